// A tiny MCP tool server built on the SDK's McpServer (Streamable HTTP, one session per client)
// that records every tools/call it receives and runs, for tests/e2e/story.sh.
//
// Usage: PORT=N [HOST=ADDR] node recorder.mjs   (listens on HOST, default 127.0.0.1; a pod sets 0.0.0.0)
//   POST/GET/DELETE /mcp   the MCP endpoint
//   GET /calls             JSON array of the calls that ran, in order:
//                          {tool, args, receivedNs, ranNs}
//     receivedNs: process.hrtime.bigint() (CLOCK_MONOTONIC, comparable across processes on one
//                 machine) taken when the HTTP request carrying the tools/call arrived, before its
//                 body was read; ranNs: when the tool handler ran.
//
// Tools: read_file {path}, write_file {path, content}, delete_file {path}. Nothing touches the
// disk: each answers with a text saying what it would have done.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

const port = Number(process.env.PORT || 3002);
const host = process.env.HOST || "127.0.0.1";
const calls = [];
// "<session>/<JSON-RPC id>" -> arrival time of the HTTP request that carried the call.
const arrivals = new Map();

function newServer() {
  const server = new McpServer({ name: "hitl-e2e-recorder", version: "1.0.0" });
  const tool = (name, description, shape, answer, annotations) =>
    server.registerTool(name, { description, inputSchema: shape, annotations }, async (args, extra) => {
      const key = `${extra.sessionId}/${extra.requestId}`;
      const ranNs = process.hrtime.bigint();
      calls.push({ tool: name, args, receivedNs: String(arrivals.get(key) ?? ranNs), ranNs: String(ranNs) });
      arrivals.delete(key);
      return { content: [{ type: "text", text: answer(args) }] };
    });
  // MCP tool annotations, as a real server lists them (docs/policies.md, "Tool annotations").
  // READ_FILE_DESCRIPTION: a server version whose read_file says something else (a "rug
  // pull", docs/policies.md "Changed tool definitions").
  tool("read_file", process.env.READ_FILE_DESCRIPTION || "Reads a file", { path: z.string() },
    (a) => `contents of ${a.path}`,
    { readOnlyHint: true, openWorldHint: false });
  tool("write_file", "Writes a file", { path: z.string(), content: z.string() }, (a) => `wrote ${a.path}`,
    { destructiveHint: false, idempotentHint: true, openWorldHint: false });
  tool("delete_file", "Deletes a file", { path: z.string() }, (a) => `deleted ${a.path}`,
    { title: "Delete a file", destructiveHint: true, openWorldHint: false });
  return server;
}

const transports = new Map();

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

async function handleMcp(req, res, receivedNs) {
  const sessionId = req.headers["mcp-session-id"];
  let body;
  if (req.method === "POST") {
    body = await readJson(req);
    for (const msg of Array.isArray(body) ? body : [body]) {
      if (msg && msg.method === "tools/call" && sessionId) arrivals.set(`${sessionId}/${msg.id}`, receivedNs);
    }
  }
  let transport = sessionId ? transports.get(sessionId) : undefined;
  if (!transport) {
    if (sessionId || req.method !== "POST") {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }));
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
    await newServer().connect(transport);
  }
  await transport.handleRequest(req, res, body);
}

http
  .createServer((req, res) => {
    const receivedNs = process.hrtime.bigint();
    const url = new URL(req.url, "http://localhost");
    if (url.pathname === "/calls" && req.method === "GET") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(calls));
    } else if (url.pathname === "/mcp") {
      handleMcp(req, res, receivedNs).catch((e) => {
        console.error("recorder:", e);
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
    } else {
      res.writeHead(404);
      res.end();
    }
  })
  .listen(port, host, () => console.error(`recorder listening on ${host}:${port}`));
