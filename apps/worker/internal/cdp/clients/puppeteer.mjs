// Puppeteer (puppeteer-core) drives a bot's Chromium through the worker's
// CDP route: connect with the worker token and the computer's capability
// as headers (or a ticket URL and none), evaluate in a new page on the
// test's site, take a screenshot, disconnect. One JSON line per step on
// stdout (apps/worker/cdp_test.go reads them). Same variables as
// playwright.mjs.
import puppeteer from "puppeteer-core";

// out resolves once its line is handed to the OS: a write to a full pipe
// (the screenshot's line is hundreds of KiB) finishes asynchronously, and
// process.exit would cut it, and every line after it, short.
const out = (o) => new Promise((resolve) => process.stdout.write(JSON.stringify(o) + "\n", resolve));
const headers = {};
if (process.env.WORKER_TOKEN) headers.Authorization = `Bearer ${process.env.WORKER_TOKEN}`;
if (process.env.WORKER_CAPABILITY) headers["X-Computer-Capability"] = process.env.WORKER_CAPABILITY;

const browser = await puppeteer.connect({
  browserWSEndpoint: process.env.CDP_URL,
  headers,
  defaultViewport: null,
  protocolTimeout: 60_000,
});
await out({ step: "connected", version: await browser.version() });
const page = await browser.newPage();
await page.goto(process.env.SITE + "/form", { waitUntil: "load" });
const evaluated = await page.evaluate(() => ({ title: document.title, answer: 6 * 7, hasForm: !!document.querySelector("#note") }));
await out({ step: "evaluate", ...evaluated });
const png = await page.screenshot({ encoding: "base64" });
await out({ step: "screenshot", png });
await page.close();
await browser.disconnect();
await out({ step: "done" });
process.exit(0);
