// The official MCP JS SDK's Client driving `jidocode mcp <dir>` over stdio, as an editor built on it does.
//
//   node mcp_js_client.mjs <sdk-node_modules> <json: {command, args, env, calls}>
//
// Lists the tools first (the SDK then checks every result against the tool's outputSchema),
// sets the log level, runs each step of `calls` and prints one JSON line per step:
// {"step", "ok": true, "result"} or {"step", "ok": false, "error"} (what the SDK threw), then
// {"logs": [...]} with the log notifications it received. Nothing here is JidoCode-specific:
// the steps name the MCP requests.
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, spec] = process.argv.slice(2);
const sdk = (sub) => import(pathToFileURL(path.join(modules, "@modelcontextprotocol/sdk/dist/esm", sub)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { LoggingMessageNotificationSchema } = await sdk("types.js");

const { command, args, env, calls } = JSON.parse(spec);
const transport = new StdioClientTransport({ command, args, env, stderr: "inherit" });
const client = new Client({ name: "jidocode-contract-js", version: "1" });
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
  logs.push(note.params);
});
await client.connect(transport);
const timeout = 120_000;
await client.listTools(undefined, { timeout });

async function run(step) {
  switch (step.method) {
    case "tools/call":
      return client.callTool({ name: step.name, arguments: step.arguments }, undefined, { timeout });
    case "completion/complete":
      return client.complete({ ref: step.ref, argument: step.argument }, { timeout });
    case "logging/setLevel":
      return client.setLoggingLevel(step.level, { timeout });
    case "server/capabilities":
      return client.getServerCapabilities();
    default:
      throw new Error(`unknown step ${step.method}`);
  }
}

for (const [index, step] of calls.entries()) {
  try {
    const result = await run(step);
    console.log(JSON.stringify({ step: index, ok: true, result }));
  } catch (error) {
    console.log(JSON.stringify({ step: index, ok: false, error: String(error?.message ?? error) }));
  }
}
console.log(JSON.stringify({ logs }));
await client.close();
