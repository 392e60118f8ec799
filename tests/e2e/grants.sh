#!/usr/bin/env bash
# Standing grants on the real control plane (docs/policies.md "Standing grants"; issue 12
# part 2): the chart's admission policy and the CRD refuse a grant by someone without the verb
# approve, a forged grantedBy, a grant by a ServiceAccount (the Agent's own), one living longer
# than grants.maxTTL, any change but revocation, and un-revoking; a grant lets covered calls
# run without a person and records each one as an ApprovalRequest decided by it; its condition
# and its maxUses hold, the latter under calls racing through two gates; revoking and deleting
# stop it at once; `kubectl hitl approve --remember session` remembers one MCP session only.
#
# Uses the cluster of $KUBECONFIG as cluster-admin, the repository's CRDs, the chart's roles
# and admission policies from tests/chart/rendered/, the controller watching one throwaway
# namespace, two gates of the Agent as local processes, and the npm recorder MCP server with
# the official SDK client. Users alice and mallory come from $HITL_E2E_USERS (default: the
# folder of $KUBECONFIG, as /work/shared/k8s/cluster-up.sh makes it), else they are
# impersonated. Environment: HITL_E2E_BIN (default target/debug/hitl-operator),
# HITL_E2E_KEEP=1. Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=janitor
throwaway hitl-e2e-grants

# grant_yaml NAME GRANTED_BY EXPIRES [EXTRA SPEC LINES]: an ApprovalGrant of delete_file.
grant_yaml() {
  cat <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalGrant
metadata: {name: $1}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: recorder, namespace: $NS}
  toolName: delete_file
  expiresAt: "$3"
  reason: e2e
  grantedBy: $2
${4:-}
YAML
}
in_minutes() { date -u -d "+$1 minutes" +%Y-%m-%dT%H:%M:%SZ; }
uses() { jp "approvalgrant/$1" '{.status.uses}'; }
awaiting() { [ "$(gate_metric "$1" hitl_gate_calls_awaiting_decision)" -ge "${2:-1}" ]; }
# granted_requests GRANT: names of the requests the grant decided.
granted_requests() { kubectl -n "$NS" get approvalrequests -l "kagent.dev/grant=$1" -o name; }
# deny_pending: alice denies every pending request, so waiting clients end.
deny_pending() {
  KUBECONFIG=$ALICE kubectl hitl deny --all --agent "$AGENT" -n "$NS" --reason "e2e: not this one" >/dev/null || true
}

step "setup: CRDs, roles and admission policies, namespace $NS, recorder, controller, Agent $AGENT"
gates_with_policies
GATES_APPROVAL="{timeout: 10m, waitTimeout: 90s}"
gates_setup
grep -q '"grant_max_ttl_seconds":86400' "$WORK/gate.json" || fail "gate.json does not carry the grant lifetime: $(cat "$WORK/gate.json")"
kubectl -n "$NS" create rolebinding approvers --clusterrole=hitl-approver --user=alice >/dev/null
# The Agent's ServiceAccount holds the approver role, so that the admission policy (not RBAC)
# is what refuses its grant; mallory may create grants but holds no approve verb.
kubectl -n "$NS" create rolebinding robots --clusterrole=hitl-approver --serviceaccount="$NS:$AGENT" >/dev/null
kubectl -n "$NS" create role grant-writer --verb=create,get,list --resource=approvalgrants.kagent.dev >/dev/null
kubectl -n "$NS" create rolebinding grant-writers --role=grant-writer --user=mallory >/dev/null

e2e_users
forged_grant_refused() {
  local out
  out=$(grant_yaml forged bob "$(in_minutes 30)" | kubectl --kubeconfig "$ALICE" -n "$NS" create --dry-run=server -f - 2>&1) && return 1
  grep -q "spec.grantedBy must be your username" <<<"$out"
}
wait_for "the admission policies to be enforced" 30 forged_grant_refused
start_gate a
start_gate b
ok "recorder :$RECORDER_PORT, controller, gates a and b; alice may approve, mallory may only create grants"

step "1. admission: only a person who may approve grants, in their own name, for at most 24h"
refused "mallory (create on approvalgrants, no approve)" "mallory may not grant: it needs the RBAC verb approve" \
  kubectl --kubeconfig "$MALLORY" -n "$NS" create -f - < <(grant_yaml m1 mallory "$(in_minutes 30)")
refused "alice granting in bob's name" "spec.grantedBy must be your username alice" \
  kubectl --kubeconfig "$ALICE" -n "$NS" create -f - < <(grant_yaml a1 bob "$(in_minutes 30)")
AGENT_USER=system:serviceaccount:$NS:$AGENT
refused "the Agent's ServiceAccount granting itself" "ServiceAccounts \(agents among them\) cannot grant" \
  kubectl --kubeconfig "$WORK/agent.kubeconfig" -n "$NS" create -f - < <(grant_yaml self "$AGENT_USER" "$(in_minutes 30)")
refused "alice for 25 hours" "at most 24h after the grant's creation" \
  kubectl --kubeconfig "$ALICE" -n "$NS" create -f - < <(grant_yaml long alice "$(in_minutes 1500)")
refused "alice without expiresAt in the future" "must lie in the future" \
  kubectl --kubeconfig "$ALICE" -n "$NS" create -f - < <(grant_yaml past alice "$(in_minutes -5)")
grant_yaml g-edit alice "$(in_minutes 30)" | kubectl --kubeconfig "$ALICE" -n "$NS" create -f - >/dev/null
refused "alice widening her grant to write_file" "a grant is immutable: only spec.revoked can be set" \
  kubectl --kubeconfig "$ALICE" -n "$NS" patch approvalgrant g-edit --type merge -p '{"spec":{"toolName":"write_file"}}'
KUBECONFIG=$ALICE kubectl hitl grants revoke g-edit -n "$NS" >/dev/null
refused "alice un-revoking" "a revoked grant stays revoked" \
  kubectl --kubeconfig "$ALICE" -n "$NS" patch approvalgrant g-edit --type merge -p '{"spec":{"revoked":false}}'
kubectl -n "$NS" patch approvalgrant g-edit --subresource status --type merge -p '{"status":{"uses":1}}' >/dev/null
refused "the agent's identity resetting uses (as its gate may write grant status)" "status.uses never decreases" \
  kube_curl "$WORK/agent.kubeconfig" PATCH "/apis/kagent.dev/v1alpha2/namespaces/$NS/approvalgrants/g-edit/status" \
  -H "Content-Type: application/merge-patch+json" -d '{"status":{"uses":0}}'
ok "all refused"

step "2. a grant with a condition and two uses: /tmp runs without asking, /etc asks a person"
grant_yaml tmp-only alice "$(in_minutes 30)" "  maxUses: 2
  when: \"args.path.startsWith('/tmp/')\"" | kubectl --kubeconfig "$ALICE" -n "$NS" create -f - >/dev/null
t0=$(now)
gate_call tmp1 a delete_file /tmp/1
out=$(finished tmp1)
took=$(elapsed "$t0")
expect_in "the granted call" '"text":"deleted /tmp/1"' "$out"
[ "$(runs delete_file /tmp/1)" = 1 ] || fail "/tmp/1 ran $(runs delete_file /tmp/1) times"
[ "$(uses tmp-only)" = 1 ] || fail "tmp-only uses $(uses tmp-only), want 1"
REQ=$(granted_requests tmp-only)
[ "$(wc -l <<<"$REQ")" = 1 ] || fail "want one request decided by tmp-only: $REQ"
executed() { [ "$(kubectl -n "$NS" get "$REQ" -o 'jsonpath={.status.phase}')" = Executed ]; }
wait_for "$REQ Executed" 10 executed
[ "$(kubectl -n "$NS" get "$REQ" -o 'jsonpath={.spec.grant.grantedBy}')" = alice ] || fail "$REQ does not name alice"
[ -z "$(kubectl -n "$NS" get "$REQ" -o 'jsonpath={.spec.decision}')" ] || fail "$REQ carries a decision"
describe=$(KUBECONFIG=$ALICE kubectl hitl get "${REQ#*/}" -n "$NS")
expect_in "kubectl hitl get" "Approve by approvalgrant/tmp-only, granted by alice (e2e)" "$describe"
note "client's call through the grant: ${took}s (SDK client start included); $REQ Executed"
gate_call etc a delete_file /etc/passwd
wait_for "gate a to hold delete_file(/etc/passwd)" 20 awaiting a
[ "$(uses tmp-only)" = 1 ] || fail "a call the condition excludes used the grant"
the_request ETC /etc/passwd
deny_pending
expect_in "the /etc call" "denied" "$(finished etc)"
[ "$(runs delete_file /etc/passwd)" = 0 ] || fail "/etc/passwd ran"
ok "/tmp/1 ran on the grant (uses 1/2, $REQ Executed, decided by the grant); /etc/passwd asked a person ($ETC)"

step "3. maxUses under a race: five calls at once through two gates, a grant with two uses"
grant_yaml two-uses alice "$(in_minutes 30)" "  maxUses: 2" | kubectl --kubeconfig "$ALICE" -n "$NS" create -f - >/dev/null
for i in 1 2 3 4 5; do
  gate=a; [ $((i % 2)) = 0 ] && gate=b
  gate_call "race$i" "$gate" delete_file "/race/$i"
done
held() { [ $(($(gate_metric a hitl_gate_calls_awaiting_decision) + $(gate_metric b hitl_gate_calls_awaiting_decision))) -ge 3 ]; }
wait_for "three calls held for a person" 30 held
[ "$(uses two-uses)" = 2 ] || fail "two-uses used $(uses two-uses) times, want 2"
ran=0
for i in 1 2 3 4 5; do ran=$((ran + $(runs delete_file "/race/$i"))); done
[ "$ran" = 2 ] || fail "$ran racing calls ran on a two-use grant, want 2"
[ "$(granted_requests two-uses | wc -l)" = 2 ] || fail "want two requests decided by two-uses"
deny_pending
for i in 1 2 3 4 5; do finished "race$i" >/dev/null; done
ran=0
for i in 1 2 3 4 5; do ran=$((ran + $(runs delete_file "/race/$i"))); done
[ "$ran" = 2 ] || fail "after the denials $ran racing calls ran, want 2"
conflicts=$(($(gate_metric a hitl_gate_grant_use_conflicts_total) + $(gate_metric b hitl_gate_grant_use_conflicts_total)))
note "grant uses that met a 409 Conflict and were judged again: $conflicts"
ok "exactly 2 of 5 ran on the grant; 3 asked a person and were denied"

step "4. revoking and deleting stop a grant at once"
grant_yaml open alice "$(in_minutes 30)" | kubectl --kubeconfig "$ALICE" -n "$NS" create -f - >/dev/null
gate_call open1 b delete_file /open/1
expect_in "a call on the open grant" '"text":"deleted /open/1"' "$(finished open1)"
out=$(KUBECONFIG=$ALICE kubectl hitl grants revoke open -n "$NS")
expect_in "kubectl hitl grants revoke" "approvalgrant/open revoked" "$out"
gate_call open2 b delete_file /open/2
wait_for "gate b to hold delete_file(/open/2) after the revocation" 20 awaiting b
deny_pending
finished open2 >/dev/null
grant_yaml open-again alice "$(in_minutes 30)" | kubectl --kubeconfig "$ALICE" -n "$NS" create -f - >/dev/null
kubectl --kubeconfig "$ALICE" -n "$NS" delete approvalgrant open-again >/dev/null
gate_call open3 a delete_file /open/3
wait_for "gate a to hold delete_file(/open/3) after the deletion" 20 awaiting a
deny_pending
finished open3 >/dev/null
[ "$(runs delete_file /open/2)$(runs delete_file /open/3)" = 00 ] || fail "a call ran on a revoked or deleted grant"
ok "after revoke and delete the next call asks a person"

step "5. kubectl hitl approve --remember session: the rest of that MCP session runs, another session asks"
start session "$WORK/session.out" timeout 150 node "$PEERS/client.mjs" "${GATE_URL[a]}" streamable \
  '[{"op":"call","name":"delete_file","args":{"path":"/s/1"}},{"op":"call","name":"delete_file","args":{"path":"/s/2"}}]'
wait_for "gate a to hold delete_file(/s/1)" 20 awaiting a
the_request REQ /s/1
out=$(KUBECONFIG=$ALICE kubectl hitl approve "$REQ" -n "$NS" --remember session,10m --reason "this conversation only")
expect_in "approve --remember" "approvalrequest/$REQ approved (decidedBy alice)" "$out"
expect_in "approve --remember" "in session" "$out"
note "$(tail -1 <<<"$out" | cut -c1-200)"
out=$(finished session)
expect_in "the first call" '"text":"deleted /s/1"' "$out"
expect_in "the second call, same session" '"text":"deleted /s/2"' "$out"
gate_call other a delete_file /s/3
wait_for "gate a to hold delete_file(/s/3) from another session" 20 awaiting a
deny_pending
finished other >/dev/null
[ "$(runs delete_file /s/3)" = 0 ] || fail "another session's call ran on a session grant"
grants_before=$(kubectl -n "$NS" get approvalgrants -o name | wc -l)
refused "remembering /s/1 a second time" "was already approved by alice" \
  env KUBECONFIG="$ALICE" kubectl hitl approve "$REQ" -n "$NS" --remember session
[ "$(kubectl -n "$NS" get approvalgrants -o name | wc -l)" = "$grants_before" ] || fail "a refused approval created a grant"
list=$(KUBECONFIG=$ALICE kubectl hitl grants -n "$NS")
note "$(head -1 <<<"$list")"
grep -E "^$AGENT-delete-file-" <<<"$list" | grep -q "Active" || fail "kubectl hitl grants lacks the session grant: $list"
grep -E "^two-uses " <<<"$list" | grep -q "2/2 .*UsedUp" || fail "kubectl hitl grants does not show two-uses used up: $list"
grep -E "^open " <<<"$list" | grep -q "Revoked" || fail "kubectl hitl grants does not show open revoked: $list"
ok "/s/1 approved by alice, /s/2 ran on the remembered session, /s/3 from another session asked; grants listed"
