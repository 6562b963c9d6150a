// Playwright (playwright-core) drives a bot's Chromium through the worker's
// CDP route: connectOverCDP with the worker token and the computer's
// capability as headers, the browser's default context (the bot's
// profile, its sign-ins), a new page on the test's site: fill and submit
// its form, read the context's cookies, take a screenshot. One JSON line
// per step on stdout (apps/worker/cdp_test.go reads them).
//   CDP_URL  ws://<worker>/v1/computers/<id>/bots/<bot>/cdp[?screen=…]
//   WORKER_TOKEN, WORKER_CAPABILITY  the headers ("" sends none: a ticket URL)
//   SITE     the site's origin as the bot's browser reaches it
//   NOTE     what to type into the form
import { chromium } from "playwright-core";

// out resolves once its line is handed to the OS: a write to a full pipe
// (the screenshot's line is hundreds of KiB) finishes asynchronously, and
// process.exit would cut it, and every line after it, short.
const out = (o) => new Promise((resolve) => process.stdout.write(JSON.stringify(o) + "\n", resolve));
const headers = {};
if (process.env.WORKER_TOKEN) headers.Authorization = `Bearer ${process.env.WORKER_TOKEN}`;
if (process.env.WORKER_CAPABILITY) headers["X-Computer-Capability"] = process.env.WORKER_CAPABILITY;
const site = process.env.SITE;

const browser = await chromium.connectOverCDP(process.env.CDP_URL, { headers, timeout: 60_000 });
await out({ step: "connected", version: browser.version(), contexts: browser.contexts().length });
const context = browser.contexts()[0];
const page = await context.newPage();
await page.goto(site + "/form");
await page.fill("#note", process.env.NOTE);
await Promise.all([page.waitForURL("**/submit"), page.click("#send")]);
await out({ step: "submitted", done: await page.textContent("#done") });
const cookies = await context.cookies(site);
await out({ step: "cookies", cookies: cookies.map((c) => ({ name: c.name, value: c.value, httpOnly: c.httpOnly })) });
const png = await page.screenshot();
await out({ step: "screenshot", png: png.toString("base64") });
await page.close();
// For a browser from connectOverCDP, close() only disconnects (playwright-
// core closes its transport; no Browser.close is sent): the bot's browser
// stays.
await browser.close();
await out({ step: "done" });
process.exit(0);
