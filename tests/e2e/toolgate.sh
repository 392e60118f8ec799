#!/usr/bin/env bash
# A ToolGate on a real control plane (issue 43): one shared gate in front of a tool server, two
# callers with ServiceAccounts of their own and two different real MCP clients, each request
# attributed to its caller. docs/e2e.md explains each step.
#
#  1. install: the chart (admission policies on, ServiceAccounts allowed to decide so that the
#     caller rule is what refuses a caller approving its own call), alice as approver of this
#     ToolGate only
#  2. the tool server: the Python SDK 2.x peer (tests/mcp-peers-py/server.py, MCP 2026-07-28)
#  3. the controller as the chart runs it; the ToolGate is rendered: Deployment, Service,
#     ServiceAccount, Role and RoleBinding, its gate in the TokenReview ClusterRoleBinding
#  4. the gate as in its pod (gate.json from the Secret, the gate's ServiceAccount token)
#  5. who calls: no token, a token for the apiserver, alice's token: 401, nothing runs
#  6. caller-ts (TypeScript SDK, 2025-11-25): list filtered, ungated call, a gated call waits,
#     its ApprovalRequest names the caller; mallory and a team without approve on this
#     ToolGate are refused; alice approves with kubectl hitl: it runs once
#  7. caller-py (Python SDK 2.x, 2026-07-28): the same call is a request of its own; the caller
#     cannot approve its own call; alice denies it with a reason, which the client gets
#  8. a grant remembered for caller-ts covers caller-ts only; caller-py is asked; alice's inbox
#     (kubectl hitl ui) shows a request with its caller and approves it
#  9. MCP 2026-07-28: routing headers that disagree with the body are refused before the server
# 10. kagent v1alpha3: examples/kagent-v1alpha3/sandboxagent.yaml against kagent's own CRDs
# 11. figures: TokenReviews per call (the cache), the calls that ran
#
# Needs: cargo build --bins, npm ci --prefix tests/mcp-peers, the Python peer's venv and the
# chart venv (make peers chart-venv; run.sh sees to them). Users alice and mallory as story.sh
# finds them. HITL_E2E_KEEP=1 keeps the namespace. Installs release "hitl" in hitl-system:
# use a throwaway cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error

skip_without_cluster

BIN=${HITL_E2E_BIN:-$PWD/target/debug/hitl-operator}
PEERS=$PWD/tests/mcp-peers
PY=$PWD/tests/mcp-peers-py/.venv/bin/python
VENV_PY=$PWD/.venv/bin/python
RELEASE=hitl
SYS_NS=hitl-system
TG=payments
throwaway hitl-e2e-toolgate
AUDIENCE=toolgate.kagent.dev/$NS/$TG

[ -x "$BIN" ] || fail "$BIN missing: cargo build --bins"
command -v kubectl-hitl >/dev/null || fail "kubectl-hitl not on PATH (export PATH=\$PWD/target/debug:\$PATH)"
[ -x "$PY" ] || fail "no Python peer venv at $PY: make peers"
"$VENV_PY" -c 'import helm_python' 2>/dev/null || fail "no helm_python in .venv: make chart-venv"

cleanup() {
  local rc=$?
  trap - ERR
  stop_all
  if [ "${KAGENT_CRDS:-0}" = 1 ]; then
    kubectl delete crd sandboxagents.kagent.dev --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kubectl apply --server-side --force-conflicts -f "$WORK/chart/crds.yaml" >/dev/null 2>&1 || true
  fi
  if [ "${HITL_E2E_KEEP:-0}" = 1 ]; then
    echo "kept: namespace $NS, work folder $WORK"
    return "$rc"
  fi
  kubectl delete namespace "$NS" --wait=false --ignore-not-found >/dev/null 2>&1 || true
  if [ -s "$WORK/chart/manifests.yaml" ]; then
    kubectl delete -n "$SYS_NS" -f "$WORK/chart/manifests.yaml" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    [ -z "${LEASE:-}" ] || kubectl -n "$SYS_NS" delete lease "$LEASE" --ignore-not-found >/dev/null 2>&1 || true
  fi
  kubectl delete clusterrolebinding "$TOKEN_REVIEW_BINDING" --ignore-not-found >/dev/null 2>&1 || true
  [ "${CREATED_SYS_NS:-0}" = 1 ] && kubectl delete namespace "$SYS_NS" --wait=false >/dev/null 2>&1
  if [ "$rc" = 0 ]; then rm -rf "$WORK"; else echo "logs kept in $WORK"; fi
  return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
TOKEN_REVIEW_BINDING=

condition() { jp "$1" "{.status.conditions[?(@.type==\"$2\")].status}"; }
figure() { printf '%-64s %s\n' "$1" "$2" >>"$WORK/figures"; }

# ---------------------------------------------------------------------------------------------
step "1. install the chart (ServiceAccounts may decide: the caller rule is then what stops a caller)"
HITL_CHART_VALUES='{"admissionPolicy": {"allowServiceAccountsToDecide": true}}' chart_controller
[ -n "$TOKEN_REVIEW_BINDING" ] || fail "the chart's controller args have no --token-review-binding: ${CONTROLLER_ARGS[*]}"
kubectl apply --server-side --force-conflicts -f "$WORK/chart/crds.yaml" >/dev/null
waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/toolgates.kagent.dev \
  crd/approvalrequests.kagent.dev crd/remotemcpservers.kagent.dev >/dev/null
system_namespace
kubectl apply --server-side -n "$SYS_NS" -f "$WORK/chart/manifests.yaml" >/dev/null
kubectl create namespace "$NS" >/dev/null
# Deciding needs two things (docs/approvers.md): writing requests and grants, and the verb
# approve on the ToolGate. Here they are given apart, so that approve is scoped to one ToolGate:
# alice approves calls to this ToolGate and nothing else.
kubectl -n "$NS" create role decide-requests --verb=get,list,watch,patch \
  --resource=approvalrequests.kagent.dev >/dev/null
kubectl -n "$NS" create role give-grants --verb=get,list,watch,create,patch,delete \
  --resource=approvalgrants.kagent.dev >/dev/null
kubectl -n "$NS" create role approve-payments --verb=approve --resource=toolgates.kagent.dev \
  --resource-name="$TG" >/dev/null
for role in decide-requests give-grants approve-payments; do
  kubectl -n "$NS" create rolebinding "alice-$role" --role="$role" --user=alice >/dev/null
done
e2e_users
ok "chart installed; alice may write requests and grants, and approve on toolgates/$TG only"

# ---------------------------------------------------------------------------------------------
step "2. the tool server: the Python SDK 2.x peer (MCP 2026-07-28)"
SERVER_PORT=$(free_port)
start server "$WORK/server.log" "$PY" tests/mcp-peers-py/server.py "$SERVER_PORT" "$WORK/ran.jsonl"
wait_for "the Python peer on :$SERVER_PORT" 30 http_up "http://127.0.0.1:$SERVER_PORT/mcp"
touch "$WORK/ran.jsonl"
# ran TOOL PATH: how many times TOOL ran with that path, by the server's own record.
ran() { python3 -c '
import json, sys
print(sum(1 for l in open(sys.argv[1]) if (c := json.loads(l))["tool"] == sys.argv[2] and c["args"].get("path") == sys.argv[3]))' \
  "$WORK/ran.jsonl" "$1" "$2"; }
ok "server.py on 127.0.0.1:$SERVER_PORT"

# ---------------------------------------------------------------------------------------------
step "3. the controller as the chart runs it; the ToolGate is rendered"
kubeconfig_with_token "$WORK/controller.kubeconfig" \
  "$(kubectl -n "$SYS_NS" create token "$CONTROLLER_SA" --duration=2h)" "$SYS_NS"
METRICS_PORT=$(free_port)
start_chart_controller controller "$WORK/controller.log" "$RELEASE-hitl-operator-e2e" "$METRICS_PORT" \
  "$WORK/controller.kubeconfig"
wait_for "the controller's /readyz" 60 http_ok "http://127.0.0.1:$METRICS_PORT/readyz"

kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: payments-server}
spec:
  description: the Python SDK 2.x peer
  url: http://127.0.0.1:$SERVER_PORT/mcp
---
apiVersion: kagent.dev/v1alpha2
kind: ToolGate
metadata: {name: $TG}
spec:
  server: {remoteMCPServer: payments-server}
  toolNames: [echo, delete_file]
  requireApproval: [delete_file]
  # Never reached in this suite: its requests carry the step (docs/approvers.md).
  approval: {timeout: 1h, escalation: {steps: [{after: 50m, approvers: {groups: [payments-oncall]}, notifier: pager}]}}
EOF
accepted() { [ "$(condition "toolgate/$TG" Accepted)" = True ]; }
wait_for "ToolGate $TG Accepted" 30 accepted
for object in deployment/$TG-gate service/$TG-gate serviceaccount/$TG-gate; do
  kubectl -n "$NS" get "$object" >/dev/null || fail "$object not rendered for ToolGate $TG"
done
[ "$(jp "toolgate/$TG" '{.status.audiences[0]}')" = "$AUDIENCE" ] ||
  fail "status.audiences: $(jp "toolgate/$TG" '{.status.audiences}'), want $AUDIENCE"
ROUTE_PATH=/servers/$NS/payments-server/mcp
expect_in "status.route" "$TG-gate.$NS.svc:8099$ROUTE_PATH" "$(jp "toolgate/$TG" '{.status.route}')"
in_binding() {
  kubectl get clusterrolebinding "$TOKEN_REVIEW_BINDING" -o jsonpath='{range .subjects[*]}{.namespace}/{.name}{"\n"}{end}' |
    grep -qx "$NS/$TG-gate"
}
wait_for "$NS/$TG-gate in ClusterRoleBinding $TOKEN_REVIEW_BINDING" 30 in_binding
ok "ToolGate $TG: Deployment, Service and ServiceAccount $TG-gate; audience $AUDIENCE; route $ROUTE_PATH; the gate may create TokenReviews"

# ---------------------------------------------------------------------------------------------
step "4. the gate as in its pod: gate.json from the Secret, the gate's ServiceAccount token"
kubeconfig_with_token "$WORK/gate.kubeconfig" "$(kubectl -n "$NS" create token "$TG-gate" --duration=1h)" "$NS"
GATE_SECRET=$(jp "deployment/$TG-gate" '{.spec.template.spec.volumes[?(@.name=="gate-config")].secret.secretName}')
KEY_SECRET=$(jp "deployment/$TG-gate" '{.spec.template.spec.volumes[?(@.name=="binding-key")].secret.secretName}')
[ -n "$GATE_SECRET" ] && [ -n "$KEY_SECRET" ] || fail "Deployment $TG-gate mounts no gate-config or binding-key Secret"
GATE_PORT=$(free_port)
GATE_METRICS=$(free_port)
jp "secret/$GATE_SECRET" '{.data.gate\.json}' | base64 -d | python3 -c '
import json, sys
c = json.load(sys.stdin)
c["listen"], c["metrics_listen"] = "127.0.0.1:" + sys.argv[1], "127.0.0.1:" + sys.argv[2]
print(json.dumps(c))' "$GATE_PORT" "$GATE_METRICS" >"$WORK/gate.json"
jp "secret/$KEY_SECRET" '{.data.key}' | base64 -d >"$WORK/binding-key"
[ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["callers"]["audiences"][0])' "$WORK/gate.json")" = "$AUDIENCE" ] ||
  fail "gate.json has no callers.audiences [$AUDIENCE]"
start gate "$WORK/gate.log" env KUBECONFIG="$WORK/gate.kubeconfig" POD_NAME="$TG-gate-e2e" \
  "$BIN" gate --config "$WORK/gate.json" --binding-key "$WORK/binding-key"
wait_for "the gate's /healthz" 15 http_ok "http://127.0.0.1:$GATE_METRICS/healthz"
URL=http://127.0.0.1:$GATE_PORT$ROUTE_PATH
# token_reviews: the TokenReviews the apiserver has answered so far (only the gate makes them).
token_reviews() {
  kubectl get --raw /metrics | awk '/^apiserver_request_total\{/ && /resource="tokenreviews"/ { n += $NF } END { print n + 0 }'
}
REVIEWS0=$(token_reviews)
ok "gate on 127.0.0.1:$GATE_PORT as $NS/$TG-gate"

# ---------------------------------------------------------------------------------------------
step "5. who calls: a request without a valid token for the gate's audience is refused"
kubectl -n "$NS" create serviceaccount caller-ts >/dev/null
kubectl -n "$NS" create serviceaccount caller-py >/dev/null
TS_USER=system:serviceaccount:$NS:caller-ts
PY_USER=system:serviceaccount:$NS:caller-py
TS_TOKEN=$(kubectl -n "$NS" create token caller-ts --audience "$AUDIENCE" --duration=1h)
PY_TOKEN=$(kubectl -n "$NS" create token caller-py --audience "$AUDIENCE" --duration=1h)
STOLEN=$(kubectl -n "$NS" create token caller-ts --duration=1h) # the apiserver's own audience
OTHER=$(kubectl -n "$NS" create token caller-ts --audience "toolgate.kagent.dev/$NS/other" --duration=1h)
ALICE_TOKEN=$(kubectl --kubeconfig "$ALICE" config view --raw --minify -o jsonpath='{.users[0].user.token}')
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
status_with() { # TOKEN-OR-EMPTY: the HTTP status of an initialize
  local auth=()
  [ -z "$1" ] || auth=(-H "Authorization: Bearer $1")
  curl -s -o "$WORK/refused.body" -w '%{http_code}' "${auth[@]}" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' --data "$INIT" "$URL"
}
for case in "no token:" "a token for the apiserver:$STOLEN" "a token for another ToolGate:$OTHER" \
  "alice's apiserver token:$ALICE_TOKEN" "garbage:not-a-token"; do
  code=$(status_with "${case#*:}")
  [ "$code" = 401 ] || fail "${case%%:*}: HTTP $code, want 401: $(cat "$WORK/refused.body")"
  ok "${case%%:*}: 401 ($(head -c 160 "$WORK/refused.body"))"
done
[ ! -s "$WORK/ran.jsonl" ] || fail "something ran on the server: $(cat "$WORK/ran.jsonl")"
ok "nothing reached the server's tools"

# ---------------------------------------------------------------------------------------------
step "6. caller-ts, the TypeScript SDK client (2025-11-25): approved by alice, runs once"
ts() { timeout 90 node "$PEERS/client.mjs" "$URL" streamable "$1" "{\"token\":\"$TS_TOKEN\"}"; }
ts_bg() { start "$1" "$WORK/$1.out" timeout 90 node "$PEERS/client.mjs" "$URL" streamable "$2" "{\"token\":\"$TS_TOKEN\"}"; }
py_bg() { start "$1" "$WORK/$1.out" timeout 90 "$PY" tests/mcp-peers-py/client.py "$URL" "$2" "{\"token\":\"$PY_TOKEN\"}"; }
finished() {
  local pid=${E2E_PIDS[$1]} deadline=$((SECONDS + ${2:-30}))
  while alive "$pid"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "client $1 still waiting after ${2:-30}s: $(cat "$WORK/$1.out")"
    sleep 0.1
  done
  unset "E2E_PIDS[$1]"
  wait "$pid" || fail "client $1 exited non-zero: $(cat "$WORK/$1.out")"
}
# await_request VAR CALLER: the one undecided delete_file request of CALLER, once it exists.
await_request() {
  local name deadline=$((SECONDS + 20))
  while name=$(kubectl -n "$NS" get approvalrequests -o json | python3 -c '
import json, sys
print(" ".join(r["metadata"]["name"] for r in json.load(sys.stdin)["items"]
      if r["spec"].get("caller", {}).get("username") == sys.argv[1] and "decision" not in r["spec"]
      and r.get("status", {}).get("phase", "Pending") == "Pending"))' "$2") && [ -z "$name" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no Pending ApprovalRequest of $2 within 20 s"
    sleep 0.2
  done
  [ "$(wc -w <<<"$name")" = 1 ] || fail "more than one Pending ApprovalRequest of $2: $name"
  printf -v "$1" '%s' "$name"
}

out=$(ts '[{"op":"list"},{"op":"call","name":"echo","args":{"message":"hello"}}]')
expect_in "tools/list through the ToolGate" '"tools":["echo","delete_file"]' "$out"
expect_in "ungated echo" 'Echo: hello' "$out"
ok "caller-ts: the list is filtered (wipe_dir, get_secret hidden); echo answered by the server"

ts_bg ts-delete '[{"op":"call","name":"delete_file","args":{"path":"/srv/a"}}]'
await_request REQ_TS "$TS_USER"
[ "$(jp "approvalrequest/$REQ_TS" '{.spec.agentRef.kind}/{.spec.agentRef.name}')" = "ToolGate/$TG" ] ||
  fail "agentRef of $REQ_TS: $(jp "approvalrequest/$REQ_TS" '{.spec.agentRef}')"
[ "$(jp "approvalrequest/$REQ_TS" '{.spec.requestedBy}')" = "system:serviceaccount:$NS:$TG-gate" ] ||
  fail "requestedBy of $REQ_TS: $(jp "approvalrequest/$REQ_TS" '{.spec.requestedBy}')"
[ "$(jp "approvalrequest/$REQ_TS" '{.spec.escalation.steps[0].tier}/{.spec.escalation.steps[0].approvers.groups[0]}/{.spec.escalation.steps[0].notifier}')" = 1/payments-oncall/pager ] ||
  fail "the ToolGate's escalation is not on $REQ_TS: $(jp "approvalrequest/$REQ_TS" '{.spec.escalation}')"
ok "$REQ_TS: agentRef ToolGate/$TG, caller $TS_USER, requestedBy the gate; the ToolGate's escalation step on it"
out=$(KUBECONFIG=$ALICE kubectl hitl get "$REQ_TS" -n "$NS")
expect_in "kubectl hitl get shows the caller" "$TS_USER" "$out"

# refusal OUT: the line of a refused write that says why.
refusal() { grep -m1 -E 'may not|cannot|forbidden' <<<"$1" | cut -c1-220; }
if out=$(KUBECONFIG=$MALLORY kubectl hitl approve "$REQ_TS" -n "$NS" 2>&1); then
  fail "mallory approved $REQ_TS: $out"
fi
ok "mallory refused: $(refusal "$out")"
# A team that may approve another ToolGate's calls only.
kubectl -n "$NS" create role approve-other --verb=approve --resource=toolgates.kagent.dev --resource-name=other >/dev/null
kubectl -n "$NS" create rolebinding mallory-approves-other --role=approve-other --user=mallory >/dev/null
kubectl -n "$NS" create rolebinding mallory-decide-requests --role=decide-requests --user=mallory >/dev/null
wait_for "mallory's new rights" 10 kubectl --kubeconfig "$MALLORY" -n "$NS" auth can-i approve toolgates.kagent.dev/other
if out=$(KUBECONFIG=$MALLORY kubectl hitl approve "$REQ_TS" -n "$NS" 2>&1); then
  fail "mallory (approve on toolgates/other only) approved $REQ_TS: $out"
fi
expect_in "approve scoped per ToolGate" "mallory may not decide: it needs the RBAC verb approve on toolgates.kagent.dev/$TG" "$out"
ok "approve on toolgates/other does not decide toolgates/$TG's requests: $(refusal "$out")"

KUBECONFIG=$ALICE kubectl hitl approve "$REQ_TS" -n "$NS" --reason "e2e: caller-ts may" >/dev/null
finished ts-delete 30
expect_in "the approved call's result" 'deleted /srv/a' "$(cat "$WORK/ts-delete.out")"
[ "$(ran delete_file /srv/a)" = 1 ] || fail "delete_file /srv/a ran $(ran delete_file /srv/a) times, want 1"
ok "alice approved; delete_file /srv/a ran once"

# ---------------------------------------------------------------------------------------------
step "7. caller-py, the Python SDK 2.x client (2026-07-28): its own request; it cannot approve it"
py_bg py-delete '[{"op":"call","name":"delete_file","args":{"path":"/srv/a"}}]'
await_request REQ_PY "$PY_USER"
[ "$REQ_PY" != "$REQ_TS" ] || fail "caller-py's call shares caller-ts's request"
ok "$REQ_PY: the identical call of another caller is a request of its own"
for role in decide-requests approve-payments; do
  kubectl -n "$NS" create rolebinding "caller-py-$role" --role="$role" --serviceaccount="$NS:caller-py" >/dev/null
done
kubeconfig_with_token "$WORK/caller-py.kubeconfig" "$(kubectl -n "$NS" create token caller-py --duration=1h)" "$NS"
wait_for "caller-py's new rights" 10 kubectl --kubeconfig "$WORK/caller-py.kubeconfig" auth can-i approve toolgates.kagent.dev/$TG
if out=$(KUBECONFIG=$WORK/caller-py.kubeconfig kubectl hitl approve "$REQ_PY" -n "$NS" 2>&1); then
  fail "caller-py approved its own call $REQ_PY: $out"
fi
expect_in "the caller cannot approve its own call" "the caller of a tool call (spec.caller) cannot decide it" "$out"
ok "caller-py, with approve on toolgates/$TG, cannot approve its own call: $(refusal "$out")"
KUBECONFIG=$ALICE kubectl hitl deny "$REQ_PY" -n "$NS" --reason "not this one" >/dev/null
finished py-delete 30
expect_in "the denial reaches the Python client" 'not this one' "$(cat "$WORK/py-delete.out")"
[ "$(ran delete_file /srv/a)" = 1 ] || fail "delete_file /srv/a ran $(ran delete_file /srv/a) times after the denial, want 1"
ok "alice denied it; caller-py got the reason; nothing more ran"

# ---------------------------------------------------------------------------------------------
step "8. a grant remembered for caller-ts covers caller-ts only"
ts_bg ts-grant '[{"op":"call","name":"delete_file","args":{"path":"/srv/b"}}]'
await_request REQ_TS2 "$TS_USER"
out=$(KUBECONFIG=$ALICE kubectl hitl approve "$REQ_TS2" -n "$NS" --remember 10m --reason "caller-ts may delete for 10 minutes")
finished ts-grant 30
GRANT=$(kubectl -n "$NS" get approvalgrants -o jsonpath='{.items[0].metadata.name}')
[ "$(jp "approvalgrant/$GRANT" '{.spec.caller}')" = "$TS_USER" ] ||
  fail "grant $GRANT covers caller '$(jp "approvalgrant/$GRANT" '{.spec.caller}')', want $TS_USER"
out=$(ts '[{"op":"call","name":"delete_file","args":{"path":"/srv/c"}}]')
expect_in "caller-ts under its grant" 'deleted /srv/c' "$out"
ok "grant $GRANT (caller $TS_USER): caller-ts's next call ran without asking"
py_bg py-grant '[{"op":"call","name":"delete_file","args":{"path":"/srv/c"}}]'
await_request REQ_PY2 "$PY_USER"
[ "$(ran delete_file /srv/c)" = 1 ] || fail "delete_file /srv/c ran $(ran delete_file /srv/c) times, want 1 (caller-ts's)"
ok "caller-py's same call waits for a person ($REQ_PY2): the grant is not theirs"
KUBECONFIG=$ALICE kubectl hitl deny "$REQ_PY2" -n "$NS" --reason "e2e" >/dev/null
finished py-grant 30

# ---------------------------------------------------------------------------------------------
step "8b. the inbox (kubectl hitl ui) as alice: the request names its ToolGate and caller; approved there"
py_bg py-inbox '[{"op":"call","name":"delete_file","args":{"path":"/srv/e"}}]'
await_request REQ_PY3 "$PY_USER"
INBOX_OUT=$WORK/inbox.out
KUBECONFIG=$ALICE kubectl hitl -n "$NS" ui --no-open >"$INBOX_OUT" 2>&1 &
E2E_PIDS[inbox]=$!
track_log inbox "$INBOX_OUT"
inbox_url() { grep -o 'http://127.0.0.1:[0-9]*/#token=[0-9a-f]*' "$INBOX_OUT"; }
wait_for "alice's inbox to start" 15 inbox_url
INBOX=$(inbox_url)
INBOX_BASE=${INBOX%%/#*}
INBOX_TOKEN=${INBOX##*token=}
listed=$(curl -sN --max-time 3 "$INBOX_BASE/events?token=$INBOX_TOKEN" | grep -m1 '^data:' || true)
expect_in "the inbox lists the request" "\"name\":\"$REQ_PY3\"" "$listed"
expect_in "the inbox names the caller" "$PY_USER" "$listed"
out=$(curl -s --max-time 10 -w '\n%{http_code}' -X POST "$INBOX_BASE/api/decisions" \
  -H "Origin: $INBOX_BASE" -H "X-Hitl-Token: $INBOX_TOKEN" -H 'Content-Type: application/json' \
  -d "{\"decision\":\"Approve\",\"requests\":[{\"namespace\":\"$NS\",\"name\":\"$REQ_PY3\"}]}")
[ "${out##*$'\n'}" = 200 ] || fail "the inbox's approval: $out"
finished py-inbox 30
expect_in "the approved call's result" 'deleted /srv/e' "$(cat "$WORK/py-inbox.out")"
[ "$(jp "approvalrequest/$REQ_PY3" '{.spec.decision.decidedBy}')" = alice ] || fail "$REQ_PY3 not decided by alice"
[ "$(ran delete_file /srv/e)" = 1 ] || fail "delete_file /srv/e ran $(ran delete_file /srv/e) times, want 1"
stop inbox
ok "alice's inbox listed $REQ_PY3 with its caller and approved it; caller-py's call ran once"

# ---------------------------------------------------------------------------------------------
step "9. MCP 2026-07-28: routing headers that disagree with the body never reach the server"
SESSION_HEADERS=$(mktemp)
curl -s -D "$SESSION_HEADERS" -o /dev/null -H "Authorization: Bearer $PY_TOKEN" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' --data "$INIT" "$URL"
SID=$(awk 'tolower($1) == "mcp-session-id:" { print $2 }' "$SESSION_HEADERS" | tr -d '\r')
code=$(curl -s -o "$WORK/mismatch.body" -w '%{http_code}' -H "Authorization: Bearer $PY_TOKEN" \
  -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
  ${SID:+-H "Mcp-Session-Id: $SID"} -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' \
  -H 'Mcp-Name: echo' \
  --data '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_file","arguments":{"path":"/srv/d"}}}' "$URL")
[ "$code" = 400 ] || fail "Mcp-Name echo on a delete_file call: HTTP $code, want 400: $(cat "$WORK/mismatch.body")"
expect_in "the refusal" "-32020" "$(cat "$WORK/mismatch.body")"
[ "$(ran delete_file /srv/d)" = 0 ] || fail "delete_file /srv/d ran"
ok "Mcp-Name: echo on a delete_file body: HTTP 400, -32020, nothing forwarded"

# ---------------------------------------------------------------------------------------------
step "10. kagent v1alpha3: a SandboxAgent through the ToolGate, checked by kagent's own CRDs"
KAGENT_CRDS=1
for crd in tests/e2e/kagent-v1alpha3/*.yaml.gz; do
  gunzip -c "$crd" | kubectl apply --server-side --force-conflicts -f - >/dev/null
done
# (kubectl wait errors out on a CRD whose status has no conditions yet: poll instead.)
established() {
  local crd
  for crd in sandboxagents.kagent.dev remotemcpservers.kagent.dev; do
    [ "$(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')" = True ] || return 1
  done
}
wait_for "kagent's CRDs to be established" 60 established
served() { kubectl get crd remotemcpservers.kagent.dev -o jsonpath='{.spec.versions[?(@.served==true)].name}'; }
expect_in "kagent's RemoteMCPServer CRD" v1alpha3 "$(served)"
sandbox_valid() { kubectl -n "$NS" apply --dry-run=server -f examples/kagent-v1alpha3/sandboxagent.yaml; }
wait_for "kagent's v1alpha3 kinds to be served" 30 sandbox_valid
out=$(sandbox_valid)
expect_in "the example" "sandboxagent.kagent.dev/payments-assistant created (server dry run)" "$out"
if out=$(sed 's/toolNames: \[get_balance, transfer_funds\]/toolNames: [get_balance]/' \
  examples/kagent-v1alpha3/sandboxagent.yaml | kubectl -n "$NS" apply --dry-run=server -f - 2>&1); then
  fail "kagent's CRD accepted requireApproval outside toolNames: $out"
fi
ok "kagent's own v1alpha3 CRDs accept examples/kagent-v1alpha3/sandboxagent.yaml (and refuse a broken copy)"
kubectl delete crd sandboxagents.kagent.dev >/dev/null
kubectl apply --server-side --force-conflicts -f "$WORK/chart/crds.yaml" >/dev/null
KAGENT_CRDS=0
[ "$(served)" = v1alpha2 ] || fail "our RemoteMCPServer CRD not restored: serves $(served)"
ok "this repository's RemoteMCPServer CRD restored"

# ---------------------------------------------------------------------------------------------
step "11. figures"
figure "TokenReviews the apiserver answered (6 distinct tokens; 9 sessions with a valid one)" "$(($(token_reviews) - REVIEWS0))"
figure "delete_file runs: /srv/a, /srv/b, /srv/c, /srv/d, /srv/e" "$(ran delete_file /srv/a), $(ran delete_file /srv/b), $(ran delete_file /srv/c), $(ran delete_file /srv/d), $(ran delete_file /srv/e)"
cat "$WORK/figures"
