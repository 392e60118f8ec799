#!/usr/bin/env bash
# A cold start over N Agents that were never rendered, on the cluster in KUBECONFIG: what a new
# install (or a controller that was down while Agents were applied) costs the apiserver. A
# benchmark, not a test: it prints figures and fails only when something does not work.
# Issue 44, part 1.
#
# Usage: tests/e2e/cold-start.sh [N]    (default 500; HITL_E2E_BIN, default the release build)
# Applies N Agents (Gate mode, sharing one RemoteMCPServer and one ModelConfig with its API-key
# Secret, as a team's agents do) while no controller runs, then starts the controller and waits
# until every Agent has its Deployment and a status. Prints the time that took, the controller's
# RSS then, and Agents per second; the controller's own count of the requests it sent
# (hitl_apiserver_requests_total), divided by N, by verb and by verb and resource: the headline;
# then the apiserver's own request counters (apiserver_request_total) over the same time,
# divided by N, which also hold other clients' requests: kube-controller-manager's resources
# (Deployments' status, ReplicaSets, Pods, EndpointSlices, core/v1 Events; the controller's
# Events are events.k8s.io/v1) and the apiserver's own IPAddress per Service are left out, but
# the garbage collector's and the Deployment controller's reads of the objects the controller
# made cannot be told apart there. Lists are per controller, not per Agent, and printed apart.
# Last, the CPU time the controller and each control-plane process used over the cold start, per
# Agent, and the most Agents a second the control plane's CPU per Agent allows on this machine's
# cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error

skip_without_cluster
N=${1:-500}
BIN=${HITL_E2E_BIN:-${CARGO_TARGET_DIR:-target}/release/hitl-operator}
[ -x "$BIN" ] || cargo build --release --quiet --bin hitl-operator
throwaway hitl-cold

# counters: apiserver_request_total as "verb group resource subresource count" lines, summed
# over codes, scopes and versions.
counters() {
  kubectl get --raw /metrics | awk '
    /^apiserver_request_total\{/ {
      split("", l)
      s = $0; sub(/^[^{]*\{/, "", s); sub(/\}.*/, "", s)
      n = split(s, kv, ",")
      for (i = 1; i <= n; i++) { split(kv[i], p, "="); gsub(/"/, "", p[2]); l[p[1]] = p[2] }
      key = l["verb"] " " (l["group"] == "" ? "core" : l["group"]) " " l["resource"] " " (l["subresource"] == "" ? "-" : l["subresource"])
      sum[key] += $NF
    }
    END { for (k in sum) print k, sum[k] }' | sort
}

kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev >/dev/null
kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata: {name: openai}
stringData: {api-key: sk-bench}
---
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: default-model-config}
spec: {provider: OpenAI, model: gpt-4o, apiKeySecret: openai, apiKeySecretKey: api-key}
---
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: tools}
spec: {url: "http://127.0.0.1:9/mcp"}
EOF

step "cold start over $N unrendered Agents ($BIN, namespace $NS)"
for i in $(seq 1 "$N"); do
  bench_agent "$i" >>"$WORK/agents.yaml"
done
kubectl -n "$NS" apply --server-side -f "$WORK/agents.yaml" >/dev/null
ok "$N Agents applied; no controller running"

# cpu_ticks PID: the CPU time (user + system, clock ticks) process PID has used so far.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
CONTROL_PLANE=(kube-apiserver etcd kube-controller-manager)
declare -A CP_PID CP_BEFORE CP_AFTER
for name in "${CONTROL_PLANE[@]}"; do
  CP_PID[$name]=$(pgrep -o -f "(^|/)$name( |$)" || true)
  CP_BEFORE[$name]=$(cpu_ticks "${CP_PID[$name]:-0}")
done

counters >"$WORK/before"
PORT=$(free_port)
T=$(now)
start controller "$WORK/controller.log" "$BIN" controller --namespace "$NS" \
  --leader-election=false --metrics-addr="127.0.0.1:$PORT" --log-format json
# Polled cheaply, so that the polling takes little of the CPU the cold start runs on: the
# Deployments are counted from a one-item list (remainingItemCount); the Agents' statuses are
# read only once every Deployment exists (each Agent's status is written after its Deployment).
deployments() {
  local page
  page=$(kubectl get --raw "/apis/apps/v1/namespaces/$NS/deployments?limit=1")
  case $page in *'"items":[]'*) echo 0 ;; *) echo $((1 + $(grep -o '"remainingItemCount":[0-9]*' <<<"$page" | cut -d: -f2 || echo 0))) ;; esac
}
rendered() {
  [ "$(deployments)" -ge "$N" ] &&
    [ "$(kubectl -n "$NS" get agents -o jsonpath='{range .items[*]}{.status.observedGeneration}{"\n"}{end}' |
      grep -c .)" -ge "$N" ]
}
# 15 minutes, or a tenth of a second per Agent when that is longer (10 000 Agents: 1000 s).
WAIT=$((N / 10 > 900 ? N / 10 : 900))
wait_for "every Agent rendered, with a status" "$WAIT" rendered
SECONDS_TAKEN=$(elapsed "$T")
CONTROLLER_TICKS=$(cpu_ticks "${E2E_PIDS[controller]}")
RSS=$(rss_mib "${E2E_PIDS[controller]}")
for name in "${CONTROL_PLANE[@]}"; do
  CP_AFTER[$name]=$(cpu_ticks "${CP_PID[$name]:-0}")
done
# The last Agents' writes may still be in flight when the last status appears: settle.
sleep 3
counters >"$WORK/after"
curl -fsS "http://127.0.0.1:$PORT/metrics" >"$WORK/controller-metrics"
ok "rendered $N Agents in ${SECONDS_TAKEN} s: $(awk -v n="$N" -v s="$SECONDS_TAKEN" 'BEGIN { printf "%.0f", n / s }') Agents/s; controller RSS then $RSS"

# The controller's own count of its requests (hitl_apiserver_requests_total), exact where the
# apiserver's counters below also hold what kube-controller-manager sent for the same resources
# (its garbage collector's and Deployment controller's reads): the headline.
awk -v n="$N" '
  /^hitl_apiserver_requests_total\{/ {
    verb = $0; sub(/.*verb="/, "", verb); sub(/".*/, "", verb)
    resource = $0; sub(/.*resource="/, "", resource); sub(/".*/, "", resource)
    if (verb == "LIST" || verb == "WATCH") { once = once sprintf("       %-34s %6d\n", verb " " resource, $NF); next }
    per[verb " " resource] += $NF; by_verb[verb] += $NF; total += $NF }
  END {
    printf "     the controller'\''s own requests per Agent (its hitl_apiserver_requests_total; %d Agents): %.2f\n", n, total / n
    for (v in by_verb) printf "       %-8s %6.2f\n", v, by_verb[v] / n
    print "     by verb and resource (per Agent, total):"
    for (r in per) printf "       %-34s %6.2f %6d\n", r, per[r] / n, per[r]
    if (once != "") { print "     its lists and watches (per controller, not per Agent):"; printf "%s", once }
  }' "$WORK/controller-metrics"
echo "     the apiserver's counters over the same time (every client's requests, kube-controller-manager's resources left out):"

# Not the controller's: kube-controller-manager's controllers act on what it creates.
not_ours='^(LIST|WATCH|GET|POST|PUT|PATCH|DELETE|APPLY|UPDATE) (apps replicasets|core pods|discovery.k8s.io endpointslices|core endpoints|apps controllerrevisions|coordination.k8s.io leases|core events|networking.k8s.io ipaddresses)'
keyed() { awk '{ print $1 "|" $2 "|" $3 "|" $4, $5 }' "$1" | sort -k1,1; }
join -a 2 -e 0 -o '0,1.2,2.2' <(keyed "$WORK/before") <(keyed "$WORK/after") |
  awk -v n="$N" -v not_ours="$not_ours" '
    { split($1, k, "|"); d = $3 - $2; if (d <= 0) next
      line = k[1] " " k[2] " " k[3]
      if (k[1] != "WATCH" && k[1] != "LIST") everyone += d
      if (line ~ not_ours || (k[3] == "deployments" && k[4] == "status") || (k[2] == "authorization.k8s.io") || (k[2] == "authentication.k8s.io")) next
      name = k[1] " " k[3] (k[4] == "-" ? "" : "/" k[4])
      if (k[1] == "WATCH") next
      if (k[1] == "LIST") { once = once sprintf("       %-34s %6d\n", name, d); next }
      per[name] += d; verb[k[1]] += d; total += d }
    END {
      printf "     apiserver requests per Agent (%d Agents): %.2f (of %.2f by everyone, kube-controller-manager'\''s resources and the apiserver'\''s own included)\n", n, total / n, everyone / n
      for (v in verb) printf "       %-8s %6.2f\n", v, verb[v] / n
      print "     by verb and resource (per Agent, total):"
      for (r in per) printf "       %-34s %6.2f %6d\n", r, per[r] / n, per[r]
      if (once != "") { print "     lists (per controller, not per Agent; agents and deployments include this script'\''s polling):"; printf "%s", once }
    }'

# Where the CPU went while the Agents were rendered (the two cores are shared by all of them).
HZ=$(getconf CLK_TCK)
cpu_line="     CPU seconds over the cold start: controller $(awk -v t="$CONTROLLER_TICKS" -v hz="$HZ" 'BEGIN { printf "%.1f", t / hz }')"
for name in "${CONTROL_PLANE[@]}"; do
  [ -n "${CP_PID[$name]}" ] || continue
  cpu_line+=", $name $(awk -v a="${CP_BEFORE[$name]}" -v b="${CP_AFTER[$name]}" -v hz="$HZ" 'BEGIN { printf "%.1f", (b - a) / hz }')"
done
echo "$cpu_line (wall ${SECONDS_TAKEN} s, $(nproc) cores)"
# The ceiling the control plane sets: at its CPU per Agent in this run, the machine's cores
# render at most this many Agents a second, with a controller that cost nothing.
plane_ticks=0
for name in "${CONTROL_PLANE[@]}"; do
  [ -n "${CP_PID[$name]}" ] && plane_ticks=$((plane_ticks + CP_AFTER[$name] - CP_BEFORE[$name]))
done
awk -v t="$plane_ticks" -v c="$CONTROLLER_TICKS" -v hz="$HZ" -v n="$N" -v s="$SECONDS_TAKEN" -v cores="$(nproc)" 'BEGIN {
  plane = t / hz / n; ours = c / hz / n
  printf "     CPU per Agent: control plane %.1f ms, controller %.1f ms; the control plane alone allows at most %.0f Agents/s on %d cores: this run reached %.2f of that\n",
    plane * 1000, ours * 1000, cores / plane, cores, (n / s) / (cores / plane) }'
