#!/usr/bin/env bash
# Installing next to kagent, on a real cluster: the controller reconciles only the Agents its
# --agent-selector matches, and never writes to an object another controller made (it reports
# Accepted=False, OwnedByAnotherController, instead). docs/kagent.md.
#
# Uses the cluster of $KUBECONFIG as cluster-admin, the repository's CRDs (crds/) and the
# controller binary (HITL_E2E_BIN, default target/debug/hitl-operator) run as a local process
# watching one throwaway namespace, without leader election. Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error

skip_without_cluster

BIN=${HITL_E2E_BIN:-target/debug/hitl-operator}
[ -x "$BIN" ] || cargo build --quiet --bin hitl-operator
throwaway hitl-e2e-coexist
SELECTOR=kagent.dev/controller=hitl-operator

jp() { kubectl -n "$NS" get "$1" -o jsonpath="$2" 2>/dev/null; }
condition() { jp "$1" "{.status.conditions[?(@.type==\"$2\")].$3}"; }
exists() { kubectl -n "$NS" get "$1" >/dev/null 2>&1; }

step "setup: CRDs, namespace $NS, the controller with --agent-selector=$SELECTOR"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev >/dev/null
kubectl create namespace "$NS" >/dev/null

# A selector the apiserver cannot parse stops the controller before it watches anything.
if out=$("$BIN" controller --namespace "$NS" --leader-election=false \
  --metrics-addr=127.0.0.1:0 --agent-selector='tier in (a' 2>&1); then
  fail "the controller started with an unparsable --agent-selector"
fi
grep -q -- '--agent-selector' <<<"$out" || fail "the error does not name --agent-selector: $out"
ok "an unparsable --agent-selector stops the controller, naming the flag"

PORT=$(free_port)
start controller "$WORK/controller.log" "$BIN" controller --namespace "$NS" \
  --leader-election=false --metrics-addr="127.0.0.1:$PORT" --agent-selector="$SELECTOR"
wait_for "the controller's /readyz" 30 http_ok "http://127.0.0.1:$PORT/readyz"

agent() { # agent NAME [LABELS]: a minimal Agent without tools
  cat <<EOF
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: $1, labels: {${2:-}}}
spec:
  type: Declarative
  declarative: {systemMessage: "You coexist.", modelConfig: model}
EOF
}
kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: model}
spec: {provider: OpenAI, model: gpt-4o}
EOF

step "the selector: only labelled Agents are reconciled"
agent ours "kagent.dev/controller: hitl-operator" | kubectl -n "$NS" apply -f - >/dev/null
agent kagents | kubectl -n "$NS" apply -f - >/dev/null
wait_for "Deployment ours" 20 exists deployment/ours
wait_for "Agent ours Accepted=True" 20 eval '[ "$(condition agent/ours Accepted status)" = True ]'
sleep 3 # the unlabelled one had as long as the labelled one, and then some
! exists deployment/kagents || fail "the controller rendered Agent kagents, which its selector does not match"
! exists secret/kagents || fail "the controller rendered Secret kagents"
[ -z "$(jp agent/kagents '{.status}')" ] || fail "the controller wrote the status of Agent kagents"
ok "Agent ours (labelled) rendered and Accepted; Agent kagents (unlabelled) untouched"

step "ownership: an object another controller made is left alone and named"
kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: taken
  labels: {app.kubernetes.io/managed-by: kagent}
spec:
  replicas: 0
  selector: {matchLabels: {app: taken}}
  template:
    metadata: {labels: {app: taken}}
    spec: {containers: [{name: agent, image: registry.k8s.io/pause:3.10}]}
EOF
RV=$(jp deployment/taken '{.metadata.resourceVersion}')
agent taken "kagent.dev/controller: hitl-operator" | kubectl -n "$NS" apply -f - >/dev/null
wait_for "Agent taken Accepted=False" 20 eval '[ "$(condition agent/taken Accepted reason)" = OwnedByAnotherController ]'
message=$(condition agent/taken Accepted message)
grep -q "Deployment $NS/taken exists and is not hitl-operator's (app.kubernetes.io/managed-by=kagent)" <<<"$message" ||
  fail "the condition does not name the Deployment and its owner: $message"
sleep 2
[ "$(jp deployment/taken '{.metadata.resourceVersion}')" = "$RV" ] || fail "the controller wrote to kagent's Deployment"
[ "$(jp deployment/taken '{.metadata.labels.app\.kubernetes\.io/managed-by}')" = kagent ] ||
  fail "Deployment taken changed hands"
ok "kagent's Deployment taken unchanged (resourceVersion $RV); Agent taken: Accepted=False, OwnedByAnotherController: $message"

step "hand-over: without the label the controller stops reconciling"
kubectl -n "$NS" label agent ours kagent.dev/controller- >/dev/null
sleep 1
HASH=$(jp deployment/ours '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')
kubectl -n "$NS" patch agent ours --type merge -p '{"spec":{"declarative":{"systemMessage":"Changed."}}}' >/dev/null
sleep 3
[ "$(jp deployment/ours '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')" = "$HASH" ] ||
  fail "the controller still reconciles Agent ours after its label was removed"
ok "an unlabelled Agent is no longer reconciled (config hash unchanged after a spec change)"

echo
echo "PASS: coexistence e2e"
