#!/usr/bin/env bash
# Controller memory and cold start at N Agents, on the cluster in KUBECONFIG (a benchmark, not a
# test: it prints figures and fails only when something does not work). Issue 16, part 3.
#
# Usage: tests/e2e/controller-memory.sh [N]      (default 1000; HITL_E2E_BIN, default the
#        release build target/release/hitl-operator)
# Prints: RSS idle (no Agents); N Agents applied while it runs: time until every Deployment
# exists, RSS then; a restart over the N rendered Agents: time until every Agent was reconciled
# again, the writes it made (apiserver objects whose resourceVersion changed), RSS then.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error

if ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "SKIP: no cluster reachable"
  exit 0
fi
N=${1:-1000}
BIN=${HITL_E2E_BIN:-target/release/hitl-operator}
[ -x "$BIN" ] || cargo build --release --quiet --bin hitl-operator
throwaway hitl-bench

rss_mib() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
reconciles() {
  curl -fsS "http://127.0.0.1:$PORT/metrics" |
    awk '$1 ~ /^hitl_reconcile_total\{controller="agent"\}/ { print $2 }'
}
count() { kubectl -n "$NS" get "$1" -o name 2>/dev/null | wc -l; }
# versions: what the controller writes, one line per object: the resourceVersion of the objects
# only it writes, the generation of Deployments (kube-controller-manager writes their status).
versions() {
  kubectl -n "$NS" get secrets,services,serviceaccounts,roles,rolebindings \
    -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}'
  kubectl -n "$NS" get deployments \
    -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.metadata.generation}{"\n"}{end}'
}

kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev >/dev/null
kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: default-model-config}
spec: {provider: OpenAI, model: gpt-4o}
---
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: tools}
spec: {url: "http://127.0.0.1:9/mcp"}
EOF

PORT=$(free_port)
start_controller() {
  start controller "$WORK/controller.log" "$BIN" controller --namespace "$NS" \
    --leader-election=false --metrics-addr="127.0.0.1:$PORT" --log-format json
  wait_for "the controller's /readyz" 60 http_ok "http://127.0.0.1:$PORT/readyz"
}

step "controller memory at $N Agents ($BIN, namespace $NS)"
start_controller
sleep 5
IDLE=$(rss_mib "${E2E_PIDS[controller]}")
ok "idle RSS: $IDLE MiB"

for i in $(seq 1 "$N"); do
  cat <<EOF
---
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: agent-$i}
spec:
  type: Declarative
  declarative:
    systemMessage: "Agent $i."
    tools:
      - type: McpServer
        mcpServer: {name: tools, toolNames: [read_file, delete_file], requireApproval: [delete_file]}
EOF
done >"$WORK/agents.yaml"
T=$(now)
kubectl -n "$NS" apply --server-side -f "$WORK/agents.yaml" >/dev/null
APPLIED=$(elapsed "$T")
all_rendered() { [ "$(count deployments)" -ge "$N" ]; }
wait_for "$N Deployments" 1800 all_rendered
RENDERED=$(elapsed "$T")
sleep 10
AFTER=$(rss_mib "${E2E_PIDS[controller]}")
ok "$N Agents applied in $APPLIED s; every Deployment existed $RENDERED s after the apply began; RSS $AFTER MiB"

step "cold start over $N rendered Agents"
stop controller
versions | sort >"$WORK/before"
T=$(now)
start_controller
all_reconciled() { [ "$(reconciles)" -ge "$N" ] 2>/dev/null; }
wait_for "$N Agent reconciles" 1800 all_reconciled
COLD=$(elapsed "$T")
sleep 10
COLD_RSS=$(rss_mib "${E2E_PIDS[controller]}")
versions | sort >"$WORK/after"
WRITES=$(comm -13 "$WORK/before" "$WORK/after" | wc -l)
ok "restart: $N Agents reconciled $COLD s after start, $WRITES rendered objects written, RSS $COLD_RSS MiB"

echo
printf '%-52s %s\n' "controller RSS idle" "$IDLE MiB" \
  "controller RSS with $N Agents (applied while running)" "$AFTER MiB" \
  "apply of $N Agents -> every Deployment exists" "$RENDERED s" \
  "cold start over $N Agents -> all reconciled" "$COLD s" \
  "objects written during that cold start" "$WRITES" \
  "controller RSS after the cold start" "$COLD_RSS MiB"
