#!/usr/bin/env bash
# End-to-end check of `hitl-operator controller` against the cluster in KUBECONFIG, with plain
# kubectl: CRDs, rendered objects, admission of a bad Agent, ApprovalRequests approved / denied /
# expired, write-once decisions, rollout on a config change, and garbage collection.
# Installs only the CRDs (their CEL rules apply; the chart's admission policies are exercised by
# tests/e2e/plugin.sh), and acts as the kubeconfig user: it creates the ApprovalRequests as the
# requester and decides them. Prints SKIP and exits 0 when no cluster is reachable.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "SKIP: no Kubernetes cluster reachable (KUBECONFIG=${KUBECONFIG:-~/.kube/config})"
  exit 0
fi

NS="hitl-e2e-controller-$$"
METRICS_ADDR="127.0.0.1:${E2E_METRICS_PORT:-18080}"
LOG="$(mktemp -t hitl-controller.XXXXXX.log)"
AGENT=file-agent
ME="$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}' 2>/dev/null || echo e2e-user)"

step() { printf '\n== %s\n' "$*"; }
fail() {
  echo "FAIL: $*"
  echo "--- controller log (last 50 lines):"
  tail -n 50 "$LOG" || true
  exit 1
}
# wait_for DESCRIPTION SECONDS COMMAND...: retries COMMAND once a second.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  for _ in $(seq "$seconds"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  fail "timed out waiting for $what"
}
jsonpath() { kubectl -n "$NS" get "$1" -o "jsonpath=$2"; }
has_value() { [ "$(jsonpath "$1" "$2")" = "$3" ]; }
phase_is() { has_value "approvalrequest/$1" '{.status.phase}' "$2"; }

cleanup() {
  if [ -n "${CONTROLLER_PID:-}" ]; then kill "$CONTROLLER_PID" 2>/dev/null || true; fi
  kubectl delete namespace "$NS" --wait=false --ignore-not-found >/dev/null 2>&1 || true
}
trap cleanup EXIT

step "build and install the CRDs"
cargo build -q --bin hitl-operator
BIN=target/debug/hitl-operator
"$BIN" crds | kubectl apply -f -
kubectl wait --for=condition=Established --timeout=60s \
  crd/agents.kagent.dev crd/approvalrequests.kagent.dev \
  crd/modelconfigs.kagent.dev crd/remotemcpservers.kagent.dev
kubectl create namespace "$NS"

step "start the controller (namespace $NS, log $LOG)"
"$BIN" controller --namespace "$NS" --leader-election=false \
  --metrics-addr "$METRICS_ADDR" --log-format json >"$LOG" 2>&1 &
CONTROLLER_PID=$!
wait_for "/readyz" 60 curl -fsS "http://$METRICS_ADDR/readyz"
curl -fsS "http://$METRICS_ADDR/healthz" >/dev/null || fail "/healthz"

step "apply examples/"
kubectl apply -n "$NS" -f examples/
wait_for "Agent $AGENT Accepted" 60 \
  has_value "agent/$AGENT" '{.status.conditions[?(@.type=="Accepted")].status}' True
kubectl -n "$NS" get agents,remotemcpservers,modelconfigs

step "rendered objects exist and are owned by the Agent"
for object in secret/$AGENT serviceaccount/$AGENT deployment/$AGENT service/$AGENT \
  role/$AGENT-approval-gate rolebinding/$AGENT-approval-gate; do
  owner="$(jsonpath "$object" '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')"
  [ "$owner" = "Agent/$AGENT" ] || fail "$object owner is '$owner'"
  echo "ok: $object"
done
wait_for "ModelConfig Accepted" 30 \
  has_value modelconfig/default-model-config '{.status.conditions[?(@.type=="Accepted")].status}' True
[ -n "$(jsonpath modelconfig/default-model-config '{.status.secretHash}')" ] || fail "no secretHash"

step "admission rejects requireApproval entries missing from toolNames"
if out="$(kubectl apply -n "$NS" -f examples/invalid/require-approval-not-in-tool-names.yaml 2>&1)"; then
  fail "the invalid Agent was accepted"
fi
echo "$out"
grep -q "each requireApproval entry must also appear in toolNames" <<<"$out" || fail "wrong rejection"

step "ApprovalRequests: approve, deny, expire"
create_request() { # NAME SECONDS-UNTIL-EXPIRY
  local expires
  expires="$(date -u -d "+$2 seconds" +%Y-%m-%dT%H:%M:%SZ)"
  kubectl apply -n "$NS" -f - <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata:
  name: $1
  labels: {kagent.dev/agent: $AGENT, kagent.dev/tool: delete_file}
spec:
  agentRef: {name: $AGENT}
  toolServer: {kind: RemoteMCPServer, name: filesystem-server, namespace: $NS}
  toolName: delete_file
  argumentsPreview: {path: /data/report.csv}
  argumentsSha256: "$(printf '%s' "$1" | sha256sum | cut -c1-64)"
  argumentsBytes: 28
  requestedBy: "$ME"
  message: "Run 'delete_file' with arguments {\"path\":\"/data/report.csv\"}?"
  expiresAt: "$expires"
EOF
}
decide() { # NAME Approve|Deny
  kubectl patch -n "$NS" approvalrequest "$1" --type merge \
    -p "{\"spec\":{\"decision\":{\"type\":\"$2\",\"reason\":\"e2e\",\"decidedBy\":\"$ME\"}}}"
}
create_request approve-me 600
create_request deny-me 600
create_request let-me-expire 30
wait_for "approve-me Pending" 30 phase_is approve-me Pending
wait_for "pendingApprovals=3" 30 has_value "agent/$AGENT" '{.status.pendingApprovals}' 3
has_value approvalrequest/approve-me '{.metadata.ownerReferences[0].name}' "$AGENT" || fail "not adopted"

decide approve-me Approve
decide deny-me Deny
wait_for "approve-me Approved" 30 phase_is approve-me Approved
wait_for "deny-me Denied" 30 phase_is deny-me Denied
wait_for "let-me-expire Expired" 60 phase_is let-me-expire Expired
kubectl -n "$NS" get approvalrequests

step "a decision cannot be changed, and a late one revives nothing"
if out="$(decide approve-me Deny 2>&1)"; then fail "decision was changed"; fi
echo "$out"
grep -q "write-once" <<<"$out" || fail "wrong rejection: $out"
decide let-me-expire Approve || true
sleep 3
phase_is let-me-expire Expired || fail "late approval revived an expired request"
wait_for "pendingApprovals=0" 30 has_value "agent/$AGENT" '{.status.pendingApprovals}' 0
kubectl -n "$NS" get events --field-selector involvedObject.kind=Agent -o wide | tail -n 10 || true

step "a config change rolls the pods"
before="$(jsonpath deployment/$AGENT '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')"
kubectl patch -n "$NS" agent "$AGENT" --type merge \
  -p '{"spec":{"declarative":{"systemMessage":"You help users manage the files under /srv."}}}'
changed() {
  local now
  now="$(jsonpath deployment/$AGENT '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')"
  [ -n "$now" ] && [ "$now" != "$before" ]
}
wait_for "config-hash annotation to change" 30 changed
hash_in_status() {
  has_value "agent/$AGENT" '{.status.configHash}' \
    "$(jsonpath deployment/$AGENT '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')"
}
wait_for "status.configHash to match the pod template" 30 hash_in_status
echo "config-hash $before -> $(jsonpath deployment/$AGENT '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')"

step "drift is put back"
kubectl scale -n "$NS" deployment/$AGENT --replicas=3
wait_for "replicas back to 1" 30 has_value deployment/$AGENT '{.spec.replicas}' 1

step "metrics"
metrics="$(curl -fsS "http://$METRICS_ADDR/metrics")"
for name in hitl_reconcile_total hitl_approvals_pending hitl_decisions_total hitl_decision_latency_seconds; do
  grep -q "^$name" <<<"$metrics" || fail "metric $name missing"
done

step "deleting the Agent garbage-collects its objects"
kubectl delete -n "$NS" agent "$AGENT"
for object in deployment/$AGENT service/$AGENT secret/$AGENT; do
  wait_for "$object deleted" 60 bash -c "! kubectl -n '$NS' get $object"
done

echo
echo "PASS: controller e2e"
