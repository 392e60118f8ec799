// Drives the gate with the official MCP TypeScript SDK client.
// Usage: node client.mjs <url> <streamable|sse> '<json array of operations>' ['<json options>']
// Options: {"sampling": true} declares the sampling capability and answers
// sampling/createMessage requests from the server with "sampled: <prompt>".
// {"token": "..."} sends `Authorization: Bearer <token>` with every request (a caller's
// identity at a shared gate).
// Operations: {"op":"list"} | {"op":"call","name":"echo","args":{...},"progress":true}
//             | {"op":"terminate"} (DELETE of the Streamable HTTP session)
//             | {"op":"touch","file":"..."} (writes the session id, or "", to the file: a test
//               waiting for it knows the operations before it are done)
//             | {"op":"wait","file":"..."} (waits, at most 120 s, until the file exists)
//             | {"op":"raw","body":"...","contentType":"..."} (POSTs the body as given on the
//               client's session, as a hostile client would; waits 500 ms for stray answers)
// Prints one JSON line per operation: {"op","tools"} | {"op","result","progress"} | {"op","error"}
// | {"op","status","text","errors"} (errors: what the client reported meanwhile, such as
// answers to requests it never made).
import { existsSync, writeFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, kind, opsJson, optsJson] = process.argv.slice(2);
const ops = JSON.parse(opsJson);
const opts = JSON.parse(optsJson ?? "{}");
const auth = opts.token ? { Authorization: `Bearer ${opts.token}` } : {};
const transport =
  kind === "sse"
    ? new SSEClientTransport(new URL(url), {
        requestInit: { headers: auth },
        eventSourceInit: { fetch: (u, init) => fetch(u, { ...init, headers: { ...init?.headers, ...auth } }) },
      })
    : new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } });
const client = new Client(
  { name: "hitl-gate-test", version: "1.0.0" },
  opts.sampling ? { capabilities: { sampling: {} } } : undefined,
);
if (opts.sampling) {
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => ({
    model: "test-model",
    role: "assistant",
    content: { type: "text", text: `sampled: ${request.params.messages[0].content.text}` },
  }));
}
await client.connect(transport);
for (const op of ops) {
  try {
    if (op.op === "list") {
      const res = await client.listTools();
      console.log(JSON.stringify({ op: "list", tools: res.tools.map((t) => t.name) }));
    } else if (op.op === "call") {
      const progress = [];
      const options = { timeout: 120000 };
      if (op.progress) {
        options.onprogress = (p) => progress.push(p);
      }
      const result = await client.callTool({ name: op.name, arguments: op.args ?? {} }, undefined, options);
      console.log(JSON.stringify({ op: "call", result, progress }));
    } else if (op.op === "raw") {
      const errors = [];
      client.onerror = (e) => errors.push(String(e && e.message ? e.message : e));
      const headers = { ...auth, "content-type": op.contentType, accept: "application/json, text/event-stream" };
      if (kind !== "sse" && transport.sessionId) {
        headers["mcp-session-id"] = transport.sessionId;
      }
      const endpoint = kind === "sse" ? transport._endpoint : new URL(url);
      const resp = await fetch(endpoint, { method: "POST", headers, body: op.body });
      const text = await resp.text();
      await new Promise((resolve) => setTimeout(resolve, 500));
      console.log(JSON.stringify({ op: "raw", status: resp.status, text, errors }));
    } else if (op.op === "touch") {
      writeFileSync(op.file, transport.sessionId ?? "");
      console.log(JSON.stringify({ op: "touch", session: transport.sessionId ?? null }));
    } else if (op.op === "wait") {
      const until = Date.now() + 120000;
      while (!existsSync(op.file) && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      console.log(JSON.stringify({ op: "wait", found: existsSync(op.file) }));
    } else if (op.op === "terminate") {
      const session = transport.sessionId;
      await transport.terminateSession();
      console.log(JSON.stringify({ op: "terminate", session, after: transport.sessionId ?? null }));
    }
  } catch (e) {
    console.log(JSON.stringify({ op: op.op, error: String(e && e.message ? e.message : e) }));
  }
}
// Closing may wait on a server that is gone (a test that killed the gate mid-call): bounded.
await Promise.race([client.close(), new Promise((resolve) => setTimeout(resolve, 2000))]);
process.exit(0);
