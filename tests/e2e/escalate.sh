#!/usr/bin/env bash
# Deadlines that escalate (docs/approvers.md "Deadlines that escalate"; issue 60 part 2) on the
# real control plane:
#
#  1. an Agent whose approval escalates after 10 s (group hitl-e2e-oncall, notifier oncall) and
#     20 s (user boss, notifier managers): the gate copies the steps into the request with
#     absolute instants
#  2. before tier 1, boss and an oncall member are refused by the admission policy, naming the
#     tier and when it begins; alice (in no step) could decide at once
#  3. tier 1 is taken by controller a (the leader, controller b standing by); oncall gets one
#     escalated-1 message; an oncall member may now decide, boss still may not
#  4. the leader is stopped; controller b takes the Lease and tier 2: managers gets one
#     escalated-2 message, the records name a for tier 1 and b for tier 2, each step once
#  5. status.tier never decreases: every way to lower, remove or null it is refused (as admin,
#     with the policies installed and as the CRD alone rules), and the agent cannot raise it
#  6. boss approves at tier 2; a second request nobody decides gets its `expiring` notice and
#     expires: Expired, never Denied
#  6b. a step whose notifier does not exist: its Escalated Event is a Warning saying nobody was
#     told, and the controller counts it (notifier=missing)
#  6c. a rule with its own escalation: its requests carry the rule's step, not the Agent's
#  7. figure: step latency after its deadline over N requests, as a ratio to the controller's
#     own latency recording a decision (a plain status write) in the same run
#
# Uses the cluster of $KUBECONFIG as cluster-admin (impersonating boss and carol), the
# repository's CRDs, the chart's roles and admission policies from tests/chart/rendered/, two
# controller processes with leader election, one gate process and the npm recorder MCP server.
# Environment: HITL_E2E_BIN, HITL_E2E_KEEP=1, ESCALATE_N (figure requests, default 10). Prints
# SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=escalating
LEASE=hitl-escalate-e2e
N=${ESCALATE_N:-10}
throwaway hitl-e2e-escalate

received() { # received PATH [EVENT]: the bodies POSTed to PATH (of that event)
  python3 - "$WORK/received.jsonl" "$1" "${2:-}" <<'PY'
import json, sys
log, path, event = sys.argv[1:]
try:
    lines = open(log).read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines:
    r = json.loads(line)
    if r["path"] != path:
        continue
    body = json.loads(r["body"])
    if event and body.get("data", {}).get("event") != event:
        continue
    print(json.dumps(body))
PY
}
count() { received "$@" | grep -c . || true; }
holder() { kubectl -n "$NS" get lease "$LEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
tier() { jp "approvalrequest/$1" '{.status.tier}'; }
start_controller() { # start_controller NAME: a replica with leader election, as the chart's SA
  start "controller-$1" "$WORK/controller-$1.log" env KUBECONFIG="$GATES_CONTROLLER_KUBECONFIG" \
    POD_NAME="controller-$1" "$BIN" controller --namespace "$NS" --leader-election=true \
    --lease-name "$LEASE" --lease-namespace "$NS" --metrics-addr "127.0.0.1:$(free_port)" \
    --log-format json --notifier-allow-cidrs 127.0.0.0/8
}

step "setup: CRDs, roles and admission policies, namespace $NS, recorder, Agent $AGENT (two steps), controllers a (leader) and b, receiver, notifiers"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
gates_with_policies
GATES_APPROVAL="{timeout: 90s, waitTimeout: 2s, escalation: {warnBefore: 20s, steps: [{after: 10s, approvers: {groups: [hitl-e2e-oncall]}, notifier: oncall}, {after: 20s, approvers: {users: [boss]}, notifier: managers}]}, rules: [{name: ledger, tool: delete_file, when: \"args.path == '/ledger'\", action: RequireApproval, escalation: {steps: [{after: 60s, approvers: {users: [boss]}, notifier: managers}]}}]}"
gates_setup
grep -q '"escalation"' "$WORK/gate.json" || fail "gate.json carries no escalation: $(cat "$WORK/gate.json")"
stop controller # replaced by two replicas with leader election
start_controller a
wait_for "controller a holding the Lease" 30 eval '[ "$(holder)" = controller-a ]'
start_controller b
kubectl -n "$NS" create rolebinding approvers --clusterrole=hitl-approver --user=alice --user=boss --user=carol >/dev/null
BOSS=$WORK/boss.kubeconfig
CAROL=$WORK/carol.kubeconfig
kubeconfig_as "$BOSS" boss managers
kubeconfig_as "$CAROL" carol hitl-e2e-oncall
forged_request_refused() {
  local out
  out=$(kubectl -n "$NS" create --dry-run=server -f - 2>&1 <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: forged}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf '%064d' 0)"
  argumentsBytes: 2
  requestedBy: someone-else
  expiresAt: "2030-01-01T00:00:00Z"
YAML
  ) && return 1
  grep -q "must be the creating user" <<<"$out"
}
wait_for "the admission policies to be enforced" 30 forged_request_refused
RECEIVER=http://127.0.0.1:$(free_port)
start receiver "$WORK/receiver.log" python3 tests/e2e/receiver.py "${RECEIVER##*:}" "$WORK/received.jsonl"
wait_for "the receiver" 10 http_ok "$RECEIVER/"
# oncall and managers select no request of their own (tools): they hear only of their step.
webhook_notifier oncall "$RECEIVER/oncall" "[no_such_tool]"
webhook_notifier managers "$RECEIVER/managers" "[no_such_tool]"
webhook_notifier watchers "$RECEIVER/watchers"
start_gate a
ok "controller a leads, b stands by; gate a; alice, boss and carol (group hitl-e2e-oncall) hold the approver role"

# ---------------------------------------------------------------------------------------------
step "1. a gated call: the request carries the steps with absolute instants"
gate_call one a delete_file /escalate/1
expect_in "the call" "needs a human approval" "$(finished one)"
the_request REQ /escalate/1
steps=$(kubectl -n "$NS" get "approvalrequest/$REQ" -o json | python3 -c "$(cat <<'PY'
import json, sys
from datetime import datetime
r = json.load(sys.stdin)
def t(s): return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").timestamp()
created = t(r["metadata"]["creationTimestamp"])
out = []
for step in r["spec"]["escalation"]["steps"]:
    out.append("%d:%+.0fs" % (step["tier"], t(step["at"]) - created))
out.append(str(t(r["spec"]["escalation"]["warnAt"]) - t(r["spec"]["expiresAt"])))
print(" ".join(out))
PY
)")
read -r one two warn <<<"$steps"
[[ "$one" =~ ^1:\+(9|10|11)s$ ]] || fail "tier 1 not 10 s after creation: $steps"
[[ "$two" =~ ^2:\+(19|20|21)s$ ]] || fail "tier 2 not 20 s after creation: $steps"
[ "$warn" = -20.0 ] || fail "warnAt not 20 s before expiresAt: $steps"
TIER1=$(jp "approvalrequest/$REQ" '{.spec.escalation.steps[0].at}')
TIER2=$(jp "approvalrequest/$REQ" '{.spec.escalation.steps[1].at}')
[ -z "$(tier "$REQ")" ] || fail "$REQ starts at tier $(tier "$REQ")"
ok "$REQ: steps $one $two after creation, warning ${warn#-}s before expiry"

# ---------------------------------------------------------------------------------------------
step "2. before tier 1: boss and carol refused, naming their tier; alice may decide"
refused boss "boss may decide only from escalation tier 2 on \(spec.escalation\), which begins at $TIER2; the request is at tier 0" \
  env KUBECONFIG="$BOSS" kubectl hitl approve "$REQ" -n "$NS"
refused carol "carol may decide only from escalation tier 1 on \(spec.escalation\), which begins at $TIER1; the request is at tier 0" \
  env KUBECONFIG="$CAROL" kubectl hitl deny "$REQ" -n "$NS" --reason early
e2e_users
KUBECONFIG=$ALICE kubectl -n "$NS" patch approvalrequest "$REQ" --dry-run=server --type merge \
  -p '{"spec":{"decision":{"type":"Deny","decidedBy":"alice"}}}' >/dev/null ||
  fail "alice (in no step) may not decide at tier 0"
list=$(kubectl hitl list -n "$NS" | grep "^$REQ ")
expect_in "kubectl hitl list" "Pending (tier 0, next in" "$list"
ok "boss and carol refused at tier 0; alice's decision admitted (dry run); list: $(awk '{print $5, $6, $7, $8, $9}' <<<"$list")"

# ---------------------------------------------------------------------------------------------
step "3. tier 1 by controller a: one escalated-1 message to oncall; carol may decide, boss not yet"
wait_for "tier 1" 20 eval '[ "$(tier "$REQ")" = 1 ]'
[ "$(jp "approvalrequest/$REQ" '{.status.escalations[0].by}')" = controller-a ] ||
  fail "tier 1 taken by $(jp "approvalrequest/$REQ" '{.status.escalations[0].by}')"
wait_for "oncall's escalated-1" 20 eval '[ "$(count /oncall escalated-1)" = 1 ]'
kubectl -n "$NS" get events --field-selector "involvedObject.name=$REQ,reason=Escalated" -o jsonpath='{.items[*].note}{.items[*].message}' |
  grep -q "escalated to tier 1" || fail "no Escalated Event for tier 1"
KUBECONFIG=$CAROL kubectl -n "$NS" patch approvalrequest "$REQ" --dry-run=server --type merge \
  -p '{"spec":{"decision":{"type":"Deny","decidedBy":"carol"}}}' >/dev/null ||
  fail "carol may not decide at tier 1"
refused "boss at tier 1" "boss may decide only from escalation tier 2 on .*; the request is at tier 1" \
  env KUBECONFIG="$BOSS" kubectl hitl approve "$REQ" -n "$NS"
ok "tier 1 at $(jp "approvalrequest/$REQ" '{.status.escalations[0].at}') by controller-a (due $TIER1); oncall told once; carol admitted, boss refused"

# ---------------------------------------------------------------------------------------------
step "4. the leader stops before tier 2; controller b takes the Lease and tier 2, once"
stop controller-a
wait_for "controller b holding the Lease" 40 eval '[ "$(holder)" = controller-b ]'
wait_for "tier 2" 30 eval '[ "$(tier "$REQ")" = 2 ]'
wait_for "managers' escalated-2" 20 eval '[ "$(count /managers escalated-2)" = 1 ]'
start_controller c # a third replica, standing by: it must not take anything again
sleep 5            # anything sent or taken twice would show by now
[ "$(count /oncall)" = 1 ] || fail "oncall got $(count /oncall) messages, want 1"
[ "$(count /managers)" = 1 ] || fail "managers got $(count /managers) messages, want 1"
by=$(jp "approvalrequest/$REQ" '{.status.escalations[*].by}')
[ "$by" = "controller-a controller-b" ] || fail "steps taken by: $by"
events=$(kubectl -n "$NS" get events --field-selector "involvedObject.name=$REQ,reason=Escalated" -o json |
  python3 -c 'import json, sys; print(sum(e.get("count") or 1 for e in json.load(sys.stdin)["items"]))')
[ "$events" = 2 ] || fail "want 2 Escalated Events on $REQ, got $events"
taken=$(cat "$WORK"/controller-*.log | grep -c '"escalation step taken"' || true)
[ "$taken" = 2 ] || fail "the controllers logged $taken steps taken, want 2"
expect_in "kubectl hitl get" "tier 2 of 2" "$(kubectl hitl get "$REQ" -n "$NS")"
expect_in "kubectl hitl get" "taken at" "$(kubectl hitl get "$REQ" -n "$NS")"
ok "tier 2 by controller-b after the Lease moved; each step once (2 Events, 2 log lines), one message per notifier"

# ---------------------------------------------------------------------------------------------
step "5. status.tier never decreases; the agent cannot move it"
for patch in '{"status":{"tier":1}}' '{"status":{"tier":0}}' '{"status":{"tier":null}}' '{"status":null}' '{"status":{"escalations":[]}}'; do
  refused "admin: merge $patch" "never decreases|append-only|Invalid value" \
    kubectl -n "$NS" patch approvalrequest "$REQ" --subresource=status --type merge -p "$patch"
done
refused "admin: json remove /status/tier" "never decreases" \
  kubectl -n "$NS" patch approvalrequest "$REQ" --subresource=status --type json -p '[{"op":"remove","path":"/status/tier"}]'
refused "admin: tier past the last step" "cannot pass the last step" \
  kubectl -n "$NS" patch approvalrequest "$REQ" --subresource=status --type merge -p '{"status":{"tier":3}}'
refused "admin: PUT without status.tier" "never decreases" sh -c \
  "kubectl -n '$NS' get approvalrequest '$REQ' -o json | python3 -c 'import json,sys; o=json.load(sys.stdin); o[\"status\"].pop(\"tier\"); print(json.dumps(o))' | kubectl replace --subresource=status -f -"
# The agent (its gate's identity) may patch the status to record consumption: an added step
# record, which the CRD allows (append-only), is the admission policy's to refuse.
added=$(kubectl -n "$NS" get "approvalrequest/$REQ" -o json | python3 -c '
import json, sys
records = json.load(sys.stdin)["status"]["escalations"]
print(json.dumps({"status": {"escalations": records + [{"tier": 3, "at": "2026-01-01T00:00:00Z", "by": "agent"}]}}))')
refused "the agent adding a step record (the CRD allows an addition)" "status.escalations are the controller's" \
  kube_curl "$WORK/agent.kubeconfig" PATCH "/apis/kagent.dev/v1alpha2/namespaces/$NS/approvalrequests/$REQ/status" \
  -H "Content-Type: application/merge-patch+json" --data "$added"
[ "$(tier "$REQ")" = 2 ] || fail "the tier moved: $(tier "$REQ")"
ok "every lowering, removal or null refused by the CRD; the agent's write refused by the policy; tier 2 stands"

# ---------------------------------------------------------------------------------------------
step "6. boss approves at tier 2; a request nobody decides is warned of and expires, not denied"
out=$(KUBECONFIG=$BOSS kubectl hitl approve "$REQ" -n "$NS" --reason "escalated to me")
expect_in "boss's approval" "approved" "$out"
gate_call two a delete_file /escalate/2
finished two >/dev/null
the_request LATE /escalate/2
wait_for "watchers' expiring message for $LATE" 90 eval '[ "$(received /watchers expiring | grep -c "$LATE")" = 1 ]'
wait_for "$LATE Expired" 60 eval '[ "$(jp "approvalrequest/$LATE" "{.status.phase}")" = Expired ]'
[ "$(jp "approvalrequest/$LATE" '{.status.tier}')" = 2 ] || fail "$LATE did not escalate to tier 2 before expiring"
expect_in "the expired status" "no decision before" "$(jp "approvalrequest/$LATE" '{.status.message}')"
ok "$REQ approved by boss; $LATE: expiring notice, tier 2, Expired ('$(jp "approvalrequest/$LATE" '{.status.message}')')"

# ---------------------------------------------------------------------------------------------
step "6b. a step whose notifier does not exist: a Warning Event says nobody was told, and it is counted"
at=$(date -u -d @$(($(date +%s) + 3)) +%Y-%m-%dT%H:%M:%SZ)
kubectl --kubeconfig "$WORK/agent.kubeconfig" -n "$NS" create -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: untold, labels: {kagent.dev/agent: $AGENT, kagent.dev/tool: delete_file}}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  argumentsPreview: {path: /escalate/untold}
  argumentsSha256: "$(printf '%064d' 99)"
  argumentsBytes: 27
  requestedBy: system:serviceaccount:$NS:$AGENT
  expiresAt: $(date -u -d @$(($(date +%s) + 60)) +%Y-%m-%dT%H:%M:%SZ)
  escalation:
    steps: [{tier: 1, at: "$at", approvers: {groups: [hitl-e2e-oncall]}, notifier: no-such-notifier}]
YAML
wait_for "untold at tier 1" 20 eval '[ "$(tier untold)" = 1 ]'
warning() {
  kubectl -n "$NS" get events --field-selector "involvedObject.name=untold,reason=Escalated,type=Warning" \
    -o jsonpath='{.items[*].note}{.items[*].message}'
}
wait_for "the Warning Event on untold" 20 eval '[ -n "$(warning)" ]'
expect_in "the Escalated Warning" "its notifier \"no-such-notifier\" is not an ApprovalNotifier in namespace $NS: nobody was told" "$(warning)"
grep -h '"escalation step taken"' "$WORK"/controller-*.log | grep -q '"notifier":"missing"' ||
  fail "no controller logged a step taken with notifier=missing"
KUBECONFIG=$ALICE kubectl hitl deny untold -n "$NS" --reason "done" >/dev/null
ok "untold: tier 1 taken; Warning Event: $(warning | head -c 160)…"

# ---------------------------------------------------------------------------------------------
step "6c. a rule's own escalation replaces the Agent's on the requests it makes"
gate_call ledger a delete_file /ledger
expect_in "the call" "needs a human approval" "$(finished ledger)"
the_request LEDGER /ledger
[ "$(jp "approvalrequest/$LEDGER" '{.spec.rule}')" = ledger ] || fail "$LEDGER was not made by rule ledger"
ruled=$(jp "approvalrequest/$LEDGER" '{range .spec.escalation.steps[*]}{.tier}:{.approvers.users[0]}:{.notifier} {end}')
[ "$ruled" = "1:boss:managers " ] || fail "$LEDGER's steps are '$ruled', want the rule's one step (1:boss:managers)"
[ -z "$(jp "approvalrequest/$LEDGER" '{.spec.escalation.warnAt}')" ] || fail "$LEDGER carries the Agent's warnBefore"
KUBECONFIG=$ALICE kubectl hitl deny "$LEDGER" -n "$NS" --reason "done" >/dev/null
ok "$LEDGER (rule ledger): one step, boss after 60 s, the Agent's two steps and warning not on it"

# ---------------------------------------------------------------------------------------------
step "7. figure: step latency after its deadline, over $N requests, against a decision's"
# Requests created by the agent itself (the gate would make the same), each with one step 4 s
# ahead; a watch stamps when the tier changes and, after alice denies, when the phase does.
WATCH=$WORK/watch.jsonl
start watch "$WORK/watch.log" python3 -c '
import json, subprocess, sys, time
out = open(sys.argv[2], "w")
proc = subprocess.Popen(["kubectl", "-n", sys.argv[1], "get", "approvalrequests", "-w", "-o", "json"], stdout=subprocess.PIPE, text=True)
dec, buf = json.JSONDecoder(), ""
for line in proc.stdout:
    buf += line
    try:
        obj, end = dec.raw_decode(buf.strip())
    except ValueError:
        continue
    buf = ""
    st = obj.get("status", {})
    out.write(json.dumps({"t": time.time(), "name": obj["metadata"]["name"], "tier": st.get("tier"), "phase": st.get("phase")}) + "\n")
    out.flush()' "$NS" "$WATCH"
sleep 2
for i in $(seq 1 "$N"); do
  at=$(date -u -d @$(($(date +%s) + 4)) +%Y-%m-%dT%H:%M:%SZ)
  kubectl --kubeconfig "$WORK/agent.kubeconfig" -n "$NS" create -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: fig-$i, labels: {kagent.dev/agent: $AGENT, kagent.dev/tool: delete_file}}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  argumentsPreview: {path: /escalate/fig-$i}
  argumentsSha256: "$(printf '%064d' "$i")"
  argumentsBytes: 27
  requestedBy: system:serviceaccount:$NS:$AGENT
  expiresAt: $(date -u -d @$(($(date +%s) + 60)) +%Y-%m-%dT%H:%M:%SZ)
  escalation:
    steps: [{tier: 1, at: "$at", approvers: {groups: [hitl-e2e-oncall]}}]
YAML
  echo "fig-$i $at" >>"$WORK/deadlines"
  wait_for "fig-$i at tier 1" 20 eval '[ "$(tier fig-$i)" = 1 ]'
  sleep 1
  echo "fig-$i $EPOCHREALTIME" >>"$WORK/decided"
  KUBECONFIG=$ALICE kubectl hitl deny "fig-$i" -n "$NS" --reason figure >/dev/null
  wait_for "fig-$i Denied" 20 eval '[ "$(jp approvalrequest/fig-$i "{.status.phase}")" = Denied ]'
done
sleep 1
figure=$(python3 - "$WATCH" "$WORK/deadlines" "$WORK/decided" <<'PY'
import json, statistics, sys
from datetime import datetime, timezone
events = [json.loads(l) for l in open(sys.argv[1])]
deadline = {n: datetime.strptime(a, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
            for n, a in (l.split() for l in open(sys.argv[2]))}
decided = {n: float(t) for n, t in (l.split() for l in open(sys.argv[3]))}
step = [min(e["t"] for e in events if e["name"] == n and e["tier"] == 1) - d for n, d in deadline.items()]
write = [min(e["t"] for e in events if e["name"] == n and e["phase"] == "Denied") - d for n, d in decided.items()]
def p95(xs): return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]
sm, sp, wm, wp = statistics.median(step), p95(step), statistics.median(write), p95(write)
print(f"step after deadline median {sm:.3f}s p95 {sp:.3f}s; decision to status median {wm:.3f}s p95 {wp:.3f}s; ratio median {sm / wm:.1f}x p95 {sp / wp:.1f}x (n={len(step)})")
PY
)
note "$figure"
ok "figure: $figure"
echo
echo "PASS: escalate"
