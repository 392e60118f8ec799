#!/usr/bin/env bash
# Decision -> execution on the cluster in KUBECONFIG (a benchmark, not a test: it prints figures
# and fails only when something does not work). Issue 16, part 1; docs/performance.md.
#
# Usage: tests/e2e/bench-approval.sh [COUNT]   (approvals, default 100; HITL_E2E_BIN, default the
#        release build target/release/hitl-operator)
# One Agent, one gate (a local process with the Agent's ServiceAccount token), the controller
# watching a throwaway namespace, the recorder MCP server; tests/mcp-peers/approval-bench.mjs
# approves COUNT gated calls one after the other as cluster-admin and times, for each, the
# decision PATCH leaving -> the tool server receiving the call, next to a plain PATCH round trip
# on the same connection. Prints p50/p99 as multiples of the plain PATCH, and the gate's claim
# conflicts per approval.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
fail_on_error

skip_without_cluster
COUNT=${1:-100}
BIN=${HITL_E2E_BIN:-target/release/hitl-operator}
PEERS=$PWD/tests/mcp-peers
AGENT=bench
[ -x "$BIN" ] || cargo build --release --quiet --bin hitl-operator
throwaway hitl-bench-approval

gates_setup
start_gate a
kubectl config view --raw --minify --flatten -o json >"$WORK/approver.kubeconfig.json"
approver=$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}' 2>/dev/null || echo admin)
track_log bench "$WORK/bench.log"
timeout 900 env GATE_URL="${GATE_URL[a]}" RECORDER_URL="http://127.0.0.1:$RECORDER_PORT" NAMESPACE="$NS" \
  AGENT="$AGENT" TOOL=delete_file COUNT="$COUNT" DECIDED_BY="$approver" \
  KUBECONFIG_JSON="$WORK/approver.kubeconfig.json" \
  node "$PEERS/approval-bench.mjs" >"$WORK/bench.json" 2>"$WORK/bench.log" || fail "approval bench failed"
python3 - "$WORK/bench.json" "$(gate_metric a hitl_gate_claim_conflicts_total)" "$WORK/gate-a.log" <<'PY'
import json, math, sys
s = json.load(open(sys.argv[1]))["stats"]
claims = sorted(
    e["fields"]["claim_ms"]
    for e in map(json.loads, (l for l in open(sys.argv[3]) if l.startswith("{")))
    if e.get("fields", {}).get("message") == "approval consumed"
)
rank = lambda v, p: v[min(len(v) - 1, math.ceil(p / 100 * len(v)) - 1)]
u, p = s["decisionToUpstream"], s["plainPatch"]
print(f"approvals: {u['n']} (one at a time, each 300 ms after its request appeared)")
print(f"plain PATCH round trip (baseline): p50 {p['p50']:.1f} ms, p99 {p['p99']:.1f} ms")
print(f"decision PATCH -> a watch sees it: p50 {s['decisionToWatch']['p50']:.1f} ms, p99 {s['decisionToWatch']['p99']:.1f} ms")
print(f"the gate's claim (status PATCH round trip, from its log): p50 {rank(claims, 50):.1f} ms, p99 {rank(claims, 99):.1f} ms")
print(f"decision PATCH -> tool server receives the call: p50 {u['p50']:.1f} ms = {u['p50'] / p['p50']:.2f}x PATCH p50; "
      f"p99 {u['p99']:.1f} ms = {u['p99'] / p['p50']:.2f}x PATCH p50 ({u['p99'] / p['p99']:.2f}x PATCH p99)")
print(f"decision PATCH -> client has the result: p50 {s['decisionToResult']['p50']:.1f} ms, p99 {s['decisionToResult']['p99']:.1f} ms")
print(f"claim conflicts: {sys.argv[2]} in {u['n']} approvals")
PY
slowest_approval "$WORK/bench.log" "$WORK/gate-a.log"
