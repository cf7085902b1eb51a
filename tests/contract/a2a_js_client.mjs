// The official A2A JS SDK's client against one agent, for tests/contract/test_a2a_js.py.
//
// node a2a_js_client.mjs <node_modules> '<spec json>'
// spec: {"url": base URL, "token": gateway token, "text": a question, "messageId": its id}
// Prints one JSON line per step: {"step", "ok": true, ...} or {"step", "ok": false, "error", "message"}.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [, , modules, raw] = process.argv;
const spec = JSON.parse(raw);
const { ClientFactory } = await import(
  pathToFileURL(join(modules, "@a2a-js", "sdk", "dist", "client", "index.js")).href
);

// every request carries the gateway's token (the card's bearer scheme)
const plainFetch = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set("Authorization", `Bearer ${spec.token}`);
  return plainFetch(input, { ...init, headers });
};

const TEXT = (parts) => (parts || []).filter((p) => p.content?.$case === "text").map((p) => p.content.value);
const summary = (task) => ({
  id: task.id,
  state: task.status?.state,
  history: (task.history || []).map((m) => ({ messageId: m.messageId, role: m.role, text: TEXT(m.parts) })),
  artifacts: (task.artifacts || []).map((a) => TEXT(a.parts).join("")),
});

async function step(name, run) {
  try {
    console.log(JSON.stringify({ step: name, ok: true, ...(await run()) }));
  } catch (e) {
    console.log(JSON.stringify({ step: name, ok: false, error: e?.constructor?.name, message: String(e?.message ?? e) }));
  }
}

const client = await new ClientFactory().createFromUrl(spec.url);
let taskId = "";
await step("send", async () => {
  const sent = await client.sendMessage({
    message: {
      messageId: spec.messageId,
      contextId: "",
      taskId: "",
      role: 1, // ROLE_USER
      parts: [{ content: { $case: "text", value: spec.text }, metadata: undefined, filename: "", mediaType: "" }],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    },
  });
  const task = sent.payload?.value ?? sent;
  taskId = task.id;
  return summary(task);
});
await step("get", async () => summary(await client.getTask({ tenant: "", id: taskId })));
await step("list", async () => {
  const page = await client.listTasks({ tenant: "", contextId: "", status: 0, pageSize: 100, pageToken: "" });
  return { listed: page.tasks.some((t) => t.id === taskId), totalSize: page.totalSize };
});
await step("get-unknown", async () => summary(await client.getTask({ tenant: "", id: "no-such-task" })));
