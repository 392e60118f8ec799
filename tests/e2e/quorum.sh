#!/usr/bin/env bash
# Quorum on the real control plane (docs/policies.md "Quorum"; issue 12 part 3): an Agent whose
# approval rule asks for two approvals. alice approves (1/2): the request stays Pending and the
# call waits; alice again, mallory, the Agent's ServiceAccount, a forged entry for someone else
# and an Approve decision without the quorum are all refused; bob completes it (2/2) and the
# call runs once.
#
# Uses the cluster of $KUBECONFIG as cluster-admin (who may impersonate bob), the repository's
# CRDs, the chart's hitl-approver role and admission policies from tests/chart/rendered/ (as
# tests/e2e/plugin.sh does), the controller watching one throwaway namespace, one gate of the
# Agent as a local process, and the npm recorder MCP server. Users alice and mallory come from
# $HITL_E2E_USERS (default: the folder of $KUBECONFIG, as /work/shared/k8s/cluster-up.sh makes
# it), else they are impersonated like bob. Environment: HITL_E2E_BIN (default
# target/debug/hitl-operator), HITL_E2E_KEEP=1. Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=payments
throwaway hitl-e2e-quorum

runs() {
  curl -fsS "http://127.0.0.1:$RECORDER_PORT/calls" | python3 -c '
import json, sys
print(sum(1 for c in json.load(sys.stdin) if c["tool"] == "delete_file" and c["args"].get("path") == sys.argv[1]))' "$1"
}
awaiting() { [ "$(gate_metric a hitl_gate_calls_awaiting_decision)" = 1 ]; }

step "setup: CRDs, roles and admission policies, namespace $NS, recorder, controller, Agent $AGENT (two approvals)"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
gates_with_policies
# The controller as the chart's ServiceAccount (the status policy lets it write statuses), with
# an admin's rights.
GATES_APPROVAL="{timeout: 10m, waitTimeout: 120s, rules: [{name: two-person, tool: delete_file, action: RequireApproval, requiredApprovals: 2}]}"
gates_setup
grep -q '"required_approvals":2' "$WORK/gate.json" || fail "gate.json does not carry the rule's two approvals: $(cat "$WORK/gate.json")"
kubectl -n "$NS" create rolebinding approvers --clusterrole=hitl-approver --user=alice --user=bob >/dev/null
# ServiceAccounts with the approver role, the Agent's own among them, so that the admission
# policy (not RBAC) is what refuses them.
kubectl -n "$NS" create rolebinding robots --clusterrole=hitl-approver \
  --serviceaccount="$NS:$AGENT" --serviceaccount="$NS:ci-bot" >/dev/null

e2e_users
BOB=$WORK/bob.kubeconfig
kubeconfig_as "$BOB" bob approvers
[ "$(kubectl --kubeconfig "$BOB" auth whoami -o jsonpath='{.status.userInfo.username}')" = bob ] ||
  fail "$BOB does not authenticate as bob"
# The policies take a moment to be enforced after they are created.
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
start_gate a
ok "recorder :$RECORDER_PORT, controller, gate a; alice and bob may approve; mallory may not"

step "1. a gated call asks for two approvals and waits"
start call "$WORK/call.out" timeout 150 node "$PEERS/client.mjs" "${GATE_URL[a]}" streamable \
  '[{"op":"call","name":"delete_file","args":{"path":"/ledger/2026.csv"}}]'
wait_for "the gate to hold delete_file(/ledger/2026.csv)" 20 awaiting
the_request REQ /ledger/2026.csv
[ "$(jp "approvalrequest/$REQ" '{.spec.requiredApprovals}')" = 2 ] || fail "$REQ does not ask for two approvals"
[ "$(jp "approvalrequest/$REQ" '{.spec.rule}')" = two-person ] || fail "$REQ does not name the rule"
ok "ApprovalRequest $REQ: requiredApprovals 2, rule two-person"

step "2. alice approves: 1/2, still Pending, nothing runs"
out=$(KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" --reason "amount checked")
expect_in "alice's approval" "approvalrequest/$REQ approved (1/2) by alice: 1 more approval needed" "$out"
note "$out"
status_says_one_of_two() { jp "approvalrequest/$REQ" '{.status.message}' | grep -q "^1 of 2 approvals (alice)"; }
wait_for "the controller's status '1 of 2 approvals (alice)'" 20 status_says_one_of_two
[ "$(jp "approvalrequest/$REQ" '{.status.phase}')" = Pending ] || fail "$REQ is not Pending after one approval"
row=$(KUBECONFIG=$ALICE kubectl hitl list -n "$NS" | grep "^$REQ ")
expect_in "kubectl hitl list" " Pending   1/2 " "$row"
[ -z "$(jp "approvalrequest/$REQ" '{.spec.decision}')" ] || fail "$REQ got a decision after one approval"
[ "$(runs /ledger/2026.csv)" = 0 ] || fail "the call ran after one approval"
awaiting || fail "the gate stopped waiting after one approval"
ok "Pending, status '$(jp "approvalrequest/$REQ" '{.status.message}' | cut -c1-60)...', list shows 1/2, the call still waits"

step "3. refused: alice again, mallory, the Agent's ServiceAccount, a forged entry, an Approve without the quorum"
refused "alice a second time" "alice already approved approvalrequest/$REQ \(1/2\)" \
  env KUBECONFIG="$ALICE" kubectl hitl approve "$REQ" -n "$NS"
refused mallory "forbidden|Forbidden" env KUBECONFIG="$MALLORY" kubectl hitl approve "$REQ" -n "$NS"
AGENT_USER=system:serviceaccount:$NS:$AGENT
refused "the Agent's ServiceAccount with the approver role (the requester)" \
  "the identity that requested a tool call cannot approve it" kubectl --kubeconfig "$WORK/agent.kubeconfig" -n "$NS" \
  patch approvalrequest "$REQ" --type json \
  -p "[{\"op\":\"add\",\"path\":\"/spec/approvals/-\",\"value\":{\"approvedBy\":\"$AGENT_USER\"}}]"
BOT=system:serviceaccount:$NS:ci-bot
refused "another ServiceAccount with the approver role" "ServiceAccounts cannot approve ApprovalRequests" \
  kubectl --as "$BOT" -n "$NS" patch approvalrequest "$REQ" --type json \
  -p "[{\"op\":\"add\",\"path\":\"/spec/approvals/-\",\"value\":{\"approvedBy\":\"$BOT\"}}]"
refused "alice adding bob's approval" "approvedBy your username alice" kubectl --kubeconfig "$ALICE" -n "$NS" \
  patch approvalrequest "$REQ" --type json -p '[{"op":"add","path":"/spec/approvals/-","value":{"approvedBy":"bob"}}]'
refused "alice approving without the quorum (kubectl patch)" "needs that many entries in spec.approvals" \
  kubectl --kubeconfig "$ALICE" -n "$NS" patch approvalrequest "$REQ" --type merge \
  -p '{"spec":{"decision":{"type":"Approve","decidedBy":"alice"}}}'
refused "bob removing alice's approval" "append-only" kubectl --kubeconfig "$BOB" -n "$NS" \
  patch approvalrequest "$REQ" --type merge -p '{"spec":{"approvals":[{"approvedBy":"bob"}]}}'
[ "$(jp "approvalrequest/$REQ" '{.spec.approvals[*].approvedBy}')" = alice ] || fail "the approvals changed"
[ "$(runs /ledger/2026.csv)" = 0 ] || fail "the call ran"
ok "all refused; the approvals are still [alice]; nothing ran"

step "4. bob approves: 2/2, the call runs once"
out=$(KUBECONFIG=$BOB kubectl hitl approve "$REQ" -n "$NS" --reason "second pair of eyes")
expect_in "bob's approval" "approvalrequest/$REQ approved (2/2, decidedBy bob): the call may run" "$out"
note "$out"
pid=${E2E_PIDS[call]}
deadline=$((SECONDS + 30))
while alive "$pid"; do [ "$SECONDS" -lt "$deadline" ] || fail "the client still waits 30 s after the quorum"; sleep 0.05; done
unset "E2E_PIDS[call]"
wait "$pid" || true
result=$(cat "$WORK/call.out")
expect_in "the client's result" '"text":"deleted /ledger/2026.csv"' "$result"
[ "$(runs /ledger/2026.csv)" = 1 ] || fail "delete_file ran $(runs /ledger/2026.csv) times, want 1"
executed() { [ "$(jp "approvalrequest/$REQ" '{.status.phase}')" = Executed ]; }
wait_for "$REQ Executed" 20 executed
describe=$(KUBECONFIG=$ALICE kubectl hitl get "$REQ" -n "$NS")
expect_in "kubectl hitl get" "Approvals:    2/2 (needs 2 distinct approvers)" "$describe"
expect_in "kubectl hitl get" "  bob at " "$describe"
ADMIN=$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')
refused "a third approval after the decision ($ADMIN)" "spec.approvals cannot change once spec.decision is set" \
  kubectl -n "$NS" patch approvalrequest "$REQ" --type json \
  -p "[{\"op\":\"add\",\"path\":\"/spec/approvals/-\",\"value\":{\"approvedBy\":\"$ADMIN\"}}]"
ok "the call ran once; $REQ Executed, approved by alice and bob (decidedBy bob)"
