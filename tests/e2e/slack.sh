#!/usr/bin/env bash
# Approving from Slack (docs/approvers.md "Approve from Slack"; issue 13 part 2) on the real
# control plane with the chart's roles and admission policies. The controller serves the Slack
# interactions endpoint; this suite plays Slack: it signs button presses with the signing
# secret as Slack documents, and receives the replies on loopback.
#
#  1. a gated call: the Slack notifier's message carries Approve and Deny buttons
#  2. refused before anything is read: a forged signature, a stale timestamp, no signature
#  3. a Slack user nobody mapped: told so, nothing decided
#  4. mallory (patch on approvalrequests, not the verb approve): the apiserver's admission
#     policy refuses the decision written as her; the reply says why and which rolebinding
#     would grant it; nothing decided
#  5. alice: approved as alice (decidedBy alice, through impersonation), the waiting call runs
#     once; the same signed request again is refused as a replay
#  6. a ToolGate's request (a shared gate's, with its caller): the message names the ToolGate
#     and the caller; mallory's press is refused for want of approve on the ToolGate; alice's
#     approves it (the shared gate itself is exercised by tests/e2e/toolgate.sh)
#
# Environment: HITL_E2E_BIN (default target/debug/hitl-operator). Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=slacked
throwaway hitl-e2e-slack

SIGNING_SECRET=e2e-signing-secret-$RANDOM$RANDOM
SLACK_PORT=$(free_port)
SLACK=http://127.0.0.1:$SLACK_PORT/slack/interactions
RECEIVER=http://127.0.0.1:$(free_port)

received() { # received PATH: the JSON bodies POSTed to PATH, one per line
  python3 -c '
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines:
    r = json.loads(line)
    if r["path"] == sys.argv[2]:
        print(r["body"])' "$WORK/received.jsonl" "$1"
}
# sign_press USER ACTION VALUE [AGE [SECRET]]: a block_actions request as Slack sends it, AGE
# seconds old, signed with SECRET, written to $WORK/last-press (not sent).
sign_press() {
  local user=$1 action=$2 value=$3 age=${4:-0} secret=${5:-$SIGNING_SECRET}
  python3 - "$user" "$action" "$value" "$age" "$secret" "$RECEIVER/reply" "$WORK" <<'PY'
import hashlib, hmac, json, sys, time, urllib.parse
user, action, value, age, secret, reply, work = sys.argv[1:]
payload = {"type": "block_actions", "user": {"id": user, "username": user.lower()},
           "actions": [{"action_id": action, "value": value}], "response_url": reply}
body = urllib.parse.urlencode({"payload": json.dumps(payload)})
ts = str(int(time.time()) - int(age))
sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
open(f"{work}/last-press", "w").write(json.dumps({"ts": ts, "sig": sig, "body": body}))
PY
}
# send_press [unsigned]: POSTs $WORK/last-press (again: a replay), without its signature header
# when told; prints the answer, then the HTTP status on a line of its own.
send_press() {
  local field signature=()
  field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$WORK/last-press" "$1"; }
  [ "${1:-}" = unsigned ] || signature=(-H "X-Slack-Signature: $(field sig)")
  curl -s --max-time 20 -w '\n%{http_code}' -X POST "$SLACK" \
    -H 'Content-Type: application/x-www-form-urlencoded' \
    -H "X-Slack-Request-Timestamp: $(field ts)" "${signature[@]}" --data-raw "$(field body)"
}
press() { sign_press "$@" && send_press; }
status_of() { echo "${1##*$'\n'}"; }
text_of() { sed '$d' <<<"$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["text"])'; }
decision() { jp "approvalrequest/$1" '{.spec.decision.type} {.spec.decision.decidedBy}'; }
undecided() { [ -z "$(jp "approvalrequest/$1" '{.spec.decision.type}')" ]; }

step "setup: CRDs, roles and admission policies, namespace $NS, the receiver, the controller with the Slack endpoint, Agent $AGENT, its gate, a Slack notifier with buttons"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
gates_with_policies
start receiver "$WORK/receiver.log" python3 tests/e2e/receiver.py "${RECEIVER##*:}" "$WORK/received.jsonl"
wait_for "the receiver" 10 http_ok "$RECEIVER/"
printf '%s\n' "$SIGNING_SECRET" >"$WORK/signing-secret"
cat >"$WORK/slack-users.yaml" <<YAML
U0ALICE: {user: alice}
U0MALLORY: {user: mallory}
YAML
GATES_CONTROLLER_ARGS=(--slack-interactions-addr "127.0.0.1:$SLACK_PORT"
  --slack-signing-secret-file "$WORK/signing-secret" --slack-users-file "$WORK/slack-users.yaml"
  --slack-response-url-prefix "$RECEIVER/"
  --notifier-allow-cidrs 127.0.0.0/8) # the receiver runs on loopback, refused by default
GATES_APPROVAL="{timeout: 10m, waitTimeout: 120s}"
gates_setup
start_gate a
kubectl -n "$NS" create rolebinding alice-approves --clusterrole=hitl-approver --user=alice >/dev/null
kubectl -n "$NS" create role patch-only --verb=get,list,watch,patch --resource=approvalrequests.kagent.dev >/dev/null
kubectl -n "$NS" create rolebinding mallory-patches --role=patch-only --user=mallory >/dev/null
kubectl -n "$NS" create secret generic chat --from-literal=url="$RECEIVER/slack" >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalNotifier
metadata: {name: chat}
spec:
  channel: {type: Slack, urlFrom: {name: chat, key: url}, buttons: true}
YAML
wait_for "the Slack endpoint" 10 eval 'curl -s -o /dev/null -X POST "$SLACK"'
ok "controller with the Slack endpoint on :$SLACK_PORT (2 users mapped); alice may approve, mallory may only patch"

# ---------------------------------------------------------------------------------------------
step "1. a gated call: the Slack message has buttons"
gate_call waiting a delete_file /slack/1
wait_for "the Slack message" 30 eval '[ -n "$(received /slack)" ]'
REQ=$(requests /slack/1)
message=$(received /slack | head -1)
expect_in "the message" '"action_id": "hitl_approve"' "$(python3 -m json.tool <<<"$message")"
expect_in "the message" "\"value\": \"$NS/$REQ\"" "$(python3 -m json.tool <<<"$message")"
ok "$REQ: Slack message with Approve and Deny buttons (value $NS/$REQ, each with a confirmation)"

# ---------------------------------------------------------------------------------------------
step "2. refused before anything is read"
out=$(press U0ALICE hitl_approve "$NS/$REQ" 0 not-the-signing-secret)
[ "$(status_of "$out")" = 401 ] || fail "a forged signature got $out"
expect_in "forged" "signature does not match" "$out"
out=$(press U0ALICE hitl_approve "$NS/$REQ" 600)
[ "$(status_of "$out")" = 401 ] || fail "a stale request got $out"
expect_in "stale" "more than 5 minutes" "$out"
sign_press U0ALICE hitl_approve "$NS/$REQ"
out=$(send_press unsigned)
[ "$(status_of "$out")" = 401 ] || fail "an unsigned request got $out"
undecided "$REQ" || fail "decided: $(decision "$REQ")"
ok "forged signature, stale timestamp (600 s) and no signature: 401, nothing decided"

# ---------------------------------------------------------------------------------------------
step "3. a Slack user nobody mapped"
out=$(press U0NOBODY hitl_approve "$NS/$REQ")
[ "$(status_of "$out")" = 200 ] || fail "got $out"
expect_in "unmapped" "not mapped to a Kubernetes user" "$out"
undecided "$REQ" || fail "decided: $(decision "$REQ")"
ok "told: $(text_of "$out" | cut -c1-90)…"

# ---------------------------------------------------------------------------------------------
step "4. mallory: patch but not the verb approve"
out=$(press U0MALLORY hitl_approve "$NS/$REQ")
[ "$(status_of "$out")" = 200 ] || fail "got $out"
expect_in "mallory" "mallory may not decide approvalrequest/$REQ" "$out"
expect_in "mallory" "needs the RBAC verb approve" "$out"
expect_in "mallory" "create rolebinding hitl-approver-mallory" "$out"
undecided "$REQ" || fail "decided: $(decision "$REQ")"
wait_for "the reply to mallory on response_url" 10 eval '[ -n "$(received /reply)" ]'
expect_in "the reply" "mallory may not decide" "$(received /reply | tail -1)"
ok "the admission policy refused the decision written as mallory; the reply says so, with the rolebinding"

# ---------------------------------------------------------------------------------------------
step "5. alice approves; a replay is refused"
out=$(press U0ALICE hitl_approve "$NS/$REQ")
expect_in "alice" "approvalrequest/$REQ approved (decidedBy alice)" "$out"
[ "$(decision "$REQ")" = "Approve alice" ] || fail "decision: $(decision "$REQ")"
expect_in "the reason" "approved in Slack by @u0alice" "$(jp "approvalrequest/$REQ" '{.spec.decision.reason}')"
expect_in "the waiting call" '"text":"deleted /slack/1"' "$(finished waiting)"
[ "$(runs delete_file /slack/1)" = 1 ] || fail "delete_file(/slack/1) ran $(runs delete_file /slack/1) times"
out=$(send_press)
[ "$(status_of "$out")" = 401 ] || fail "a replay got $out"
expect_in "replay" "already received" "$out"
ok "approved as alice through impersonation (managedFields: $(kubectl -n "$NS" get "approvalrequest/$REQ" --show-managed-fields -o jsonpath='{.metadata.managedFields[?(@.manager=="kubectl-hitl")].manager}')); the call ran once; the replay refused"

# ---------------------------------------------------------------------------------------------
step "6. a ToolGate's request: the message names its caller; approve on the ToolGate decides"
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ToolGate
metadata: {name: shared}
spec:
  server: {url: "http://127.0.0.1:9/mcp"}
  toolNames: [delete_file]
  requireApproval: [delete_file]
YAML
BOT=system:serviceaccount:$NS:bot
kubectl -n "$NS" create -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: shared-call}
spec:
  agentRef: {kind: ToolGate, name: shared}
  toolServer: {kind: RemoteMCPServer, name: shared, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf '%064d' 0)"
  argumentsBytes: 2
  requestedBy: $(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')
  caller: {username: "$BOT"}
  expiresAt: "$(date -u -d '+10 min' +%Y-%m-%dT%H:%M:%SZ)"
YAML
shared_message() { received /slack | grep -F "$NS/shared-call"; }
wait_for "the Slack message of shared-call" 30 shared_message
expect_in "the message names the caller" "$BOT" "$(shared_message | head -1)"
expect_in "the message names the ToolGate" "shared" "$(shared_message | head -1)"
out=$(press U0MALLORY hitl_approve "$NS/shared-call")
expect_in "mallory" "needs the RBAC verb approve on toolgates.kagent.dev/shared" "$out"
undecided shared-call || fail "decided: $(decision shared-call)"
out=$(press U0ALICE hitl_approve "$NS/shared-call")
expect_in "alice" "approvalrequest/shared-call approved (decidedBy alice)" "$out"
[ "$(decision shared-call)" = "Approve alice" ] || fail "decision: $(decision shared-call)"
ok "shared-call (ToolGate shared, caller $BOT): the message names both; mallory refused for want of approve on toolgates/shared; alice approved it from Slack"
echo
echo "PASS: slack"
