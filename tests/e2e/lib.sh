# Helpers for the e2e suites (sourced). Every wait is bounded; failures print what the running
# processes logged.

# Logs whose tails `fail` prints, in the order they were added: "name=file" entries.
E2E_LOGS=()
# Processes started by the suite: name -> pid. `stop_all` ends them (by pid only).
declare -A E2E_PIDS=()

step() { printf '\n== %s\n' "$*"; }
ok() { echo "ok   - $*"; }
note() { echo "     $*"; }
# slowest_approval BENCH_LOG GATE_LOG: the slowest approval of tests/mcp-peers/approval-bench.mjs
# (its stderr) with the gate's claim for it (the gate's JSON log), to tell a late watch event
# from a slow write after it.
slowest_approval() {
  python3 - "$1" "$2" <<'PY' || note "slowest approval: not found in $1"
import json, re, sys
rows = [l.rstrip() for l in open(sys.argv[1]) if " upstream +" in l]
slowest = max(rows, key=lambda l: float(re.search(r"upstream \+([0-9.]+) ms", l).group(1)))
name = re.search(r"\): (\S+) watch ", slowest).group(1)
logged = (json.loads(l) for l in open(sys.argv[2]) if l.startswith("{"))
claims = [e["fields"]["claim_ms"] for e in logged
          if e.get("fields", {}).get("message") == "approval consumed" and e["fields"].get("request") == name]
claim = f"; the gate's claim {claims[0]:.1f} ms" if claims else "; no claim of it in the gate's log"
print(f"slowest: {slowest}{claim}")
PY
}
# jp OBJECT JSONPATH: a field of an object in $NS.
jp() { kubectl -n "$NS" get "$1" -o "jsonpath=$2"; }
# expect_in WHAT WANT TEXT: fails unless TEXT contains WANT.
expect_in() { grep -qF -- "$2" <<<"$3" || fail "$1: want '$2' in: $3"; }

track_log() {
  local entry
  for entry in "${E2E_LOGS[@]}"; do [ "$entry" != "$1=$2" ] || return 0; done
  E2E_LOGS+=("$1=$2")
}

# fail MESSAGE: prints FAIL and the tails of the tracked logs (kube-client's "Server cert
# bypassed" warnings left out), all on stderr so that a failure inside $(...) still shows;
# then exits 1.
fail() {
  {
    echo "FAIL - $*"
    local entry
    for entry in "${E2E_LOGS[@]}"; do
      [ -s "${entry#*=}" ] || continue
      echo "--- ${entry%%=*} (${entry#*=}), last 15 lines:"
      grep -v 'Server cert bypassed' "${entry#*=}" | tail -n 15 | cut -c1-400
    done
    echo "FAIL - $*"
  } >&2
  exit 1
}

# fail_on_error: any command that fails outside a condition ends the suite with a FAIL line naming
# it (set -e alone would exit silently).
fail_on_error() {
  set -E
  trap 'fail "line $LINENO: \"$BASH_COMMAND\" failed (status $?)"' ERR
}

# skip_without_cluster: prints SKIP and ends the script (status 0) when the cluster of
# KUBECONFIG does not answer.
skip_without_cluster() {
  kubectl version --request-timeout=5s >/dev/null 2>&1 && return
  echo "SKIP: no cluster reachable"
  exit 0
}

# now: seconds since the epoch with microseconds (bash builtin, no fork).
now() { echo "$EPOCHREALTIME"; }
# elapsed START [END]: seconds between two `now` values, 3 decimals.
elapsed() { awk -v a="$1" -v b="${2:-$EPOCHREALTIME}" 'BEGIN { printf "%.3f", b - a }'; }

# within START SECONDS: less than SECONDS have passed since START (a `now` value).
within() { awk -v a="$1" -v b="$EPOCHREALTIME" -v s="$2" 'BEGIN { exit !(b - a < s) }'; }

# explain_wait WHAT: after a wait for WHAT gave up, what the pods were doing, on stderr: each
# pod of the suite's namespaces ($NS, and $SYS_NS where it has one) with its phase,
# conditions and containers' states, the namespace's Events by time (the last 40), and each
# container's last 20 log lines, and its previous instance's when it restarted
# (tests/e2e/explain.py). Every wait of the suites calls it when it fails: wait_for, waited
# (kubectl wait, kubectl rollout status, helm --wait) and reply.
explain_wait() {
  local what=$1 ns pod container restarts line containers=() k=(kubectl --request-timeout=10s)
  # shellcheck disable=SC2206 # unset or empty ones drop out
  local namespaces=(${NS:-} ${SYS_NS:-})
  {
    echo "=== the wait for $what failed; what the cluster shows:"
    [ ${#namespaces[@]} -gt 0 ] || echo "(the suite has no namespace to show)"
    for ns in "${namespaces[@]}"; do
      if ! "${k[@]}" get namespace "$ns" >/dev/null 2>&1; then
        echo "--- namespace $ns: not found"
        continue
      fi
      echo "--- namespace $ns: pods"
      # Each pod's state (on stderr), and the containers with logs to show (on stdout).
      mapfile -t containers < <("${k[@]}" -n "$ns" get pods -o json | python3 tests/e2e/explain.py pods || true)
      echo "--- namespace $ns: Events, oldest first (the last 40)"
      "${k[@]}" -n "$ns" get events -o json | python3 tests/e2e/explain.py events 40 || true
      for line in "${containers[@]}"; do
        read -r pod container restarts <<<"$line"
        echo "--- $ns/$pod, container $container: its last 20 log lines"
        "${k[@]}" -n "$ns" logs "$pod" -c "$container" --tail 20 2>&1 | cut -c1-400 || true
        if [ "$restarts" -gt 0 ]; then
          echo "--- $ns/$pod, container $container: its previous instance's last 20 log lines ($restarts restarts)"
          "${k[@]}" -n "$ns" logs "$pod" -c "$container" --previous --tail 20 2>&1 | cut -c1-400 || true
        fi
      done
    done
    echo "=== end of what the cluster shows"
  } >&2
}

# wait_for DESCRIPTION SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      explain_wait "$what"
      fail "timed out after ${seconds}s waiting for $what"
    fi
    sleep 0.1
  done
}

# waited WHAT COMMAND...: runs COMMAND, a wait of its own (kubectl wait, kubectl rollout status,
# helm --wait), and prints its output; when it fails, its output, explain_wait WHAT and a FAIL.
waited() {
  local what=$1 out status=0
  shift
  out=$("$@" 2>&1) || status=$?
  if [ "$status" = 0 ]; then
    [ -z "$out" ] || printf '%s\n' "$out"
    return 0
  fi
  printf '%s\n' "$out" >&2
  explain_wait "$what"
  fail "waiting for $what: $1 failed (status $status): $(tail -n 3 <<<"$out")"
}

# start NAME LOGFILE COMMAND...: runs COMMAND in the background, output appended to LOGFILE
# (a restarted process keeps its earlier output, like `kubectl logs --previous`).
start() {
  local name=$1 log=$2
  shift 2
  "$@" >>"$log" 2>&1 &
  E2E_PIDS[$name]=$!
  track_log "$name" "$log"
}

alive() { kill -0 "$1" 2>/dev/null; }

# stop NAME [SIGNAL]: signals a started process and waits up to 10 s for it (then SIGKILL).
stop() {
  local pid=${E2E_PIDS[$1]:-}
  unset "E2E_PIDS[$1]"
  [ -n "$pid" ] || return 0
  kill "-${2:-TERM}" "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + 10))
  while alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

stop_all() {
  local name
  for name in "${!E2E_PIDS[@]}"; do stop "$name"; done
  rm -f "$E2E_PORTS_GIVEN"
}

# The ports free_port has handed out in this suite. A port is only bound later, by whoever gets
# it, so the kernel may offer it again meanwhile: two listeners of one suite then got the same
# port (a CI run failed on "Address already in use").
E2E_PORTS_GIVEN=${TMPDIR:-/tmp}/hitl-e2e-ports.$$
# free_port: a loopback port that is free now and that this suite has not handed out before.
free_port() {
  python3 - "$E2E_PORTS_GIVEN" <<'PY'
import os, socket, sys
ledger = sys.argv[1]
given = set(open(ledger).read().split()) if os.path.exists(ledger) else set()
while True:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    if port not in given:
        break
with open(ledger, "a") as f:
    f.write(port + "\n")
print(port)
PY
}

# http_up URL: any HTTP answer counts.
http_up() { curl -s -o /dev/null --max-time 2 "$1"; }
# http_ok URL: a 2xx answer.
http_ok() { curl -fs -o /dev/null --max-time 2 "$1"; }

# kubeconfig_with_token FILE TOKEN NAMESPACE: a kubeconfig for the cluster of the current
# kubeconfig that authenticates with TOKEN (as a pod's projected ServiceAccount token would).
kubeconfig_with_token() {
  local file=$1 token=$2 namespace=$3 server ca insecure
  server=$(kubectl config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  insecure=$(kubectl config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.insecure-skip-tls-verify}')
  {
    echo "apiVersion: v1"
    echo "kind: Config"
    echo "clusters:"
    echo "- name: e2e"
    echo "  cluster:"
    echo "    server: $server"
    if [ -n "$ca" ]; then echo "    certificate-authority-data: $ca"; fi
    if [ "$insecure" = true ]; then echo "    insecure-skip-tls-verify: true"; fi
    echo "users:"
    echo "- name: e2e"
    echo "  user: {token: $token}"
    echo "contexts:"
    echo "- name: e2e"
    echo "  context: {cluster: e2e, user: e2e, namespace: $namespace}"
    echo "current-context: e2e"
  } >"$file"
  chmod 600 "$file"
}

# kube_curl KUBECONFIG METHOD PATH [CURL-ARGS...]: a raw API request with the server and token of
# KUBECONFIG (one made by kubeconfig_with_token); fails on an HTTP error, printing the body.
kube_curl() {
  local kc=$1 method=$2 path=$3 view=(kubectl --kubeconfig "$1" config view --raw --minify --flatten -o) tls=(-k)
  shift 3
  local server token ca
  server=$("${view[@]}" jsonpath='{.clusters[0].cluster.server}')
  token=$("${view[@]}" jsonpath='{.users[0].user.token}')
  ca=$("${view[@]}" jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  if [ -n "$ca" ]; then
    base64 -d <<<"$ca" >"$kc.ca"
    tls=(--cacert "$kc.ca")
  elif [ "$("${view[@]}" jsonpath='{.clusters[0].cluster.insecure-skip-tls-verify}')" != true ]; then
    tls=()
  fi
  curl -sS --max-time 10 --fail-with-body "${tls[@]}" -X "$method" -H "Authorization: Bearer $token" "$@" "$server$path"
}

# kubeconfig_as FILE USER GROUP: the current kubeconfig's credentials, impersonating USER in
# GROUP (for clusters without ready-made kubeconfigs of the test users).
kubeconfig_as() {
  kubectl config view --raw --minify --flatten -o json | python3 -c '
import json, sys
config = json.load(sys.stdin)
config["users"][0]["user"].update({"as": sys.argv[1], "as-groups": [sys.argv[2]]})
json.dump(config, sys.stdout)' "$2" "$3" >"$1"
  chmod 600 "$1"
}

# refused WHO PATTERN COMMAND...: the command must fail, saying PATTERN (grep -iE); notes the
# line that says it.
refused() {
  local who=$1 pattern=$2 out
  shift 2
  if out=$("$@" 2>&1); then fail "$who was let through: $out"; fi
  grep -qiE -- "$pattern" <<<"$out" || fail "$who refused without /$pattern/: $out"
  note "$who: $(grep -iE -m1 -- "$pattern" <<<"$out" | cut -c1-200)"
}

# e2e_users: sets ALICE and MALLORY to kubeconfigs of alice (group approvers) and mallory (no
# rights): those in $HITL_E2E_USERS (default: the folder of $KUBECONFIG, as
# ../shared/k8s/cluster-up.sh makes them), else kubeconfigs in $WORK impersonating them; and
# checks that each authenticates as its user.
e2e_users() {
  local users=${HITL_E2E_USERS:-$(dirname "${KUBECONFIG:-$HOME/.kube/config}")} who kc
  if [ -f "$users/alice.kubeconfig" ] && [ -f "$users/mallory.kubeconfig" ]; then
    ALICE=$users/alice.kubeconfig
    MALLORY=$users/mallory.kubeconfig
  else
    ALICE=$WORK/alice.kubeconfig
    MALLORY=$WORK/mallory.kubeconfig
    kubeconfig_as "$ALICE" alice approvers
    kubeconfig_as "$MALLORY" mallory nobody
    note "no alice/mallory kubeconfigs in $users: impersonating them"
  fi
  for who in alice mallory; do
    kc=$ALICE
    [ "$who" = mallory ] && kc=$MALLORY
    [ "$(kubectl --kubeconfig "$kc" auth whoami -o jsonpath='{.status.userInfo.username}')" = "$who" ] ||
      fail "$kc does not authenticate as $who"
  done
}

# start_chart_controller NAME LOG POD METRICS_PORT KUBECONFIG: starts $BIN as the chart's
# controller container runs it (the args and env in CONTROLLER_ARGS and CONTROLLER_ENV, from
# tests/e2e/container.py), as the "pod" POD in $SYS_NS, /metrics on 127.0.0.1:METRICS_PORT.
start_chart_controller() {
  local name=$1 log=$2 pod=$3 port=$4 args=() envs=(KUBECONFIG="$5") a v
  for a in "${CONTROLLER_ARGS[@]}"; do
    case $a in
      --metrics-addr=*) args+=("--metrics-addr=127.0.0.1:$port") ;;
      *) args+=("$a") ;;
    esac
  done
  for v in "${CONTROLLER_ENV[@]}"; do
    case ${v#*=} in
      fieldRef:metadata.name) envs+=("${v%%=*}=$pod") ;;
      fieldRef:metadata.namespace) envs+=("${v%%=*}=$SYS_NS") ;;
      fieldRef:*) fail "unsupported downward-API env $v" ;;
      *) envs+=("$v") ;;
    esac
  done
  start "$name" "$log" env "${envs[@]}" "$BIN" "${args[@]}"
}

# throwaway PREFIX: sets NS (PREFIX-<epoch>, not created yet) and WORK (a new directory), and
# on exit stops the suite's processes, deletes NS and WORK (HITL_E2E_KEEP=1 keeps both).
throwaway() {
  NS=$1-$(date +%s)
  WORK=$(mktemp -d)
  trap throwaway_cleanup EXIT
}
throwaway_cleanup() {
  stop_all
  if [ "${HITL_E2E_KEEP:-0}" = 1 ]; then
    echo "kept namespace $NS and $WORK"
    return
  fi
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$WORK"
}

# webhook_notifier NAME URL [TOOLS]: in $NS, a Secret NAME holding URL and a Webhook
# ApprovalNotifier NAME sending there; TOOLS (a YAML list such as [no_such_tool]) narrows which
# requests it hears of (one selecting none hears only of escalation steps naming it).
webhook_notifier() {
  kubectl -n "$NS" create secret generic "$1" --from-literal=url="$2" >/dev/null
  kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalNotifier
metadata: {name: $1}
spec:
  channel: {type: Webhook, urlFrom: {name: $1, key: url}}
${3:+  tools: $3}
YAML
}

# rss_mib PID: resident memory, and of it the anonymous memory (heap, stacks); the rest is the
# executable's code and read-only data, file-backed and reclaimable.
rss_mib() {
  awk '/^VmRSS/ { rss = $2 } /^RssAnon/ { anon = $2 }
       END { printf "%.1f MiB (anonymous %.1f MiB)", rss / 1024, anon / 1024 }' "/proc/$1/status"
}
# bench_agent I: the Agent agent-I that the benches apply by the thousand (Gate mode, the
# RemoteMCPServer `tools` with delete_file gated), as one YAML document.
bench_agent() {
  cat <<EOF
---
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: agent-$1}
spec:
  type: Declarative
  declarative:
    systemMessage: "Agent $1."
    tools:
      - type: McpServer
        mcpServer: {name: tools, toolNames: [read_file, delete_file], requireApproval: [delete_file]}
EOF
}

# start_pod_gate: (re)starts the gate of Agent $AGENT in $NS with the Secret's current gate.json
# and the Deployment's approval-gate container args and env, like a rolled pod, as the Agent's
# ServiceAccount ($WORK/agent.kubeconfig); the binary is $BIN. Sets GATE_LISTEN and GATE_METRICS.
start_pod_gate() {
  stop gate
  jp "secret/$AGENT" '{.data.gate\.json}' | base64 -d >"$WORK/gate.json"
  jp "secret/$AGENT-binding-key" '{.data.key}' | base64 -d >"$WORK/binding-key"
  jp "deployment/$AGENT" '{.spec.template.spec.initContainers[?(@.name=="approval-gate")]}' >"$WORK/gate-container.json"
  [ -s "$WORK/gate-container.json" ] || fail "no approval-gate container in Deployment $AGENT"
  python3 tests/e2e/container.py args "$WORK/gate-container.json" >"$WORK/gate.args" || fail "gate container args"
  python3 tests/e2e/container.py env "$WORK/gate-container.json" >"$WORK/gate.env" || fail "gate container env"
  GATE_LISTEN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("listen","127.0.0.1:8099"))' "$WORK/gate.json")
  GATE_METRICS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("metrics_listen","0.0.0.0:9099"))' "$WORK/gate.json")
  ! http_up "http://$GATE_LISTEN/" || fail "something already listens on $GATE_LISTEN (the gate's MCP address)"
  ! http_up "http://127.0.0.1:${GATE_METRICS##*:}/" || fail "something already listens on port ${GATE_METRICS##*:} (the gate's metrics)"
  local args=() envs=(KUBECONFIG="$WORK/agent.kubeconfig") a v mount key_mount
  mount_of() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print([m["mountPath"] for m in c["volumeMounts"] if m["name"]==sys.argv[2]][0])' "$WORK/gate-container.json" "$1"; }
  mount=$(mount_of gate-config)
  key_mount=$(mount_of binding-key)
  while IFS= read -r a; do
    case $a in
      "$mount/gate.json") a=$WORK/gate.json ;;
      "--config=$mount/gate.json") a=--config=$WORK/gate.json ;;
      "$key_mount/key") a=$WORK/binding-key ;;
      "--binding-key=$key_mount/key") a=--binding-key=$WORK/binding-key ;;
    esac
    args+=("$a")
  done <"$WORK/gate.args"
  while IFS= read -r v; do
    case ${v#*=} in
      fieldRef:metadata.name) envs+=("${v%%=*}=$AGENT-e2e-gate") ;;
      fieldRef:metadata.namespace) envs+=("${v%%=*}=$NS") ;;
      fieldRef:*) fail "unsupported downward-API env $v" ;;
      *) envs+=("$v") ;;
    esac
  done <"$WORK/gate.env"
  start gate "$WORK/gate.log" env "${envs[@]}" "$BIN" "${args[@]}"
  wait_for "the gate's /healthz" 15 http_ok "http://127.0.0.1:${GATE_METRICS##*:}/healthz"
  alive "${E2E_PIDS[gate]}" || fail "the gate exited"
  note "gate: ${args[*]} (POD_NAME=$AGENT-e2e-gate), MCP on $GATE_LISTEN"
}

# chart_controller: renders the chart as release $RELEASE in $SYS_NS into $WORK/chart with the
# Helm engine ($VENV_PY, values from HITL_CHART_VALUES) and reads its controller container (the
# Deployment whose container is `controller`, picked by name by chart.py: the session store's
# `$RELEASE-sessions` Deployment is rendered beside it):
# CONTROLLER_SA, CONTROLLER_ARGS, CONTROLLER_ENV (for start_chart_controller), LEASE and
# TOKEN_REVIEW_BINDING (empty when the args have none). Fails when the Lease is held already:
# another hitl-operator runs on the cluster.
chart_controller() {
  local a
  "$VENV_PY" tests/e2e/chart.py "$WORK/chart" "$RELEASE" "$SYS_NS"
  CONTROLLER_SA=$(cat "$WORK/chart/controller.sa")
  python3 tests/e2e/container.py args "$WORK/chart/controller.json" >"$WORK/controller.args"
  python3 tests/e2e/container.py env "$WORK/chart/controller.json" >"$WORK/controller.env"
  mapfile -t CONTROLLER_ARGS <"$WORK/controller.args"
  mapfile -t CONTROLLER_ENV <"$WORK/controller.env"
  LEASE= TOKEN_REVIEW_BINDING=
  for a in "${CONTROLLER_ARGS[@]}"; do
    case $a in
      --lease-name=*) LEASE=${a#--lease-name=} ;;
      --token-review-binding=*) TOKEN_REVIEW_BINDING=${a#--token-review-binding=} ;;
    esac
  done
  [ -n "$LEASE" ] || fail "the chart's controller args have no --lease-name: ${CONTROLLER_ARGS[*]}"
  if kubectl -n "$SYS_NS" get lease "$LEASE" >/dev/null 2>&1; then
    fail "Lease $SYS_NS/$LEASE exists: another hitl-operator runs on this cluster; use a throwaway cluster"
  fi
}

# system_namespace: $SYS_NS exists, after one left terminating by an earlier run is gone;
# CREATED_SYS_NS=1 when this made it (the suite's cleanup deletes it then).
system_namespace() {
  ns_gone() { ! kubectl get namespace "$1" >/dev/null 2>&1; }
  if [ "$(kubectl get namespace "$SYS_NS" -o jsonpath='{.status.phase}' 2>/dev/null)" = Terminating ]; then
    wait_for "namespace $SYS_NS (left by an earlier run) to finish terminating" 120 ns_gone "$SYS_NS"
  fi
  if ns_gone "$SYS_NS"; then
    kubectl create namespace "$SYS_NS" >/dev/null
    CREATED_SYS_NS=1
  fi
}

# A2A turns with kagent's runtime (tests/kagent-runtime/a2a_send.py), for the suites that talk to
# it. send NAME TEXT [CONTEXT]: message/send to $AGENT_URL in the background; reply NAME waits
# for its answer (120 s) and puts it in ANSWER (not in a subshell: only this shell can wait for
# what it started); on a failure it prints the suite's `runtime_log`.
send() { start "$1" "$WORK/$1.out" python3 tests/kagent-runtime/a2a_send.py "$AGENT_URL" "$2" ${3:+"$3"}; }
reply() {
  local pid=${E2E_PIDS[$1]} deadline=$((SECONDS + 120))
  while alive "$pid"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      explain_wait "the answer to message $1"
      fail "message $1 unanswered after 120 s"
    fi
    sleep 0.02
  done
  unset "E2E_PIDS[$1]"
  wait "$pid" || fail "message $1 failed: $(cat "$WORK/$1.out"); runtime log: $(runtime_log)"
  ANSWER=$(tail -1 "$WORK/$1.out")
}
# field ANSWER KEY: one field of an answer line.
field() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
# expect_answer ANSWER WANT: the task completed and its text holds WANT.
expect_answer() {
  [ "$(field "$1" state)" = completed ] || fail "the task did not complete: $1"
  expect_in "the A2A answer" "$2" "$(field "$1" text)"
}
