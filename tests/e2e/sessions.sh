#!/usr/bin/env bash
# The session store (`hitl-operator sessions`, docs/sessions.md) on a real control plane, run as
# the chart runs it (its container args from the chart rendered by the real Helm engine) but as
# a local process, with a kubeconfig holding a token of its own ServiceAccount and the chart's
# RBAC for it applied: every TokenReview and every read of a pod, ReplicaSet, Deployment and
# Agent is the apiserver's answer to that identity. The controller runs locally too (with
# --session-store-url pointing at the store) and renders the Agents; kube-controller-manager
# makes their ReplicaSets and (Pending: no node) pods, and the suite mints each pod's bound
# token as the kubelet would (`kubectl create token --bound-object-kind Pod`). Requests are made
# as kagent's runtime makes them (Authorization: Bearer, X-Agent-Name, user_id).
#  1. the store's identity: the chart's ServiceAccount and RBAC; the controller; Agents alpha,
#     beta, and gamma + delta sharing ServiceAccount `shared`; their pods' tokens;
#  2. auth: no token, a token of the apiserver's audience, of kagent's, a ServiceAccount token
#     bound to no pod: 401; another Agent's pod: its own sessions only (404 for alpha's id,
#     even the same id kept apart); X-Agent-Name / agent_ref of another Agent: 403; two Agents
#     on one ServiceAccount each scoped to its own Agent; a deleted pod's token: 401, the
#     ReplicaSet's new pod reads the conversation on; the apiserver not answering (a proxy in
#     front of it, SIGSTOPped): a new token 503, a verified one still served;
#  3. kagent's runtime clients (kagent-adk 0.7.4 and 0.10.4, tests/kagent-runtime/store_client.py)
#     with a pod's token;
#  4. durability (SQLite): a loop of appends, the store SIGKILLed in the middle and restarted on
#     the same file: every acknowledged event there, in order, none twice;
#  5. two stores on one real Postgres (Debian's, started here as the postgres user): appends to
#     one session alternating between them and racing through both: all there once, in order;
#     the deleted-Agent sweep: gamma deleted, both stores with --deleted-agent-grace 1s started
#     together (twice: the first sweep notes the Agent missing, the second, past the grace,
#     deletes), gamma's sessions gone, its neighbour delta's (same ServiceAccount) kept, exactly
#     one process swept. Sweeps run once per 10-minute period across replicas; the suite moves
#     the claimed period back in the database (hitl_sweeps) to stand for the next period;
#  6. quotas: 507 naming the limit, nothing evicted, hitl_sessions_limit_refusals_total, a
#     Warning Event SessionStoreLimitReached on the Agent.
# Figures: event append p50/p99 through HTTP (one keep-alive connection, 500 appends) on SQLite,
# Postgres and memory (`--database memory:`), in the same run.
#
# Needs: the binaries (run.sh builds them), the chart venv (make chart-venv), the runtime venvs
# (make runtime-peers), Debian's postgresql (apt-get install -y postgresql; PG_BIN overrides the
# bin directory) and root (initdb runs as the postgres user). Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error
skip_without_cluster

VENV_PY=$PWD/.venv/bin/python
RUNTIME=$PWD/tests/kagent-runtime
"$VENV_PY" -c 'import helm_python' 2>/dev/null || fail "no helm_python in .venv: make chart-venv"
for v in 0.7.4 0.10.4; do
  [ -x "$RUNTIME/.venv-$v/bin/kagent-adk" ] || fail "no kagent-adk in $RUNTIME/.venv-$v: make runtime-peers"
done
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] || fail "no Postgres: apt-get install -y postgresql (or set PG_BIN)"
[ "$(id -u)" = 0 ] || fail "needs root: Postgres runs as the postgres user (runuser)"
id postgres >/dev/null 2>&1 || fail "no postgres user: apt-get install -y postgresql"

throwaway hitl-e2e-sessions
SYS_NS=$NS-system
RELEASE=$NS
# The binary, copied: a build elsewhere during the suite must not change the store it restarts.
[ -x "${HITL_E2E_BIN:-target/debug/hitl-operator}" ] || cargo build --quiet --bins
cp "${HITL_E2E_BIN:-target/debug/hitl-operator}" "$WORK/hitl-operator"
BIN=$WORK/hitl-operator
PGDIR=
FIGURES=$WORK/figures
figure() { printf '%-64s %s\n' "$1" "$2" | tee -a "$FIGURES"; }
sessions_cleanup() {
  stop_all
  if [ -n "$PGDIR" ] && [ -d "$PGDIR/data" ]; then
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PGDIR/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  if [ "${HITL_E2E_KEEP:-0}" != 1 ]; then
    [ ! -s "$WORK/chart/sessions-rbac.yaml" ] ||
      kubectl delete -f "$WORK/chart/sessions-rbac.yaml" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kubectl delete namespace "$SYS_NS" --wait=false >/dev/null 2>&1 || true
    [ -z "$PGDIR" ] || rm -rf "$PGDIR"
  fi
  throwaway_cleanup
}
trap sessions_cleanup EXIT

# kid AGENT: the Agent's id as kagent's runtime sends it in X-Agent-Name (its app_name).
kid() { local id="$NS/$1"; id=${id//-/_}; echo "${id//\//__NS__}"; }

# api TOKEN_FILE|- AGENT|- METHOD PATH [BODY]: a request to $API (default: the SQLite store) as
# the runtime makes it: the token, X-Agent-Name of AGENT; sets CODE and BODY.
api() {
  local token=$1 agent=$2 method=$3 path=$4 data=${5-}
  local args=(-s --max-time 30 -o "$WORK/api.body" -w '%{http_code}' -X "$method")
  [ "$token" = - ] || args+=(-H "Authorization: Bearer $(<"$token")")
  [ "$agent" = - ] || args+=(-H "X-Agent-Name: $(kid "$agent")")
  [ -z "$data" ] || args+=(-H 'Content-Type: application/json' --data-binary "$data")
  CODE=$(curl "${args[@]}" "${API:-$STORE}$path") || CODE=000
  BODY=$(cat "$WORK/api.body" 2>/dev/null || true)
}
# want WHAT CODE [TEXT]: the last api call answered CODE (and its body holds TEXT).
want() {
  [ "$CODE" = "$2" ] || fail "$1: HTTP $CODE, want $2: $BODY"
  [ -z "${3-}" ] || expect_in "$1" "$3" "$BODY"
}
# event_body ID: an append's body, an ADK event as the runtime sends it.
event_body() {
  python3 -c 'import json, sys
print(json.dumps({"id": sys.argv[1], "data": json.dumps({"id": sys.argv[1], "author": "user",
  "content": {"role": "user", "parts": [{"text": "turn " + sys.argv[1]}]}})}))' "$1"
}
# event_ids: the ids of the events of the session in BODY (a GET of a session), one a line.
event_ids() { python3 -c 'import json, sys; [print(e["id"]) for e in json.loads(sys.argv[1])["data"]["events"]]' "$BODY"; }
session_ids() { python3 -c 'import json, sys; [print(s["id"]) for s in json.loads(sys.argv[1]).get("data") or []]' "$BODY"; }

# pod_of AGENT: the name of the Agent's (only) pod; pod_uid POD.
pod_of() { kubectl -n "$NS" get pods -l "kagent.dev/agent=$1" -o jsonpath='{.items[*].metadata.name}'; }
one_pod() { local p; p=$(pod_of "$1"); [ -n "$p" ] && [ "$(wc -w <<<"$p")" = 1 ]; }
# pod_token FILE AGENT [AUDIENCE]: a token of the Agent pod's ServiceAccount bound to the pod,
# as the kubelet projects it (audience hitl-operator-sessions unless given; "apiserver": the
# apiserver's own audience).
pod_token() {
  local file=$1 pod sa uid audience=()
  pod=$(pod_of "$2")
  sa=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.spec.serviceAccountName}')
  uid=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.metadata.uid}')
  case ${3:-hitl-operator-sessions} in
    apiserver) ;;
    *) audience=(--audience "${3:-hitl-operator-sessions}") ;;
  esac
  kubectl -n "$NS" create token "$sa" "${audience[@]}" --duration=2h \
    --bound-object-kind Pod --bound-object-name "$pod" --bound-object-uid "$uid" >"$file"
}

# start_store NAME DATABASE [FLAG=VALUE...]: the store as the chart's container runs it, its
# API on STORE_PORT[NAME] and health on HEALTH_PORT[NAME] (ports kept across restarts),
# DATABASE (--database=... or --database-file=...) and the FLAGs replacing the chart's;
# KUBECONFIG the store's ServiceAccount's ($STORE_KUBECONFIG unless set in STORE_KC[NAME]).
declare -A STORE_PORT HEALTH_PORT STORE_KC
start_store() {
  local name=$1 database=$2 args=() envs=() a v flag
  shift 2
  declare -A over=()
  for a in "$@"; do over[${a%%=*}]=$a; done
  [ -n "${STORE_PORT[$name]:-}" ] || { STORE_PORT[$name]=$(free_port); HEALTH_PORT[$name]=$(free_port); }
  for a in "${STORE_ARGS[@]}"; do
    flag=${a%%=*}
    case $flag in
      --listen) args+=("--listen=127.0.0.1:${STORE_PORT[$name]}") ;;
      --health-listen) args+=("--health-listen=127.0.0.1:${HEALTH_PORT[$name]}") ;;
      --database | --database-file) args+=("$database") ;;
      *)
        if [ -n "${over[$flag]:-}" ]; then args+=("${over[$flag]}"); unset "over[$flag]"; else args+=("$a"); fi ;;
    esac
  done
  for a in "${over[@]}"; do args+=("$a"); done
  envs=(KUBECONFIG="${STORE_KC[$name]:-$STORE_KUBECONFIG}")
  for v in "${STORE_ENV[@]}"; do
    case ${v#*=} in
      fieldRef:metadata.name) envs+=("${v%%=*}=$RELEASE-sessions-$name") ;;
      fieldRef:metadata.namespace) envs+=("${v%%=*}=$SYS_NS") ;;
      fieldRef:*) fail "unsupported downward-API env $v" ;;
      *) envs+=("$v") ;;
    esac
  done
  start "store-$name" "$WORK/store-$name.log" env "${envs[@]}" "$BIN" "${args[@]}"
}
store_ready() {
  wait_for "store $1's /readyz" 30 http_ok "http://127.0.0.1:${HEALTH_PORT[$1]}/readyz"
  alive "${E2E_PIDS[store-$1]}" || fail "store $1 exited"
}
store_url() { echo "http://127.0.0.1:${STORE_PORT[$1]}"; }
# metric STORE SERIES: a value of a store's /metrics (0 when absent); SERIES as printed,
# labels included.
metric() {
  curl -fsS "http://127.0.0.1:${HEALTH_PORT[$1]}/metrics" | awk -v m="$2" '$1 == m { v = $2 } END { print v + 0 }'
}

step "1. the store's identity (the chart's RBAC), the controller, four Agents and their pods"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev >/dev/null
kubectl create namespace "$NS" >/dev/null
kubectl create namespace "$SYS_NS" >/dev/null
"$VENV_PY" tests/e2e/chart.py "$WORK/chart" "$RELEASE" "$SYS_NS"
[ -s "$WORK/chart/sessions.json" ] || fail "the chart rendered no session store Deployment ($RELEASE-sessions)"
STORE_SA=$(cat "$WORK/chart/sessions.sa")
python3 tests/e2e/container.py args "$WORK/chart/sessions.json" >"$WORK/store.args"
python3 tests/e2e/container.py env "$WORK/chart/sessions.json" >"$WORK/store.env"
mapfile -t STORE_ARGS <"$WORK/store.args"
mapfile -t STORE_ENV <"$WORK/store.env"
[ "${STORE_ARGS[0]}" = sessions ] || fail "the chart's store container does not run 'sessions': ${STORE_ARGS[*]}"
kubectl apply -n "$SYS_NS" -f "$WORK/chart/sessions-rbac.yaml" >/dev/null
STORE_KUBECONFIG=$WORK/store.kubeconfig
kubeconfig_with_token "$STORE_KUBECONFIG" "$(kubectl -n "$SYS_NS" create token "$STORE_SA" --duration=2h)" "$SYS_NS"
as_store() { kubectl --kubeconfig "$STORE_KUBECONFIG" auth can-i "$@"; }
as_store create tokenreviews.authentication.k8s.io >/dev/null || fail "the chart's RBAC does not let the store create TokenReviews"
as_store get pods -n "$NS" >/dev/null || fail "the chart's RBAC does not let the store read pods"
! as_store list secrets -n "$NS" >/dev/null 2>&1 || fail "the store's ServiceAccount may list Secrets"
! as_store update deployments -n "$NS" >/dev/null 2>&1 || fail "the store's ServiceAccount may update Deployments"
ok "ServiceAccount $SYS_NS/$STORE_SA with the chart's $(grep -c '^kind:' "$WORK/chart/sessions-rbac.yaml") RBAC objects; it may review tokens and read pods, not list Secrets nor write Deployments"

start_store sql --database=sqlite://"$WORK/sessions.db"
STORE=$(store_url sql)
CONTROLLER_PORT=$(free_port)
start controller "$WORK/controller.log" "$BIN" controller --namespace "$NS" --leader-election=false \
  --metrics-addr="127.0.0.1:$CONTROLLER_PORT" --session-store-url "$STORE"
wait_for "the controller's /readyz" 30 http_ok "http://127.0.0.1:$CONTROLLER_PORT/readyz"
store_ready sql
kubectl -n "$NS" create serviceaccount shared >/dev/null
agent_yaml() {
  cat <<EOF
---
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: $1}
spec:
  type: Declarative
  declarative:
    systemMessage: "Agent $1."
    modelConfig: model
$([ -z "${2:-}" ] || echo "    deployment: {serviceAccountName: $2}")
EOF
}
{
  printf 'apiVersion: kagent.dev/v1alpha2\nkind: ModelConfig\nmetadata: {name: model}\nspec: {provider: OpenAI, model: gpt-4o}\n'
  agent_yaml alpha
  agent_yaml beta
  agent_yaml gamma shared
  agent_yaml delta shared
} | kubectl -n "$NS" apply -f - >/dev/null
for agent in alpha beta gamma delta; do
  wait_for "the pod of Agent $agent (controller -> Deployment -> ReplicaSet -> pod)" 60 one_pod "$agent"
done
container_env() { kubectl -n "$NS" get deployment "$1" -o jsonpath="{.spec.template.spec.containers[?(@.name==\"agent\")].env[?(@.name==\"$2\")].value}"; }
[ "$(container_env alpha KAGENT_URL)" = "$STORE" ] || fail "alpha's KAGENT_URL is '$(container_env alpha KAGENT_URL)', not the store's $STORE"
AUDIENCE=$(kubectl -n "$NS" get deployment alpha -o jsonpath='{.spec.template.spec.volumes[?(@.name=="kagent-token")].projected.sources[0].serviceAccountToken.audience}')
[ "$AUDIENCE" = hitl-operator-sessions ] || fail "alpha's kagent-token audience is '$AUDIENCE'"
[ "$(kubectl -n "$NS" get pod "$(pod_of gamma)" -o jsonpath='{.spec.serviceAccountName}')" = shared ] || fail "gamma's pod does not run as ServiceAccount shared"
[ "$(kubectl -n "$NS" get pod "$(pod_of delta)" -o jsonpath='{.spec.serviceAccountName}')" = shared ] || fail "delta's pod does not run as ServiceAccount shared"
for agent in alpha beta gamma delta; do pod_token "$WORK/tok-$agent" "$agent"; done
ok "store (SQLite) on $STORE as $STORE_SA; Agents alpha, beta, gamma+delta (ServiceAccount shared) rendered with KAGENT_URL=$STORE and a hitl-operator-sessions token; 4 Pending pods, a bound token each"

step "2. auth: each refused or scoped"
api "$WORK/tok-alpha" alpha POST "/api/sessions?user_id=alice" "{\"agent_ref\": \"$NS/alpha\", \"id\": \"ctx-a\", \"name\": \"alpha's\"}"
want "alpha creates its session" 201
api "$WORK/tok-alpha" alpha POST "/api/sessions/ctx-a/events?user_id=alice" "$(event_body a-1)"
want "alpha appends" 201
api "$WORK/tok-alpha" alpha GET "/api/sessions/ctx-a?user_id=alice&order=asc&limit=-1"
want "alpha reads its session" 200
[ "$(event_ids)" = a-1 ] || fail "alpha's session holds '$(event_ids)', want a-1"
ok "alpha's pod token: create 201, append 201, read 200 with its event"

api - alpha GET "/api/sessions?user_id=alice"
want "no token" 401 "no Authorization header"
pod_token "$WORK/tok-alpha-apiserver" alpha apiserver
api "$WORK/tok-alpha-apiserver" alpha GET "/api/sessions?user_id=alice"
want "a token of the apiserver's audience (bound to alpha's pod)" 401 "audience hitl-operator-sessions"
pod_token "$WORK/tok-alpha-kagent" alpha kagent
api "$WORK/tok-alpha-kagent" alpha GET "/api/sessions?user_id=alice"
want "a token of kagent's audience (bound to alpha's pod)" 401 "audience hitl-operator-sessions"
kubectl -n "$NS" create token alpha --audience hitl-operator-sessions --duration=1h >"$WORK/tok-alpha-unbound"
api "$WORK/tok-alpha-unbound" alpha GET "/api/sessions?user_id=alice"
want "alpha's ServiceAccount token bound to no pod" 401 "bound to no pod"
echo garbage >"$WORK/tok-garbage"
api "$WORK/tok-garbage" alpha GET "/api/sessions?user_id=alice"
want "a garbage token" 401
ok "401: no token; the apiserver's audience; kagent's; a ServiceAccount token bound to no pod; garbage"

api "$WORK/tok-beta" beta GET "/api/sessions/ctx-a?user_id=alice"
want "beta reads alpha's session id" 404
api "$WORK/tok-beta" beta GET "/api/sessions?user_id=alice"
want "beta lists alice's sessions" 200
[ -z "$(session_ids)" ] || fail "beta lists alpha's sessions: $(session_ids)"
api "$WORK/tok-beta" beta POST "/api/sessions/ctx-a/events?user_id=alice" "$(event_body b-x)"
want "beta appends to alpha's session id" 404
api "$WORK/tok-beta" beta DELETE "/api/sessions/ctx-a?user_id=alice"
[ "$CODE" = 200 ] || [ "$CODE" = 404 ] || fail "beta deletes alpha's session id: HTTP $CODE: $BODY"
api "$WORK/tok-beta" beta POST "/api/sessions?user_id=alice" "{\"agent_ref\": \"$NS/beta\", \"id\": \"ctx-a\"}"
want "beta makes a session of the same id" 201
api "$WORK/tok-beta" beta POST "/api/sessions/ctx-a/events?user_id=alice" "$(event_body b-1)"
want "beta appends to its own ctx-a" 201
api "$WORK/tok-alpha" alpha GET "/api/sessions/ctx-a?user_id=alice&order=asc&limit=-1"
want "alpha reads its session again" 200
[ "$(event_ids)" = a-1 ] || fail "alpha's ctx-a holds '$(event_ids)' after beta's writes, want a-1"
ok "beta's pod: alpha's ctx-a is 404 to read and to append, not listed, not deleted; beta's own ctx-a is another session"

api "$WORK/tok-alpha" beta GET "/api/sessions?user_id=alice"
want "alpha's token with X-Agent-Name beta" 403 "X-Agent-Name"
api "$WORK/tok-alpha" alpha POST "/api/sessions?user_id=alice" "{\"agent_ref\": \"$NS/beta\", \"id\": \"ctx-x\"}"
want "alpha's token with agent_ref beta" 403 "agent_ref"
ok "403: X-Agent-Name of another Agent; agent_ref of another Agent"

# sub TOKEN_FILE: the token's subject (its ServiceAccount), from its JWT payload.
sub() {
  python3 -c 'import base64, json, sys
payload = open(sys.argv[1]).read().strip().split(".")[1]
print(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sub"])' "$1"
}
[ "$(sub "$WORK/tok-gamma")" = "$(sub "$WORK/tok-delta")" ] || fail "gamma's and delta's tokens are of different ServiceAccounts"
api "$WORK/tok-gamma" gamma POST "/api/sessions?user_id=carol" "{\"agent_ref\": \"$NS/gamma\", \"id\": \"ctx-g\"}"
want "gamma creates" 201
api "$WORK/tok-delta" delta GET "/api/sessions/ctx-g?user_id=carol"
want "delta (same ServiceAccount) reads gamma's session" 404
api "$WORK/tok-delta" delta POST "/api/sessions?user_id=carol" "{\"agent_ref\": \"$NS/delta\", \"id\": \"ctx-d\"}"
want "delta creates its own" 201
api "$WORK/tok-delta" delta GET "/api/sessions?user_id=carol"
[ "$(session_ids)" = ctx-d ] || fail "delta lists '$(session_ids)', want ctx-d"
api "$WORK/tok-gamma" delta GET "/api/sessions?user_id=carol"
want "gamma's token with X-Agent-Name delta" 403
ok "gamma and delta share ServiceAccount $(sub "$WORK/tok-gamma"): each sees its own Agent's sessions only"

OLD_POD=$(pod_of alpha)
cp "$WORK/tok-alpha" "$WORK/tok-alpha-used"   # verified above: in the store's cache
pod_token "$WORK/tok-alpha-unused" alpha        # never shown to the store
kubectl -n "$NS" delete pod "$OLD_POD" --wait=true >/dev/null
new_pod() { one_pod alpha && [ "$(pod_of alpha)" != "$OLD_POD" ]; }
wait_for "the ReplicaSet's new pod of alpha" 60 new_pod
api "$WORK/tok-alpha-unused" alpha GET "/api/sessions?user_id=alice"
want "the deleted pod's token" 401
DELETED_WHY=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["error"][:150])' "$BODY")
api "$WORK/tok-alpha-used" alpha GET "/api/sessions?user_id=alice"
CACHED_CODE=$CODE
pod_token "$WORK/tok-alpha" alpha
api "$WORK/tok-alpha" alpha GET "/api/sessions/ctx-a?user_id=alice&order=asc&limit=-1"
want "the new pod reads alpha's session" 200
[ "$(event_ids)" = a-1 ] || fail "the new pod reads '$(event_ids)', want a-1"
ok "pod $OLD_POD deleted: its token 401 ($DELETED_WHY); the new pod $(pod_of alpha) reads ctx-a on"
note "the deleted pod's token verified before the deletion: HTTP $CACHED_CODE (cached verifications last up to 5 minutes, docs/sessions.md)"

# The apiserver not answering: a second store whose apiserver is reached through a TCP proxy
# the suite can freeze (the shared control plane itself is left alone).
PROXY_PORT=$(free_port)
SERVER=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
start proxy "$WORK/proxy.log" python3 -c '
import socket, sys, threading
target = (sys.argv[2], int(sys.argv[3]))
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
def pipe(a, b):
    try:
        while (data := a.recv(65536)):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
while True:
    client, _ = server.accept()
    upstream = socket.create_connection(target)
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pipe, args=(a, b), daemon=True).start()
' "$PROXY_PORT" "$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlsplit(sys.argv[1]).hostname)' "$SERVER")" \
  "$(python3 -c 'import sys, urllib.parse; u = urllib.parse.urlsplit(sys.argv[1]); print(u.port or 443)' "$SERVER")"
sed "s|server: .*|server: https://127.0.0.1:$PROXY_PORT|" "$STORE_KUBECONFIG" >"$WORK/store-proxied.kubeconfig"
grep -q 'insecure-skip-tls-verify: true' "$WORK/store-proxied.kubeconfig" ||
  sed -i "s|server: https://127.0.0.1:$PROXY_PORT|server: https://127.0.0.1:$PROXY_PORT\n    tls-server-name: $(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlsplit(sys.argv[1]).hostname)' "$SERVER")|" "$WORK/store-proxied.kubeconfig"
STORE_KC[blind]=$WORK/store-proxied.kubeconfig
start_store blind "--database=memory:"
store_ready blind
API=$(store_url blind)
api "$WORK/tok-beta" beta GET "/api/sessions?user_id=alice"
want "beta through the proxied store" 200
pod_token "$WORK/tok-beta-new" beta
kill -STOP "${E2E_PIDS[proxy]}"
T_STOP=$(now)
api "$WORK/tok-beta-new" beta GET "/api/sessions?user_id=alice"
UNVERIFIED_S=$(elapsed "$T_STOP")
want "a new token while the apiserver does not answer" 503 "did not answer"
api "$WORK/tok-beta" beta GET "/api/sessions?user_id=alice"
want "a verified token while the apiserver does not answer" 200
kill -CONT "${E2E_PIDS[proxy]}"
api "$WORK/tok-beta-new" beta GET "/api/sessions?user_id=alice"
want "the new token once the apiserver answers" 200
unset API
stop store-blind
ok "apiserver frozen (proxy SIGSTOPped): a new token 503 after $UNVERIFIED_S s, never let through; a verified one served; after SIGCONT the new token 200"
REFUSED=$(metric sql 'hitl_sessions_auth_refusals_total{reason="unauthenticated"}')
[ "$REFUSED" -ge 6 ] || fail "hitl_sessions_auth_refusals_total{reason=\"unauthenticated\"} is $REFUSED, want >= 6"
ok "hitl_sessions_auth_refusals_total{reason=\"unauthenticated\"} = $REFUSED"

step "3. kagent's runtime clients (0.7.4, 0.10.4) with alpha's pod token"
for v in 0.7.4 0.10.4; do
  "$RUNTIME/.venv-$v/bin/python" "$RUNTIME/store_client.py" "$STORE" "$(kid alpha)" "$WORK/tok-alpha" "$(kid beta)" \
    >"$WORK/store-client-$v.log" 2>&1 || fail "store_client.py with kagent-adk $v: $(tail -5 "$WORK/store-client-$v.log")"
  ok "kagent-adk $v: $(grep -c '^ok:' "$WORK/store-client-$v.log") checks ($(tail -1 "$WORK/store-client-$v.log"))"
done

step "4. durability: the store SIGKILLed in the middle of a loop of appends"
N=600
: >"$WORK/acked"
start appender "$WORK/appender.log" python3 tests/e2e/store_load.py append "$STORE" "$WORK/tok-alpha" "$NS/alpha" dora dur "$N" "$WORK/acked"
acked() { wc -l <"$WORK/acked"; }
wait_for "150 acknowledged appends" 60 eval '[ "$(acked)" -ge 150 ]'
stop store-sql KILL
AT_KILL=$(acked)
sleep 0.5
start_store sql --database=sqlite://"$WORK/sessions.db"
store_ready sql
T_RESTART=$(now)
pid=${E2E_PIDS[appender]}
wait_for "the appender to finish" 120 eval '! alive '"$pid"
unset "E2E_PIDS[appender]"
wait "$pid" || fail "the appender failed: $(tail -3 "$WORK/appender.log")"
python3 tests/e2e/store_load.py events "$STORE" "$WORK/tok-alpha" "$NS/alpha" dora dur >"$WORK/dur.events"
seq 0 $((N - 1)) | sed 's/^/e-/' >"$WORK/dur.want"
[ "$(acked)" = "$N" ] || fail "$(acked) of $N appends acknowledged"
diff -q "$WORK/dur.want" "$WORK/dur.events" >/dev/null ||
  fail "the session after the SIGKILL is not e-0..e-$((N - 1)) once each in order: $(diff "$WORK/dur.want" "$WORK/dur.events" | head -5)"
head -n "$AT_KILL" "$WORK/dur.want" | cmp -s - <(head -n "$AT_KILL" "$WORK/dur.events") || fail "an event acknowledged before the kill is missing or out of order"
ok "$AT_KILL appends acknowledged before SIGKILL; after the restart all $N events (the unacknowledged one retried with its id) there once, in order"

step "5. two stores on one Postgres"
PGDIR=$(mktemp -d /tmp/hitl-e2e-pg.XXXXXX)
chown postgres: "$PGDIR"
PG_PORT=$(free_port)
as_pg() { runuser -u postgres -- "$@"; }
as_pg "$PG_BIN/initdb" -D "$PGDIR/data" -A trust -U postgres -E UTF8 --locale=C --no-sync >"$WORK/initdb.log" 2>&1 || fail "initdb: $(tail -5 "$WORK/initdb.log")"
as_pg "$PG_BIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PGDIR -c max_connections=100" start >/dev/null || fail "pg_ctl start: $(tail -5 "$PGDIR/log")"
track_log postgres "$PGDIR/log"
as_pg "$PG_BIN/createdb" -h "$PGDIR" -p "$PG_PORT" -U postgres sessions
psql() { as_pg "$PG_BIN/psql" -h "$PGDIR" -p "$PG_PORT" -U postgres -d sessions -XAtq -c "$1"; }
echo "postgres://postgres@127.0.0.1:$PG_PORT/sessions" >"$WORK/pg.url"
PG_VERSION=$("$PG_BIN/postgres" --version | awk '{print $3}')
start_pg_stores() {
  start_store pga "--database-file=$WORK/pg.url" --deleted-agent-grace=1s
  start_store pgb "--database-file=$WORK/pg.url" --deleted-agent-grace=1s
  store_ready pga
  store_ready pgb
}
start_pg_stores
PGA=$(store_url pga)
PGB=$(store_url pgb)
[ "$(psql 'SELECT count(*) FROM hitl_sessions_migrations')" -ge 1 ] || fail "no migration recorded in Postgres"
ok "Postgres $PG_VERSION on 127.0.0.1:$PG_PORT; stores a ($PGA) and b ($PGB) started together, migrated once ($(psql 'SELECT count(*) FROM hitl_sessions_migrations') migration rows)"

python3 tests/e2e/store_load.py alternate "$PGA" "$PGB" "$WORK/tok-alpha" "$NS/alpha" erin alt 200
seq 0 199 | sed 's/^/alt-/' >"$WORK/alt.want"
for s in "$PGA" "$PGB"; do
  python3 tests/e2e/store_load.py events "$s" "$WORK/tok-alpha" "$NS/alpha" erin alt >"$WORK/alt.events"
  diff -q "$WORK/alt.want" "$WORK/alt.events" >/dev/null || fail "alternating appends read through $s: $(diff "$WORK/alt.want" "$WORK/alt.events" | head -5)"
done
python3 tests/e2e/store_load.py race "$PGA" "$PGB" "$WORK/tok-alpha" "$NS/alpha" erin raced 150
python3 tests/e2e/store_load.py events "$PGB" "$WORK/tok-alpha" "$NS/alpha" erin raced >"$WORK/raced.events"
[ "$(wc -l <"$WORK/raced.events")" = 300 ] || fail "racing appends: $(wc -l <"$WORK/raced.events") events, want 300"
[ "$(sort -u "$WORK/raced.events" | wc -l)" = 300 ] || fail "racing appends: an event is there twice"
for w in a b; do
  grep "^$w-" "$WORK/raced.events" | cmp -s - <(seq 0 149 | sed "s/^/$w-/") || fail "writer $w's events are not all there in its order"
done
SWITCHES=$(cut -c1 "$WORK/raced.events" | uniq | wc -l)
ok "200 appends alternating a/b: in order through both; 2x150 racing (a through one store, b through the other): 300 once each, each writer's in order ($SWITCHES runs interleaved)"

api_as() { API=$1; shift; api "$@"; unset API; }
for s in g-1 g-2; do
  api_as "$PGA" "$WORK/tok-gamma" gamma POST "/api/sessions?user_id=carol" "{\"agent_ref\": \"$NS/gamma\", \"id\": \"$s\"}"
  want "gamma creates $s" 201
  api_as "$PGB" "$WORK/tok-gamma" gamma POST "/api/sessions/$s/events?user_id=carol" "$(event_body "$s-e")"
  want "gamma appends to $s" 201
done
api_as "$PGB" "$WORK/tok-delta" delta POST "/api/sessions?user_id=carol" "{\"agent_ref\": \"$NS/delta\", \"id\": \"d-1\"}"
want "delta creates d-1" 201
api_as "$PGA" "$WORK/tok-delta" delta POST "/api/sessions/d-1/events?user_id=carol" "$(event_body d-1-e)"
want "delta appends to d-1" 201
sessions_of() { psql "SELECT count(*) FROM hitl_sessions WHERE agent = '$NS/$1'"; }
[ "$(sessions_of gamma)" = 2 ] && [ "$(sessions_of delta)" = 1 ] || fail "want 2 sessions of gamma and 1 of delta in Postgres: $(sessions_of gamma), $(sessions_of delta)"
kubectl -n "$NS" delete agent gamma --wait=true >/dev/null
# rewind_sweep: the deleted-Agent sweep's claimed period moved back one period (600 s), as if
# the next period had come: the next start of the stores sweeps again.
rewind_sweep() {
  [ "$(psql "UPDATE hitl_sweeps SET period_start = period_start - 600000000 WHERE name = 'deleted-agents' RETURNING name")" = deleted-agents ] ||
    fail "no claimed deleted-agents sweep in hitl_sweeps: $(psql 'SELECT * FROM hitl_sweeps')"
}
swept_lines() { cat "$WORK/store-pga.log" "$WORK/store-pgb.log" | grep -c 'the data of a deleted Agent was deleted' || true; }
stop store-pga
stop store-pgb
rewind_sweep
start_pg_stores
missing() { [ -n "$(psql "SELECT since FROM hitl_missing_agents WHERE agent = '$NS/gamma'")" ]; }
wait_for "gamma noted missing" 20 missing
[ "$(psql 'SELECT count(*) FROM hitl_missing_agents')" = 1 ] || fail "Agents noted missing: $(psql 'SELECT agent FROM hitl_missing_agents')"
[ "$(sessions_of gamma)" = 2 ] || fail "gamma's sessions went before its grace period"
[ "$(swept_lines)" = 0 ] || fail "a store swept gamma at the first notice"
ok "Agent gamma deleted; next period's first sweep (both stores starting together) noted it missing, kept its 2 sessions (grace 1s not passed)"
sleep 1.5
stop store-pga
stop store-pgb
rewind_sweep
start_pg_stores
gone() { [ "$(sessions_of gamma)" = 0 ]; }
wait_for "gamma's sessions swept" 20 gone
sleep 1 # the other store's first sweep, if it were to run, has run
[ "$(swept_lines)" = 1 ] || fail "$(swept_lines) log lines of a sweep of gamma, want exactly 1"
SWEPT_A=$(metric pga hitl_sessions_swept_total)
SWEPT_B=$(metric pgb hitl_sessions_swept_total)
{ [ "$SWEPT_A" = 0 ] && [ "$SWEPT_B" -gt 0 ]; } || { [ "$SWEPT_B" = 0 ] && [ "$SWEPT_A" -gt 0 ]; } ||
  fail "hitl_sessions_swept_total: a $SWEPT_A, b $SWEPT_B; want one process only"
[ "$(psql "SELECT count(*) FROM hitl_events WHERE agent = '$NS/gamma'")" = 0 ] || fail "gamma's events left"
[ "$(sessions_of delta)" = 1 ] || fail "delta's session went with gamma's"
api_as "$PGA" "$WORK/tok-delta" delta GET "/api/sessions/d-1?user_id=carol&order=asc&limit=-1"
want "delta reads d-1 after the sweep" 200
[ "$(event_ids)" = d-1-e ] || fail "d-1 holds '$(event_ids)'"
[ "$(psql 'SELECT count(*) FROM hitl_missing_agents')" = 0 ] || fail "gamma still noted missing after its data went"
ok "the next period past the grace: gamma's sessions and events deleted by exactly one process (swept_total a=$SWEPT_A b=$SWEPT_B, one log line); delta's (same ServiceAccount) kept and readable"

step "6. a quota: refused with 507 naming it, counted, told on the Agent, nothing evicted"
start_store quota --database=sqlite://"$WORK/quota.db" --max-events-per-session=3 --max-sessions-per-agent=2
store_ready quota
API=$(store_url quota)
api "$WORK/tok-beta" beta POST "/api/sessions?user_id=frank" "{\"agent_ref\": \"$NS/beta\", \"id\": \"q-1\"}"
want "beta's first session" 201
for i in 0 1 2; do
  api "$WORK/tok-beta" beta POST "/api/sessions/q-1/events?user_id=frank" "$(event_body "q-$i")"
  want "event q-$i" 201
done
api "$WORK/tok-beta" beta POST "/api/sessions/q-1/events?user_id=frank" "$(event_body q-3)"
want "the 4th event of a session with --max-events-per-session=3" 507 "events-per-session (3)"
EVENTS_REFUSAL=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["error"][:160])' "$BODY")
api "$WORK/tok-beta" beta POST "/api/sessions?user_id=frank" "{\"agent_ref\": \"$NS/beta\", \"id\": \"q-2\"}"
want "beta's second session" 201
api "$WORK/tok-beta" beta POST "/api/sessions?user_id=grace" "{\"agent_ref\": \"$NS/beta\", \"id\": \"q-3\"}"
want "beta's third session (--max-sessions-per-agent=2), another user" 507 "sessions-per-agent (2)"
api "$WORK/tok-beta" beta GET "/api/sessions/q-1?user_id=frank&order=asc&limit=-1"
want "q-1 after the refusals" 200
[ "$(event_ids | tr '\n' ' ')" = "q-0 q-1 q-2 " ] || fail "q-1 holds '$(event_ids | tr '\n' ' ')' after the refusals"
api "$WORK/tok-alpha" alpha POST "/api/sessions?user_id=frank" "{\"agent_ref\": \"$NS/alpha\", \"id\": \"q-1\"}"
want "alpha's session while beta is at its limit" 201
unset API
R_EVENTS=$(metric quota 'hitl_sessions_limit_refusals_total{limit="events-per-session"}')
R_SESSIONS=$(metric quota 'hitl_sessions_limit_refusals_total{limit="sessions-per-agent"}')
[ "$R_EVENTS" = 1 ] && [ "$R_SESSIONS" = 1 ] || fail "hitl_sessions_limit_refusals_total: events-per-session $R_EVENTS, sessions-per-agent $R_SESSIONS; want 1 each"
limit_event() {
  kubectl -n "$NS" get events --field-selector "reason=SessionStoreLimitReached,involvedObject.name=beta" -o json |
    python3 -c 'import json, sys
items = [e for e in json.load(sys.stdin)["items"] if e["involvedObject"].get("kind") == "Agent" and e["type"] == "Warning"]
notes = [e.get("message") or e.get("note") or "" for e in items]
assert any("events-per-session" in n for n in notes), notes
print(next(n for n in notes if "events-per-session" in n)[:160])'
}
wait_for "a Warning Event SessionStoreLimitReached on Agent beta" 20 limit_event
ok "507: $EVENTS_REFUSAL"
ok "507 for a third session of beta (another user's); q-1 keeps q-0..q-2; alpha unaffected; refusals counted (events-per-session 1, sessions-per-agent 1); Warning Event on Agent beta: $(limit_event)"
stop store-quota

step "7. figures: event append through HTTP, SQLite vs Postgres vs memory (500 appends each, one connection)"
start_store mem "--database=memory:"
store_ready mem
for s in sql pga mem; do
  python3 tests/e2e/store_load.py latency "$(store_url "$s")" "$WORK/tok-alpha" "$NS/alpha" lat "lat-$s" 500 >"$WORK/lat-$s.json"
done
lat() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$WORK/lat-$1.json" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1fx", a / b }'; }
figure "append p50 / p99: memory" "$(lat mem p50_ms) / $(lat mem p99_ms) ms"
figure "append p50 / p99: SQLite (WAL, one file)" "$(lat sql p50_ms) / $(lat sql p99_ms) ms ($(ratio "$(lat sql p50_ms)" "$(lat mem p50_ms)") / $(ratio "$(lat sql p99_ms)" "$(lat mem p99_ms)") memory's)"
figure "append p50 / p99: Postgres $PG_VERSION (two stores on it)" "$(lat pga p50_ms) / $(lat pga p99_ms) ms ($(ratio "$(lat pga p50_ms)" "$(lat mem p50_ms)") / $(ratio "$(lat pga p99_ms)" "$(lat mem p99_ms)") memory's)"
figure "a new token with the apiserver frozen: refused (503) after" "$UNVERIFIED_S s"

echo
cat "$FIGURES"
echo "PASS: sessions e2e"
