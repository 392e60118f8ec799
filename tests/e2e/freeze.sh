#!/usr/bin/env bash
# The freeze switch on the real control plane (docs/policies.md "Freeze"; issue 12 part 4):
#
#  1. the annotation hitl.kagent.dev/freeze on the Agent: its Frozen condition, a gated call
#     refused at once with the reason and no ApprovalRequest asked, an ungated call still runs
#  2. lifted: the gated call asks for approval again and runs once when approved
#  3. the annotation on the Namespace while a call waits for a decision: the waiting call is
#     refused at once, its request Cancelled (reason Frozen), the Agent's condition says why;
#     an approval after that runs nothing
#  4. lifted: nothing that was refused or cancelled runs by itself; the call, made again, asks
#     for a new approval
#  5. a ToolGate (the controller's side only: no gate of it runs): its own annotation sets its
#     Frozen condition (ToolGateFrozen, shown by -o wide, a Frozen Event) and cancels its
#     pending request (reason Frozen); lifted, the condition goes (an Unfrozen Event); the
#     Namespace's annotation sets it too (NamespaceFrozen) until lifted
#
# The gate runs as a local process with the Agent's ServiceAccount token, so it watches its
# Agent with exactly the rights the rendered Role gives it. Environment: HITL_E2E_BIN (default
# target/debug/hitl-operator). Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin
AGENT=frozen
GATES_TOOLS="[read_file, delete_file]"
FREEZE=hitl.kagent.dev/freeze
throwaway hitl-e2e-freeze

now_ms() { date +%s%3N; }
# call NAME TOOL PATH: TOOL(PATH) through gate a, in the background.
call() { gate_call "$1" a "$2" "$3"; }
frozen_condition() { jp "agent/$AGENT" '{.status.conditions[?(@.type=="Frozen")].reason}'; }
awaiting() { [ "$(gate_metric a hitl_gate_calls_awaiting_decision)" = 1 ]; }
phase() { jp "approvalrequest/$1" '{.status.phase}'; }

step "setup: CRDs, namespace $NS, the recorder MCP server, the controller, Agent $AGENT, its gate"
gates_setup
start_gate a
ok "recorder on :$RECORDER_PORT; controller ready; gate a of Agent $AGENT"

# ---------------------------------------------------------------------------------------------
step "1. the Agent frozen"
kubectl -n "$NS" annotate "agent/$AGENT" "$FREEZE=incident 42" >/dev/null
wait_for "the Agent's Frozen condition" 20 eval '[ "$(frozen_condition)" = AgentFrozen ]'
expect_in "kubectl get agent -o wide" "Agent $AGENT is frozen ($FREEZE: incident 42)" \
  "$(kubectl -n "$NS" get "agent/$AGENT" -o wide)"
expect_in "the Agent's Events" "Frozen" "$(kubectl -n "$NS" get events --field-selector "involvedObject.name=$AGENT" -o jsonpath='{.items[*].reason}')"
# The gate sees the annotation on its own watch of the Agent (no controller in between).
refused_by_freeze() { call probe delete_file /frozen/1; grep -qF "incident 42" <<<"$(finished probe)"; }
wait_for "the gate seeing the freeze" 20 refused_by_freeze
out=$(cat "$WORK/probe.out")
expect_in "the gated call" "NOT executed: tool 'delete_file' needs approval" "$out"
expect_in "the gated call" "Agent $AGENT is frozen ($FREEZE: incident 42)" "$out"
[ -z "$(requests /frozen/1)" ] || fail "an ApprovalRequest was asked while frozen: $(requests /frozen/1)"
call ungated read_file /frozen/readme
expect_in "the ungated call" '"text":"contents of /frozen/readme"' "$(finished ungated)"
[ "$(runs delete_file /frozen/1)" = 0 ] || fail "delete_file ran while frozen"
frozen_calls=$(curl -fsS "${GATE_METRICS[a]}" | awk '$1 == "hitl_gate_tool_calls_total{outcome=\"frozen\"}" { print $2 }')
[ "${frozen_calls:-0}" -ge 1 ] || fail "no call counted with outcome frozen"
ok "Frozen condition AgentFrozen; delete_file refused with the reason, nothing asked; read_file ran; $frozen_calls call(s) counted frozen"

# ---------------------------------------------------------------------------------------------
step "2. lifted"
kubectl -n "$NS" annotate "agent/$AGENT" "$FREEZE-" >/dev/null
wait_for "the Frozen condition to go" 20 eval '[ -z "$(frozen_condition)" ]'
call lifted delete_file /frozen/1
wait_for "the gated call waiting for a decision" 20 awaiting
the_request REQ /frozen/1
kubectl hitl approve "$REQ" -n "$NS" --reason "e2e: after the freeze" >/dev/null
expect_in "the approved call" '"text":"deleted /frozen/1"' "$(finished lifted)"
[ "$(runs delete_file /frozen/1)" = 1 ] || fail "delete_file(/frozen/1) ran $(runs delete_file /frozen/1) times, want 1"
ok "the call asked again ($REQ) and ran once when approved"

# ---------------------------------------------------------------------------------------------
step "3. the Namespace frozen while a call waits"
call waiting delete_file /frozen/2
wait_for "the gated call waiting for a decision" 20 awaiting
the_request REQ /frozen/2
started=$(now_ms)
kubectl annotate namespace "$NS" "$FREEZE=drill" >/dev/null
out=$(finished waiting)
refused_ms=$(($(now_ms) - started))
expect_in "the waiting call" "NOT executed: tool 'delete_file' was not forwarded (ApprovalRequest $REQ)" "$out"
expect_in "the waiting call" "Namespace $NS is frozen ($FREEZE: drill)" "$out"
wait_for "request $REQ Cancelled" 20 eval '[ "$(phase "$REQ")" = Cancelled ]'
[ "$(jp "approvalrequest/$REQ" '{.status.conditions[?(@.type=="Finished")].reason}')" = Frozen ] ||
  fail "request $REQ: Finished reason $(jp "approvalrequest/$REQ" '{.status.conditions[?(@.type=="Finished")].reason}'), want Frozen"
expect_in "request $REQ's message" "Namespace $NS is frozen ($FREEZE: drill)" "$(jp "approvalrequest/$REQ" '{.status.message}')"
[ "$(frozen_condition)" = NamespaceFrozen ] || fail "Agent condition Frozen: '$(frozen_condition)', want NamespaceFrozen"
# An approval now changes nothing: the request is finished.
kubectl hitl approve "$REQ" -n "$NS" --reason "e2e: during the freeze" >/dev/null 2>&1 || true
sleep 1
[ "$(runs delete_file /frozen/2)" = 0 ] || fail "delete_file(/frozen/2) ran after the freeze"
ok "the waiting call was refused ${refused_ms} ms after the annotation; $REQ Cancelled (Frozen); Agent Frozen=NamespaceFrozen"
note "annotation -> waiting call refused: ${refused_ms} ms (controller: Agent condition; gate: its watch of the Agent)"

# ---------------------------------------------------------------------------------------------
step "4. lifted: nothing runs by itself"
kubectl annotate namespace "$NS" "$FREEZE-" >/dev/null
wait_for "the Frozen condition to go" 20 eval '[ -z "$(frozen_condition)" ]'
sleep 1
[ "$(runs delete_file /frozen/2)" = 0 ] || fail "delete_file(/frozen/2) ran after the freeze was lifted"
[ "$(phase "$REQ")" = Cancelled ] || fail "request $REQ is $(phase "$REQ") after the lift, want Cancelled"
call again delete_file /frozen/2
wait_for "the call made again waiting for a decision" 20 awaiting
the_request NEW /frozen/2 "$REQ"
kubectl hitl deny "$NEW" -n "$NS" --reason "e2e: not this one" >/dev/null
expect_in "the call made again" "was denied" "$(finished again)"
[ "$(runs delete_file /frozen/2)" = 0 ] || fail "delete_file(/frozen/2) ran"
ok "after the lift nothing ran; the call made again asked anew ($NEW) and was denied"

# ---------------------------------------------------------------------------------------------
step "5. a ToolGate frozen, lifted, frozen by its Namespace (the controller's side)"
TG=frozen-tool-gate
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: ToolGate
metadata: {name: $TG}
spec:
  server: {url: "http://127.0.0.1:$RECORDER_PORT/mcp"}
  toolNames: [delete_file]
  requireApproval: [delete_file]
---
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: $TG-call}
spec:
  agentRef: {name: $TG, kind: ToolGate}
  toolServer: {kind: RemoteMCPServer, name: $TG, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf '%064d' 5)"
  argumentsBytes: 2
  requestedBy: system:serviceaccount:$NS:$TG-gate
  expiresAt: "2099-01-01T00:00:00Z"
YAML
tg_condition() { jp "toolgate/$TG" "{.status.conditions[?(@.type==\"$1\")].$2}"; }
tg_events() { kubectl -n "$NS" get events --field-selector "involvedObject.kind=ToolGate,involvedObject.name=$TG" -o jsonpath='{.items[*].reason}'; }
wait_for "ToolGate $TG Accepted" 20 eval '[ "$(tg_condition Accepted status)" = True ]'
wait_for "request $TG-call Pending" 20 eval '[ "$(phase "$TG-call")" = Pending ]'
kubectl -n "$NS" annotate "toolgate/$TG" "$FREEZE=incident 43" >/dev/null
wait_for "the ToolGate's Frozen condition" 20 eval '[ "$(tg_condition Frozen reason)" = ToolGateFrozen ]'
expect_in "kubectl get toolgate -o wide" "ToolGate $TG is frozen ($FREEZE: incident 43)" \
  "$(kubectl -n "$NS" get "toolgate/$TG" -o wide)"
wait_for "request $TG-call Cancelled" 20 eval '[ "$(phase "$TG-call")" = Cancelled ]'
[ "$(jp "approvalrequest/$TG-call" '{.status.conditions[?(@.type=="Finished")].reason}')" = Frozen ] ||
  fail "request $TG-call: Finished reason $(jp "approvalrequest/$TG-call" '{.status.conditions[?(@.type=="Finished")].reason}'), want Frozen"
wait_for "the ToolGate's Frozen Event" 10 eval 'grep -qw Frozen <<<"$(tg_events)"'
kubectl -n "$NS" annotate "toolgate/$TG" "$FREEZE-" >/dev/null
wait_for "the ToolGate's Frozen condition to go" 20 eval '[ -z "$(tg_condition Frozen reason)" ]'
wait_for "the ToolGate's Unfrozen Event" 10 eval 'grep -qw Unfrozen <<<"$(tg_events)"'
[ "$(phase "$TG-call")" = Cancelled ] || fail "request $TG-call is $(phase "$TG-call") after the lift, want Cancelled"
kubectl annotate namespace "$NS" "$FREEZE=drill 2" >/dev/null
wait_for "the ToolGate's Frozen condition from its Namespace" 20 eval '[ "$(tg_condition Frozen reason)" = NamespaceFrozen ]'
expect_in "the ToolGate's Frozen message" "Namespace $NS is frozen ($FREEZE: drill 2)" "$(tg_condition Frozen message)"
kubectl annotate namespace "$NS" "$FREEZE-" >/dev/null
wait_for "the ToolGate's Frozen condition to go" 20 eval '[ -z "$(tg_condition Frozen reason)" ]'
ok "ToolGate $TG: Frozen=ToolGateFrozen, $TG-call Cancelled (Frozen), lifted; Frozen=NamespaceFrozen from $NS, lifted; Events $(tg_events)"

echo
echo "PASS: freeze"
