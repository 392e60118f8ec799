#!/usr/bin/env bash
# An Agent whose pods can reach the node, on a real control plane (issue 59): the controller as
# the chart runs it refuses it next to a gate, naming the field; with the chart's
# allowAgentNodeAccess it renders it and says GateIsolated=False naming the field.
# docs/e2e.md explains each step.
#
#  1. install: the chart's CRDs, RBAC and admission policies; the controller as the chart runs
#     it with the default values (allowAgentNodeAccess: false)
#  2. examples/invalid/node-access.yaml (a privileged agent container mounting the node's
#     /var/lib/kubelet as a hostPath volume) and the same Agent without those two fields:
#     the first is Accepted=False, InvalidSpec naming both fields, and nothing of it is
#     deployed; the second is Accepted=True, GateIsolated=True (CredentialsOnlyInGate)
#  3. the controller restarted from the chart rendered with allowAgentNodeAccess: true: the
#     first is Accepted=True, GateIsolated=False (AgentReachesNode) naming both fields, and its
#     Deployment carries them
#
# The Agents run 0 replicas: no privileged pod with the node's folder is ever started on the
# shared node; what is checked is what the apiserver accepts and the controller reports.
#
# Needs: cargo build --bins and the chart venv (make chart-venv; run.sh sees to them).
# HITL_E2E_KEEP=1 keeps the namespace. Installs release "hitl" in hitl-system: use a
# throwaway cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error

skip_without_cluster

BIN=${HITL_E2E_BIN:-$PWD/target/debug/hitl-operator}
VENV_PY=$PWD/.venv/bin/python
RELEASE=hitl
SYS_NS=hitl-system
throwaway hitl-e2e-node-access

[ -x "$BIN" ] || fail "$BIN missing: cargo build --bins"
"$VENV_PY" -c 'import helm_python' 2>/dev/null || fail "no helm_python in .venv: make chart-venv"

cleanup() {
  local rc=$?
  trap - ERR
  stop_all
  if [ "${HITL_E2E_KEEP:-0}" = 1 ]; then
    echo "kept: namespace $NS, work folder $WORK"
    return "$rc"
  fi
  kubectl delete namespace "$NS" --wait=false --ignore-not-found >/dev/null 2>&1 || true
  if [ -s "$WORK/chart/manifests.yaml" ]; then
    kubectl delete -n "$SYS_NS" -f "$WORK/chart/manifests.yaml" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    [ -z "${LEASE:-}" ] || kubectl -n "$SYS_NS" delete lease "$LEASE" --ignore-not-found >/dev/null 2>&1 || true
  fi
  [ -z "${TOKEN_REVIEW_BINDING:-}" ] || kubectl delete clusterrolebinding "$TOKEN_REVIEW_BINDING" --ignore-not-found >/dev/null 2>&1 || true
  [ "${CREATED_SYS_NS:-0}" = 1 ] && kubectl delete namespace "$SYS_NS" --wait=false >/dev/null 2>&1
  if [ "$rc" = 0 ]; then rm -rf "$WORK"; else echo "logs kept in $WORK"; fi
  return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

AGENT_KIND=agents.v1alpha2.kagent.dev
REACHING=node-reader
CLEAN=node-free
# condition AGENT TYPE FIELD: a field of one of the Agent's conditions.
condition() { kubectl -n "$NS" get "$AGENT_KIND/$1" -o "jsonpath={.status.conditions[?(@.type==\"$2\")].$3}" 2>/dev/null; }
condition_is() { [ "$(condition "$1" "$2" "$3")" = "$4" ]; }
# The example, run with 0 replicas; named $2 and without the node fields when $1 is "clean".
example() {
  "$VENV_PY" - "$1" "$2" <<'PY'
import sys, yaml
docs = list(yaml.safe_load_all(open("examples/invalid/node-access.yaml")))
for doc in docs:
    if doc["kind"] == "Agent":
        doc["metadata"]["name"] = sys.argv[2]
        deployment = doc["spec"]["declarative"]["deployment"]
        deployment["replicas"] = 0
        if sys.argv[1] == "clean":
            del deployment["securityContext"], deployment["volumes"], deployment["volumeMounts"]
print(yaml.safe_dump_all(docs, sort_keys=False))
PY
}
# run_controller: the chart's controller container as rendered by chart_controller, until the
# next stop_all; waits for its /readyz.
run_controller() {
  kubeconfig_with_token "$WORK/controller.kubeconfig" \
    "$(kubectl -n "$SYS_NS" create token "$CONTROLLER_SA" --duration=1h)" "$SYS_NS"
  METRICS_PORT=$(free_port)
  start_chart_controller controller "$WORK/controller-$1.log" "$RELEASE-hitl-operator-e2e" "$METRICS_PORT" \
    "$WORK/controller.kubeconfig"
  wait_for "the controller's /readyz" 60 http_ok "http://127.0.0.1:$METRICS_PORT/readyz"
}
FIELDS=(spec.declarative.deployment.securityContext.privileged spec.declarative.deployment.volumes[0].hostPath)

# ---------------------------------------------------------------------------------------------
step "1. install the chart and run its controller (allowAgentNodeAccess: false, the default)"
chart_controller
expect_in "the chart's controller args" "--allow-agent-node-access=false" "${CONTROLLER_ARGS[*]}"
kubectl apply --server-side --force-conflicts -f "$WORK/chart/crds.yaml" >/dev/null
established() { kubectl wait --for=condition=Established --timeout=5s crd/agents.kagent.dev crd/remotemcpservers.kagent.dev crd/modelconfigs.kagent.dev; }
wait_for "the CRDs Established" 60 established
system_namespace
kubectl apply --server-side -n "$SYS_NS" -f "$WORK/chart/manifests.yaml" >/dev/null
kubectl create namespace "$NS" >/dev/null
run_controller refusing
ok "controller running as $SYS_NS/$CONTROLLER_SA with --allow-agent-node-access=false"

# ---------------------------------------------------------------------------------------------
step "2. next to a gate, an Agent whose pods reach the node is refused, naming the field"
kubectl -n "$NS" apply -f examples/model-openai.yaml >/dev/null
example reaching "$REACHING" | kubectl -n "$NS" apply -f - >/dev/null
example clean "$CLEAN" | kubectl -n "$NS" apply -f - >/dev/null
wait_for "Agent $REACHING Accepted=False" 30 condition_is "$REACHING" Accepted status False
[ "$(condition "$REACHING" Accepted reason)" = InvalidSpec ] ||
  fail "Agent $REACHING: Accepted reason $(condition "$REACHING" Accepted reason), want InvalidSpec"
MESSAGE=$(condition "$REACHING" Accepted message)
expect_in "Accepted message of $REACHING" "${FIELDS[0]}: Forbidden: a privileged container has every capability and the node's devices" "$MESSAGE"
expect_in "Accepted message of $REACHING" "(also ${FIELDS[1]})" "$MESSAGE"
expect_in "Accepted message of $REACHING" "--allow-agent-node-access" "$MESSAGE"
! kubectl -n "$NS" get deployment "$REACHING" >/dev/null 2>&1 || fail "Deployment $REACHING exists: the refused Agent was deployed"
ok "Agent $REACHING: Accepted=False InvalidSpec: $MESSAGE"
wait_for "Agent $CLEAN GateIsolated=True" 30 condition_is "$CLEAN" GateIsolated status True
[ "$(condition "$CLEAN" GateIsolated reason)" = CredentialsOnlyInGate ] ||
  fail "Agent $CLEAN: GateIsolated reason $(condition "$CLEAN" GateIsolated reason), want CredentialsOnlyInGate"
condition_is "$CLEAN" Accepted status True || fail "Agent $CLEAN: Accepted $(condition "$CLEAN" Accepted status)"
ok "the same Agent without those two fields: Accepted=True, GateIsolated=True (CredentialsOnlyInGate)"

# ---------------------------------------------------------------------------------------------
step "3. with the chart's allowAgentNodeAccess: true it is deployed, and GateIsolated=False names the field"
stop_all
kubectl -n "$SYS_NS" delete lease "$LEASE" --ignore-not-found >/dev/null
HITL_CHART_VALUES='{"allowAgentNodeAccess": true}' chart_controller
expect_in "the chart's controller args" "--allow-agent-node-access=true" "${CONTROLLER_ARGS[*]}"
kubectl apply --server-side -n "$SYS_NS" -f "$WORK/chart/manifests.yaml" >/dev/null
run_controller allowing
wait_for "Agent $REACHING GateIsolated=False" 30 condition_is "$REACHING" GateIsolated status False
[ "$(condition "$REACHING" GateIsolated reason)" = AgentReachesNode ] ||
  fail "Agent $REACHING: GateIsolated reason $(condition "$REACHING" GateIsolated reason), want AgentReachesNode"
VERDICT=$(condition "$REACHING" GateIsolated message)
for field in "${FIELDS[@]}"; do
  expect_in "GateIsolated message of $REACHING" "$field (" "$VERDICT"
done
expect_in "GateIsolated message of $REACHING" "RemoteMCPServer $NS/ledger (delete_entry)" "$VERDICT"
condition_is "$REACHING" Accepted status True || fail "Agent $REACHING: Accepted $(condition "$REACHING" Accepted status) $(condition "$REACHING" Accepted message)"
[ "$(kubectl -n "$NS" get deployment "$REACHING" -o jsonpath='{.spec.template.spec.containers[0].securityContext.privileged}')" = true ] ||
  fail "Deployment $REACHING: the agent container is not privileged"
[ "$(kubectl -n "$NS" get deployment "$REACHING" -o jsonpath='{.spec.template.spec.volumes[?(@.name=="kubelet")].hostPath.path}')" = /var/lib/kubelet ] ||
  fail "Deployment $REACHING has no hostPath volume of /var/lib/kubelet"
condition_is "$CLEAN" GateIsolated reason CredentialsOnlyInGate || fail "Agent $CLEAN: GateIsolated changed: $(condition "$CLEAN" GateIsolated reason)"
ok "Agent $REACHING: Accepted=True, Deployment with both fields (0 replicas), GateIsolated=False AgentReachesNode: $VERDICT"

echo
echo "PASS: node-access e2e"
