// Ungated tools/call latency and throughput, straight to an MCP server and through the
// approval gate, with the official TypeScript SDK client. Driven by tests/bench/ungated.sh.
//
// usage: node ungated.mjs DIRECT_URL GATE_URL GATE_PID CALLS ROUNDS CLIENT_LEVELS [NAME URL PID]...
//   CLIENT_LEVELS: comma-separated numbers of concurrent clients, e.g. 1,8
//   NAME URL PID: a reference relay in front of the same server (nginx as a plain reverse proxy,
//   nginx as a TCP relay, the bare hyper relay, or another build of the gate): what a relay
//   costs on this machine, or what the gate cost before a change, measured in the same rounds.
//   SERVER_PID (environment): the MCP server's process, whose CPU time is then printed per path
//   next to the client's (this process) and the whole machine's.
//   HITL_BENCH_TOKENS (environment): JSON {NAME: [token, ...]}, bearer tokens a path's client
//   sessions send in turn (the callers of a shared gate, a ToolGate).
//
// Before measuring it checks that the gate works (the tool list is filtered, an ungated call
// answers as the server does, a gated call is not executed) and that each reference relays, and
// exits non-zero if not. In each round the paths take turns of TURN calls per client session
// (default 25), in an order that rotates every turn, so that all see the same machine load even
// as it drifts; figures are never asserted on.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const peers = fileURLToPath(new URL("../mcp-peers/package.json", import.meta.url));
const require = createRequire(peers);
const { Client } = await import(require.resolve("@modelcontextprotocol/sdk/client/index.js"));
const { StreamableHTTPClientTransport } = await import(
  require.resolve("@modelcontextprotocol/sdk/client/streamableHttp.js")
);

const [directUrl, gateUrl, gatePid, callsArg, roundsArg, levelsArg, ...referenceArgs] =
  process.argv.slice(2);
const references = [];
for (let i = 0; i + 2 < referenceArgs.length; i += 3) {
  const [name, url, pid] = referenceArgs.slice(i, i + 3);
  references.push({ name, url, pid });
}
const calls = Number(callsArg);
const rounds = Number(roundsArg);
const levels = (levelsArg ?? "").split(",").map(Number);
if (
  !gatePid ||
  !(calls > 0) ||
  !(rounds > 0) ||
  levels.some((n) => !(n > 0)) ||
  referenceArgs.length % 3 !== 0
) {
  console.error(
    "usage: node ungated.mjs DIRECT_URL GATE_URL GATE_PID CALLS ROUNDS CLIENT_LEVELS [NAME URL PID]...",
  );
  process.exit(2);
}

/** Calls per client session in one turn of a path (see `round`). */
const turnCalls = Number(process.env.TURN ?? 25);
if (!(turnCalls > 0)) {
  console.error("ungated bench: TURN must be a positive number of calls");
  process.exit(2);
}

const ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim());

/** CPU time a process has used, in milliseconds: `[user, system]`. */
function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return [Number(fields[11]), Number(fields[12])].map((ticks) => (ticks * 1000) / ticksPerSecond);
}

/** The MCP server's process, when the driver names it (`SERVER_PID`): its CPU time is printed
 * per path, with the client's (this process) and the machine's. */
const serverPid = process.env.SERVER_PID;

/** The cores of this machine. */
const cores = availableParallelism();

/** CPU time the whole machine has used, in milliseconds summed over its cores: `[busy, steal]`.
 * Busy is user, nice, system, irq and softirq time, whichever process it went to (the client,
 * the server, the relay, anything else running); steal is time the hypervisor gave to others
 * while this VM wanted to run. */
function machineMs() {
  const [user, nice, system, , , irq, softirq, steal] = readFileSync("/proc/stat", "utf8")
    .split("\n", 1)[0]
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  return [user + nice + system + irq + softirq, steal].map((t) => (t * 1000) / ticksPerSecond);
}

/** Bearer tokens by path name: session `i` of a path sends the `i`-th (in turn), if any. */
const tokens = JSON.parse(process.env.HITL_BENCH_TOKENS ?? "{}");
function tokenFor(name, session) {
  const list = tokens[name] ?? [];
  return list.length ? list[session % list.length] : undefined;
}

async function connect(url, token) {
  const client = new Client({ name: "hitl-bench", version: "1" });
  const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : undefined;
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));
  return client;
}

async function connectWithRetry(url, token) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await connect(url, token);
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
  for (const { name, url } of references) {
    const reference = await connectWithRetry(url, tokenFor(name, 0));
    const viaReference = JSON.stringify(await reference.callTool(args));
    if (viaReference !== straight) {
      fail(`echo through ${name} answered ${viaReference}, directly ${straight}`);
    }
    await reference.close();
  }
  await Promise.all([direct.close(), gate.close()]);
}

/** Every path measured: direct, the gate, then the references. */
const paths = [
  { name: "direct", url: directUrl },
  { name: "gate", url: gateUrl, pid: gatePid },
  ...references,
];

/** A path's client sessions for one round, and what its calls took so far. */
async function open(path, clients) {
  const sessions = await Promise.all(
    Array.from({ length: clients }, (_, i) => connect(path.url, tokenFor(path.name, i))),
  );
  return {
    path,
    sessions,
    latencies: [],
    seconds: 0,
    userMs: 0,
    systemMs: 0,
    machineBusyMs: 0,
    machineStealMs: 0,
    clientMs: 0,
    serverMs: 0,
  };
}

/** One turn of a path: `perSession` echo calls on each of its sessions at once, timed, with
 * the relay's user and system CPU time and the whole machine's over the turn. */
async function turn(state, perSession) {
  const { path, sessions } = state;
  const cpuBefore = path.pid ? cpuMs(path.pid) : null;
  const machineBefore = machineMs();
  const clientBefore = process.cpuUsage();
  const serverBefore = serverPid ? cpuMs(serverPid) : null;
  const started = performance.now();
  await Promise.all(
    sessions.map(async (client) => {
      for (let n = 0; n < perSession; n++) {
        const t = performance.now();
        const result = await client.callTool({ name: "echo", arguments: { message: "x" } });
        state.latencies.push(performance.now() - t);
        if (result.isError) fail(`echo failed on ${path.url}: ${JSON.stringify(result)}`);
      }
    }),
  );
  state.seconds += (performance.now() - started) / 1000;
  const [busy, steal] = machineMs();
  state.machineBusyMs += busy - machineBefore[0];
  state.machineStealMs += steal - machineBefore[1];
  const client = process.cpuUsage(clientBefore);
  state.clientMs += (client.user + client.system) / 1000;
  if (serverBefore) {
    const [user, system] = cpuMs(serverPid);
    state.serverMs += user + system - serverBefore[0] - serverBefore[1];
  }
  if (cpuBefore) {
    const [user, system] = cpuMs(path.pid);
    state.userMs += user - cpuBefore[0];
    state.systemMs += system - cpuBefore[1];
  }
}

/** A path's figures over a round: p50 latency (ms), calls per second while its turns ran, CPU
 * per call (ms) for a relay, and the machine's: the share of its cores busy and of its time
 * stolen while the turns ran, its CPU per call (ms; client, server, relay and kernel work
 * together) and the client's and the server's. */
function figuresOf({
  latencies,
  seconds,
  userMs,
  systemMs,
  machineBusyMs,
  machineStealMs,
  clientMs,
  serverMs,
}) {
  const sorted = [...latencies].sort((a, b) => a - b);
  const calls = sorted.length;
  return {
    calls,
    p50: sorted[Math.floor(calls / 2)],
    perSecond: calls / seconds,
    userPerCall: userMs / calls,
    systemPerCall: systemMs / calls,
    cpuPerCall: (userMs + systemMs) / calls,
    machineBusy: machineBusyMs / (seconds * 1000 * cores),
    machineSteal: machineStealMs / (seconds * 1000 * cores),
    machinePerCall: machineBusyMs / calls,
    clientPerCall: clientMs / calls,
    serverPerCall: serverMs / calls,
  };
}

/** One round: at least `total` calls per path over `clients` sessions each, the paths taking
 * turns of `TURN` calls per session in an order that rotates every turn, so that a drift in the
 * machine's load (other processes, the VM's neighbours) reaches every path alike. */
async function round(clients, total) {
  const states = [];
  for (const path of paths) states.push(await open(path, clients));
  const turns = Math.ceil(total / (turnCalls * clients));
  for (let t = 0; t < turns; t++) {
    for (let i = 0; i < states.length; i++) {
      await turn(states[(i + t) % states.length], turnCalls);
    }
  }
  await Promise.all(states.flatMap(({ sessions }) => sessions.map((s) => s.close())));
  return Object.fromEntries(states.map((state) => [state.path.name, figuresOf(state)]));
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const spread = (xs) => `${Math.min(...xs).toFixed(3)}-${Math.max(...xs).toFixed(3)}`;
const summary = (xs) => `${median(xs).toFixed(3)} (${spread(xs)})`;

/** What a proxy's run cost against the direct one of the same round. */
function against(direct, proxy) {
  return {
    p50: proxy.p50 / direct.p50,
    throughput: proxy.perSecond / direct.perSecond,
    cpu: proxy.cpuPerCall,
  };
}

await checkGate();
// Warm every path up (JIT, connection pools) before anything is measured.
await round(1, Math.min(calls, 300));

/** Issue 44's two ratios per client level, printed last: the gate's CPU per call over nginx's
 * (HTTP relay), and the p50 the gate adds to a direct call over what nginx adds, each per round. */
const headlines = [];

for (const clients of levels) {
  const figures = Object.fromEntries(paths.slice(1).map(({ name }) => [name, []]));
  const cpuVsReference = Object.fromEntries(references.map(({ name }) => [name, []]));
  const addedP50 = { gate: [], nginx: [] };
  const machine = Object.fromEntries(paths.map(({ name }) => [name, []]));
  for (let r = 1; r <= rounds; r++) {
    const results = await round(clients, calls);
    const { direct, gate } = results;
    const gated = against(direct, gate);
    figures.gate.push(gated);
    let line =
      `clients ${clients} round ${r} (${gate.calls} calls a path): p50 direct ${direct.p50.toFixed(3)} ms, gate ${gate.p50.toFixed(3)} ms, ` +
      `ratio ${gated.p50.toFixed(3)}; throughput direct ${direct.perSecond.toFixed(0)}/s, ` +
      `gate ${gate.perSecond.toFixed(0)}/s, ratio ${gated.throughput.toFixed(3)}; ` +
      `gate CPU ${gate.cpuPerCall.toFixed(3)} ms/call (user ${gate.userPerCall.toFixed(3)}, ` +
      `system ${gate.systemPerCall.toFixed(3)})`;
    for (const { name } of references) {
      const reference = results[name];
      const relayed = against(direct, reference);
      figures[name].push(relayed);
      cpuVsReference[name].push(gate.cpuPerCall / reference.cpuPerCall);
      if (name === "nginx") {
        addedP50.gate.push(gate.p50 - direct.p50);
        addedP50.nginx.push(reference.p50 - direct.p50);
      }
      line +=
        `; ${name} p50 ${reference.p50.toFixed(3)} ms, ratio ${relayed.p50.toFixed(3)}, ` +
        `throughput ratio ${relayed.throughput.toFixed(3)}, ` +
        `CPU ${reference.cpuPerCall.toFixed(3)} ms/call (user ${reference.userPerCall.toFixed(3)}, ` +
        `system ${reference.systemPerCall.toFixed(3)})`;
    }
    console.log(line);
    let machineLine = `clients ${clients} round ${r} machine (${cores} cores)`;
    for (const { name } of paths) {
      const path = results[name];
      machine[name].push(path);
      machineLine +=
        `; ${name} busy ${path.machineBusy.toFixed(3)} (steal ${path.machineSteal.toFixed(3)}), ` +
        `CPU ${path.machinePerCall.toFixed(3)} ms/call (client ${path.clientPerCall.toFixed(3)}` +
        (serverPid ? `, server ${path.serverPerCall.toFixed(3)})` : ")");
    }
    console.log(machineLine);
  }
  for (const name of Object.keys(figures)) {
    const rows = figures[name];
    console.log(
      `summary clients ${clients} ${name} (${rounds} rounds, median and range): ` +
        `p50 ratio ${summary(rows.map((f) => f.p50))}, ` +
        `throughput ratio ${summary(rows.map((f) => f.throughput))}, ` +
        `${name} CPU ${summary(rows.map((f) => f.cpu))} ms/call`,
    );
  }
  for (const [name, ratios] of Object.entries(cpuVsReference)) {
    console.log(`summary clients ${clients}: gate CPU per call / ${name}'s ${summary(ratios)}`);
  }
  if (addedP50.nginx.length > 0) {
    const ms = (xs) => `${(median(xs) * 1000).toFixed(0)} us (${xs.map((x) => (x * 1000).toFixed(0)).join(", ")})`;
    // A ratio only where nginx added time: a round in which it added none has no ratio to give.
    const ratios = addedP50.gate.flatMap((g, i) => (addedP50.nginx[i] > 0 ? [g / addedP50.nginx[i]] : []));
    headlines.push(
      `headline clients ${clients}: gate CPU per call / nginx's ${summary(cpuVsReference.nginx)} ` +
        `(target <= 1); gate added p50 / nginx's added p50 ` +
        (ratios.length > 0 ? summary(ratios) : "n/a (nginx added nothing)") +
        ` (target <= 1; added p50: gate ${ms(addedP50.gate)}, nginx ${ms(addedP50.nginx)})`,
    );
  }
  for (const [name, rows] of Object.entries(machine)) {
    console.log(
      `summary clients ${clients} machine, ${name}: ` +
        `busy ${summary(rows.map((f) => f.machineBusy))} of ${cores} cores, ` +
        `steal ${summary(rows.map((f) => f.machineSteal))}, ` +
        `CPU ${summary(rows.map((f) => f.machinePerCall))} ms/call, ` +
        `client ${summary(rows.map((f) => f.clientPerCall))}` +
        (serverPid ? `, server ${summary(rows.map((f) => f.serverPerCall))}` : ""),
    );
  }
}
for (const line of headlines) console.log(line);
