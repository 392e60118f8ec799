# One Agent whose gates run as local processes, for tests/e2e/claim.sh and the approval bench
# (sourced after lib.sh and `throwaway`): the repository's CRDs, namespace $NS, the recorder MCP
# server (tests/mcp-peers/recorder.mjs), the controller watching $NS without leader election,
# Agent $AGENT with the recorder's delete_file gated, and `start_gate NAME` for each gate.
# Needs BIN (the hitl-operator binary), PEERS (tests/mcp-peers) and AGENT; GATES_APPROVAL, when
# set, is the Agent's spec.declarative.approval (flow YAML; default a 10m timeout, 60s wait);
# GATES_CONTROLLER_KUBECONFIG, when set, is the controller's kubeconfig (default: KUBECONFIG's).

# gates_setup: everything but the gates; sets RECORDER_PORT and CONTROLLER_PORT.
gates_setup() {
  kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev crd/approvalrequests.kagent.dev >/dev/null
  kubectl create namespace "$NS" >/dev/null

  RECORDER_PORT=$(free_port)
  start recorder "$WORK/recorder.log" env PORT="$RECORDER_PORT" node "$PEERS/recorder.mjs"
  wait_for "the recorder on :$RECORDER_PORT" 20 http_ok "http://127.0.0.1:$RECORDER_PORT/calls"

  CONTROLLER_PORT=$(free_port)
  local as=()
  [ -z "${GATES_CONTROLLER_KUBECONFIG:-}" ] || as=(env KUBECONFIG="$GATES_CONTROLLER_KUBECONFIG")
  start controller "$WORK/controller.log" "${as[@]}" "$BIN" controller --namespace "$NS" \
    --leader-election=false --metrics-addr="127.0.0.1:$CONTROLLER_PORT" --log-format json
  wait_for "the controller's /readyz" 30 http_ok "http://127.0.0.1:$CONTROLLER_PORT/readyz"

  kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: model}
spec: {provider: OpenAI, model: gpt-4o}
---
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: recorder}
spec: {url: "http://127.0.0.1:$RECORDER_PORT/mcp", timeout: 30s}
---
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: $AGENT}
spec:
  type: Declarative
  declarative:
    systemMessage: You delete files, carefully.
    modelConfig: model
    tools:
    - type: McpServer
      mcpServer: {name: recorder, toolNames: [delete_file], requireApproval: [delete_file]}
    approval: ${GATES_APPROVAL:-"{timeout: 10m, waitTimeout: 60s}"}
YAML
  wait_for "Secrets $AGENT and $AGENT-binding-key" 20 gates_secrets_ready
  wait_for "ServiceAccount $AGENT" 10 kubectl -n "$NS" get "serviceaccount/$AGENT"
  kubectl -n "$NS" get "secret/$AGENT" -o 'jsonpath={.data.gate\.json}' | base64 -d >"$WORK/gate.json"
  kubectl -n "$NS" get "secret/$AGENT-binding-key" -o 'jsonpath={.data.key}' | base64 -d >"$WORK/binding-key"
  kubeconfig_with_token "$WORK/agent.kubeconfig" "$(kubectl -n "$NS" create token "$AGENT" --duration=1h)" "$NS"
}
gates_secrets_ready() {
  [ -n "$(kubectl -n "$NS" get "secret/$AGENT" -o 'jsonpath={.data.gate\.json}' 2>/dev/null)" ] &&
    [ -n "$(kubectl -n "$NS" get "secret/$AGENT-binding-key" -o 'jsonpath={.data.key}' 2>/dev/null)" ]
}

declare -A GATE_CONFIG GATE_URL GATE_METRICS
# start_gate NAME: a gate of the Agent as in its pod (gate.json from the Secret, the binding key,
# the Agent's ServiceAccount token), POD_NAME $AGENT-NAME, on loopback ports of its own (kept
# across restarts). Its MCP route to the recorder is ${GATE_URL[NAME]}.
start_gate() {
  local name=$1 listen metrics
  if [ -z "${GATE_CONFIG[$name]:-}" ]; then
    listen=127.0.0.1:$(free_port)
    metrics=127.0.0.1:$(free_port)
    GATE_CONFIG[$name]=$WORK/gate-$name.json
    python3 -c 'import json, sys
config = json.load(open(sys.argv[1]))
config.update(listen=sys.argv[2], metrics_listen=sys.argv[3])
json.dump(config, open(sys.argv[4], "w"))' "$WORK/gate.json" "$listen" "$metrics" "${GATE_CONFIG[$name]}"
    GATE_URL[$name]=http://$listen/servers/$NS/recorder/mcp
    GATE_METRICS[$name]=http://$metrics/metrics
  fi
  start "gate-$name" "$WORK/gate-$name.log" env KUBECONFIG="$WORK/agent.kubeconfig" \
    POD_NAME="$AGENT-$name" POD_NAMESPACE="$NS" \
    "$BIN" gate --config "${GATE_CONFIG[$name]}" --binding-key "$WORK/binding-key" --log-format json
  wait_for "gate $name's /metrics" 15 http_ok "${GATE_METRICS[$name]}"
}

# gate_metric GATE NAME: a value of a gate's /metrics (0 when absent).
gate_metric() {
  curl -fsS "${GATE_METRICS[$1]}" | awk -v m="$2" '$1 == m { v = $2 } END { print v + 0 }'
}
