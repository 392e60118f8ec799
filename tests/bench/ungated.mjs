// Ungated tools/call latency and throughput, straight to an MCP server and through the
// approval gate, with the official TypeScript SDK client. Driven by tests/bench/ungated.sh.
//
// usage: node ungated.mjs DIRECT_URL GATE_URL GATE_PID CALLS ROUNDS CLIENT_LEVELS
//   CLIENT_LEVELS: comma-separated numbers of concurrent clients, e.g. 1,8
//
// Before measuring it checks that the gate works (the tool list is filtered, an ungated call
// answers as the server does, a gated call is not executed) and exits non-zero if not. Each
// round runs the direct and the gated path back to back, alternating which goes first, so both
// see the same machine load; figures are never asserted on.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const peers = fileURLToPath(new URL("../mcp-peers/package.json", import.meta.url));
const require = createRequire(peers);
const { Client } = await import(require.resolve("@modelcontextprotocol/sdk/client/index.js"));
const { StreamableHTTPClientTransport } = await import(
  require.resolve("@modelcontextprotocol/sdk/client/streamableHttp.js")
);

const [directUrl, gateUrl, gatePid, callsArg, roundsArg, levelsArg] = process.argv.slice(2);
const calls = Number(callsArg);
const rounds = Number(roundsArg);
const levels = (levelsArg ?? "").split(",").map(Number);
if (!gatePid || !(calls > 0) || !(rounds > 0) || levels.some((n) => !(n > 0))) {
  console.error("usage: node ungated.mjs DIRECT_URL GATE_URL GATE_PID CALLS ROUNDS CLIENT_LEVELS");
  process.exit(2);
}

const ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim());

/** CPU time (user + system) the gate process has used, in milliseconds. */
function gateCpuMs() {
  const stat = readFileSync(`/proc/${gatePid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
}

async function connect(url) {
  const client = new Client({ name: "hitl-bench", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

async function connectWithRetry(url) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await connect(url);
    } catch (e) {
      if (attempt >= 100) throw new Error(`cannot connect to ${url}: ${e.message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

function fail(why) {
  console.error(`ungated bench: ${why}`);
  process.exit(1);
}

async function checkGate() {
  const direct = await connectWithRetry(directUrl);
  const gate = await connectWithRetry(gateUrl);
  const listed = (await gate.listTools()).tools.map((t) => t.name).sort();
  if (JSON.stringify(listed) !== JSON.stringify(["echo", "get-sum"])) {
    fail(`the gate listed ${JSON.stringify(listed)}, expected only echo and get-sum`);
  }
  const args = { name: "echo", arguments: { message: "bench" } };
  const viaGate = JSON.stringify(await gate.callTool(args));
  const straight = JSON.stringify(await direct.callTool(args));
  if (viaGate !== straight) fail(`echo through the gate answered ${viaGate}, directly ${straight}`);
  const gated = await gate.callTool({ name: "get-sum", arguments: { a: 1, b: 2 } });
  if (!gated.isError || !gated.content?.[0]?.text?.startsWith("NOT executed")) {
    fail(`a gated call was not refused: ${JSON.stringify(gated)}`);
  }
  await Promise.all([direct.close(), gate.close()]);
}

/** `calls` echo calls spread over `clients` sessions: p50 latency (ms) and calls per second. */
async function run(url, clients, total) {
  const latencies = [];
  const sessions = await Promise.all(Array.from({ length: clients }, () => connect(url)));
  const started = performance.now();
  await Promise.all(
    sessions.map(async (client, i) => {
      const mine = Math.floor(total / clients) + (i < total % clients ? 1 : 0);
      for (let n = 0; n < mine; n++) {
        const t = performance.now();
        const result = await client.callTool({ name: "echo", arguments: { message: "x" } });
        latencies.push(performance.now() - t);
        if (result.isError) fail(`echo failed on ${url}: ${JSON.stringify(result)}`);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  await Promise.all(sessions.map((s) => s.close()));
  latencies.sort((a, b) => a - b);
  return { p50: latencies[Math.floor(latencies.length / 2)], perSecond: latencies.length / seconds };
}

/** The gated run, with the gate's CPU time per call. */
async function runGate(clients) {
  const cpu = gateCpuMs();
  const result = await run(gateUrl, clients, calls);
  return { ...result, cpuPerCall: (gateCpuMs() - cpu) / calls };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const spread = (xs) => `${Math.min(...xs).toFixed(3)}-${Math.max(...xs).toFixed(3)}`;

await checkGate();
// Warm both paths up (JIT, connection pools) before anything is measured.
await run(directUrl, 1, Math.min(calls, 300));
await run(gateUrl, 1, Math.min(calls, 300));

for (const clients of levels) {
  const ratios = [];
  const throughputs = [];
  const cpus = [];
  for (let r = 1; r <= rounds; r++) {
    let direct;
    let gate;
    if (r % 2 === 1) {
      direct = await run(directUrl, clients, calls);
      gate = await runGate(clients);
    } else {
      gate = await runGate(clients);
      direct = await run(directUrl, clients, calls);
    }
    ratios.push(gate.p50 / direct.p50);
    throughputs.push(gate.perSecond / direct.perSecond);
    cpus.push(gate.cpuPerCall);
    console.log(
      `clients ${clients} round ${r}: p50 direct ${direct.p50.toFixed(3)} ms, gate ${gate.p50.toFixed(3)} ms, ` +
        `ratio ${(gate.p50 / direct.p50).toFixed(3)}; throughput direct ${direct.perSecond.toFixed(0)}/s, ` +
        `gate ${gate.perSecond.toFixed(0)}/s, ratio ${(gate.perSecond / direct.perSecond).toFixed(3)}; ` +
        `gate CPU ${gate.cpuPerCall.toFixed(3)} ms/call`,
    );
  }
  console.log(
    `summary clients ${clients} (${rounds} rounds of ${calls} calls, median and range): ` +
      `p50 ratio ${median(ratios).toFixed(3)} (${spread(ratios)}), ` +
      `throughput ratio ${median(throughputs).toFixed(3)} (${spread(throughputs)}), ` +
      `gate CPU ${median(cpus).toFixed(3)} ms/call (${spread(cpus)})`,
  );
}
