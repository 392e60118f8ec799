#!/usr/bin/env bash
# Tool risk on the real control plane (docs/policies.md "Tool annotations"; issue 60 part 3):
# the recorder MCP server (the TypeScript SDK's McpServer) lists delete_file with
# `destructiveHint: true, openWorldHint: false, title "Delete a file"`; its RemoteMCPServer is
# not trusted. A call listed and made through a gate of the Agent asks, and its ApprovalRequest
# carries the hints, `trusted: false` and the definition digest; `kubectl hitl list/get` show
# them. Then every way cluster-admin can remove, null or replace spec.toolAnnotations or a part
# of it (merge and JSON patches, PUT, server-side apply) is refused by the CRD, with the
# admission policies installed and without; the call is denied and never runs.
#
# Uses the cluster of $KUBECONFIG as cluster-admin, the repository's CRDs, the chart's roles
# and admission policies from tests/chart/rendered/, the controller watching one throwaway
# namespace, one gate of the Agent as a local process, and the npm recorder MCP server.
# Environment: HITL_E2E_BIN (default target/debug/hitl-operator), HITL_E2E_KEEP=1. Prints
# SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=cleaner
throwaway hitl-e2e-tool-risk
awaiting() { [ "$(gate_metric a hitl_gate_calls_awaiting_decision)" = 1 ]; }

step "setup: CRDs, roles and admission policies, namespace $NS, recorder, controller, Agent $AGENT"
gates_with_policies
GATES_TOOLS="[read_file, delete_file]"
gates_setup
grep -q '"trust_tool_annotations"' "$WORK/gate.json" && fail "an untrusted server's gate.json says it is trusted"
start_gate a
ok "recorder :$RECORDER_PORT, controller, gate a (RemoteMCPServer recorder not trusted)"

step "1. listed, then called: the request carries the server's hints, untrusted"
start call "$WORK/call.out" timeout 150 node "$PEERS/client.mjs" "${GATE_URL[a]}" streamable \
  '[{"op":"list"},{"op":"call","name":"delete_file","args":{"path":"/var/data/old"}}]'
wait_for "the gate to hold delete_file(/var/data/old)" 20 awaiting
the_request REQ /var/data/old
[ "$(jp "approvalrequest/$REQ" '{.spec.toolAnnotations.destructiveHint}')" = true ] || fail "$REQ: no destructiveHint"
[ "$(jp "approvalrequest/$REQ" '{.spec.toolAnnotations.openWorldHint}')" = false ] || fail "$REQ: no openWorldHint false"
[ "$(jp "approvalrequest/$REQ" '{.spec.toolAnnotations.trusted}')" = false ] || fail "$REQ: trusted is not false"
[ "$(jp "approvalrequest/$REQ" '{.spec.toolAnnotations.title}')" = "Delete a file" ] || fail "$REQ: no title"
DIGEST=$(jp "approvalrequest/$REQ" '{.spec.toolAnnotations.definitionSha256}')
[[ "$DIGEST" =~ ^[0-9a-f]{64}$ ]] || fail "$REQ: definitionSha256 '$DIGEST'"
row=$(kubectl hitl list -n "$NS" | grep "^$REQ ")
expect_in "kubectl hitl list" "delete_file [destructive]" "$row"
describe=$(kubectl hitl get "$REQ" -n "$NS")
expect_in "kubectl hitl get" "Risk:         destructive (asserted by an untrusted server; title \"Delete a file\"; definition sha256 $DIGEST)" "$describe"
ok "$REQ: destructive, not open-world, untrusted, digest ${DIGEST:0:16}...; list and get show it"

ANNOTATIONS=$(kubectl -n "$NS" get "approvalrequest/$REQ" -o 'jsonpath={.spec.toolAnnotations}')
# attacks LABEL: every way to take spec.toolAnnotations away or change it, as cluster-admin.
attacks() {
  local label=$1 path value
  refused "$label: merge patch null" "spec is immutable" \
    kubectl -n "$NS" patch approvalrequest "$REQ" --type merge -p '{"spec":{"toolAnnotations":null}}'
  refused "$label: JSON patch remove" "spec is immutable" \
    kubectl -n "$NS" patch approvalrequest "$REQ" --type json -p '[{"op":"remove","path":"/spec/toolAnnotations"}]'
  refused "$label: trusted made true" "spec is immutable" \
    kubectl -n "$NS" patch approvalrequest "$REQ" --type json -p '[{"op":"replace","path":"/spec/toolAnnotations/trusted","value":true}]'
  # (definitionSha256 is required: the schema refuses its removal before the CEL rules run.)
  for path in destructiveHint openWorldHint title definitionSha256; do
    refused "$label: $path removed" "spec is immutable|definitionSha256: Required value" \
      kubectl -n "$NS" patch approvalrequest "$REQ" --type json -p "[{\"op\":\"remove\",\"path\":\"/spec/toolAnnotations/$path\"}]"
  done
  refused "$label: destructiveHint false" "spec is immutable" \
    kubectl -n "$NS" patch approvalrequest "$REQ" --type json -p '[{"op":"replace","path":"/spec/toolAnnotations/destructiveHint","value":false}]'
  refused "$label: readOnlyHint added" "spec is immutable" \
    kubectl -n "$NS" patch approvalrequest "$REQ" --type json -p '[{"op":"add","path":"/spec/toolAnnotations/readOnlyHint","value":true}]'
  refused "$label: another digest" "spec is immutable" \
    kubectl -n "$NS" patch approvalrequest "$REQ" --type json -p "[{\"op\":\"replace\",\"path\":\"/spec/toolAnnotations/definitionSha256\",\"value\":\"$(printf '%064d' 0)\"}]"
  # PUT of the whole object without the field.
  kubectl -n "$NS" get "approvalrequest/$REQ" -o json | python3 -c '
import json, sys
o = json.load(sys.stdin); del o["spec"]["toolAnnotations"]; json.dump(o, sys.stdout)' >"$WORK/put.json"
  refused "$label: PUT without it" "spec is immutable" kubectl -n "$NS" replace -f "$WORK/put.json"
  # Server-side apply by a new field manager, forcing the annotations to a read-only tool's.
  refused "$label: server-side apply" "spec is immutable" sh -c "kubectl -n '$NS' apply --server-side --force-conflicts --field-manager=e2e-rewinder -f - <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: $REQ}
spec:
  toolAnnotations: {readOnlyHint: true, destructiveHint: false, trusted: true, definitionSha256: \"$DIGEST\"}
YAML"
  [ "$(kubectl -n "$NS" get "approvalrequest/$REQ" -o 'jsonpath={.spec.toolAnnotations}')" = "$ANNOTATIONS" ] ||
    fail "$label: spec.toolAnnotations changed"
}

step "2. with the admission policies: every removal, null and replacement refused"
attacks "with policies"
ok "all refused; spec.toolAnnotations unchanged"

step "3. without the admission policies: the CRD alone refuses them"
kubectl delete -f tests/chart/rendered/admission-policy.default.yaml --ignore-not-found >/dev/null
policies_gone() {
  ! kubectl get validatingadmissionpolicy hitl-hitl-operator-approval-decision >/dev/null 2>&1
}
wait_for "the admission policies gone" 20 policies_gone
attacks "without policies"
kubectl apply -f tests/chart/rendered/admission-policy.default.yaml >/dev/null
ok "all refused; spec.toolAnnotations unchanged"

step "4. denied: the call never runs"
kubectl -n "$NS" patch approvalrequest "$REQ" --type merge \
  -p "{\"spec\":{\"decision\":{\"type\":\"Deny\",\"decidedBy\":\"$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')\",\"reason\":\"too risky\"}}}" >/dev/null
pid=${E2E_PIDS[call]}
deadline=$((SECONDS + 30))
while alive "$pid"; do [ "$SECONDS" -lt "$deadline" ] || fail "the client still waits 30 s after the denial"; sleep 0.05; done
unset "E2E_PIDS[call]"
wait "$pid" || true
[ "$(runs delete_file /var/data/old)" = 0 ] || fail "delete_file ran"
ok "denied; delete_file never ran"
