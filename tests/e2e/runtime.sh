#!/usr/bin/env bash
# kagent's own agent runtime next to the gate, on a real control plane: an Agent from examples/
# (filesystem-agent.yaml, its model from model-openai.yaml), rendered by the controller; its gate
# and kagent-adk 0.7.4 (the chart's default agentImage) started exactly as the rendered
# Deployment starts them (args, env and mounted files from the objects in the cluster:
# tests/kagent-runtime/agent_pod.py, the runtime's hitl-operator-sessions token bound to the
# Agent's Pending pod); the session store (`hitl-operator sessions`, SQLite in the work folder)
# as a local process, the controller rendering KAGENT_URL to it (--session-store-url); a
# scripted OpenAI-compatible model (tests/kagent-runtime/model.py); the npm recorder as the
# Streamable HTTP tool server and server-everything as an SSE one. Through A2A `message/send`:
#  1. an ungated tool runs straight through (the baseline turn);
#  1b. a conversation outlives the store: turn 1 ("the code word is kiwi-4711"), the store
#     SIGKILLed and started again on its SQLite file, turn 2 in the same conversation (its A2A
#     contextId): the model gets turn 1 in turn 2's history (and, as a control, a store in
#     memory restarted the same way loses it);
#  2. the gated delete_file waits as an ApprovalRequest, `kubectl hitl approve` lets it run once,
#     the answer carries the tool's result;
#  3. a denial's reason reaches the model, and nothing runs; an approval with an edit runs the
#     edited call once, and the tool result the model reads says which path the approver changed;
#  4. waitTimeout passes: the model gets the "pending" answer; after the approval, the retry of
#     the same call runs it once, and a third call asks again;
#  5. the SSE tool server: ungated and gated;
#  6. the runtime's token (audience hitl-operator-sessions) is no Kubernetes credential; an
#     Agent in approval mode Runtime (no gate, no kagent) gets the store as its KAGENT_URL and
#     waits only for its pod (Ready=False DeploymentNotReady, never NoSessionApi);
#  5b. the tool server restarts (a new recorder process on its port, as a rollout starts one)
#     between turns, and in the middle of one while a gated call waits for its approval: every
#     turn after is answered (a new conversation and the same one), the approved call runs
#     once — the gate carries the runtime's MCP session onto the new server (docs/gate.md);
#  7. the newest release (kagent-adk 0.10.4) in the same pod: ungated, gated approved, its
#     conversation across a store restart as in 1b, and the tool server's restarts as in 5b.
# Figures: message/send -> ApprovalRequest, approval -> A2A answer, against the ungated turn.
#
# Needs: the binaries (run.sh builds them), the npm peers and the runtime's venv
# (make peers runtime-peers; HITL_E2E_RUNTIME_VENV and HITL_E2E_NEWEST_RUNTIME_VENV override them), root (unshare, bind mounts),
# ports 8080 and 8099 free (the pod's own ports). The store runs with KUBECONFIG's credentials
# (tests/e2e/sessions.sh runs it as its own ServiceAccount). Prints SKIP without a cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
source tests/e2e/gates.sh
gates_begin

RUNTIME=$PWD/tests/kagent-runtime
VENV=${HITL_E2E_RUNTIME_VENV:-$RUNTIME/.venv-0.7.4}
NEWEST=${HITL_E2E_NEWEST_RUNTIME_VENV:-$RUNTIME/.venv-0.10.4}
for venv in "$VENV" "$NEWEST"; do
  [ -x "$venv/bin/kagent-adk" ] || fail "no kagent-adk in $venv: make runtime-peers"
done
[ "$(id -u)" = 0 ] || fail "the runtime's mounts need root (unshare, mount --bind)"
AGENT=file-agent
AGENT_URL=http://127.0.0.1:8080/
throwaway hitl-e2e-runtime
FIGURES=$WORK/figures
figure() { printf '%-64s %s\n' "$1" "$2" | tee -a "$FIGURES"; }
for port in 8080 8099; do
  ! http_up "http://127.0.0.1:$port/" || fail "port $port is taken: the agent pod's ports must be free"
done

step "1. peers, the controller, and the examples applied"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
waited "the CRDs Established" kubectl wait --for=condition=Established --timeout=60s crd/agents.kagent.dev crd/approvalrequests.kagent.dev >/dev/null
kubectl create namespace "$NS" >/dev/null
RECORDER_PORT=$(free_port)
SSE_PORT=$(free_port)
MODEL_PORT=$(free_port)
start recorder "$WORK/recorder.log" env PORT="$RECORDER_PORT" node "$PEERS/recorder.mjs"
start everything "$WORK/everything.log" env PORT="$SSE_PORT" \
  node "$PEERS/node_modules/@modelcontextprotocol/server-everything/dist/index.js" sse
start model "$WORK/model.log" python3 "$RUNTIME/model.py" "$MODEL_PORT" "$WORK/model.jsonl"
wait_for "the recorder" 20 http_ok "http://127.0.0.1:$RECORDER_PORT/calls"
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; } # an SSE stream never ends
wait_for "server-everything (SSE)" 20 port_open "$SSE_PORT"
wait_for "the scripted model" 20 http_up "http://127.0.0.1:$MODEL_PORT/"
STORE_PORT=$(free_port)
STORE_HEALTH=$(free_port)
STORE_URL=http://127.0.0.1:$STORE_PORT
# start_store [DATABASE]: the session store on STORE_PORT, on $WORK/sessions.db unless given.
start_store() {
  start store "$WORK/store.log" "$BIN" sessions --listen "127.0.0.1:$STORE_PORT" \
    --health-listen "127.0.0.1:$STORE_HEALTH" --database "${1:-sqlite://$WORK/sessions.db}"
  wait_for "the session store's /readyz" 30 http_ok "http://127.0.0.1:$STORE_HEALTH/readyz"
  alive "${E2E_PIDS[store]}" || fail "the session store exited"
}
start_store
CONTROLLER_PORT=$(free_port)
start controller "$WORK/controller.log" "$BIN" controller --namespace "$NS" \
  --leader-election=false --metrics-addr="127.0.0.1:$CONTROLLER_PORT" --session-store-url "$STORE_URL"
wait_for "the controller's /readyz" 30 http_ok "http://127.0.0.1:$CONTROLLER_PORT/readyz"

sed "s|^  openAI:\$|  openAI:\n    baseUrl: http://127.0.0.1:$MODEL_PORT/v1|" examples/model-openai.yaml |
  kubectl -n "$NS" apply -f - >/dev/null
sed "s|url: http://filesystem-mcp:3000/mcp|url: http://127.0.0.1:$RECORDER_PORT/mcp|" examples/filesystem-agent.yaml |
  kubectl -n "$NS" apply -f - >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: everything-sse}
spec: {url: "http://127.0.0.1:$SSE_PORT/sse", protocol: SSE, timeout: 30s}
EOF
kubectl -n "$NS" patch agent "$AGENT" --type json -p '[{"op": "add", "path": "/spec/declarative/tools/-", "value":
  {"type": "McpServer", "mcpServer": {"name": "everything-sse", "toolNames": ["echo", "get-sum"], "requireApproval": ["get-sum"]}}}]' >/dev/null
sse_rendered() { jp "secret/$AGENT" '{.data.gate\.json}' | base64 -d | grep -q everything-sse; }
wait_for "the Agent's Secret with both tool servers" 20 sse_rendered
wait_for "ServiceAccount $AGENT" 10 kubectl -n "$NS" get "serviceaccount/$AGENT"
ok "examples/filesystem-agent.yaml and examples/model-openai.yaml applied; SSE server added; rendered"

step "2. the pod: the gate and kagent-adk $("$VENV/bin/pip" show kagent-adk | sed -n 's/^Version: //p') as the Deployment runs them"
kubeconfig_with_token "$WORK/agent.kubeconfig" "$(kubectl -n "$NS" create token "$AGENT" --duration=1h)" "$NS"
start_pod_gate
container_env() { jp "deployment/$AGENT" "{.spec.template.spec.containers[?(@.name==\"agent\")].env[?(@.name==\"$1\")].value}"; }
[ "$(container_env KAGENT_URL)" = "$STORE_URL" ] || fail "KAGENT_URL is '$(container_env KAGENT_URL)', not the session store's $STORE_URL"
token_audience() { jp "deployment/$1" '{.spec.template.spec.volumes[?(@.name=="kagent-token")].projected.sources[0].serviceAccountToken.audience}'; }
[ "$(token_audience "$AGENT")" = hitl-operator-sessions ] || fail "the kagent-token audience is '$(token_audience "$AGENT")', not hitl-operator-sessions"
start agent "$WORK/agent.log" python3 "$RUNTIME/agent_pod.py" "$NS" "$AGENT" "$VENV" "$WORK/pod"
wait_for "the runtime's /health" 90 http_ok "http://127.0.0.1:8080/health"
alive "${E2E_PIDS[agent]}" || fail "the runtime exited: $(tail -20 "$WORK/agent.log")"
curl -fsS http://127.0.0.1:8080/.well-known/agent-card.json >"$WORK/card.json" ||
  curl -fsS http://127.0.0.1:8080/.well-known/agent.json >"$WORK/card.json" || fail "no agent card"
grep -q '"name"' "$WORK/card.json" || fail "the agent card has no name: $(cat "$WORK/card.json")"
grep -q "session store token bound to pod $AGENT-" "$WORK/agent.log" || fail "the runtime's token is bound to no pod: $(head -1 "$WORK/agent.log")"
ok "runtime up: $(head -1 "$WORK/agent.log"); KAGENT_URL=$STORE_URL (the session store)"

runtime_log() { tail -30 "$WORK/agent.log"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Every ApprovalRequest's first watch event, stamped with its arrival: when it was created, to
# the watch's resolution (a poll would add its own interval).
kubectl -n "$NS" get approvalrequests --watch -o name \
  > >(while IFS= read -r line; do echo "$EPOCHREALTIME $line"; done >"$WORK/requests.watch") 2>/dev/null &
E2E_PIDS[watch]=$!
created_at() { grep -m1 " approvalrequest.kagent.dev/$1\$" "$WORK/requests.watch" | cut -d' ' -f1; }

step "3. ungated: read_file runs straight through (5 turns, the baseline)"
for i in 1 2 3 4 5; do
  send "read-$i" "CALL read_file {\"path\": \"/data/notes-$i.txt\"}"
  reply "read-$i"
  expect_answer "$ANSWER" "contents of /data/notes-$i.txt"
  field "$ANSWER" seconds >>"$WORK/ungated.s"
done
[ "$(runs read_file /data/notes-1.txt)" = 1 ] || fail "read_file ran $(runs read_file /data/notes-1.txt) times"
UNGATED=$(median <"$WORK/ungated.s")
[ -z "$(kubectl -n "$NS" get approvalrequests -o name)" ] || fail "an ungated call made an ApprovalRequest"
figure "ungated turn (message/send -> answer), median of 5" "$UNGATED s"
ok "5 turns with read_file answered with its result, no ApprovalRequest"

# model_history_since LINE: what the model was sent after line LINE of model.jsonl: every
# message's text of those requests, one a line.
model_history_since() {
  tail -n +"$(($1 + 1))" "$WORK/model.jsonl" | python3 -c 'import json, sys
for line in sys.stdin:
    for m in json.loads(line)["messages"]:
        c = m.get("content")
        text = c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))
        print(m["role"] + ": " + " ".join(text.split()))'
}
# remembered TAG: turn 1 gives a code word, the store is SIGKILLed and started again on the
# same SQLite file, turn 2 in the same conversation: the model gets turn 1 in its history.
# With DATABASE ("memory:") the store runs on it, for the control: the word must be lost.
remembered() {
  local tag=$1 database=${2:-} word="kiwi-4711-$1" context lines t_restart
  [ -z "$database" ] || { stop store; start_store "$database"; }
  send "turn1-$tag" "the code word is $word"
  reply "turn1-$tag"
  expect_answer "$ANSWER" OK
  context=$(field "$ANSWER" context_id)
  t_restart=$(now)
  stop store KILL
  start_store "$database"
  STORE_RESTART_S=$(elapsed "$t_restart")
  lines=$(wc -l <"$WORK/model.jsonl")
  send "turn2-$tag" "what was the code word?" "$context"
  reply "turn2-$tag"
  expect_answer "$ANSWER" OK
  [ "$(field "$ANSWER" context_id)" = "$context" ] || fail "turn 2 went to another conversation: $ANSWER"
  model_history_since "$lines" >"$WORK/history-$tag.txt"
  grep -q '^user: what was the code word?' "$WORK/history-$tag.txt" || fail "the model never got turn 2: $(cat "$WORK/history-$tag.txt")"
  if [ -n "$database" ]; then
    ! grep -q "$word" "$WORK/history-$tag.txt" || fail "control: a store in memory, restarted, still gave the model turn 1"
    stop store
    start_store
  else
    grep -q "^user: the code word is $word" "$WORK/history-$tag.txt" ||
      fail "turn 2 reached the model without turn 1 after the store's restart: $(cat "$WORK/history-$tag.txt")"
  fi
}

step "3b. a conversation outlives the session store (kagent-adk $("$VENV/bin/pip" show kagent-adk | sed -n 's/^Version: //p'))"
remembered 074
ok "turn 1 told the code word; the store SIGKILLed and restarted on its SQLite file ($STORE_RESTART_S s); turn 2 in the same context reached the model with turn 1 in its history"
remembered 074-memory memory:
ok "control: the same with --database memory: gives the model turn 2 without turn 1 (the check sees a loss)"

step "4. gated: delete_file waits for kubectl hitl approve, then runs once"
T_SEND=$(now)
send approve "CALL delete_file {\"path\": \"/data/report.csv\"}"
the_request REQ /data/report.csv
wait_for "the watch event of $REQ" 5 created_at "$REQ"
T_REQUEST=$(created_at "$REQ")
[ "$(runs delete_file /data/report.csv)" = 0 ] || fail "delete_file ran before the approval"
T_APPROVE=$(now)
kubectl hitl approve "$REQ" -n "$NS" --reason "e2e: the report may go" >/dev/null
reply approve
T_ANSWER=$(now)
expect_answer "$ANSWER" "deleted /data/report.csv"
[ "$(runs delete_file /data/report.csv)" = 1 ] || fail "delete_file ran $(runs delete_file /data/report.csv) times"
wait_for "request $REQ Executed" 10 eval '[ "$(jp "approvalrequest/$REQ" "{.status.phase}")" = Executed ]'
figure "gated: message/send -> ApprovalRequest (its watch event)" "$(elapsed "$T_SEND" "$T_REQUEST") s"
figure "gated: approval (kubectl hitl approve) -> A2A answer" "$(elapsed "$T_APPROVE" "$T_ANSWER") s"
ok "ApprovalRequest $REQ; approved; the answer carries 'deleted /data/report.csv'; ran once; Executed"

step "5. denied: the reason reaches the model, nothing runs"
send deny "CALL delete_file {\"path\": \"/data/keep.csv\"}"
the_request DENIED /data/keep.csv
kubectl hitl deny "$DENIED" -n "$NS" --reason "e2e: keep.csv stays" >/dev/null
reply deny
expect_answer "$ANSWER" "e2e: keep.csv stays"
expect_in "the tool result the model got" "e2e: keep.csv stays" "$(tail -1 "$WORK/model.jsonl")"
[ "$(runs delete_file /data/keep.csv)" = 0 ] || fail "a denied delete_file ran"
DENIAL=$(field "$ANSWER" text)
ok "denied with a reason: the model read it (${DENIAL:0:160}...), nothing ran"

step "5b. edited: the approver's edit runs once, and the tool result the model reads says what was changed"
send edited "CALL delete_file {\"path\": \"/data/draft.csv\"}"
the_request EDITED /data/draft.csv
kubectl hitl approve "$EDITED" -n "$NS" --reason "e2e: the old draft instead" \
  --patch '[{"op":"replace","path":"/path","value":"/data/draft-old.csv"}]' >/dev/null
reply edited
expect_answer "$ANSWER" "deleted /data/draft-old.csv"
expect_in "the tool result the model got" "changed: /path" "$(tail -1 "$WORK/model.jsonl")"
[ "$(runs delete_file /data/draft-old.csv)" = 1 ] || fail "the edited call ran $(runs delete_file /data/draft-old.csv) times"
[ "$(runs delete_file /data/draft.csv)" = 0 ] || fail "the original of the edited call ran"
ok "edited and approved: /data/draft-old.csv deleted once, /data/draft.csv never; the model read the gate's note (changed: /path)"

step "6. waitTimeout: the pending answer, then the model's retry after the approval runs once"
send pending "CALL delete_file {\"path\": \"/data/later.csv\"}"
the_request LATER /data/later.csv
reply pending
expect_answer "$ANSWER" "$LATER"
CONTEXT=$(field "$ANSWER" context_id)
kubectl hitl approve "$LATER" -n "$NS" --reason "e2e: later is fine" >/dev/null
send retry "CALL delete_file {\"path\": \"/data/later.csv\"}" "$CONTEXT"
reply retry
expect_answer "$ANSWER" "deleted /data/later.csv"
[ "$(runs delete_file /data/later.csv)" = 1 ] || fail "the retried call ran $(runs delete_file /data/later.csv) times"
send again "CALL delete_file {\"path\": \"/data/later.csv\"}" "$CONTEXT"
the_request AGAIN /data/later.csv "$LATER"
[ "$(runs delete_file /data/later.csv)" = 1 ] || fail "a used approval let a third call run"
kubectl hitl deny "$AGAIN" -n "$NS" --reason "e2e: once is enough" >/dev/null
reply again
ok "pending answer named $LATER; after approval the retry in the same session ran once; a third call asked again ($AGAIN)"

step "7. the SSE tool server: echo straight through, get-sum approved"
send echo "CALL echo {\"message\": \"over SSE\"}"
reply echo
expect_answer "$ANSWER" "Echo: over SSE"
send sum "CALL get-sum {\"a\": 2, \"b\": 3}"
sum_request() { kubectl -n "$NS" get approvalrequests -l kagent.dev/tool=get-sum -o jsonpath="{.items[0].metadata.name}" 2>/dev/null; }
wait_for "the get-sum ApprovalRequest" 15 eval '[ -n "$(sum_request)" ]'
kubectl hitl approve "$(sum_request)" -n "$NS" --reason "e2e: sums are harmless" >/dev/null
reply sum
expect_answer "$ANSWER" "5"
ok "SSE: echo answered, get-sum ran after approval"

# restart_recorder: a new process of the npm recorder on its port, as a rollout starts one; it
# knows none of the old one's MCP sessions (it answers them 404).
restart_recorder() {
  stop recorder
  start recorder "$WORK/recorder.log" env PORT="$RECORDER_PORT" node "$PEERS/recorder.mjs"
  wait_for "the restarted recorder" 20 http_ok "http://127.0.0.1:$RECORDER_PORT/calls"
}
# tool_server_restarts TAG: the recorder restarted between two turns, then while a gated call
# waits for its approval; every turn after is answered, the approved call runs once.
tool_server_restarts() {
  local tag=$1 context mid
  send "restart-before-$tag" "CALL read_file {\"path\": \"/data/before-$tag.txt\"}"
  reply "restart-before-$tag"
  expect_answer "$ANSWER" "contents of /data/before-$tag.txt"
  context=$(field "$ANSWER" context_id)
  restart_recorder
  send "restart-new-$tag" "CALL read_file {\"path\": \"/data/new-$tag.txt\"}"
  reply "restart-new-$tag"
  expect_answer "$ANSWER" "contents of /data/new-$tag.txt"
  send "restart-same-$tag" "CALL read_file {\"path\": \"/data/same-$tag.txt\"}" "$context"
  reply "restart-same-$tag"
  expect_answer "$ANSWER" "contents of /data/same-$tag.txt"
  send "restart-mid-$tag" "CALL delete_file {\"path\": \"/data/mid-$tag.csv\"}"
  the_request mid "/data/mid-$tag.csv"
  restart_recorder
  kubectl hitl approve "$mid" -n "$NS" --reason "e2e: approved after the tool server restarted" >/dev/null
  reply "restart-mid-$tag"
  expect_answer "$ANSWER" "deleted /data/mid-$tag.csv"
  [ "$(runs delete_file "/data/mid-$tag.csv")" = 1 ] || fail "the approved call ran $(runs delete_file "/data/mid-$tag.csv") times"
  wait_for "request $mid Executed" 10 eval '[ "$(jp "approvalrequest/$mid" "{.status.phase}")" = Executed ]'
  send "restart-after-$tag" "CALL read_file {\"path\": \"/data/after-$tag.txt\"}"
  reply "restart-after-$tag"
  expect_answer "$ANSWER" "contents of /data/after-$tag.txt"
}

step "7b. the tool server restarts between turns and in the middle of one (kagent-adk $("$VENV/bin/pip" show kagent-adk | sed -n 's/^Version: //p'))"
tool_server_restarts 074
ok "recorder restarted between turns: a new conversation and the same one answered; restarted while a gated call waited: approved, ran once, Executed; the next turn answered"

# A legacy SSE session is not carried across its server's restart (docs/gate.md, "A tool
# server's restart"): the gate ends the runtime's stream with the server's, and kagent-adk
# begins a new SSE session for its next turn, which is answered.
step "7c. the SSE tool server restarts between turns"
stop everything
start everything "$WORK/everything-restarted.log" env PORT="$SSE_PORT" \
  node "$PEERS/node_modules/@modelcontextprotocol/server-everything/dist/index.js" sse
wait_for "server-everything (SSE) restarted" 20 port_open "$SSE_PORT"
send sse-after "CALL echo {\"message\": \"after the SSE restart\"}"
reply sse-after
expect_answer "$ANSWER" "Echo: after the SSE restart"
send sse-again "CALL echo {\"message\": \"once more over SSE\"}"
reply sse-again
expect_answer "$ANSWER" "Echo: once more over SSE"
ok "SSE server restarted between turns: the next two turns answered over a new SSE session"

step "8. the runtime's token, and an Agent in approval mode Runtime"
TOKEN=$WORK/pod/volumes/kagent-token/kagent-token
[ -s "$TOKEN" ] || fail "no kagent-token was mounted"
if kubectl --token "$(cat "$TOKEN")" --kubeconfig /dev/null --server "$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')" \
  --insecure-skip-tls-verify auth whoami >"$WORK/whoami" 2>&1; then
  fail "the runtime's token (audience hitl-operator-sessions) authenticates to the Kubernetes API: $(cat "$WORK/whoami")"
fi
kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: runtime-only}
spec:
  type: Declarative
  declarative: {systemMessage: "No gate.", approval: {mode: Runtime}}
EOF
ready_reason() { jp agent/runtime-only '{.status.conditions[?(@.type=="Ready")].reason}'; }
wait_for "Agent runtime-only Ready=False DeploymentNotReady (no node runs its pod)" 20 eval '[ "$(ready_reason)" = DeploymentNotReady ]'
[ "$(jp agent/runtime-only '{.status.conditions[?(@.type=="Accepted")].status}')" = True ] || fail "Agent runtime-only not Accepted"
runtime_env() { jp deployment/runtime-only "{.spec.template.spec.containers[?(@.name==\"agent\")].env[?(@.name==\"$1\")].value}"; }
[ "$(runtime_env KAGENT_URL)" = "$STORE_URL" ] || fail "Agent runtime-only's KAGENT_URL is '$(runtime_env KAGENT_URL)', not the store's $STORE_URL"
[ "$(token_audience runtime-only)" = hitl-operator-sessions ] || fail "Agent runtime-only's kagent-token audience is '$(token_audience runtime-only)'"
ok "the hitl-operator-sessions token is refused by the apiserver; approval mode Runtime without kagent: KAGENT_URL the store, Accepted, Ready=False only for want of a running pod ($(ready_reason))"

step "9. the newest release, kagent-adk $("$NEWEST/bin/pip" show kagent-adk | sed -n 's/^Version: //p'), in the same pod"
stop agent
start agent "$WORK/agent-newest.log" python3 "$RUNTIME/agent_pod.py" "$NS" "$AGENT" "$NEWEST" "$WORK/pod-newest"
wait_for "the newest runtime's /health" 90 http_ok "http://127.0.0.1:8080/health"
send newest-read "CALL read_file {\"path\": \"/data/newest.txt\"}"
reply newest-read
expect_answer "$ANSWER" "contents of /data/newest.txt"
send newest-delete "CALL delete_file {\"path\": \"/data/newest.csv\"}"
the_request NEWEST_REQ /data/newest.csv
kubectl hitl approve "$NEWEST_REQ" -n "$NS" --reason "e2e: the newest runtime too" >/dev/null
reply newest-delete
expect_answer "$ANSWER" "deleted /data/newest.csv"
[ "$(runs delete_file /data/newest.csv)" = 1 ] || fail "delete_file ran $(runs delete_file /data/newest.csv) times"
ok "the newest runtime: read_file straight through, delete_file approved and run once"
remembered 0104
ok "the newest runtime: turn 1, the store SIGKILLed and restarted ($STORE_RESTART_S s), turn 2 reached the model with turn 1 in its history"
tool_server_restarts 0104
ok "the newest runtime: the recorder restarted between turns and while a gated call waited; every turn after answered, the approved call ran once"

echo
cat "$FIGURES"
echo "PASS: runtime e2e"
