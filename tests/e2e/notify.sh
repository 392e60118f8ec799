#!/usr/bin/env bash
# Notifications (ApprovalNotifier; docs/approvers.md "Notifications"; issue 13 part 1) on the
# real control plane, with a real HTTP receiver on loopback (tests/e2e/receiver.py):
#
#  1. a gated call whose arguments hold a secret: the webhook notifier's receiver fails the first
#     two attempts and takes the third (one CloudEvents id for all three), the Slack notifier's
#     first attempt is taken; the attempts are in the request's status.notifications and the
#     notifiers' status; the secret is in no message
#  2. a reminder after the configured time without a decision
#  3. a leader change between attempts: the decision's message fails under controller a, which
#     stops; controller b takes the Lease and goes on from the recorded attempt until one is
#     taken: as many POSTs as recorded attempts, the message taken once
#  4. a request expiring without a decision: its expired message
#  5. a notifier whose Secret is missing: Ready=False SecretNotFound, nothing recorded for it
#
# Environment: HITL_E2E_BIN (default target/debug/hitl-operator). Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=notified
GATES_APPROVAL="{timeout: 10m, waitTimeout: 2s}"
CANARY=sk-CANARYnotify0123456789
LEASE=hitl-notify-e2e
throwaway hitl-e2e-notify

received() { # received PATH [TYPE-SUFFIX]: the bodies POSTed to PATH (of that CloudEvents type)
  python3 - "$WORK/received.jsonl" "$1" "${2:-}" <<'PY'
import json, sys
log, path, kind = sys.argv[1:]
try:
    lines = open(log).read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines:
    r = json.loads(line)
    if r["path"] != path:
        continue
    body = json.loads(r["body"])
    if kind and not body.get("type", "").endswith("." + kind):
        continue
    print(json.dumps({"contentType": r["contentType"], "body": body}))
PY
}
count() { received "$@" | grep -c . || true; }
record() { # record REQUEST NOTIFIER EVENT FIELD: a field of a delivery record of the request
  kubectl -n "$NS" get "approvalrequest/$1" -o json | python3 -c '
import json, sys
records = json.load(sys.stdin).get("status", {}).get("notifications", [])
match = [r for r in records if r["notifier"] == sys.argv[1] and r["event"] == sys.argv[2]]
print(match[0].get(sys.argv[3], "") if match else "")' "$2" "$3" "$4"
}
ready() { jp "approvalnotifier/$1" '{.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].reason}'; }
holder() { kubectl -n "$NS" get lease "$LEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
declare -A CONTROLLER_METRICS
start_controller() { # start_controller NAME: a replica with leader election on Lease $LEASE
  local port
  port=$(free_port)
  CONTROLLER_METRICS[$1]=http://127.0.0.1:$port/metrics
  start "controller-$1" "$WORK/controller-$1.log" env POD_NAME="controller-$1" "$BIN" controller \
    --namespace "$NS" --leader-election=true --lease-name "$LEASE" --lease-namespace "$NS" \
    --metrics-addr "127.0.0.1:$port" --log-format json \
    --notifier-allow-cidrs 127.0.0.0/8 # the receiver runs on loopback, refused by default
}
controller_metric() {
  curl -fsS "${CONTROLLER_METRICS[$1]}" | awk -v m="$2" '$1 == m { v = $2 } END { print v + 0 }'
}

step "setup: CRDs, namespace $NS, recorder, Agent $AGENT and its gate, controller a (leader), the receiver, three notifiers"
gates_setup
stop controller # replaced by replicas with leader election
start_controller a
wait_for "controller a holding the Lease" 30 eval '[ "$(holder)" = controller-a ]'
start_gate a
RECEIVER=http://127.0.0.1:$(free_port)
start receiver "$WORK/receiver.log" python3 tests/e2e/receiver.py "${RECEIVER##*:}" "$WORK/received.jsonl"
wait_for "the receiver" 10 http_ok "$RECEIVER/"
curl -fsS -X POST "$RECEIVER/fail?path=/hook&n=2"
kubectl -n "$NS" create secret generic hook --from-literal=url="$RECEIVER/hook" >/dev/null
kubectl -n "$NS" create secret generic chat --from-literal=url="$RECEIVER/slack" >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalNotifier
metadata: {name: oncall}
spec:
  channel: {type: Webhook, urlFrom: {name: hook, key: url}}
  events: {reminder: {after: 20s, max: 1}}
---
apiVersion: kagent.dev/v1alpha2
kind: ApprovalNotifier
metadata: {name: chat}
spec:
  channel: {type: Slack, urlFrom: {name: chat, key: url}}
  tools: [delete_file]
  events: {decided: false, expired: false}
---
apiVersion: kagent.dev/v1alpha2
kind: ApprovalNotifier
metadata: {name: broken}
spec:
  channel: {type: Webhook, urlFrom: {name: missing, key: url}}
YAML
wait_for "oncall and chat Ready" 20 eval '[ "$(ready oncall)" = True/ChannelReady ] && [ "$(ready chat)" = True/ChannelReady ]'
wait_for "broken not Ready" 20 eval '[ "$(ready broken)" = False/SecretNotFound ]'
expect_in "kubectl get apn" "oncall" "$(kubectl -n "$NS" get approvalnotifiers)"
ok "controller a leads; oncall (Webhook) and chat (Slack) Ready; broken: $(jp approvalnotifier/broken '{.status.conditions[0].message}')"

# ---------------------------------------------------------------------------------------------
step "1. a gated call: created, the webhook after two failed attempts, Slack at once"
gate_call one a delete_file "/notify/1 $CANARY"
expect_in "the call" "needs a human approval" "$(finished one)"
REQ=$(requests "/notify/1 [REDACTED]")
[ "$(wc -w <<<"$REQ")" = 1 ] || fail "want one request for /notify/1: '$REQ' (previews: $(kubectl -n "$NS" get apr -o jsonpath='{.items[*].spec.argumentsPreview}'))"
wait_for "the created message taken on the third attempt" 30 eval '[ -n "$(record "$REQ" oncall created deliveredAt)" ]'
wait_for "the Slack message" 10 eval '[ -n "$(record "$REQ" chat created deliveredAt)" ]'
[ "$(count /hook created)" = 3 ] || fail "want 3 POSTs of created to /hook, got $(count /hook created)"
[ "$(record "$REQ" oncall created attempts)" = 3 ] || fail "oncall/created attempts: $(record "$REQ" oncall created attempts)"
expect_in "the last error recorded" "HTTP 503" "$(record "$REQ" oncall created lastError)"
ids=$(received /hook created | python3 -c 'import json, sys; print(sorted({json.loads(l)["body"]["id"] for l in sys.stdin}))')
[ "$(grep -o "'" <<<"$ids" | wc -l)" = 2 ] || fail "want one CloudEvents id for every attempt: $ids"
event=$(received /hook created | tail -1)
expect_in "the CloudEvent" '"contentType": "application/cloudevents+json"' "$event"
expect_in "the CloudEvent" '"specversion": "1.0"' "$event"
expect_in "the CloudEvent" "\"approve\": \"kubectl hitl approve $REQ -n $NS\"" "$event"
expect_in "the CloudEvent" '[REDACTED]' "$event"
[ "$(count /slack)" = 1 ] || fail "want 1 POST to /slack, got $(count /slack)"
expect_in "the Slack message" "Approval needed: \`delete_file\` of agent *$AGENT* in $NS" "$(received /slack)"
[ "$(record "$REQ" chat created attempts)" = 1 ] || fail "chat/created attempts: $(record "$REQ" chat created attempts)"
[ "$(jp approvalnotifier/oncall '{.status.lastDelivery.event}')" = created ] || fail "oncall lastDelivery: $(jp approvalnotifier/oncall '{.status.lastDelivery}')"
[ "$(controller_metric a 'hitl_notifications_total{outcome="failed"}')" = 2 ] || fail "failed attempts counted: $(controller_metric a 'hitl_notifications_total{outcome="failed"}')"
! grep -q "$CANARY" "$WORK/received.jsonl" || fail "the secret reached a message"
ok "$REQ: 3 attempts at oncall/created (503, 503, taken; one id), chat/created taken at once; the secret in none"

# ---------------------------------------------------------------------------------------------
step "2. a reminder 20 s after the request, still undecided"
wait_for "oncall's reminder" 40 eval '[ "$(count /hook reminder)" = 1 ]'
expect_in "the reminder" '"event": "reminder-1"' "$(received /hook reminder)"
[ -n "$(record "$REQ" oncall reminder-1 deliveredAt)" ] || fail "reminder-1 not recorded as delivered"
ok "reminder-1 taken $(record "$REQ" oncall reminder-1 deliveredAt), request created $(jp "approvalrequest/$REQ" '{.metadata.creationTimestamp}')"

# ---------------------------------------------------------------------------------------------
step "3. the decision's message across a leader change"
curl -fsS -X POST "$RECEIVER/fail?path=/hook&n=3"
kubectl hitl approve "$REQ" -n "$NS" --reason "e2e: notify" >/dev/null
wait_for "the first attempt at oncall/decided (failing)" 30 eval '[ "$(record "$REQ" oncall decided attempts)" = 1 ]'
stop controller-a
start_controller b
wait_for "controller b holding the Lease" 30 eval '[ "$(holder)" = controller-b ]'
wait_for "oncall/decided taken" 60 eval '[ -n "$(record "$REQ" oncall decided deliveredAt)" ]'
sleep 3 # anything sent twice would arrive by now
attempts=$(record "$REQ" oncall decided attempts)
[ "$attempts" = 4 ] || fail "want 4 recorded attempts at oncall/decided (3 failing), got $attempts"
[ "$(count /hook decided)" = "$attempts" ] || fail "$(count /hook decided) POSTs of decided for $attempts recorded attempts"
by_b=$(grep -c '"notification delivered"' "$WORK/controller-b.log" || true)
[ "$by_b" -ge 1 ] || fail "controller b delivered nothing"
grep -q '"notification failed"' "$WORK/controller-a.log" || fail "controller a made no attempt"
expect_in "the decided message" '"decidedBy": "' "$(received /hook decided | tail -1)"
[ "$(count /slack)" = 1 ] || fail "chat sends no decisions, yet /slack got $(count /slack)"
ok "4 attempts at oncall/decided, 4 POSTs: the first by controller a, the rest after the Lease moved to controller b; taken once"

# ---------------------------------------------------------------------------------------------
step "4. a request expiring without a decision"
kubectl --kubeconfig "$WORK/agent.kubeconfig" -n "$NS" create -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: expiring, labels: {kagent.dev/agent: $AGENT, kagent.dev/tool: delete_file}}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  argumentsPreview: {path: /notify/expiring}
  argumentsSha256: "$(printf '%064d' 0)"
  argumentsBytes: 27
  requestedBy: system:serviceaccount:$NS:$AGENT
  expiresAt: $(date -u -d @$(($(date +%s) + 8)) +%Y-%m-%dT%H:%M:%SZ)
YAML
wait_for "the expired message" 40 eval '[ "$(received /hook expired | grep -c expiring)" = 1 ]'
[ "$(jp approvalrequest/expiring '{.status.phase}')" = Expired ] || fail "expiring is $(jp approvalrequest/expiring '{.status.phase}')"
ok "expiring: $(record expiring oncall created attempts) attempt(s) at created, then expired taken"

# ---------------------------------------------------------------------------------------------
step "5. the notifier without its Secret"
[ -z "$(jp "approvalrequest/$REQ" '{.status.notifications[?(@.notifier=="broken")]}')" ] || fail "broken has records"
[ "$(ready broken)" = False/SecretNotFound ] || fail "broken: $(ready broken)"
! grep -q "$CANARY" "$WORK/received.jsonl" || fail "the secret reached a message"
total=$(grep -c . "$WORK/received.jsonl")
ok "broken: Ready=False SecretNotFound, nothing recorded; $total POSTs in all, none with the secret"
echo
echo "PASS: notify"
