#!/usr/bin/env bash
# The whole story of DESIGN.md §1 on a real control plane (the cluster in KUBECONFIG), with plain
# kubectl, the built binaries and the real npm MCP peers. docs/e2e.md explains each step.
#
#  1. install: the chart rendered by the real Helm engine, CRDs and manifests applied
#     server-side, admission policies active
#  2. tool servers: server-everything and a recording MCP server (tests/mcp-peers/recorder.mjs)
#  3. the controller as the chart runs it: two replicas (local processes) with the chart's args
#     and env, authenticated as the chart's ServiceAccount; both turn ready
#  4-6. an Agent is rendered within seconds (an invalid one is refused); nothing is written
#     while idle; a spec change rolls the pod template's config hash; drift is put back
#  7-12. the gate as in the pod (gate.json from the rendered Secret, the Agent's ServiceAccount
#     token): ungated call, approve with kubectl hitl (runs exactly once), refusals, deny with
#     a reason, 30+ approvals timed, expiry and a late approval
#  13. phases, pendingApprovals and metrics as the controller and the gate report them
#  14-15. failover: SIGTERM to the leader, then SIGKILL to the new one
#  16. garbage collection of a deleted Agent
#  17. figures
#
# Needs: cargo build --bins (target/debug/hitl-operator, kubectl-hitl on PATH as `kubectl hitl`),
# npm ci --prefix tests/mcp-peers, the chart venv (make chart-venv), and a cluster whose
# kube-controller-manager runs (Deployment status, garbage collection). run.sh sees to the first
# three.
# Users: alice (decides; gets the chart's hitl-approver role) and mallory (no rights) from
# $HITL_E2E_USERS (default: the folder of $KUBECONFIG, as /work/shared/k8s/cluster-up.sh makes
# it) as alice.kubeconfig and mallory.kubeconfig; without them the suite impersonates both.
# Environment: HITL_E2E_APPROVALS (approvals timed, default 30), HITL_E2E_BIN (the
# hitl-operator binary, default target/debug/hitl-operator), HITL_E2E_KEEP=1 keeps the
# namespaces. Installs release "hitl" in hitl-system: use a throwaway cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
fail_on_error

if ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "SKIP: no Kubernetes cluster reachable (KUBECONFIG=${KUBECONFIG:-~/.kube/config})"
  exit 0
fi

BIN=${HITL_E2E_BIN:-$PWD/target/debug/hitl-operator}
PEERS=$PWD/tests/mcp-peers
VENV_PY=$PWD/.venv/bin/python
RELEASE=hitl
SYS_NS=hitl-system
NS=hitl-e2e-story-$(date +%s)
AGENT=story
APPROVALS=${HITL_E2E_APPROVALS:-30}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hitl-e2e-story.XXXXXX")
FIGURES=$WORK/figures

[ -x "$BIN" ] || fail "$BIN missing: cargo build --bins"
command -v kubectl-hitl >/dev/null || fail "kubectl-hitl not on PATH (export PATH=\$PWD/target/debug:\$PATH)"
[ -d "$PEERS/node_modules/@modelcontextprotocol/server-everything" ] || fail "npm ci --prefix tests/mcp-peers first"
"$VENV_PY" -c 'import helm_python' 2>/dev/null || fail "no helm_python in .venv: make chart-venv"

cleanup() {
  local rc=$?
  trap - ERR
  stop_all
  if [ "${HITL_E2E_KEEP:-0}" = 1 ]; then
    echo "kept: namespace $NS, release objects, work folder $WORK"
    return "$rc"
  fi
  kubectl delete namespace "$NS" --wait=false --ignore-not-found >/dev/null 2>&1 || true
  if [ -s "$WORK/chart/manifests.yaml" ]; then
    kubectl delete -n "$SYS_NS" -f "$WORK/chart/manifests.yaml" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kubectl -n "$SYS_NS" delete lease "$LEASE" --ignore-not-found >/dev/null 2>&1 || true
  fi
  [ "${CREATED_SYS_NS:-0}" = 1 ] && kubectl delete namespace "$SYS_NS" --wait=false >/dev/null 2>&1
  if [ "$rc" = 0 ]; then rm -rf "$WORK"; else echo "logs kept in $WORK"; fi
  return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

has() { [ "$(jp "$1" "$2")" = "$3" ]; }
condition() { jp "$1" "{.status.conditions[?(@.type==\"$2\")].status}"; }
figure() { printf '%-64s %s\n' "$1" "$2" >>"$FIGURES"; }

# ---------------------------------------------------------------------------------------------
step "1. install the chart (Helm engine: helm-python-sdk) server-side"
chart_controller

kubectl apply --server-side -f "$WORK/chart/crds.yaml"
waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev crd/approvalrequests.kagent.dev \
  crd/modelconfigs.kagent.dev crd/remotemcpservers.kagent.dev >/dev/null
system_namespace
kubectl apply --server-side -n "$SYS_NS" -f "$WORK/chart/manifests.yaml"
ok "CRDs and $(grep -c '^kind:' "$WORK/chart/manifests.yaml") manifests applied server-side"
for policy in approval-requester approval-decision approval-status; do
  kubectl get validatingadmissionpolicybinding "$RELEASE-hitl-operator-$policy" >/dev/null ||
    fail "ValidatingAdmissionPolicyBinding $RELEASE-hitl-operator-$policy missing"
done

kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" create rolebinding alice-approves --clusterrole=hitl-approver --user=alice >/dev/null
ok "namespace $NS; alice bound to the chart's hitl-approver ClusterRole (docs/install.md)"

# Policies start to apply asynchronously: wait until a forged requestedBy is refused.
forged_request_refused() {
  local out
  if out=$(kubectl -n "$NS" create -f - 2>&1 <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: policy-probe}
spec:
  agentRef: {name: nobody}
  toolServer: {kind: RemoteMCPServer, name: nothing, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf '%064d' 0)"
  argumentsBytes: 2
  requestedBy: system:serviceaccount:$NS:someone-else
  expiresAt: "2099-01-01T00:00:00Z"
EOF
  ); then
    kubectl -n "$NS" delete approvalrequest policy-probe --ignore-not-found >/dev/null
    return 1
  fi
  grep -q "must be the creating user" <<<"$out"
}
wait_for "the admission policies to refuse a forged requestedBy" 30 forged_request_refused
ok "admission policies active (a forged requestedBy is refused)"

e2e_users

# ---------------------------------------------------------------------------------------------
step "2. tool servers: server-everything and the recorder (tests/mcp-peers/recorder.mjs)"
EVERYTHING_PORT=$(free_port)
RECORDER_PORT=$(free_port)
start everything "$WORK/everything.log" env PORT="$EVERYTHING_PORT" \
  node "$PEERS/node_modules/@modelcontextprotocol/server-everything/dist/index.js" streamableHttp
start recorder "$WORK/recorder.log" env PORT="$RECORDER_PORT" node "$PEERS/recorder.mjs"
wait_for "server-everything on :$EVERYTHING_PORT" 20 http_up "http://127.0.0.1:$EVERYTHING_PORT/mcp"
wait_for "the recorder on :$RECORDER_PORT" 20 http_ok "http://127.0.0.1:$RECORDER_PORT/calls"
ok "server-everything on 127.0.0.1:$EVERYTHING_PORT, recorder on 127.0.0.1:$RECORDER_PORT"

# ---------------------------------------------------------------------------------------------
step "3. the controller as the chart runs it: 2 replicas as $SYS_NS/$CONTROLLER_SA"
kubeconfig_with_token "$WORK/controller.kubeconfig" \
  "$(kubectl -n "$SYS_NS" create token "$CONTROLLER_SA" --duration=2h)" "$SYS_NS"
DEPLOY_NAME=$RELEASE-hitl-operator
declare -A METRICS_PORT=([a]=$(free_port) [b]=$(free_port))
# start_controller REPLICA: the chart's container args and env; the "pod" name is
# <deployment>-e2e-REPLICA and /metrics listens on a port of its own.
start_controller() {
  local replica=$1 pod=$DEPLOY_NAME-e2e-$1
  start_chart_controller "controller-$replica" "$WORK/controller-$replica.log" "$pod" \
    "${METRICS_PORT[$replica]}" "$WORK/controller.kubeconfig"
  note "controller-$replica: POD_NAME=$pod, /metrics on 127.0.0.1:${METRICS_PORT[$replica]}, log $WORK/controller-$replica.log"
}
readyz() { http_ok "http://127.0.0.1:${METRICS_PORT[$1]}/readyz"; }
lease_holder() { kubectl -n "$SYS_NS" get lease "$LEASE" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
holder_is() { [ "$(lease_holder)" = "$1" ]; }
holder_set() { [ -n "$(lease_holder)" ]; }

T=$(now)
start_controller a
start_controller b
# The leader turns /readyz off when it takes the Lease and on once its caches have synced, so
# look at /readyz only after the Lease shows a holder.
wait_for "a holder of Lease $SYS_NS/$LEASE" 40 holder_set
LEADER=$(lease_holder)
LEADER=${LEADER##*-}
STANDBY=$([ "$LEADER" = a ] && echo b || echo a)
[ "$LEADER" = a ] || [ "$LEADER" = b ] || fail "Lease holder '$(lease_holder)' is none of the replicas"
wait_for "/readyz of the leader, controller-$LEADER" 30 readyz "$LEADER"
wait_for "/readyz of the standby, controller-$STANDBY" 30 readyz "$STANDBY"
ok "both replicas ready ($(elapsed "$T") s after start); leader controller-$LEADER, standby controller-$STANDBY"
figure "controller start -> both /readyz 200, Lease held" "$(elapsed "$T") s"

# ---------------------------------------------------------------------------------------------
step "4. an Agent is rendered within seconds"
# stamp_watch NAME KIND FILE: kubectl watch of KIND in the story namespace, each line stamped
# with the time it arrived. The namespace starts empty, so an object's first line is its creation.
stamp_watch() {
  kubectl -n "$NS" get "$2" --watch -o name \
    > >(while IFS= read -r line; do echo "$EPOCHREALTIME $line"; done >"$3") 2>"$3.err" &
  E2E_PIDS[$1]=$!
}
stamped() { grep -m1 " $2\$" "$1" | cut -d' ' -f1; }
stamp_watch watch-agents agents.kagent.dev "$WORK/agents.watch"
stamp_watch watch-deployments deployments.apps "$WORK/deployments.watch"
sleep 1 # let both watches start

tool_servers() {
  cat <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: default-model-config}
spec: {provider: OpenAI, model: gpt-4o}
---
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: everything}
spec: {url: "http://127.0.0.1:$EVERYTHING_PORT/mcp", timeout: 30s}
---
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: recorder}
spec: {url: "http://127.0.0.1:$RECORDER_PORT/mcp", timeout: 30s}
EOF
}
# agent NAME [TIMEOUT WAIT]: the story's Agent; read_file/echo run straight through,
# delete_file/get-sum wait for a human.
agent() {
  cat <<EOF
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: $1}
spec:
  type: Declarative
  description: hitl-operator e2e story
  declarative:
    systemMessage: You manage report files.
    tools:
    - type: McpServer
      mcpServer: {name: everything, toolNames: [echo, get-sum], requireApproval: [get-sum]}
    - type: McpServer
      mcpServer: {name: recorder, toolNames: [read_file, delete_file], requireApproval: [delete_file]}
    approval: {timeout: ${2:-2m}, waitTimeout: ${3:-20s}}
EOF
}
tool_servers | kubectl apply -n "$NS" -f - >/dev/null
T_APPLY=$(now)
agent "$AGENT" | kubectl apply -n "$NS" -f - >/dev/null
wait_for "Deployment $AGENT" 10 has "deployment/$AGENT" '{.metadata.name}' "$AGENT"
T_DEPLOY=$(now)
wait_for "the Deployment's watch event" 5 stamped "$WORK/deployments.watch" "deployment.apps/$AGENT"
wait_for "the Agent's watch event" 5 stamped "$WORK/agents.watch" "agent.kagent.dev/$AGENT"
W_AGENT=$(stamped "$WORK/agents.watch" "agent.kagent.dev/$AGENT")
W_DEPLOY=$(stamped "$WORK/deployments.watch" "deployment.apps/$AGENT")
ok "Deployment $AGENT: $(elapsed "$W_AGENT" "$W_DEPLOY") s from the Agent's watch event to the Deployment's ($(elapsed "$T_APPLY" "$T_DEPLOY") s from kubectl apply to kubectl seeing it)"
figure "apply -> Deployment (watch event Agent -> Deployment)" "$(elapsed "$W_AGENT" "$W_DEPLOY") s"
figure "apply -> Deployment (kubectl apply start -> get finds it)" "$(elapsed "$T_APPLY" "$T_DEPLOY") s"

for object in secret/$AGENT secret/$AGENT-binding-key serviceaccount/$AGENT service/$AGENT role/$AGENT-approval-gate rolebinding/$AGENT-approval-gate; do
  wait_for "$object" 10 has "$object" '{.metadata.ownerReferences[0].name}' "$AGENT"
done
ok "Secret, binding-key Secret, ServiceAccount, Service, Role, RoleBinding rendered and owned by Agent/$AGENT"
has "secret/$AGENT-binding-key" '{.immutable}' true || fail "the binding-key Secret is not immutable"
[ "$(jp "secret/$AGENT-binding-key" '{.data.key}' | base64 -d | wc -c)" -ge 32 ] || fail "the binding key is shorter than 32 bytes"
[ "$(kubectl auth can-i get "secrets/$AGENT-binding-key" -n "$NS" --as "system:serviceaccount:$NS:$AGENT" 2>/dev/null)" = no ] ||
  fail "the Agent's ServiceAccount can read its binding key through the API"
ok "binding-key Secret: immutable, 32 random bytes, not readable by the Agent's ServiceAccount"
wait_for "Agent Accepted=True" 15 eval '[ "$(condition agent/$AGENT Accepted)" = True ]'
wait_for "Agent ToolsAvailable=True (tool discovery of both servers)" 30 \
  eval '[ "$(condition agent/$AGENT ToolsAvailable)" = True ]'
[ "$(jp agent/$AGENT '{.status.configHash}')" = \
  "$(jp deployment/$AGENT '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')" ] ||
  fail "status.configHash differs from the pod template's kagent.dev/config-hash"
ok "Accepted=True, ToolsAvailable=True, status.configHash = pod template's config-hash"
if out=$(kubectl apply -n "$NS" -f examples/invalid/require-approval-not-in-tool-names.yaml 2>&1); then
  fail "the apiserver accepted examples/invalid/require-approval-not-in-tool-names.yaml"
fi
expect_in "invalid Agent" "each requireApproval entry must also appear in toolNames" "$out"
ok "the apiserver rejects an Agent whose requireApproval is not in toolNames (CRD CEL)"

# ---------------------------------------------------------------------------------------------
step "5. idle: nothing is written when nothing changes"
# Settled: the Deployment's status observed by kube-controller-manager (when it runs), the
# Agent's status written for this generation, Ready reported.
settled() {
  [ "$(jp agent/$AGENT '{.status.observedGeneration}')" = "$(jp agent/$AGENT '{.metadata.generation}')" ] &&
    [ -n "$(condition agent/$AGENT Ready)" ] &&
    [ "$(jp deployment/$AGENT '{.status.observedGeneration}')" = "$(jp deployment/$AGENT '{.metadata.generation}')" ]
}
wait_for "the Agent to settle" 30 settled
sleep 2
IDLE_OBJECTS="agent/$AGENT secret/$AGENT serviceaccount/$AGENT service/$AGENT role/$AGENT-approval-gate
  rolebinding/$AGENT-approval-gate deployment/$AGENT remotemcpserver/everything remotemcpserver/recorder
  modelconfig/default-model-config"
versions() {
  local o
  for o in $IDLE_OBJECTS; do echo "$o $(jp "$o" '{.metadata.resourceVersion}')"; done
}
reconciles() { curl -fsS "http://127.0.0.1:${METRICS_PORT[$LEADER]}/metrics" | awk '/^hitl_reconcile_total/ { n += $NF } END { print n + 0 }'; }
versions >"$WORK/idle.before"
R0=$(reconciles)
sleep 10
versions >"$WORK/idle.after"
R1=$(reconciles)
if ! diff "$WORK/idle.before" "$WORK/idle.after" >"$WORK/idle.diff"; then
  cat "$WORK/idle.diff"
  fail "objects were written during 10 s of idling (resourceVersions above)"
fi
ok "10 s idle: resourceVersions of $(wc -l <"$WORK/idle.before") objects unchanged ($((R1 - R0)) reconciles meanwhile)"

# ---------------------------------------------------------------------------------------------
step "6. a spec change rolls the pod template's config hash; drift is put back"
HASH0=$(jp deployment/$AGENT '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')
kubectl -n "$NS" patch agent "$AGENT" --type merge \
  -p '{"spec":{"declarative":{"systemMessage":"You manage report files under /srv."}}}' >/dev/null
hash_changed() {
  local h
  h=$(jp deployment/$AGENT '{.spec.template.metadata.annotations.kagent\.dev/config-hash}')
  [ -n "$h" ] && [ "$h" != "$HASH0" ] && [ "$(jp agent/$AGENT '{.status.configHash}')" = "$h" ]
}
wait_for "kagent.dev/config-hash to change" 10 hash_changed
ok "config-hash $HASH0 -> $(jp deployment/$AGENT '{.spec.template.metadata.annotations.kagent\.dev/config-hash}'), status.configHash follows"
kubectl -n "$NS" scale deployment "$AGENT" --replicas=3 >/dev/null
wait_for "the controller to put replicas back to 1" 10 has "deployment/$AGENT" '{.spec.replicas}' 1
ok "drift is put back (kubectl scale --replicas=3 -> 1)"

# ---------------------------------------------------------------------------------------------
step "7. the gate, run as in the pod: gate.json from the Secret, the Agent's ServiceAccount token"
kubeconfig_with_token "$WORK/agent.kubeconfig" "$(kubectl -n "$NS" create token "$AGENT" --duration=1h)" "$NS"
AGENT_USER=system:serviceaccount:$NS:$AGENT
start_pod_gate
route() { echo "http://$GATE_LISTEN/servers/$NS/$1/mcp"; }

# mcp SERVER OPS: the SDK client (tests/mcp-peers/client.mjs) through the gate, bounded.
mcp() { timeout 90 node "$PEERS/client.mjs" "$(route "$1")" streamable "$2"; }
# mcp_bg NAME SERVER OPS: the same in the background, output in $WORK/NAME.out.
mcp_bg() { start "$1" "$WORK/$1.out" timeout 90 node "$PEERS/client.mjs" "$(route "$2")" streamable "$3"; }
# finished NAME [SECONDS]: waits (bounded) for a background client; its output is then in
# $WORK/NAME.out (read it with `output NAME`).
finished() {
  local pid=${E2E_PIDS[$1]} deadline=$((SECONDS + ${2:-30}))
  while alive "$pid"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "client $1 still waiting after ${2:-30}s: $(cat "$WORK/$1.out")"
    sleep 0.1
  done
  unset "E2E_PIDS[$1]"
  wait "$pid" || fail "client $1 exited non-zero: $(cat "$WORK/$1.out")"
}
output() { cat "$WORK/$1.out"; }
# request_for TOOL JSONPATH-FILTER: name of the undecided request of a call, once it exists.
request_for() {
  kubectl -n "$NS" get approvalrequests -l "kagent.dev/agent=$AGENT,kagent.dev/tool=$1" \
    -o "jsonpath={.items[?($2)].metadata.name}"
}
await_request() { # VAR TOOL FILTER
  local name deadline=$((SECONDS + 15))
  while name=$(request_for "$2" "$3") && [ -z "$name" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "no ApprovalRequest for $2 ($3) within 15 s"
    sleep 0.1
  done
  [ "$(wc -w <<<"$name")" = 1 ] || fail "more than one ApprovalRequest for $2 ($3): $name"
  printf -v "$1" '%s' "$name"
}
ran() { curl -fsS "http://127.0.0.1:$RECORDER_PORT/calls" | python3 -c '
import json, sys
print(sum(1 for c in json.load(sys.stdin) if c["tool"] == sys.argv[1] and c["args"].get("path") == sys.argv[2]))' "$1" "$2"; }

out=$(mcp everything '[{"op":"list"},{"op":"call","name":"echo","args":{"message":"hello from e2e"}}]')
expect_in "tools/list through the gate" '"tools":["echo","get-sum"]' "$out"
expect_in "ungated echo" 'Echo: hello from e2e' "$out"
ok "tools/list filtered to toolNames; ungated echo ran on server-everything"

step "8. gated call on server-everything, approved by alice with kubectl hitl approve"
mcp_bg sum everything '[{"op":"call","name":"get-sum","args":{"a":2,"b":3}}]'
await_request SUM get-sum '@.spec.argumentsPreview.a==2'
has "approvalrequest/$SUM" '{.spec.requestedBy}' "$AGENT_USER" || fail "requestedBy is not $AGENT_USER"
has "approvalrequest/$SUM" '{.spec.toolServer.name}' everything || fail "toolServer is not everything"
wait_for "the Agent's pendingApprovals to count $SUM" 10 has "agent/$AGENT" '{.status.pendingApprovals}' 1
pending_metric() { curl -fsS "http://127.0.0.1:${METRICS_PORT[$LEADER]}/metrics" | awk '$1 == "hitl_approvals_pending" { print $2 }'; }
[ "$(pending_metric)" -ge 1 ] || fail "hitl_approvals_pending is $(pending_metric) while $SUM waits"
# The binding hash is the HMAC of the canonical arguments under the Agent's key, not their
# plain SHA-256, which anyone could test guesses of a redacted secret against.
python3 - "$(jp "approvalrequest/$SUM" '{.spec.argumentsSha256}')" "$WORK/binding-key" <<'PY' || fail "argumentsSha256 is not the keyed hash of the arguments"
import hashlib, hmac, sys
canonical = b'{"a":2,"b":3}'
key = open(sys.argv[2], "rb").read()
assert sys.argv[1] == hmac.new(key, canonical, "sha256").hexdigest(), sys.argv[1]
assert sys.argv[1] != hashlib.sha256(canonical).hexdigest()
PY
ok "argumentsSha256 is HMAC-SHA256 under the Agent's binding key (not a plain digest)"
KUBECONFIG=$ALICE kubectl hitl approve "$SUM" -n "$NS" --reason "e2e: sums are harmless"
finished sum
out=$(output sum)
expect_in "approved get-sum" 'The sum of 2 and 3 is 5' "$out"
grep -q '"isError":true' <<<"$out" && fail "approved get-sum returned an error: $out"
wait_for "$SUM Executed" 10 has "approvalrequest/$SUM" '{.status.phase}' Executed
has "approvalrequest/$SUM" '{.spec.decision.decidedBy}' alice || fail "decidedBy is not alice"
has "approvalrequest/$SUM" '{.status.consumedBy}' "$AGENT-e2e-gate" || fail "consumedBy is not the gate"
ok "ApprovalRequest $SUM: counted in the Agent's pendingApprovals and hitl_approvals_pending while it waited; approved by alice, consumed by the gate, server-everything answered"

step "9. exactly once: two identical calls share one request; one approval runs one call"
# With a progress token the gate sends "Waiting for approval: ..." as soon as a call waits.
mcp_bg once1 recorder '[{"op":"call","name":"delete_file","args":{"path":"/data/once.csv"},"progress":true}]'
mcp_bg once2 recorder '[{"op":"call","name":"delete_file","args":{"path":"/data/once.csv"},"progress":true}]'
await_request ONCE delete_file '@.spec.argumentsPreview.path=="/data/once.csv"'
sleep 2 # let the second call reach the gate too (checked below: both were told they wait)
[ "$(request_for delete_file '@.spec.argumentsPreview.path=="/data/once.csv"')" = "$ONCE" ] ||
  fail "identical calls made more than one request"
KUBECONFIG=$ALICE kubectl hitl approve "$ONCE" -n "$NS" --reason "e2e: once"
finished once1
finished once2
out="$(output once1)"$'\n'"$(output once2)"
[ "$(grep -cF '"text":"deleted /data/once.csv"' <<<"$out")" = 1 ] || fail "want exactly one call to run: $out"
expect_in "the second identical call" "was already used by another identical call" "$out"
[ "$(grep -c "Waiting for approval: ApprovalRequest $ONCE" <<<"$out")" = 2 ] ||
  fail "not both calls waited on $ONCE (progress notifications): $out"
[ "$(ran delete_file /data/once.csv)" = 1 ] || fail "the recorder ran delete_file(/data/once.csv) $(ran delete_file /data/once.csv) times, want 1"
ok "one request ($ONCE), one run at the tool server; the other call: already used"

step "10. refusals: mallory and the Agent's ServiceAccount cannot decide; alice denies with a reason"
mcp_bg keep recorder '[{"op":"call","name":"delete_file","args":{"path":"/data/keep.csv"}}]'
await_request KEEP delete_file '@.spec.argumentsPreview.path=="/data/keep.csv"'
refused mallory "forbidden" env KUBECONFIG="$MALLORY" kubectl hitl approve "$KEEP" -n "$NS"
refused "the Agent's ServiceAccount" "forbidden" env KUBECONFIG="$WORK/agent.kubeconfig" kubectl hitl approve "$KEEP" -n "$NS"
refused "the Agent's ServiceAccount (kubectl patch)" "forbidden" kubectl --kubeconfig "$WORK/agent.kubeconfig" \
  -n "$NS" patch approvalrequest "$KEEP" --type merge \
  -p "{\"spec\":{\"decision\":{\"type\":\"Approve\",\"decidedBy\":\"$AGENT_USER\"}}}"
# The gate's own write path: a merge patch of the status subresource (kubectl patch would first
# GET the status, which the Agent's Role does not grant).
refused "the Agent's ServiceAccount (status phase Approved)" "Executed" kube_curl "$WORK/agent.kubeconfig" PATCH \
  "/apis/kagent.dev/v1alpha2/namespaces/$NS/approvalrequests/$KEEP/status" \
  -H 'Content-Type: application/merge-patch+json' -d '{"status":{"phase":"Approved"}}'
[ -z "$(jp "approvalrequest/$KEEP" '{.spec.decision}')" ] || fail "$KEEP got a decision"
KUBECONFIG=$ALICE kubectl hitl deny "$KEEP" -n "$NS" --reason "keep this file"
finished keep
out=$(output keep)
expect_in "denied call" "NOT executed: tool 'delete_file' was denied by alice (ApprovalRequest $KEEP). Reason: keep this file" "$out"
[ "$(ran delete_file /data/keep.csv)" = 0 ] || fail "the denied call ran"
ok "mallory and $AGENT_USER refused; alice's deny reached the client with its reason; nothing ran"

step "11. $APPROVALS approvals timed: decision PATCH -> the tool server receives the call"
KUBECONFIG=$ALICE kubectl config view --raw --minify --flatten -o json >"$WORK/alice.kubeconfig.json"
# claim_conflicts: the gate's count of 409s on its claims so far.
claim_conflicts() {
  curl -fsS "http://127.0.0.1:${GATE_METRICS##*:}/metrics" | awk '$1 == "hitl_gate_claim_conflicts_total" { print $2 }'
}
CONFLICTS_BEFORE=$(claim_conflicts)
[ -n "$CONFLICTS_BEFORE" ] || fail "the gate exports no hitl_gate_claim_conflicts_total"
track_log bench "$WORK/bench.log"
timeout 300 env GATE_URL="$(route recorder)" RECORDER_URL="http://127.0.0.1:$RECORDER_PORT" NAMESPACE="$NS" \
  AGENT="$AGENT" TOOL=delete_file COUNT="$APPROVALS" DECIDED_BY=alice KUBECONFIG_JSON="$WORK/alice.kubeconfig.json" \
  node "$PEERS/approval-bench.mjs" >"$WORK/bench.json" 2>"$WORK/bench.log" || fail "approval bench failed"
tail -n 3 "$WORK/bench.log"
slowest_approval "$WORK/bench.log" "$WORK/gate.log"
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
for k in ("decisionToUpstream", "decisionToResult", "decisionToWatch", "decisionPatch", "plainPatch"):
    print("%s_p50=%.1f %s_p99=%.1f" % (k, s[k]["p50"], k, s[k]["p99"]))
print("ratio=%.1f" % s["ratioUpstreamP50ToPlainPatchP50"])' "$WORK/bench.json" >"$WORK/bench.env" || fail "no figures in $WORK/bench.json"
source "$WORK/bench.env"
CONFLICTS=$(($(claim_conflicts) - CONFLICTS_BEFORE))
ok "$APPROVALS approvals, each ran exactly once; $CONFLICTS claims answered 409 Conflict"
figure "claim conflicts (409 on the gate's claim) over $APPROVALS approvals" "$CONFLICTS"
figure "plain PATCH round-trip p50 (baseline, alice)" "${plainPatch_p50} ms"
figure "decision PATCH round-trip p50 / p99" "${decisionPatch_p50} / ${decisionPatch_p99} ms"
figure "decision PATCH sent -> a watch of the request sees it p50 / p99" "${decisionToWatch_p50} / ${decisionToWatch_p99} ms"
figure "decision PATCH sent -> tool server receives call p50 / p99" "${decisionToUpstream_p50} / ${decisionToUpstream_p99} ms (n=$APPROVALS; p50 = ${ratio}x plain PATCH)"
figure "decision PATCH sent -> client has the result p50 / p99" "${decisionToResult_p50} / ${decisionToResult_p99} ms"

step "12. expiry: a short approval timeout; a late approval never runs"
kubectl -n "$NS" patch agent "$AGENT" --type merge \
  -p '{"spec":{"declarative":{"approval":{"timeout":"5s","waitTimeout":"5s"}}}}' >/dev/null
gate_json_has_short_timeout() { jp "secret/$AGENT" '{.data.gate\.json}' | base64 -d | grep -q '"timeout_seconds":5.0'; }
wait_for "gate.json with timeout_seconds 5" 10 gate_json_has_short_timeout
start_pod_gate # the config hash changed: the pod would roll, so the gate restarts with the new gate.json
out=$(mcp recorder '[{"op":"call","name":"delete_file","args":{"path":"/data/late.csv"}}]')
LATE=$(request_for delete_file '@.spec.argumentsPreview.path=="/data/late.csv"')
[ -n "$LATE" ] || fail "no ApprovalRequest for delete_file(/data/late.csv)"
expect_in "unanswered call" "NOT executed: the approval request for tool 'delete_file' (ApprovalRequest $LATE) expired at" "$out"
wait_for "$LATE phase Expired" 15 has "approvalrequest/$LATE" '{.status.phase}' Expired
if out=$(KUBECONFIG=$ALICE kubectl hitl approve "$LATE" -n "$NS" 2>&1); then fail "kubectl hitl approved an expired request: $out"; fi
expect_in "kubectl hitl approve after expiry" "expired at" "$out"
# Plain kubectl does not check the time: the decision may be stored, and must revive nothing.
KUBECONFIG=$ALICE kubectl -n "$NS" patch approvalrequest "$LATE" --type merge \
  -p '{"spec":{"decision":{"type":"Approve","reason":"too late","decidedBy":"alice"}}}' >/dev/null 2>&1 || true
sleep 2
has "approvalrequest/$LATE" '{.status.phase}' Expired || fail "a late approval changed $LATE to $(jp "approvalrequest/$LATE" '{.status.phase}')"
out=$(mcp recorder '[{"op":"call","name":"delete_file","args":{"path":"/data/late.csv"}}]')
expect_in "retry after a late approval" "NOT executed" "$out"
[ "$(ran delete_file /data/late.csv)" = 0 ] || fail "delete_file(/data/late.csv) ran after expiry"
ok "$LATE expired; kubectl hitl refused; a late kubectl patch left it Expired; the retry did not run"

step "13. what the controller and the gate report"
wait_for "the controller to mark $KEEP Denied" 10 has "approvalrequest/$KEEP" '{.status.phase}' Denied
wait_for "pendingApprovals back to 0" 20 has "agent/$AGENT" '{.status.pendingApprovals}' 0
metrics=$(curl -fsS "http://127.0.0.1:${METRICS_PORT[$LEADER]}/metrics")
for name in hitl_reconcile_total hitl_reconcile_duration_seconds hitl_approvals_pending hitl_decisions_total \
  hitl_decision_latency_seconds; do
  grep -q "^$name" <<<"$metrics" || fail "controller metric $name missing"
done
gate_metrics=$(curl -fsS "http://127.0.0.1:${GATE_METRICS##*:}/metrics")
for name in hitl_gate_tool_calls_total hitl_gate_approval_wait_seconds hitl_gate_upstream_latency_seconds; do
  grep -q "^$name" <<<"$gate_metrics" || fail "gate metric $name missing"
done
kubectl hitl list -n "$NS" | grep -v /bench/ || true
kubectl -n "$NS" get events --field-selector involvedObject.kind=Agent -o custom-columns=REASON:.reason,MESSAGE:.message --no-headers |
  sort | uniq -c | sort -rn | head -n 8 || true
ok "phases Executed / Denied / Expired, pendingApprovals 0, controller and gate metrics exported"

# ---------------------------------------------------------------------------------------------
step "14. failover: SIGTERM to the leader (controller-$LEADER)"
failover() { # SIGNAL NEW-AGENT EXIT-BOUND TAKEOVER-BOUND
  local signal=$1 name=$2 exit_bound=$3 bound=$4 pid=${E2E_PIDS[controller-$LEADER]} t0 t_exit t_lease t_deploy
  # A SIGKILLed job would make bash print "Killed" at some later point: disown it first.
  if [ "$signal" = KILL ]; then disown "$pid"; fi
  t0=$(now)
  kill "-$signal" "$pid"
  agent "$name" | kubectl apply -n "$NS" -f - >/dev/null
  while alive "$pid"; do
    within "$t0" "$exit_bound" || fail "controller-$LEADER still running $exit_bound s after SIG$signal"
    sleep 0.05
  done
  t_exit=$(now)
  HOLDER_AT_EXIT=$(lease_holder)
  if [ "$signal" = KILL ]; then EXIT_CODE=killed; else wait "$pid" && EXIT_CODE=0 || EXIT_CODE=$?; fi
  unset "E2E_PIDS[controller-$LEADER]"
  note "controller-$LEADER gone $(elapsed "$t0" "$t_exit") s after SIG$signal (exit status $EXIT_CODE); Lease holder then: '$HOLDER_AT_EXIT'"
  if [ "$signal" = TERM ]; then
    [ "$EXIT_CODE" = 0 ] || fail "controller-$LEADER exited with status $EXIT_CODE after SIGTERM, want 0"
    [ "$HOLDER_AT_EXIT" != "$DEPLOY_NAME-e2e-$LEADER" ] ||
      fail "controller-$LEADER exited after SIGTERM without releasing the Lease"
  fi
  wait_for "controller-$STANDBY to take the Lease" "$bound" holder_is "$DEPLOY_NAME-e2e-$STANDBY"
  t_lease=$(now)
  wait_for "Deployment $name from the new leader" "$bound" has "deployment/$name" '{.metadata.name}' "$name"
  t_deploy=$(now)
  wait_for "/readyz of the new leader, controller-$STANDBY" 30 readyz "$STANDBY"
  FAILOVER_EXIT=$(elapsed "$t0" "$t_exit")
  FAILOVER_LEASE=$(elapsed "$t0" "$t_lease")
  FAILOVER_DEPLOY=$(elapsed "$t0" "$t_deploy")
  local old=$LEADER
  LEADER=$STANDBY
  STANDBY=$old
}
# The standby sleeps until the expiry of the Lease it last read (kube-lease-manager), so even a
# released Lease can take up to its 30 s duration to change hands.
failover TERM after-term 5 10
ok "exit $FAILOVER_EXIT s; controller-$LEADER holds the Lease at $FAILOVER_LEASE s and rendered Agent after-term at $FAILOVER_DEPLOY s"
figure "SIGTERM leader -> process exited" "$FAILOVER_EXIT s"
figure "SIGTERM leader -> standby holds Lease / renders new Agent" "$FAILOVER_LEASE / $FAILOVER_DEPLOY s"

step "15. failover: SIGKILL to the new leader (controller-$LEADER); controller-$STANDBY restarted as standby"
start_controller "$STANDBY"
wait_for "/readyz of the restarted controller-$STANDBY" 30 readyz "$STANDBY"
holder_is "$DEPLOY_NAME-e2e-$LEADER" || fail "the restarted replica took the Lease from a live leader"
sleep 1
failover KILL after-kill 2 60
ok "controller-$LEADER holds the Lease $FAILOVER_LEASE s after the SIGKILL (Lease expiry) and rendered Agent after-kill at $FAILOVER_DEPLOY s"
figure "SIGKILL leader -> standby holds Lease / renders new Agent" "$FAILOVER_LEASE / $FAILOVER_DEPLOY s"

# ---------------------------------------------------------------------------------------------
step "16. deleting an Agent garbage-collects what was rendered for it"
kubectl -n "$NS" delete agent "$AGENT" --wait=false >/dev/null
gone() { ! kubectl -n "$NS" get "$1" >/dev/null 2>&1; }
for object in deployment/$AGENT service/$AGENT secret/$AGENT serviceaccount/$AGENT role/$AGENT-approval-gate \
  rolebinding/$AGENT-approval-gate "approvalrequest/$SUM" "approvalrequest/$LATE"; do
  wait_for "$object to be deleted" 30 gone "$object"
done
ok "Deployment, Service, Secret, ServiceAccount, Role, RoleBinding and ApprovalRequests of $AGENT deleted"

step "17. Gateway placement: the gate's own Deployment, Service, ServiceAccount and NetworkPolicies; back to Sidecar, none left"
# No kubelet and no CNI here: this proves what the apiserver accepts and what the controller
# prunes, not that a CNI enforces the policies.
GW=gateway
GW_OBJECTS="deployment/$GW-gate service/$GW-gate networkpolicy/$GW-gate networkpolicy/$GW-egress serviceaccount/$GW-gate"
gateway_agent() { agent "$GW" | sed "s/^\(    approval: {.*\)}\$/\1, placement: $1}/"; }
gateway_agent Gateway | grep -q "placement: Gateway}" || fail "gateway_agent did not set placement"
gateway_agent Gateway | kubectl apply -n "$NS" -f - >/dev/null
for object in $GW_OBJECTS; do
  wait_for "$object" 15 has "$object" '{.metadata.ownerReferences[0].name}' "$GW"
done
wait_for "Agent $GW Accepted=True" 15 eval '[ "$(condition agent/$GW Accepted)" = True ]'
has "rolebinding/$GW-approval-gate" '{.subjects[*].name}' "$GW-gate" ||
  fail "RoleBinding $GW-approval-gate binds $(jp "rolebinding/$GW-approval-gate" '{.subjects[*].name}'), not $GW-gate"
[ -z "$(jp "deployment/$GW" '{.spec.template.spec.initContainers}')" ] || fail "the agent pods of $GW still have the gate sidecar"
has "deployment/$GW-gate" '{.spec.template.metadata.labels.kagent\.dev/agent}' "" ||
  fail "the gate pods carry kagent.dev/agent (the agent's selector would take them)"
has "service/$GW-gate" '{.spec.sessionAffinity}' ClientIP || fail "service/$GW-gate has no ClientIP affinity"
expect_in "config.json of $GW" "\"http://$GW-gate.$NS.svc:8099/servers/$NS/everything/mcp\"" \
  "$(jp "secret/$GW" '{.data.config\.json}' | base64 -d)"
# The story's servers listen on 127.0.0.1: outside the cluster CIDRs, without credentials.
wait_for "Agent $GW GateIsolated=False (ExternalServerReachable)" 15 \
  has "agent/$GW" '{.status.conditions[?(@.type=="GateIsolated")].reason}' ExternalServerReachable
expect_in "Ready of $GW" "Deployment $GW-gate" \
  "$(jp "agent/$GW" '{.status.conditions[?(@.type=="Ready")].message}')"
ok "$GW_OBJECTS accepted and owned by Agent/$GW; RoleBinding subject $GW-gate; no sidecar; tool URLs at service/$GW-gate; GateIsolated=False naming the 127.0.0.1 servers"
gateway_agent Sidecar | kubectl apply -n "$NS" -f - >/dev/null
for object in $GW_OBJECTS; do
  wait_for "$object to be pruned" 15 gone "$object"
done
wait_for "RoleBinding $GW-approval-gate back on $GW" 15 has "rolebinding/$GW-approval-gate" '{.subjects[*].name}' "$GW"
has "deployment/$GW" '{.spec.template.spec.initContainers[0].name}' approval-gate || fail "no gate sidecar after the switch back"
wait_for "Agent $GW GateIsolated=False (SidecarSharesNetwork)" 15 \
  has "agent/$GW" '{.status.conditions[?(@.type=="GateIsolated")].reason}' SidecarSharesNetwork
ok "switched back to Sidecar: the five gate objects are deleted, the sidecar and the RoleBinding subject $GW are back"

step "18. figures ($(date -u +%Y-%m-%dT%H:%MZ), $(kubectl version -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])' 2>/dev/null || echo unknown server))"
cat "$FIGURES"
echo
echo "PASS: story e2e"
