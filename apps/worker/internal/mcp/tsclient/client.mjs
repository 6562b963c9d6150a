// The official MCP TypeScript SDK against the worker's /mcp: observe → act →
// shell → file_read as one bot on one computer. Configured by the
// environment (MCP_URL, WORKER_TOKEN, WORKER_CAPABILITY, WORKER_BOT); prints
// one JSON line per step on stdout for the Go test to check (never a
// credential).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is required`);
  return v;
};
const bot = env("WORKER_BOT");
const transport = new StreamableHTTPClientTransport(new URL(env("MCP_URL")), {
  requestInit: {
    headers: {
      Authorization: `Bearer ${env("WORKER_TOKEN")}`,
      "X-Computer-Capability": env("WORKER_CAPABILITY"),
      "X-Bot-Id": bot,
    },
  },
});
const client = new Client({ name: "open-bot-ts-test", version: "1.0.0" });
await client.connect(transport);

const out = (step, v) => console.log(JSON.stringify({ step, ...v }));
const summary = (r) => ({
  isError: r.isError === true,
  content: r.content.map((c) =>
    c.type === "image"
      ? { type: "image", mimeType: c.mimeType, bytes: Buffer.from(c.data, "base64").length, head: Buffer.from(c.data, "base64").subarray(0, 3).toString("hex") }
      : { type: c.type, text: c.text },
  ),
});

const { tools } = await client.listTools();
out("tools", { names: tools.map((t) => t.name), actSchemaType: tools.find((t) => t.name === "computer_act")?.inputSchema?.type });
out("observe", summary(await client.callTool({ name: "computer_observe", arguments: {} })));
out("act", summary(await client.callTool({ name: "computer_act", arguments: { actions: [{ type: "click", x: 640, y: 400 }] } })));
const marker = `ts-${process.pid}`;
out("shell", summary(await client.callTool({ name: "shell", arguments: { argv: ["bash", "-lc", `printf %s ${marker} > bots/${bot}/ts.txt && echo wrote`] } })));
out("file_read", summary(await client.callTool({ name: "file_read", arguments: { path: `bots/${bot}/ts.txt` } })));
out("marker", { marker });
out("other_screen", summary(await client.callTool({ name: "computer_observe", arguments: { screen: "someone" } })));
await client.close();
