#!/usr/bin/env bash
# Edit, then approve on the real control plane (docs/approvers.md "Edit, then approve"; issue 60
# part 1): alice, who holds the verb edit, approves a held call with a JSON Patch; the edited
# call runs once at the tool server, the original never, and the model's result says what the
# approver changed. bob (approve only) and mallory are refused by the admission policy; spec.edit
# and status.editedArgumentsSha256 cannot be removed, nulled or replaced; an edit the Agent's
# rules deny, or that needs more approvals than were given, is refused by the gate and nothing
# runs; a quorum started on the original starts again on the edit; an edit the tool's listed
# input schema does not accept, one a rule with edits.allowed=false governs, one outside a
# rule's edits.paths, and one probing a redacted value (written past the plugin, which refuses it
# first) are refused by the gate and nothing runs. Figure: kubectl hitl approve
# --patch -> edited call at the tool server, as a ratio to a plain approval in the same run.
#
# Uses the cluster of $KUBECONFIG as cluster-admin, the repository's CRDs, the chart's user roles
# and admission policies from tests/chart/rendered/, the controller watching one throwaway
# namespace, one gate of the Agent as a local process and the npm recorder MCP server (as
# tests/e2e/quorum.sh). Environment: HITL_E2E_BIN, HITL_E2E_KEEP=1. Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=files
throwaway hitl-e2e-edit

awaiting() { [ "$(gate_metric a hitl_gate_calls_awaiting_decision)" = "$1" ]; }
# held NAME PATH [MORE]: lists the tools (as agent runtimes do; the gate learns the input schemas
# edits are checked against) and calls delete_file(PATH) (with the JSON members MORE besides
# path) through gate a in the background, output in NAME.out, until the gate holds it; sets REQ
# to its request and BEFORE to how many delete_file calls ran before it.
held() {
  BEFORE=$(runs delete_file)
  start "$1" "$WORK/$1.out" timeout 150 node "$PEERS/client.mjs" "${GATE_URL[a]}" streamable \
    "[{\"op\":\"list\"},{\"op\":\"call\",\"name\":\"delete_file\",\"args\":{\"path\":\"$2\"${3:+,$3}}}]"
  wait_for "the gate to hold delete_file($2)" 20 awaiting 1
  the_request REQ "$2"
}
# answered NAME: waits for call NAME's client to finish and prints its output.
answered() {
  local pid=${E2E_PIDS[$1]} deadline=$((SECONDS + 30))
  while alive "$pid"; do [ "$SECONDS" -lt "$deadline" ] || fail "call $1 still waits 30 s after its decision"; sleep 0.01; done
  unset "E2E_PIDS[$1]"
  wait "$pid" || true
  cat "$WORK/$1.out"
}
patch_path() { printf '[{"op":"replace","path":"/path","value":"%s"}]' "$1"; }

step "setup: CRDs, roles and admission policies, namespace $NS, recorder, controller, Agent $AGENT"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
gates_with_policies
GATES_APPROVAL="{timeout: 10m, waitTimeout: 120s, rules: [
  {name: protect, tool: delete_file, action: Deny, when: \"args.path.startsWith('/protected/')\"},
  {name: ledger, tool: delete_file, action: RequireApproval, requiredApprovals: 2, when: \"args.path.startsWith('/ledger/')\"},
  {name: frozen, tool: delete_file, action: RequireApproval, when: \"args.path.startsWith('/frozen/')\", edits: {allowed: false}},
  {name: scoped, tool: delete_file, action: RequireApproval, when: \"args.path.startsWith('/scoped/')\", edits: {paths: [/path]}},
  {name: ask, tool: delete_file, action: RequireApproval}]}"
gates_setup
kubectl -n "$NS" create rolebinding approvers --clusterrole=hitl-approver --user=alice --user=bob >/dev/null
kubectl -n "$NS" create rolebinding editors --clusterrole=hitl-editor --user=alice >/dev/null
e2e_users
BOB=$WORK/bob.kubeconfig
kubeconfig_as "$BOB" bob approvers
edit_policy_enforced() {
  kubectl get validatingadmissionpolicy hitl-hitl-operator-approval-edit >/dev/null 2>&1
}
wait_for "the edit admission policy" 30 edit_policy_enforced
start_gate a
ok "recorder :$RECORDER_PORT, controller, gate a; alice may approve and edit, bob may approve, mallory neither"

step "1. a plain approval (the baseline of the figure)"
held plain /tmp/plain
t0=$(now)
KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" >/dev/null
result=$(answered plain)
plain_s=$(elapsed "$t0")
expect_in "the plain result" '"text":"deleted /tmp/plain"' "$result"
ok "approved and ran in ${plain_s}s (approve -> result at the client)"

step "2. refused before anything is written: bob (approve only), mallory, a patch touching nothing"
held edited /tmp/a
# kubectl hitl asks the apiserver first (SelfSubjectAccessReview), before any editor opens;
# the admission policy refuses the same write made without the plugin.
refused "bob editing (no verb edit)" "you may not edit its call: the RBAC verb edit on agents/$AGENT in namespace $NS is needed" \
  env KUBECONFIG="$BOB" kubectl hitl approve "$REQ" -n "$NS" --patch "$(patch_path /tmp/b)"
refused "bob writing spec.edit without the plugin" "may not edit: it needs the RBAC verb edit" \
  kubectl --kubeconfig "$BOB" -n "$NS" patch approvalrequest "$REQ" --type merge \
  -p "{\"spec\":{\"edit\":{\"patch\":$(patch_path /tmp/b | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'),\"editedBy\":\"bob\"}}}"
refused "mallory editing" "forbidden|Forbidden" \
  env KUBECONFIG="$MALLORY" kubectl hitl approve "$REQ" -n "$NS" --patch "$(patch_path /tmp/b)"
refused "a patch on a path the preview does not have" "at /nope: operation 1 \(replace\) cannot be applied" \
  env KUBECONFIG="$ALICE" kubectl hitl approve "$REQ" -n "$NS" --patch '[{"op":"replace","path":"/nope","value":1}]'
refused "alice writing an edit in bob's name" "spec.edit.editedBy must be your username alice" \
  kubectl --kubeconfig "$ALICE" -n "$NS" patch approvalrequest "$REQ" --type merge \
  -p "{\"spec\":{\"edit\":{\"patch\":$(patch_path /tmp/b | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'),\"editedBy\":\"bob\"}}}"
[ -z "$(jp "approvalrequest/$REQ" '{.spec.edit}')" ] || fail "$REQ got an edit"
[ "$(runs delete_file /tmp/a)" = 0 ] || fail "the original ran"
ok "all refused; no edit on $REQ; nothing ran"

step "3. alice approves with an edit: the edited call runs once, the original never, the model is told"
t0=$(now)
out=$(KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" --patch "$(patch_path /tmp/b)" --reason "only the copy")
expect_in "alice's edit" "approvalrequest/$REQ edited and approved (1/1, decidedBy alice)" "$out"
result=$(answered edited)
edit_s=$(elapsed "$t0")
expect_in "the client's result" '"text":"deleted /tmp/b"' "$result"
expect_in "the note to the model" "ran with arguments edited by the approver alice" "$result"
expect_in "the note names the path" "changed: /path" "$result"
[ "$(runs delete_file /tmp/b)" = 1 ] || fail "the edited call ran $(runs delete_file /tmp/b) times, want 1"
[ "$(runs delete_file /tmp/a)" = 0 ] || fail "the original call ran"
executed() { [ "$(jp "approvalrequest/$REQ" '{.status.phase}')" = Executed ]; }
wait_for "$REQ Executed" 20 executed
edited_sha=$(jp "approvalrequest/$REQ" '{.status.editedArgumentsSha256}')
original_sha=$(jp "approvalrequest/$REQ" '{.spec.argumentsSha256}')
[[ $edited_sha =~ ^[0-9a-f]{64}$ ]] || fail "no status.editedArgumentsSha256 on $REQ"
[ "$edited_sha" != "$original_sha" ] || fail "the edited binding equals the original's"
describe=$(KUBECONFIG=$ALICE kubectl hitl get "$REQ" -n "$NS")
expect_in "kubectl hitl get" "Edited by:    alice" "$describe"
expect_in "kubectl hitl get" '"value":"/tmp/b"' "$describe"
expect_in "kubectl hitl get" "only the copy" "$describe"
ok "ran delete_file(/tmp/b) once in ${edit_s}s; $REQ Executed, editedArgumentsSha256 ${edited_sha:0:16}..., get shows the edit"

step "4. the edit and its binding cannot be removed, nulled, replaced or rewound (as cluster-admin)"
refused "removing spec.edit" "spec.edit is write-once" kubectl -n "$NS" patch approvalrequest "$REQ" --type json -p '[{"op":"remove","path":"/spec/edit"}]'
refused "nulling spec.edit" "spec.edit is write-once" kubectl -n "$NS" patch approvalrequest "$REQ" --type merge -p '{"spec":{"edit":null}}'
refused "replacing the patch" "spec.edit is write-once" kubectl -n "$NS" patch approvalrequest "$REQ" --type merge -p '{"spec":{"edit":{"patch":"[]"}}}'
refused "replacing the editor" "spec.edit is write-once" kubectl -n "$NS" patch approvalrequest "$REQ" --type merge -p '{"spec":{"edit":{"editedBy":"mallory"}}}'
refused "adding an edit approval after the decision" "spec.editApprovals cannot change once spec.decision is set" \
  kubectl -n "$NS" patch approvalrequest "$REQ" --type json -p '[{"op":"add","path":"/spec/editApprovals/-","value":{"approvedBy":"carol"}}]'
for how in remove null replace; do
  case $how in
    remove) args=(--type json -p '[{"op":"remove","path":"/status/editedArgumentsSha256"}]') ;;
    null) args=(--type merge -p '{"status":{"editedArgumentsSha256":null}}') ;;
    replace) args=(--type merge -p "{\"status\":{\"editedArgumentsSha256\":\"$original_sha\"}}") ;;
  esac
  refused "status.editedArgumentsSha256: $how" "status.editedArgumentsSha256 is write-once" \
    kubectl -n "$NS" patch approvalrequest "$REQ" --subresource status "${args[@]}"
done
refused "status: rewound to Approved without consumption" "write-once" kubectl -n "$NS" patch approvalrequest "$REQ" \
  --subresource status --type merge -p '{"status":{"phase":"Approved","consumedAt":null,"editedArgumentsSha256":null}}'
[ "$(jp "approvalrequest/$REQ" '{.status.editedArgumentsSha256}')" = "$edited_sha" ] || fail "the edited binding changed"
ok "every write refused; the binding stays ${edited_sha:0:16}..."

step "5. an edit the Agent's rules deny is refused by the gate: nothing runs, the request says why"
held denied /tmp/c
KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" --patch "$(patch_path /protected/c)" >/dev/null
result=$(answered denied)
expect_in "the client's result" "the approver's edit of tool 'delete_file' (by alice, ApprovalRequest $REQ) was refused" "$result"
expect_in "the client's result" "the Agent's approval rule 'protect' denies the edited call" "$result"
cancelled() { [ "$(jp "approvalrequest/$REQ" '{.status.phase}')" = Cancelled ]; }
wait_for "$REQ Cancelled" 20 cancelled
expect_in "status.message" "the Agent's approval rule 'protect' denies the edited call" "$(jp "approvalrequest/$REQ" '{.status.message}')"
[ "$(runs delete_file /tmp/c)" = 0 ] && [ "$(runs delete_file /protected/c)" = 0 ] || fail "a call ran"
ok "refused: neither /tmp/c nor /protected/c ran; $REQ Cancelled with the rule named"

step "6. an edit needing more approvals than were given is refused; nothing runs"
held more /tmp/d
KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" --patch "$(patch_path /ledger/d)" >/dev/null
result=$(answered more)
expect_in "the client's result" "the edited call needs 2 approvals (rule 'ledger'), and 1 were given for it" "$result"
[ "$(runs delete_file /tmp/d)" = 0 ] && [ "$(runs delete_file /ledger/d)" = 0 ] || fail "a call ran"
ok "refused; nothing ran"

step "7. a quorum started on the original starts again on the edit"
held quorum /ledger/2026.csv
out=$(KUBECONFIG=$BOB kubectl hitl approve "$REQ" -n "$NS")
expect_in "bob's approval of the original" "approved (1/2) by bob" "$out"
out=$(KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" --patch "$(patch_path /ledger/2025.csv)")
expect_in "alice's edit" "edited and approved (1/2) by alice: 1 more approval of the edited call needed" "$out"
[ -z "$(jp "approvalrequest/$REQ" '{.spec.decision}')" ] || fail "$REQ decided with bob's approval of the original counted"
refused "alice approving the edited call without the quorum" "needs spec.requiredApprovals \(at least 1\) entries in spec.editApprovals" \
  kubectl --kubeconfig "$ALICE" -n "$NS" patch approvalrequest "$REQ" --type merge -p '{"spec":{"decision":{"type":"Approve","decidedBy":"alice"}}}'
[ "$(runs delete_file /ledger/2025.csv)" = 0 ] || fail "the edited call ran on one approval"
out=$(KUBECONFIG=$BOB kubectl hitl approve "$REQ" -n "$NS")
expect_in "bob's approval of the edit" "approved (2/2, decidedBy bob)" "$out"
result=$(answered quorum)
expect_in "the client's result" '"text":"deleted /ledger/2025.csv"' "$result"
[ "$(runs delete_file /ledger/2025.csv)" = 1 ] && [ "$(runs delete_file /ledger/2026.csv)" = 0 ] || fail "wrong runs"
ok "bob's approval of the original did not count; alice + bob on the edit ran /ledger/2025.csv once"

# edit_refused NAME WHY: the held call NAME, whose edit alice has written, is refused by the gate
# with WHY (in the model's result and in status.message), $REQ Cancelled, and neither the
# original nor anything else ran.
edit_refused() {
  result=$(answered "$1")
  expect_in "the client's result" "the approver's edit of tool 'delete_file' (by alice, ApprovalRequest $REQ) was refused" "$result"
  expect_in "the client's result" "$2" "$result"
  wait_for "$REQ Cancelled" 20 cancelled
  expect_in "status.message" "$2" "$(jp "approvalrequest/$REQ" '{.status.message}')"
  [ "$(runs delete_file)" = "$BEFORE" ] || fail "a call ran ($(runs delete_file) delete_file calls, $BEFORE before)"
}
# refused_edit NAME PATH PATCH WHY: a held delete_file(PATH) edited by alice with PATCH (through
# kubectl hitl) is refused by the gate with WHY, as edit_refused checks.
refused_edit() {
  held "$1" "$2"
  KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" --patch "$3" >/dev/null
  edit_refused "$1" "$4"
}

step "8. an edit the tool's input schema does not accept is refused by the gate; nothing runs"
refused_edit schema /tmp/e '[{"op":"replace","path":"/path","value":5}]' \
  "at /path: the edited arguments do not match the tool's input schema: 5 is not of type"
ok "refused naming /path and the validator's reason; nothing ran; $REQ Cancelled"

step "9. a rule with edits.allowed=false: every edit refused; nothing runs"
refused_edit frozen /frozen/f "$(patch_path /frozen/g)" "rule 'frozen' forbids edits"
ok "refused naming the rule; nothing ran; $REQ Cancelled"

step "10. a rule with edits.paths: an operation outside them refused; nothing runs"
refused_edit scoped /scoped/s '[{"op":"add","path":"/extra","value":1}]' \
  "at /extra: rule 'scoped' lets approvers edit only /path"
ok "refused naming /extra and the rule; nothing ran; $REQ Cancelled"

step "11. an edit probing a redacted value is refused, by the plugin and, written past it, by the gate; nothing runs"
held secret /tmp/s '"token":"s3cret"'
[ "$(jp "approvalrequest/$REQ" '{.spec.argumentsPreview.token}')" = "[REDACTED]" ] || fail "$REQ: its token is not redacted"
probe='[{"op":"test","path":"/token","value":"s3cret"},{"op":"replace","path":"/path","value":"/tmp/s2"}]'
refused "kubectl hitl approve with the probe" "at /token: a test may not probe a redacted value" \
  env KUBECONFIG="$ALICE" kubectl hitl approve "$REQ" -n "$NS" --patch "$probe"
# The same edit written with kubectl, as a client of alice's own could: the gate judges it on
# the full arguments.
written=$(PROBE=$probe python3 -c 'import json, os
print(json.dumps({"spec": {"edit": {"patch": os.environ["PROBE"], "editedBy": "alice"},
    "editApprovals": [{"approvedBy": "alice"}], "decision": {"type": "Approve", "decidedBy": "alice"}}}))')
kubectl --kubeconfig "$ALICE" -n "$NS" patch approvalrequest "$REQ" --type merge -p "$written" >/dev/null
edit_refused secret "at /token: a test may not probe a redacted value"
ok "refused by kubectl hitl before writing, and by the gate when written with kubectl; nothing ran; $REQ Cancelled"

step "figure"
ratio=$(awk -v e="$edit_s" -v p="$plain_s" 'BEGIN { printf "%.2f", e / p }')
note "approve -> result at the client: plain ${plain_s}s, with --patch ${edit_s}s (ratio ${ratio})"
ok "edit, then approve"
