#!/usr/bin/env bash
# Controller memory and cold start at N Agents, on the cluster in KUBECONFIG (a benchmark, not a
# test: it prints figures and fails only when something does not work). Issue 16, part 3.
#
# Usage: tests/e2e/controller-memory.sh [N]      (default 1000; HITL_E2E_BIN, default the
#        release build $CARGO_TARGET_DIR/release/hitl-operator, target/ without
#        CARGO_TARGET_DIR; HITL_HEAPTRACK=DIR runs the controller
#        under heaptrack, its profiles written to DIR, and its RSS figures are then heaptrack's;
#        HITL_BENCH_NS=NAMESPACE skips populating and measures cold starts only, COLD_STARTS
#        of them (default 1), over the Agents and requests a former run kept there with
#        HITL_E2E_KEEP=1: populating 10 000 takes far longer than a cold start over them:
#        docs/performance.md#controller-memory)
# Prints: RSS idle (no Agents); N Agents applied while it runs: time until every Deployment
# exists; N ApprovalRequests created (one per Agent): time until every one has a phase; RSS
# then; a restart over the N rendered Agents and N requests: time until every Agent was
# reconciled again and the controller's CPU time (user + system) until then, the writes it
# made (apiserver objects whose resourceVersion changed), RSS then.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error

skip_without_cluster
N=${1:-1000}
BIN=${HITL_E2E_BIN:-${CARGO_TARGET_DIR:-target}/release/hitl-operator}
[ -x "$BIN" ] || cargo build --release --quiet --bin hitl-operator
if [ -n "${HITL_BENCH_NS:-}" ]; then
  NS=$HITL_BENCH_NS
  kubectl get namespace "$NS" >/dev/null
  WORK=$(mktemp -d)
  trap 'stop_all; rm -rf "$WORK"' EXIT
else
  throwaway hitl-bench
fi

# anon_split PID: of the anonymous memory, how much is malloc's main heap (the brk area, where
# the caches live) and how much the rest (thread stacks, blocks malloc mapped on their own).
anon_split() {
  awk '/^[0-9a-f]+-[0-9a-f]+ / { heap = ($6 == "[heap]") }
       /^Anonymous:/ { if (heap) h += $2; else o += $2 }
       END { printf "heap %.1f MiB, other anonymous %.1f MiB", h / 1024, o / 1024 }' "/proc/$1/smaps"
}
# cpu_seconds PID: the user and system time the process has used, in seconds.
cpu_seconds() {
  awk -v tick="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.1f", ($12 + $13) / tick }' "/proc/$1/stat"
}
reconciles() {
  curl -fsS "http://127.0.0.1:$PORT/metrics" |
    awk '$1 ~ /^hitl_reconcile_total\{controller="agent"\}/ { print $2 }'
}
count() { kubectl -n "$NS" get "$1" -o name 2>/dev/null | wc -l; }
# apply_in_batches FILE...: one `kubectl apply` per multi-document file.
apply_in_batches() {
  local file
  for file in "$@"; do kubectl -n "$NS" apply --server-side -f "$file" >/dev/null; done
}
BATCH=1000
# versions: what the controller writes, one line per object: the resourceVersion of the objects
# only it writes (and of the Agents and ApprovalRequests, whose status it writes), the
# generation of Deployments (kube-controller-manager writes their status).
versions() {
  kubectl -n "$NS" get agents,secrets,services,serviceaccounts,roles,rolebindings,approvalrequests \
    -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}'
  kubectl -n "$NS" get deployments \
    -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.metadata.generation}{"\n"}{end}'
}

PORT=$(free_port)
start_controller() {
  local wrap=()
  if [ -n "${HITL_HEAPTRACK:-}" ]; then
    mkdir -p "$HITL_HEAPTRACK"
    wrap=(heaptrack -o "$HITL_HEAPTRACK/controller-$(date +%s)")
  fi
  start controller "$WORK/controller.log" ${wrap[@]+"${wrap[@]}"} "$BIN" controller --namespace "$NS" \
    --leader-election=false --metrics-addr="127.0.0.1:$PORT" --log-format json
  if [ ${#wrap[@]} -gt 0 ]; then
    # The controller is heaptrack's child: measure and stop it, not the wrapper.
    local wrapper=${E2E_PIDS[controller]} child=""
    wait_for "the controller under heaptrack" 30 eval 'child=$(pgrep -P "$wrapper" -x hitl-operator)'
    E2E_PIDS[controller]=$child
  fi
  # Ready once every cache listed: over 10 000 Agents (80 000 objects) that takes minutes on
  # 2 shared cores, under heaptrack longer. The cold start's time runs from the start anyway.
  wait_for "the controller's /readyz" 900 http_ok "http://127.0.0.1:$PORT/readyz"
}

# populate: the Agents and requests, applied while the controller runs; RSS idle and then.
populate() {
  kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
  waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev >/dev/null
  kubectl create namespace "$NS" >/dev/null
  ADMIN=$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')
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

  step "controller memory at $N Agents ($BIN, namespace $NS)"
  start_controller
  sleep 5
  IDLE=$(rss_mib "${E2E_PIDS[controller]}")
  ok "idle RSS: $IDLE"

  for i in $(seq 1 "$N"); do
    bench_agent "$i" >>"$WORK/agents-$(((i - 1) / BATCH)).yaml"
    # A request the gate of agent-$i would make (created here as the admin, so requestedBy is
    # that user), pending until 2099.
    cat >>"$WORK/requests-$(((i - 1) / BATCH)).yaml" <<EOF
---
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: request-$i}
spec:
  agentRef: {name: agent-$i}
  toolServer: {kind: RemoteMCPServer, name: tools, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf '%064d' "$i")"
  argumentsBytes: 2
  requestedBy: $ADMIN
  expiresAt: "2099-01-01T00:00:00Z"
EOF
  done
  T=$(now)
  apply_in_batches "$WORK"/agents-*.yaml
  APPLIED=$(elapsed "$T")
  all_rendered() { [ "$(count deployments)" -ge "$N" ]; }
  wait_for "$N Deployments" 1800 all_rendered
  RENDERED=$(elapsed "$T")
  ok "$N Agents applied in $APPLIED s; every Deployment existed $RENDERED s after the apply began"
  T=$(now)
  apply_in_batches "$WORK"/requests-*.yaml
  with_phase() {
    [ "$(kubectl -n "$NS" get approvalrequests -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' |
      grep -c .)" -ge "$N" ]
  }
  wait_for "$N ApprovalRequests with a phase" 1800 with_phase
  PHASED=$(elapsed "$T")
  sleep 10
  AFTER=$(rss_mib "${E2E_PIDS[controller]}")
  ok "$N ApprovalRequests created; every one had a phase $PHASED s after the first create; RSS $AFTER"
}

# cold_start: the controller restarted over what the namespace holds; time, writes, RSS.
cold_start() {
  step "cold start over $N rendered Agents"
  stop controller
  versions | sort >"$WORK/before"
  T=$(now)
  start_controller
  all_reconciled() { [ "$(reconciles)" -ge "$N" ] 2>/dev/null; }
  wait_for "$N Agent reconciles" 1800 all_reconciled
  COLD=$(elapsed "$T")
  COLD_CPU=$(cpu_seconds "${E2E_PIDS[controller]}")
  sleep 10
  COLD_RSS=$(rss_mib "${E2E_PIDS[controller]}")
  note "anonymous memory after the cold start: $(anon_split "${E2E_PIDS[controller]}")"
  versions | sort >"$WORK/after"
  comm -13 "$WORK/before" "$WORK/after" >"$WORK/written"
  WRITES=$(wc -l <"$WORK/written")
  [ "$WRITES" -eq 0 ] || note "written: $(awk -F= 'NR <= 5 { printf "%s ", $1 }' "$WORK/written")"
  ok "restart: $N Agents reconciled $COLD s after start (controller CPU $COLD_CPU s), $WRITES objects written, RSS $COLD_RSS"
}

if [ -z "${HITL_BENCH_NS:-}" ]; then
  populate
  cold_start
else
  N=$(count agents)
  IDLE="-" AFTER="-" RENDERED="-" PHASED="-"
  note "namespace $NS: $N Agents, $(count approvalrequests) ApprovalRequests"
  for _ in $(seq 1 "${COLD_STARTS:-1}"); do cold_start; done
fi

echo
printf '%-52s %s\n' "controller RSS idle" "$IDLE" \
  "controller RSS with $N Agents and requests (running)" "$AFTER" \
  "apply of $N Agents -> every Deployment exists" "$RENDERED s" \
  "create of $N ApprovalRequests -> every one has a phase" "$PHASED s" \
  "cold start over $N Agents -> all reconciled" "$COLD s" \
  "the controller's CPU time until then" "$COLD_CPU s" \
  "objects written during that cold start" "$WRITES" \
  "controller RSS after the cold start" "$COLD_RSS"
