// A client of the worker's /v1 API generated from its OpenAPI document:
// types by openapi-typescript (schema.d.ts), calls by openapi-fetch. Run by
// the Go test TestOpenAPITypeScriptClient (after tsc type-checks it)
// against a real worker making a real computer: create a computer → add a
// bot → shell → observe. Each step prints one JSON line for the test to
// check; any failure exits non-zero with the worker's error envelope.
//
// Env: WORKER_URL, WORKER_TOKEN, WORKER_BOT, MARKER (a string the shell
// step echoes).
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type ToolResult = components["schemas"]["ToolResult"];

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

const token = env("WORKER_TOKEN");
const bot = env("WORKER_BOT");
const marker = env("MARKER");

const api = createClient<paths>({
  baseUrl: env("WORKER_URL"),
  headers: { Authorization: `Bearer ${token}` },
});

function step(name: string, v: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify({ step: name, ...v }) + "\n");
}

function fail(what: string, status: number, error: unknown): never {
  throw new Error(`${what}: ${status} ${JSON.stringify(error)}`);
}

// 1. Create a computer (a Team computer of the caller's own session); the
// answer carries its capability, shown this once.
const created = await api.POST("/v1/computers", {
  body: { scope: { session: `ts-${marker}` }, kind: "team" },
});
if (!created.data) fail("create", created.response.status, created.error);
const computer = created.data.computer;
const capability: string = created.data.capability;
step("create", { status: created.response.status, id: computer.id, state: computer.state, provider: computer.provider });

// Every per-computer call carries the capability.
const cap = { "X-Computer-Capability": capability };
const id = { id: computer.id };

// 2. Add a bot.
const added = await api.POST("/v1/computers/{id}/bots", {
  params: { path: id },
  headers: cap,
  body: { id: bot },
});
if (!added.data) fail("add bot", added.response.status, added.error);
step("bot", { status: added.response.status, ...added.data.bot });

async function tool(name: string, args: Record<string, unknown>): Promise<ToolResult> {
  const r = await api.POST("/v1/computers/{id}/tools/{name}", {
    params: { path: { ...id, name } },
    headers: cap,
    body: { botId: bot, args },
  });
  if (!r.data) fail(name, r.response.status, r.error);
  return r.data;
}

// 3. Shell: the bot writes and reads back a file in its directory.
const sh = await tool("shell", {
  argv: ["bash", "-lc", `echo "$0" > ts-marker.txt && cat ts-marker.txt && pwd`, marker],
  cwd: added.data.bot.dir,
});
const shText = sh.content.find((c) => c.type === "text")?.text ?? "";
step("shell", { success: sh.success, result: JSON.parse(shText) as unknown });

// 4. Observe: a screenshot of the bot's screen, a JPEG data URL.
const ob = await tool("computer_observe", {});
const meta = JSON.parse(ob.content.find((c) => c.type === "text")?.text ?? "{}") as { width?: number; height?: number };
const image = ob.content.find((c) => c.type === "image")?.imageUrl ?? "";
const prefix = "data:image/jpeg;base64,";
const jpeg = image.startsWith(prefix) ? Buffer.from(image.slice(prefix.length), "base64") : Buffer.alloc(0);
step("observe", { success: ob.success, width: meta.width, height: meta.height, head: jpeg.subarray(0, 3).toString("hex"), bytes: jpeg.length });

// The computer as the API shows it now: running, with the bot's screen.
const got = await api.GET("/v1/computers/{id}", { params: { path: id }, headers: cap });
if (!got.data) fail("get", got.response.status, got.error);
step("computer", {
  state: got.data.computer.state,
  bots: got.data.computer.bots.map((b) => b.id),
  screens: got.data.computer.screens.map((s) => s.id),
});

// A wrong capability is the same 404 as no computer, in the envelope.
const denied = await api.GET("/v1/computers/{id}", {
  params: { path: id },
  headers: { "X-Computer-Capability": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" },
});
step("denied", { status: denied.response.status, code: denied.error?.error.code ?? null });

// Never called: tsc fails ("Unused '@ts-expect-error' directive") if the
// generated types stopped refusing these.
export function typeChecks(): void {
  // @ts-expect-error a path the document does not have
  void api.GET("/v1/nothing");
  // @ts-expect-error the bot's id is required
  void api.POST("/v1/computers/{id}/bots", { params: { path: id }, headers: cap, body: {} });
  // @ts-expect-error a kind the document does not have
  void api.POST("/v1/computers", { body: { kind: "public" } });
}
