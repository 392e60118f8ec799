// Approval latency bench for tests/e2e/story.sh: decision PATCH -> the tool server receives the call.
//
// For each of COUNT gated calls (tool TOOL, arguments {path: "/bench/<run>/<i>"}), through the gate:
//   1. start the call with the SDK client (the gate creates an ApprovalRequest and waits);
//   2. poll the apiserver until that request exists, then give the gate SETTLE_MS to be waiting
//      on its watch (a person never decides within milliseconds of the request);
//   3. t0 = now; PATCH spec.decision (Approve) as the approver, over a kept-alive HTTPS connection;
//   4. wait for the call's result, then ask the recorder (recorder.mjs) when the call arrived;
//   5. baseline, same connection and identity: a plain merge PATCH of an annotation on the same
//      (now finished) request, which involves no gate and no decision policy.
// Also timed: when a watch of that one request (opened before the decision, like the gate's)
// delivers the decision: the least any watcher, the gate included, can take.
// Times are process.hrtime.bigint() (CLOCK_MONOTONIC) here and in the recorder, so they compare.
//
// Paced to the gate's creation budget (docs/gate.md, approval flooding: 60 ApprovalRequests at
// once, then 1 per second): after PACE_AFTER calls (40, leaving room for the suite's other
// requests on the same gate) a call starts at least PACE_MS (1000) after the one before, so a
// long run measures approvals rather than the gate's refusal of a flood.
// Environment: GATE_URL, RECORDER_URL, NAMESPACE, AGENT, TOOL (delete_file), COUNT (30),
// SETTLE_MS (300), PACE_AFTER (40), PACE_MS (1000), DECIDED_BY, KUBECONFIG_JSON (the approver's kubeconfig as
// `kubectl config view --raw --minify --flatten -o json` prints it: server, CA or
// insecure-skip-tls-verify, token or client certificate, optional as/as-groups impersonation).
// Prints progress on stderr and one JSON object on stdout: raw samples (ms) and percentiles.
import https from "node:https";
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const env = process.env;
const need = (k) => env[k] || die(`approval-bench: ${k} is not set`);
function die(msg) {
  console.error(msg);
  process.exit(2);
}
const NS = need("NAMESPACE");
const AGENT = need("AGENT");
const TOOL = env.TOOL || "delete_file";
const COUNT = Number(env.COUNT || 30);
const SETTLE_MS = Number(env.SETTLE_MS || 300);
const PACE_AFTER = Number(env.PACE_AFTER || 40);
const PACE_MS = Number(env.PACE_MS || 1000);
const DECIDED_BY = need("DECIDED_BY");
const kubeconfig = JSON.parse(readFileSync(need("KUBECONFIG_JSON"), "utf8"));
const cluster = kubeconfig.clusters[0].cluster;
const user = kubeconfig.users[0].user;
const server = new URL(cluster.server);
const b64 = (v) => (v ? Buffer.from(v, "base64") : undefined);

const tls = {
  ca: b64(cluster["certificate-authority-data"]),
  cert: b64(user["client-certificate-data"]),
  key: b64(user["client-key-data"]),
  rejectUnauthorized: cluster["insecure-skip-tls-verify"] !== true,
};
// One kept-alive connection for every request and PATCH; watches get connections of their own.
const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ...tls });
const watchAgent = new https.Agent({ keepAlive: false, ...tls });
const headers = { accept: "application/json" };
if (user.token) headers.authorization = `Bearer ${user.token}`;
else if (!user["client-certificate-data"]) die("approval-bench: the kubeconfig has neither a token nor a client certificate");
if (user.as) headers["impersonate-user"] = user.as;
const asGroups = user["as-groups"] || [];

function requestHeaders() {
  const h = { ...headers };
  if (asGroups.length) h["impersonate-group"] = asGroups;
  return h;
}

function kube(method, path, body) {
  return new Promise((resolve, reject) => {
    const h = requestHeaders();
    if (body !== undefined) h["content-type"] = "application/merge-patch+json";
    const req = https.request(
      { agent, method, host: server.hostname, port: server.port || 443, path, headers: h, timeout: 15000 },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          if (res.statusCode >= 300) reject(new Error(`${method} ${path}: HTTP ${res.statusCode}: ${text}`));
          else resolve(JSON.parse(text));
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${method} ${path}: timed out`)));
    req.on("error", reject);
    if (body !== undefined) req.write(JSON.stringify(body));
    req.end();
  });
}

const now = () => process.hrtime.bigint();
const ms = (ns) => Number(ns) / 1e6;
const sleep = (n) => new Promise((r) => setTimeout(r, n));
const base = `/apis/kagent.dev/v1alpha2/namespaces/${NS}/approvalrequests`;
const selector = encodeURIComponent(`kagent.dev/agent=${AGENT},kagent.dev/tool=${TOOL}`);

async function waitForRequest(path) {
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    const list = await kube("GET", `${base}?labelSelector=${selector}`);
    const hit = list.items.find((r) => r.spec?.argumentsPreview?.path === path && !r.spec.decision);
    if (hit) return hit;
    await sleep(10);
  }
  throw new Error(`no ApprovalRequest for ${TOOL}(${path}) within 20 s`);
}

// A watch of one request from resourceVersion rv, as the gate opens one: resolves with the time
// the event carrying a decision arrives (the floor for any watcher of the decision).
function watchDecision(name, rv) {
  let done = false;
  let req;
  const seen = new Promise((resolve, reject) => {
    const path = `${base}?watch=1&fieldSelector=${encodeURIComponent(`metadata.name=${name}`)}&resourceVersion=${rv}&timeoutSeconds=60`;
    req = https.request(
      { agent: watchAgent, method: "GET", host: server.hostname, port: server.port || 443, path, headers: requestHeaders() },
      (res) => {
        let buf = "";
        res.on("data", (chunk) => {
          const t = now();
          buf += chunk;
          let i;
          while ((i = buf.indexOf("\n")) >= 0) {
            const event = JSON.parse(buf.slice(0, i));
            buf = buf.slice(i + 1);
            if (event.object?.spec?.decision && !done) {
              done = true;
              resolve(t);
            }
          }
        });
        res.on("end", () => done || reject(new Error(`watch of ${name} ended without a decision`)));
      },
    );
    req.on("error", (e) => done || reject(e));
    req.end();
  });
  return { seen, close: () => ((done = true), req.destroy()) };
}

async function recorded(path) {
  const res = await fetch(`${need("RECORDER_URL")}/calls`);
  return (await res.json()).filter((c) => c.tool === TOOL && c.args.path === path);
}

function pct(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}
const summary = (v) => ({ n: v.length, p50: pct(v, 50), p99: pct(v, 99), min: Math.min(...v), max: Math.max(...v) });

const client = new Client({ name: "hitl-e2e-bench", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(need("GATE_URL"))));
const run = Date.now().toString(36);
const samples = { decisionToUpstream: [], decisionToResult: [], decisionToWatch: [], decisionPatch: [], plainPatch: [] };
let lastStart = 0;
for (let i = 0; i < COUNT; i++) {
  if (i >= PACE_AFTER) await sleep(lastStart + PACE_MS - Date.now());
  lastStart = Date.now();
  const path = `/bench/${run}/${i}`;
  const call = client.callTool({ name: TOOL, arguments: { path } }, undefined, { timeout: 60000 });
  call.catch(() => {}); // awaited below; avoid an unhandled rejection while we wait for the request
  const request = await waitForRequest(path);
  const name = request.metadata.name;
  const watch = watchDecision(name, request.metadata.resourceVersion);
  await sleep(SETTLE_MS);
  const decision = { spec: { decision: { type: "Approve", reason: "bench", decidedBy: DECIDED_BY } } };
  const wall = new Date().toISOString();
  const t0 = now();
  await kube("PATCH", `${base}/${name}`, decision);
  const t1 = now();
  const result = await call;
  const t2 = now();
  const tWatch = await watch.seen;
  watch.close();
  const text = result.content?.[0]?.text ?? "";
  if (result.isError) throw new Error(`approved call ${name} failed: ${text}`);
  const seen = await recorded(path);
  if (seen.length !== 1) throw new Error(`approved call ${name} ran ${seen.length} times, want 1`);
  const t3 = now();
  await kube("PATCH", `${base}/${name}`, { metadata: { annotations: { "e2e.hitl-operator/ping": String(i) } } });
  const t4 = now();
  samples.decisionToUpstream.push(ms(BigInt(seen[0].receivedNs) - t0));
  samples.decisionToResult.push(ms(t2 - t0));
  samples.decisionToWatch.push(ms(tWatch - t0));
  samples.decisionPatch.push(ms(t1 - t0));
  samples.plainPatch.push(ms(t4 - t3));
  console.error(
    `approval ${i + 1}/${COUNT} (decided ${wall}): ${name} watch +${samples.decisionToWatch.at(-1).toFixed(1)} ms, ` +
      `upstream +${samples.decisionToUpstream.at(-1).toFixed(1)} ms, ` +
      `decision PATCH ${samples.decisionPatch.at(-1).toFixed(1)} ms, plain PATCH ${samples.plainPatch.at(-1).toFixed(1)} ms`,
  );
}
await client.close();
const out = { count: COUNT, settleMs: SETTLE_MS, paceAfter: PACE_AFTER, paceMs: PACE_MS, samples, stats: {} };
for (const [k, v] of Object.entries(samples)) out.stats[k] = summary(v);
out.stats.ratioUpstreamP50ToPlainPatchP50 = out.stats.decisionToUpstream.p50 / out.stats.plainPatch.p50;
out.stats.ratioUpstreamP99ToPlainPatchP50 = out.stats.decisionToUpstream.p99 / out.stats.plainPatch.p50;
out.stats.ratioUpstreamP99ToPlainPatchP99 = out.stats.decisionToUpstream.p99 / out.stats.plainPatch.p99;
console.log(JSON.stringify(out));
process.exit(0);
