#!/usr/bin/env bash
# Undoing a status never undoes a guarantee, on the real control plane (docs/policies.md "What
# the CRDs guarantee"; issues 41 and 60): one approval consumed, one approval edited by alice
# and executed (the edited call ran, the original never; its request carries spec.toolAnnotations
# from the recorder's tool list, spec.edit, spec.editApprovals and
# status.editedArgumentsSha256), one grant with maxUses 1 used (and the request it decided,
# spec.grant), one grant revoked; then every generated way to remove, null, replace or rewind
# each of their status fields (the request's escalation tier and records among them) and of a
# grant's spec.revoked, a request's spec.escalation, spec.edit, spec.editApprovals and
# spec.toolAnnotations, and spec.caller of a shared gate's request and grant, their values
# generated from the CRD's schema -- merge and JSON patches, PUT, server-side apply under a new
# field manager and under the managers that own the fields, on the status subresource and the
# main resource -- and every creation of a request carrying spec.decision, approvals, edit or
# editApprovals, as the Agent's own identity, another Agent's, mallory, alice, the controller and
# cluster-admin; first without the chart's admission policies, then with them
# (tests/e2e/rewind.py). A write that moves a guarantee backwards fails the suite; after every
# accepted write the same call is sent again through the real gate and the recorder's count of
# runs must not move.
#
# Uses the cluster of $KUBECONFIG as cluster-admin, the repository's CRDs, the chart's roles and
# admission policies from tests/chart/rendered/, the controller watching one throwaway
# namespace, a gate of the Agent as a local process with the Agent's ServiceAccount token, and
# the npm recorder MCP server with the official SDK client. Environment: HITL_E2E_BIN,
# HITL_E2E_KEEP=1. Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=rewind
OTHER=rewind-other
throwaway hitl-e2e-rewind
POLICIES=tests/chart/rendered/admission-policy.default.yaml

step "setup: CRDs, roles, namespace $NS, recorder, controller, Agents $AGENT and $OTHER, a gate"
gates_with_policies
# A pending call answers within a second, so each replay of a call is quick.
# The Agent escalates to tier 1 (alice) 2 s after a request is made: the consumed request
# carries spec.escalation, status.tier and status.escalations for the attacks to rewind.
GATES_APPROVAL="{timeout: 10m, waitTimeout: 1s, escalation: {steps: [{after: 2s, approvers: {users: [alice]}}]}}"
gates_setup
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: $OTHER}
spec:
  type: Declarative
  declarative:
    systemMessage: Another agent of the namespace.
    modelConfig: model
    tools:
    - type: McpServer
      mcpServer: {name: recorder, toolNames: [delete_file], requireApproval: [delete_file]}
YAML
wait_for "ServiceAccount $OTHER" 20 kubectl -n "$NS" get "serviceaccount/$OTHER"
wait_for "Role $OTHER-approval-gate" 20 kubectl -n "$NS" get "role/$OTHER-approval-gate"
kubeconfig_with_token "$WORK/other.kubeconfig" "$(kubectl -n "$NS" create token "$OTHER" --duration=1h)" "$NS"
kubectl -n "$NS" create rolebinding approvers --clusterrole=hitl-approver --user=alice >/dev/null
kubectl -n "$NS" create rolebinding editors --clusterrole=hitl-editor --user=alice >/dev/null
e2e_users
start_gate a
ok "recorder :$RECORDER_PORT, controller, gate a of $AGENT; $OTHER's ServiceAccount has its own gate Role"

# replay PATH [EDITED]: prints how many times delete_file(PATH) ran, after sending it once more;
# with EDITED (the path an approver's edit made of it), the tools are listed first (as the
# request's first call did, so that the gate has their annotations) and both counts are printed.
replay_cmd() {
  local ops="{\"op\":\"call\",\"name\":\"delete_file\",\"args\":{\"path\":\"$1\"}}"
  [ -z "${2:-}" ] || ops="{\"op\":\"list\"},$ops"
  printf 'timeout 120 node %q %q streamable %q >/dev/null && curl -fsS http://127.0.0.1:%s/calls | python3 -c %q %s' \
    "$PEERS/client.mjs" "${GATE_URL[a]}" "[$ops]" \
    "$RECORDER_PORT" 'import json, sys
calls = json.load(sys.stdin)
print(*(sum(1 for c in calls if c["tool"] == "delete_file" and c["args"].get("path") == p) for p in sys.argv[1:]))' "$(printf '%q ' "$@")"
}

step "1. an approval consumed, with a notification record; a grant with maxUses 1 used; a grant revoked"
gate_call first a delete_file /rewind/call
the_request REQ /rewind/call
wait_for "the controller's Pending status on $REQ" 20 eval '[ "$(jp "approvalrequest/$REQ" "{.status.phase}")" = Pending ]'
PENDING=$(kubectl -n "$NS" get "approvalrequest/$REQ" -o json | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["status"]))')
expect_in "the call before its approval" "NOT executed yet" "$(finished first)"
wait_for "tier 1 on $REQ (alice may decide from it)" 20 eval '[ "$(jp "approvalrequest/$REQ" "{.status.tier}")" = 1 ]'
KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" --reason "e2e: rewind" >/dev/null
gate_call retry a delete_file /rewind/call
expect_in "the approved call, sent again" 'deleted /rewind/call' "$(finished retry)"
[ "$(runs delete_file /rewind/call)" = 1 ] || fail "the approved call ran $(runs delete_file /rewind/call) times"
[ "$(jp "approvalrequest/$REQ" '{.status.phase}')" = Executed ] || fail "$REQ is not Executed"
DECIDED=$(jp "approvalrequest/$REQ" '{.status.decidedAt}')
# What the controller records for a notifier (a status owner's write), for attacks to rewind.
kubectl --kubeconfig "$GATES_CONTROLLER_KUBECONFIG" -n "$NS" patch "approvalrequest/$REQ" --subresource=status --type=merge -p "{\"status\": {\"notifications\": [
  {\"notifier\": \"pager\", \"event\": \"created\", \"attempts\": 2, \"lastAttemptAt\": \"$DECIDED\", \"deliveredAt\": \"$DECIDED\"}]}}" >/dev/null
REQUEST_HISTORY="[{}, $PENDING, {\"phase\": \"Approved\", \"decidedAt\": \"$DECIDED\"}]"
ok "$REQ: Executed, consumed by $(jp "approvalrequest/$REQ" '{.status.consumedBy}'), ran once"

step "1b. an approval with an edit, executed: listed first, so its request carries spec.toolAnnotations"
# (as tests/e2e/edit.sh and tests/e2e/tool-risk.sh): alice edits /rewind/edit into
# /rewind/edited and approves; the call sent again runs the edited call once, the original never.
list_call() {
  start "$1" "$WORK/$1.out" timeout 120 node "$PEERS/client.mjs" "${GATE_URL[a]}" streamable \
    "[{\"op\":\"list\"},{\"op\":\"call\",\"name\":\"delete_file\",\"args\":{\"path\":\"$2\"}}]"
}
list_call efirst /rewind/edit
the_request EREQ /rewind/edit
wait_for "the controller's Pending status on $EREQ" 20 eval '[ "$(jp "approvalrequest/$EREQ" "{.status.phase}")" = Pending ]'
EPENDING=$(kubectl -n "$NS" get "approvalrequest/$EREQ" -o json | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["status"]))')
expect_in "the call before its approval" "NOT executed yet" "$(finished efirst)"
[ "$(jp "approvalrequest/$EREQ" '{.spec.toolAnnotations.destructiveHint}')" = true ] || fail "$EREQ: no spec.toolAnnotations"
wait_for "tier 1 on $EREQ (alice may decide from it)" 20 eval '[ "$(jp "approvalrequest/$EREQ" "{.status.tier}")" = 1 ]'
out=$(KUBECONFIG=$ALICE kubectl hitl approve "$EREQ" -n "$NS" --patch '[{"op":"replace","path":"/path","value":"/rewind/edited"}]' --reason "e2e: rewind an edit")
expect_in "alice's edit" "edited and approved" "$out"
list_call eretry /rewind/edit
expect_in "the edited call, sent again" 'deleted /rewind/edited' "$(finished eretry)"
[ "$(runs delete_file /rewind/edited)" = 1 ] || fail "the edited call ran $(runs delete_file /rewind/edited) times"
[ "$(runs delete_file /rewind/edit)" = 0 ] || fail "the original of the edited call ran"
wait_for "$EREQ Executed" 20 eval '[ "$(jp "approvalrequest/$EREQ" "{.status.phase}")" = Executed ]'
[[ $(jp "approvalrequest/$EREQ" '{.status.editedArgumentsSha256}') =~ ^[0-9a-f]{64}$ ]] || fail "$EREQ: no status.editedArgumentsSha256"
EDECIDED=$(jp "approvalrequest/$EREQ" '{.status.decidedAt}')
EDIT_HISTORY="[{}, $EPENDING, {\"phase\": \"Approved\", \"decidedAt\": \"$EDECIDED\"}]"
ok "$EREQ: edited by alice, Executed with editedArgumentsSha256, spec.toolAnnotations; /rewind/edited ran once, /rewind/edit never"

kubectl --kubeconfig "$ALICE" -n "$NS" create -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalGrant
metadata: {name: once}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  when: "args.path == '/rewind/granted'"
  maxUses: 1
  expiresAt: "$(date -u -d '+30 minutes' +%Y-%m-%dT%H:%M:%SZ)"
  reason: e2e rewind
  grantedBy: alice
YAML
gate_call granted a delete_file /rewind/granted
expect_in "the granted call" 'deleted /rewind/granted' "$(finished granted)"
[ "$(runs delete_file /rewind/granted)" = 1 ] || fail "the granted call ran $(runs delete_file /rewind/granted) times"
[ "$(jp approvalgrant/once '{.status.uses}')" = 1 ] || fail "grant once: uses $(jp approvalgrant/once '{.status.uses}')"
USED=$(jp approvalgrant/once '{.status.lastUsedAt}')
GRANT_HISTORY="[{}, {\"uses\": 0}, {\"uses\": 1, \"lastUsedAt\": \"$USED\", \"lastUsedBy\": \"forged\"}]"
ok "grant once: used once, by $(jp approvalgrant/once '{.status.lastUsedBy}')"
# The request the gate made of that use: decided by the grant (spec.grant), consumed.
the_request GREQ /rewind/granted
[ -n "$(jp "approvalrequest/$GREQ" '{.spec.grant.name}')" ] || fail "$GREQ has no spec.grant"
[ -n "$(jp "approvalrequest/$GREQ" '{.status.consumedAt}')" ] || fail "$GREQ is not consumed"
ok "$GREQ: decided by grant $(jp "approvalrequest/$GREQ" '{.spec.grant.name}'), consumed"
kubectl --kubeconfig "$ALICE" -n "$NS" create -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalGrant
metadata: {name: revoked}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  when: "args.path == '/rewind/revoked'"
  expiresAt: "$(date -u -d '+30 minutes' +%Y-%m-%dT%H:%M:%SZ)"
  reason: e2e rewind
  grantedBy: alice
  revoked: true
YAML
ok "grant revoked: any number of uses, revoked"
# A shared gate's request and grant (spec.caller set, agentRef a ToolGate), as cluster-admin and
# alice create them: no shared gate runs in this suite, so their replay runs nothing and prints
# 0 runs; their spec.caller must survive every generated write. Their ToolGate exists (for one
# that is gone the controller would cancel the request), and alice denies the request, so that
# it is finished by its write-once decidedAt: a request finished by nothing write-once (a
# Pending one a status writer cancels) ends by its Finished condition's time, which a status
# writer can backdate, and the controller would delete it, rightly, before the attacks were
# through.
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ToolGate
metadata: {name: shared}
spec:
  server: {remoteMCPServer: recorder}
  toolNames: [delete_file]
  requireApproval: [delete_file]
YAML
ADMIN_USER=$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')
kubectl -n "$NS" create -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: shared-call}
spec:
  agentRef: {name: shared, kind: ToolGate}
  caller: {username: "system:serviceaccount:$NS:bot", uid: bot-uid, groups: [system:serviceaccounts, "system:serviceaccounts:$NS"]}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf 'a%.0s' $(seq 64))"
  argumentsBytes: 2
  requestedBy: "$ADMIN_USER"
  expiresAt: "$(date -u -d '+30 minutes' +%Y-%m-%dT%H:%M:%SZ)"
YAML
kubectl --kubeconfig "$ALICE" -n "$NS" create -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalGrant
metadata: {name: shared-grant}
spec:
  agentRef: {name: shared, kind: ToolGate}
  caller: "system:serviceaccount:$NS:bot"
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  expiresAt: "$(date -u -d '+30 minutes' +%Y-%m-%dT%H:%M:%SZ)"
  reason: e2e rewind
  grantedBy: alice
YAML
KUBECONFIG=$ALICE kubectl hitl deny shared-call -n "$NS" --reason "e2e rewind" >/dev/null
shared_call_decided() { [ -n "$(jp approvalrequest/shared-call '{.status.decidedAt}')" ]; }
wait_for "shared-call's decidedAt" 30 shared_call_decided
ok "a shared gate's request shared-call (denied by alice) and grant shared-grant, each with spec.caller"

IDENTITIES=(admin="$KUBECONFIG" controller="$GATES_CONTROLLER_KUBECONFIG" agent="$WORK/agent.kubeconfig"
  other="$WORK/other.kubeconfig" alice="$ALICE" mallory="$MALLORY")
rewind() {
  python3 tests/e2e/rewind.py --policies "$1" --ns "$NS" \
    --target approvalrequests "$REQ" "$REQUEST_HISTORY" "$(replay_cmd /rewind/call)" \
    --target approvalrequests "$EREQ" "$EDIT_HISTORY" "$(replay_cmd /rewind/edit /rewind/edited)" \
    --target approvalrequests "$GREQ" "[{}]" "$(replay_cmd /rewind/granted)" \
    --target approvalgrants once "$GRANT_HISTORY" "$(replay_cmd /rewind/granted)" \
    --target approvalgrants revoked "[{}]" "$(replay_cmd /rewind/revoked)" \
    --target approvalrequests shared-call "[{}]" "echo 0" \
    --target approvalgrants shared-grant "[{}]" "echo 0" \
    "${IDENTITIES[@]}" | tee "$WORK/rewind-$1.out"
}
# What the apiserver answers another agent's gate recording one more use of this Agent's grant
# `revoked` (which the CRD alone would admit: it has no maxUses); a dry run, nothing is written.
foreign_use() {
  local uses
  uses=$(jp approvalgrant/revoked '{.status.uses}')
  kube_curl "$WORK/other.kubeconfig" PATCH "/apis/kagent.dev/v1alpha2/namespaces/$NS/approvalgrants/revoked/status?dryRun=All" \
    -H 'Content-Type: application/merge-patch+json' -d "{\"status\": {\"uses\": $((${uses:-0} + 1))}}" 2>&1 || true
}

step "2. without the admission policies"
kubectl delete -f "$POLICIES" --ignore-not-found >/dev/null
wait_for "the admission policies to be gone" 30 eval '! grep -q "may not record uses" <<<"$(foreign_use)"'
rewind off || fail "a guarantee moved backwards without the admission policies (above)"
ok "no guarantee moved backwards; every accepted write replayed without a run"

step "3. with the admission policies"
kubectl apply -f "$POLICIES" >/dev/null
enforced() { foreign_use >"$WORK/probe.out"; grep -q "may not record uses" "$WORK/probe.out"; }
deadline=$((SECONDS + 30))
until enforced; do
  [ "$SECONDS" -lt "$deadline" ] || fail "the admission policies are not enforced after 30 s: $(cat "$WORK/probe.out")"
  sleep 0.2
done
rewind on || fail "a guarantee moved backwards with the admission policies (above)"
ok "no guarantee moved backwards; no identity but the Agent's gate wrote its grant's status"

step "4. the calls, counted at the tool server"
[ "$(runs delete_file /rewind/call)" = 1 ] || fail "delete_file(/rewind/call) ran $(runs delete_file /rewind/call) times"
[ "$(runs delete_file /rewind/granted)" = 1 ] || fail "delete_file(/rewind/granted) ran $(runs delete_file /rewind/granted) times"
[ "$(runs delete_file /rewind/revoked)" = 0 ] || fail "delete_file(/rewind/revoked) ran $(runs delete_file /rewind/revoked) times"
[ "$(runs delete_file /rewind/edited)" = 1 ] || fail "delete_file(/rewind/edited) ran $(runs delete_file /rewind/edited) times"
[ "$(runs delete_file /rewind/edit)" = 0 ] || fail "delete_file(/rewind/edit) ran $(runs delete_file /rewind/edit) times"
ok "delete_file(/rewind/call) ran once on one approval, /rewind/granted once on a grant of one use, /rewind/revoked never, /rewind/edited once on one edited approval, /rewind/edit never"
