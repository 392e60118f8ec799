# One Agent whose gates run as local processes, for tests/e2e/claim.sh and the approval bench
# (sourced after lib.sh and `throwaway`): the repository's CRDs, namespace $NS, the recorder MCP
# server (tests/mcp-peers/recorder.mjs), the controller watching $NS without leader election,
# Agent $AGENT with the recorder's delete_file gated, and `start_gate NAME` for each gate.
# Needs BIN (the hitl-operator binary), PEERS (tests/mcp-peers) and AGENT; GATES_TOOLS, the
# Agent's toolNames on the recorder, defaults to [delete_file]; GATES_APPROVAL, when set, is the
# Agent's spec.declarative.approval (flow YAML; default a 10m timeout, 60s wait);
# GATES_CONTROLLER_KUBECONFIG, when set, is the controller's kubeconfig (default: KUBECONFIG's);
# GATES_CONTROLLER_ARGS, an array, more controller flags.

# gates_begin: how a suite using these starts: failures end it with a FAIL line
# (fail_on_error), no cluster ends it with SKIP, and gates_require.
gates_begin() {
  fail_on_error
  skip_without_cluster
  gates_require
}

# gates_require: BIN (HITL_E2E_BIN, default the debug build, built if missing) and PEERS, and
# kubectl-hitl on PATH and the npm peers installed, or the suite fails saying what is missing.
gates_require() {
  BIN=${HITL_E2E_BIN:-target/debug/hitl-operator}
  PEERS=$PWD/tests/mcp-peers
  [ -x "$BIN" ] || cargo build --quiet --bins
  command -v kubectl-hitl >/dev/null || fail "kubectl-hitl not on PATH (export PATH=\$PWD/target/debug:\$PATH)"
  [ -f "$PEERS/node_modules/@modelcontextprotocol/sdk/package.json" ] || fail "npm ci --prefix tests/mcp-peers first"
}

# gates_setup: everything but the gates; sets RECORDER_PORT and CONTROLLER_PORT.
gates_setup() {
  [ -n "${GATES_CONTROLLER_ARGS+set}" ] || GATES_CONTROLLER_ARGS=()
  kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
  waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev crd/approvalrequests.kagent.dev >/dev/null
  kubectl create namespace "$NS" >/dev/null

  RECORDER_PORT=$(free_port)
  start recorder "$WORK/recorder.log" env PORT="$RECORDER_PORT" node "$PEERS/recorder.mjs"
  wait_for "the recorder on :$RECORDER_PORT" 20 http_ok "http://127.0.0.1:$RECORDER_PORT/calls"

  CONTROLLER_PORT=$(free_port)
  local as=()
  [ -z "${GATES_CONTROLLER_KUBECONFIG:-}" ] || as=(env KUBECONFIG="$GATES_CONTROLLER_KUBECONFIG")
  start controller "$WORK/controller.log" "${as[@]}" "$BIN" controller --namespace "$NS" \
    --leader-election=false --metrics-addr="127.0.0.1:$CONTROLLER_PORT" --log-format json \
    "${GATES_CONTROLLER_ARGS[@]}"
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
      mcpServer: {name: recorder, toolNames: ${GATES_TOOLS:-[delete_file]}, requireApproval: [delete_file]}
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

# gate_call NAME GATE TOOL PATH: TOOL(path: PATH) through gate GATE with the SDK client, in the
# background (its output: `finished NAME`).
gate_call() {
  start "$1" "$WORK/$1.out" timeout 120 node "$PEERS/client.mjs" "${GATE_URL[$2]}" streamable \
    "[{\"op\":\"call\",\"name\":\"$3\",\"args\":{\"path\":\"$4\"}}]"
}
# finished NAME: waits (bounded) for a background client and prints its output.
finished() {
  local pid=${E2E_PIDS[$1]} deadline=$((SECONDS + 60))
  while alive "$pid"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "client $1 still waiting after 60 s: $(cat "$WORK/$1.out")"
    sleep 0.02
  done
  unset "E2E_PIDS[$1]"
  wait "$pid" || true
  cat "$WORK/$1.out"
}
# requests PATH: names of the requests of a call with argument path PATH.
requests() {
  kubectl -n "$NS" get approvalrequests -o json | python3 -c '
import json, sys
for r in json.load(sys.stdin)["items"]:
    if r["spec"].get("argumentsPreview", {}).get("path") == sys.argv[1]:
        print(r["metadata"]["name"])' "$1"
}
# the_request VAR PATH [KNOWN]: waits (bounded) for the one request of a call with argument path
# PATH that is not among KNOWN (names, one a line) and sets VAR to its name. A gate counts a call
# as awaiting a decision before it has created the request, so read the request through this.
the_request() {
  local names deadline=$((SECONDS + 15))
  while names=$(requests "$2") && names=$(grep -vxF -e "${3:-}" <<<"$names" || true) && [ -z "$names" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no new ApprovalRequest for path $2 within 15 s"
    sleep 0.05
  done
  [ -n "$names" ] || fail "cannot list the ApprovalRequests of path $2"
  [ "$(wc -l <<<"$names")" = 1 ] || fail "more than one new ApprovalRequest for path $2: $names"
  printf -v "$1" '%s' "$names"
}
# runs TOOL [PATH]: how many times TOOL (with arguments {path: PATH}, when given) ran at the
# recorder: $RECORDER, else the local one on RECORDER_PORT.
runs() {
  curl -fsS "${RECORDER:-http://127.0.0.1:$RECORDER_PORT}/calls" | python3 -c '
import json, sys
tool, path = sys.argv[1], sys.argv[2:]
print(sum(1 for c in json.load(sys.stdin) if c["tool"] == tool and (not path or c["args"].get("path") == path[0])))' "$@"
}

# gates_with_policies: the chart's user roles and admission policies (their checked-in
# renderings), removed on exit unless they were there before (or HITL_E2E_KEEP=1); and the
# controller run as the chart's ServiceAccount would (a status writer for the policies), by
# impersonation. Call after `throwaway`, before gates_setup.
gates_with_policies() {
  # The roles and policies this suite adds are removed at its end (a chart installed later
  # cannot adopt objects it did not make).
  GATES_ROLES_ADDED=0
  kubectl get clusterrole hitl-approver >/dev/null 2>&1 || GATES_ROLES_ADDED=1
  kubectl apply -f tests/chart/rendered/user-roles.default.yaml >/dev/null
  GATES_POLICY_ADDED=0
  kubectl get validatingadmissionpolicy hitl-hitl-operator-approval-decision >/dev/null 2>&1 || GATES_POLICY_ADDED=1
  kubectl apply -f tests/chart/rendered/admission-policy.default.yaml >/dev/null
  trap gates_policies_cleanup EXIT
  GATES_CONTROLLER_KUBECONFIG=$WORK/controller.kubeconfig
  kubeconfig_as "$GATES_CONTROLLER_KUBECONFIG" system:serviceaccount:hitl-system:hitl-hitl-operator system:masters
}
gates_policies_cleanup() {
  throwaway_cleanup
  if [ "$GATES_POLICY_ADDED" = 1 ] && [ "${HITL_E2E_KEEP:-0}" != 1 ]; then
    kubectl delete -f tests/chart/rendered/admission-policy.default.yaml --ignore-not-found >/dev/null 2>&1 || true
  fi
  if [ "$GATES_ROLES_ADDED" = 1 ] && [ "${HITL_E2E_KEEP:-0}" != 1 ]; then
    kubectl delete -f tests/chart/rendered/user-roles.default.yaml --ignore-not-found >/dev/null 2>&1 || true
  fi
}
