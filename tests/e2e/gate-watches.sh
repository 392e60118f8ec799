#!/usr/bin/env bash
# What N idle gates cost the kube-apiserver, on the cluster in KUBECONFIG (a benchmark, not a
# test: it prints figures and fails only when something does not work). Issue 43, part 5.
#
# Usage: tests/e2e/gate-watches.sh [N...]     (default: 100 1000; HITL_E2E_BIN, default the
#        release build target/release/hitl-operator; IDLE seconds measured per level, default 60)
# Each gate is `hitl-operator gate` as a sidecar runs it, for an Agent of its own (gate.json as
# the controller renders it, one tool server), authenticated with a ServiceAccount token bound
# to the gate's Role, so each holds the watches an idle sidecar holds (its Agent, for the freeze
# annotation; the ApprovalRequests are watched from the first gated call on). The apiserver must be a local process
# (as ../shared/k8s/cluster-up.sh runs it): its RSS and CPU time are read from /proc.
# Prints, per level, against the same apiserver with no gate measured just before: the WATCH
# requests open (apiserver_longrunning_requests), the apiserver's RSS and its CPU while idle,
# as ratios and per gate, and the gates' own memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error

skip_without_cluster
LEVELS=("$@")
[ ${#LEVELS[@]} -gt 0 ] || LEVELS=(100 1000)
IDLE=${IDLE:-60}
BIN=${HITL_E2E_BIN:-target/release/hitl-operator}
[ -x "$BIN" ] || cargo build --release --quiet --bin hitl-operator
APISERVER=$(pgrep -o -f '/kube-apiserver ' || true)
[ -n "$APISERVER" ] || fail "no local kube-apiserver process: this bench reads its RSS and CPU from /proc"
throwaway hitl-bench-watches
TICKS=$(getconf CLK_TCK)

kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev >/dev/null
kubectl create namespace "$NS" >/dev/null
# One ServiceAccount with the Role an Agent's gate gets (render::objects), shared by the gates.
kubectl -n "$NS" create serviceaccount gate >/dev/null
kubectl -n "$NS" create role gate \
  --verb=get,list,watch,create --resource=approvalrequests.kagent.dev \
  --verb=get,list,watch --resource=approvalgrants.kagent.dev >/dev/null
kubectl -n "$NS" create role gate-status --verb=patch \
  --resource=approvalrequests.kagent.dev/status,approvalgrants.kagent.dev/status >/dev/null
kubectl -n "$NS" create role gate-agents --verb=get,list,watch --resource=agents.kagent.dev >/dev/null
for role in gate gate-status gate-agents; do
  kubectl -n "$NS" create rolebinding "$role" --role="$role" --serviceaccount="$NS:gate" >/dev/null
done
kubeconfig_with_token "$WORK/gate.kubeconfig" "$(kubectl -n "$NS" create token gate --duration=2h)" "$NS"
head -c 32 /dev/urandom >"$WORK/key"

# apiserver_sample: "<rss KiB> <cpu ticks>" of the apiserver process.
apiserver_sample() {
  awk '/^VmRSS/ { print $2 }' "/proc/$APISERVER/status" | tr '\n' ' '
  awk '{ print $14 + $15 }' "/proc/$APISERVER/stat"
}
# open_watches: the WATCH requests clients hold open on our kinds (the apiserver's own
# cluster-wide watches of its watch cache left out).
open_watches() {
  kubectl get --raw /metrics | awk '/^apiserver_longrunning_requests\{/ && /verb="WATCH"/ &&
    /group="kagent.dev"/ && !/scope="cluster"/ { n += $NF } END { print n + 0 }'
}
# idle_figures LABEL: open watches, apiserver RSS (MiB) and CPU (cores) over IDLE seconds.
idle_figures() {
  local before after
  before=$(apiserver_sample)
  sleep "$IDLE"
  after=$(apiserver_sample)
  awk -v b="$before" -v a="$after" -v t="$TICKS" -v s="$IDLE" -v w="$(open_watches)" -v l="$1" 'BEGIN {
    split(b, x, " "); split(a, y, " ")
    printf "%s %d %.1f %.4f\n", l, w, y[1] / 1024, (y[2] - x[2]) / t / s }'
}
# gates_pss_mib: the memory of every gate started, summed as PSS (the code pages they all
# share counted once, not once per gate as RSS would).
gates_pss_mib() {
  local name total=0
  for name in "${!E2E_PIDS[@]}"; do
    total=$((total + $(awk '/^Pss:/ { print $2 }' "/proc/${E2E_PIDS[$name]}/smaps_rollup" 2>/dev/null || echo 0)))
  done
  awk -v k="$total" 'BEGIN { printf "%.0f", k / 1024 }'
}

# start_gates FROM TO: gates FROM..TO-1, each for an Agent of its own.
start_gates() {
  local i
  for ((i = $1; i < $2; i++)); do
    cat >"$WORK/gate-$i.json" <<EOF
{
  "agent": {"namespace": "$NS", "name": "agent-$i", "service_account": "gate"},
  "approval": {"mode": "Gate", "timeout_seconds": 3600, "wait_timeout_seconds": 30,
               "ttl_after_finished_seconds": 86400, "grant_max_ttl_seconds": 3600},
  "listen": "127.0.0.1:0",
  "metrics_listen": "127.0.0.1:0",
  "servers": [{
    "namespace": "$NS", "name": "tools", "kind": "RemoteMCPServer",
    "protocol": "STREAMABLE_HTTP", "route": "/servers/$NS/tools/mcp",
    "params": {"url": "http://127.0.0.1:9/mcp", "headers": {}},
    "tools": ["echo", "delete_file"], "require_approval": ["delete_file"]
  }]
}
EOF
    KUBECONFIG=$WORK/gate.kubeconfig "$BIN" gate --config "$WORK/gate-$i.json" \
      --binding-key "$WORK/key" >"$WORK/gate-$i.log" 2>&1 &
    E2E_PIDS[gate-$i]=$!
  done
}

step "baseline: the apiserver with no gate, idle ${IDLE}s"
read -r _ W0 RSS0 CPU0 <<<"$(idle_figures baseline)"
note "open WATCH requests on kagent.dev: $W0; apiserver RSS $RSS0 MiB, CPU $CPU0 cores"

started=0
printf '\n%-8s %-14s %-26s %-30s %s\n' gates "open watches" "apiserver RSS (x idle)" "apiserver CPU idle (x idle)" "gates' memory (PSS)" >"$WORK/table"
for level in "${LEVELS[@]}"; do
  step "$level gates"
  start_gates "$started" "$level"
  started=$level
  per_gate=0
  watches_up() {
    local w
    w=$(open_watches)
    [ "$w" -ge $((W0 + level)) ]
  }
  wait_for "$level gates' watches" 600 watches_up
  for name in "${!E2E_PIDS[@]}"; do alive "${E2E_PIDS[$name]}" || fail "gate $name exited"; done
  read -r _ W RSS CPU <<<"$(idle_figures "$level")"
  GATES=$(gates_pss_mib)
  per_gate=$(awk -v a="$RSS" -v b="$RSS0" -v n="$level" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
  printf '%-8s %-14s %-26s %-30s %s\n' "$level" "$((W - W0))" \
    "$RSS MiB ($(awk -v a="$RSS" -v b="$RSS0" 'BEGIN { printf "%.2f", a / b }')x, +$per_gate KiB/gate)" \
    "$CPU ($(awk -v a="$CPU" -v b="$CPU0" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')x)" \
    "$GATES MiB" >>"$WORK/table"
  note "open WATCH requests on kagent.dev: $((W - W0)) more; apiserver RSS $RSS MiB, CPU $CPU cores; gates $GATES MiB"
done
step "figures (baseline: $RSS0 MiB RSS, $CPU0 cores idle, the same apiserver just before)"
cat "$WORK/table"
