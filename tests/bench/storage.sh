#!/usr/bin/env bash
# What ApprovalRequests store, measured on a real control plane (docs/install.md, "Bounding
# storage"): one Agent whose gate runs as a local process fills its cap of open requests
# (STORAGE_CAP, default 50, set as the Agent's maxOpenRequests) with calls whose arguments make
# the largest preview (32 KiB), as the gate writes them and the controller updates them. Then:
#   - the next distinct call is refused with the cap's text, creates nothing and is counted in
#     hitl_gate_open_request_cap_reached_total; an identical call still gets its own request;
#   - the bytes per request and per agent at the cap: each object's JSON as the apiserver
#     returns it, and the value etcd holds for it (through etcd's JSON gateway, STORAGE_ETCD,
#     default http://127.0.0.1:23790 as /work/shared/k8s/cluster-up.sh runs it; skipped if it
#     does not answer), and what a label-selected LIST of the agent's requests (what counting
#     by LIST before each creation would read) costs;
#   - the chart's ResourceQuota (tests/chart/rendered/approval-request-quota.enabled.yaml) in
#     the namespace, set to the cap, refuses the next request, made with kubectl or by a gate
#     whose own cap would allow it (then the call is not run).
# Uses the cluster of $KUBECONFIG as cluster-admin, the repository's CRDs, the controller
# watching one throwaway namespace (deleted at the end unless HITL_E2E_KEEP=1) and the npm
# recorder MCP server. Run: bash tests/bench/storage.sh (after cargo build --bins and
# npm ci --prefix tests/mcp-peers). Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=filler
CAP=${STORAGE_CAP:-50}
ETCD=${STORAGE_ETCD:-http://127.0.0.1:23790}
throwaway hitl-storage

# ask GATE FIRST LAST: calls delete_file through GATE for paths /data/FIRST../data/LAST, ten at
# a time, each with a `content` that makes the largest preview; prints one JSON line per call:
# {path, text, isError}.
ask() {
  python3 - "${GATE_URL[$1]}" "$2" "$3" <<'PY'
import concurrent.futures, json, sys, urllib.request
url, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PREVIEW_MAX = 32 * 1024  # the gate's largest preview (src/gate/redact.rs)

def arguments(path):
    args = {"path": path, "content": ""}
    room = PREVIEW_MAX - len(json.dumps(args, separators=(",", ":")))
    args["content"] = "x" * room
    return args

def call(i):
    path = f"/data/{i}"
    body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "delete_file", "arguments": arguments(path)}}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=60) as response:
        result = json.load(response)["result"]
    return {"path": path, "text": result["content"][0]["text"], "isError": result.get("isError", False)}

with concurrent.futures.ThreadPoolExecutor(10) as pool:
    for answer in pool.map(call, range(first, last + 1)):
        print(json.dumps(answer))
PY
}

# sizes: name, JSON bytes (compact, as GET returns it) and preview bytes of each request of $NS.
sizes() {
  kubectl -n "$NS" get approvalrequests -o json | python3 -c '
import json, sys
for r in json.load(sys.stdin)["items"]:
    preview = len(json.dumps(r["spec"].get("argumentsPreview", {}), separators=(",", ":")))
    print(r["metadata"]["name"], len(json.dumps(r, separators=(",", ":"))), preview)'
}

# etcd_values: name, bytes of the value etcd holds (CRs are stored as JSON) and how many times
# it was written, for each request of $NS; fails if etcd's gateway does not answer.
etcd_values() {
  python3 - "$ETCD" "/registry/kagent.dev/approvalrequests/$NS/" <<'PY'
import base64, json, sys, urllib.request
etcd, prefix = sys.argv[1], sys.argv[2].encode()
end = prefix[:-1] + bytes([prefix[-1] + 1])
body = json.dumps({"key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode()})
with urllib.request.urlopen(urllib.request.Request(etcd + "/v3/kv/range", data=body.encode()), timeout=5) as r:
    answer = json.load(r)
for kv in answer.get("kvs", []):
    print(base64.b64decode(kv["key"]).decode().rsplit("/", 1)[1], len(base64.b64decode(kv["value"])),
          kv["version"])
PY
}

# stats: count, mean, min and max of the second column of stdin, as "n=… mean=… min=… max=…".
stats() {
  awk '{ n++; s += $2; if (n == 1 || $2 < lo) lo = $2; if ($2 > hi) hi = $2 }
       END { if (n) printf "n=%d mean=%.0f min=%d max=%d total=%d\n", n, s / n, lo, hi, s }'
}

step "setup: CRDs, namespace $NS, recorder, controller, Agent $AGENT (maxOpenRequests: $CAP), gate a"
GATES_APPROVAL="{timeout: 1h, waitTimeout: 1s, maxOpenRequests: $CAP}"
gates_setup
grep -q "\"max_open_requests\":$CAP" "$WORK/gate.json" || fail "gate.json does not carry the cap: $(cat "$WORK/gate.json")"
start_gate a
ok "gate.json carries max_open_requests $CAP"

step "fill the cap: $CAP distinct calls, each with a 32 KiB preview"
started=$(now)
answers=$(ask a 1 "$CAP")
pending=$(grep -c 'Pending: ApprovalRequest' <<<"$answers" || true)
[ "$pending" = "$CAP" ] || fail "$pending of $CAP calls pending: $(head -c 600 <<<"$answers")"
[ "$(kubectl -n "$NS" get approvalrequests -o name | wc -l)" = "$CAP" ] || fail "not $CAP requests"
ok "$CAP requests created in $(elapsed "$started") s"
wait_for "the controller's phase on every request" 60 bash -c \
  "[ \$(kubectl -n $NS get approvalrequests -o jsonpath='{range .items[*]}{.status.phase}{\"\\n\"}{end}' | grep -c '^Pending$') = $CAP ]"

step "the cap: a new distinct call is refused, an identical one keeps its request"
refusal=$(ask a $((CAP + 1)) $((CAP + 1)))
expect_in "the refusal" "\"isError\": true" "$refusal"
expect_in "the refusal" "already has $CAP open approval requests in namespace $NS" "$refusal"
expect_in "the refusal" "may have at most $CAP (approval.maxOpenRequests)" "$refusal"
[ "$(kubectl -n "$NS" get approvalrequests -o name | wc -l)" = "$CAP" ] || fail "a request was created past the cap"
[ "$(gate_metric a hitl_gate_open_request_cap_reached_total)" = 1 ] || fail "the cap metric is not 1"
note "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["text"])' "$refusal")"
again=$(ask a 1 1)
expect_in "the identical call" "Pending" "$again"
[ "$(kubectl -n "$NS" get approvalrequests -o name | wc -l)" = "$CAP" ] || fail "the identical call made a request"
ok "call $((CAP + 1)) refused (hitl_gate_open_request_cap_reached_total 1); /data/1 again is still pending on its request"

step "bytes per request and per agent at the cap"
sizes >"$WORK/sizes"
json=$(stats <"$WORK/sizes")
preview=$(awk '{ print $1, $3 }' "$WORK/sizes" | stats)
note "preview JSON per request:     $preview"
note "object JSON per request:      $json"
if etcd_values >"$WORK/etcd" 2>/dev/null && [ -s "$WORK/etcd" ]; then
  stored=$(stats <"$WORK/etcd")
  note "etcd value per request:       $stored"
  note "writes per request so far:    $(awk '{ print $1, $3 }' "$WORK/etcd" | stats) (until etcd compacts, each write keeps a whole copy)"
  per_request=$(awk '{ s += $2 } END { printf "%.0f", s / NR }' "$WORK/etcd")
else
  note "etcd's gateway at $ETCD does not answer: object JSON sizes only"
  per_request=$(awk '{ s += $2 } END { printf "%.0f", s / NR }' "$WORK/sizes")
fi
awk -v b="$per_request" -v cap="$CAP" 'BEGIN {
  printf "     per agent at the cap (%d open): %.1f MB; etcd'"'"'s default 2 GiB quota holds %d such requests\n",
    cap, cap * b / 1e6, 2147483648 / b }'
list_path="/apis/kagent.dev/v1alpha2/namespaces/$NS/approvalrequests?labelSelector=kagent.dev%2Fagent%3D$AGENT"
started=$(now)
list_bytes=$(kubectl get --raw "$list_path" | wc -c)
note "a LIST of the agent's $CAP requests: $list_bytes bytes in $(elapsed "$started") s (what counting by LIST before each creation would read; the gate's watch reads each change once)"

step "the chart's ResourceQuota on count/approvalrequests.kagent.dev"
python3 - "$NS" "$CAP" <<'PY' | kubectl apply -f - >/dev/null
import sys, yaml
ns, cap = sys.argv[1], sys.argv[2]
for doc in yaml.safe_load_all(open("tests/chart/rendered/approval-request-quota.enabled.yaml")):
    if doc and doc["metadata"]["namespace"] == "agents":
        doc["metadata"]["namespace"] = ns
        doc["spec"]["hard"] = {"count/approvalrequests.kagent.dev": cap}
        print("---\n" + yaml.safe_dump(doc))
PY
quota=$(kubectl -n "$NS" get resourcequota -o name)
# Without a kube-controller-manager nobody computes the quota's usage, and the apiserver refuses
# every creation until someone has: then write what the quota controller would.
for _ in $(seq 50); do
  [ -z "$(kubectl -n "$NS" get "$quota" -o jsonpath='{.status.used}')" ] || break
  sleep 0.1
done
if [ -z "$(kubectl -n "$NS" get "$quota" -o jsonpath='{.status.used}')" ]; then
  kubectl -n "$NS" patch "$quota" --subresource=status --type=merge -p \
    "{\"status\":{\"hard\":{\"count/approvalrequests.kagent.dev\":\"$CAP\"},\"used\":{\"count/approvalrequests.kagent.dev\":\"$CAP\"}}}" >/dev/null
  note "no quota controller runs: wrote its usage ($CAP) by hand"
fi
note "$quota: $(kubectl -n "$NS" get "$quota" -o jsonpath='{.status.used}') used of $(kubectl -n "$NS" get "$quota" -o jsonpath='{.status.hard}')"
refused "ApprovalRequest $((CAP + 1)) created as cluster-admin" "exceeded quota" kubectl -n "$NS" create -f - <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: over-quota}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf '0%.0s' {1..64})"
  argumentsBytes: 2
  requestedBy: admin
  expiresAt: "2030-01-01T00:00:00Z"
YAML
# A gate whose cap would allow one more: the quota refuses its request, and the call is not run.
python3 -c 'import json, sys
config = json.load(open(sys.argv[1]))
config["approval"]["max_open_requests"] += 1
json.dump(config, open(sys.argv[1], "w"))' "$WORK/gate.json"
start_gate b
over=$(ask b $((CAP + 2)) $((CAP + 2)))
expect_in "the call past the quota" "\"isError\": true" "$over"
expect_in "the call past the quota" "NOT executed: the approval gate could not run tool 'delete_file'" "$over"
expect_in "the call past the quota" "exceeded quota" "$over"
[ "$(kubectl -n "$NS" get approvalrequests -o name | wc -l)" = "$CAP" ] || fail "a request was created past the quota"
[ "$(runs delete_file "/data/$((CAP + 2))")" = 0 ] || fail "the call past the quota ran"
note "gate b: $(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["text"][:300])' "$over")"
ok "the quota refuses request $((CAP + 1)) in $NS, made by kubectl or by a gate"

step "clean up: the namespace's objects, then (on exit) the namespace"
kubectl -n "$NS" delete agents --all --timeout=30s >/dev/null
kubectl -n "$NS" delete approvalrequests,remotemcpservers,modelconfigs,resourcequotas --all >/dev/null
ok "deleted the requests, the Agent and the quota of $NS"
