#!/usr/bin/env bash
# End-to-end test of `kubectl hitl` and the chart's admission policy on a real cluster.
#
# Uses the cluster of $KUBECONFIG (or ~/.kube/config) as a cluster-admin who may impersonate and
# is not a ServiceAccount (the admission policy lets only people decide).
# Installs the chart's CRDs, the hitl-approver/hitl-viewer roles and (on Kubernetes 1.30+) the
# admission policies from the checked-in renderings in tests/chart/rendered/, then creates
# ApprovalRequests as an agent ServiceAccount and decides them with the plugin and with
# `kubectl patch`. No controller is needed. Prints "SKIP: no cluster reachable" and exits 0
# when there is no cluster.
#
# Environment: KUBECTL_HITL (plugin binary, default target/debug/kubectl-hitl, built if missing),
# HITL_E2E_KEEP=1 keeps the test namespace and cluster-scoped objects.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh # kubeconfig_with_token, kube_curl (its fail is replaced below)

skip_without_cluster

PLUGIN=${KUBECTL_HITL:-target/debug/kubectl-hitl}
if [[ ! -x $PLUGIN ]]; then
  cargo build --quiet --bin kubectl-hitl
fi

NS=hitl-e2e-$(date +%s)
AGENT_SA=system:serviceaccount:$NS:helper
ADMIN=$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')
FAILURES=0
POLICY=0

cleanup() {
  stop_inboxes
  if [[ -n ${AGENT_KUBECONFIG:-} ]]; then rm -f "$AGENT_KUBECONFIG" "$AGENT_KUBECONFIG.ca"; fi
  if [[ ${HITL_E2E_KEEP:-0} == 1 ]]; then
    echo "kept namespace $NS"
    return
  fi
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  kubectl delete -f tests/chart/rendered/user-roles.default.yaml --ignore-not-found >/dev/null 2>&1 || true
  if [[ $POLICY == 1 ]]; then
    kubectl delete -f tests/chart/rendered/admission-policy.default.yaml --ignore-not-found >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILURES=$((FAILURES + 1)); }

# expect_ok DESCRIPTION COMMAND...: the command succeeds.
expect_ok() {
  local what=$1; shift
  local out
  if out=$("$@" 2>&1); then pass "$what"; else fail "$what: $out"; fi
}

# expect_fail DESCRIPTION PATTERN COMMAND...: the command fails and prints PATTERN (grep -E).
expect_fail() {
  local what=$1 pattern=$2; shift 2
  local out
  if out=$("$@" 2>&1); then
    fail "$what: succeeded, expected a failure: $out"
  elif grep -qE -- "$pattern" <<<"$out"; then
    pass "$what"
  else
    fail "$what: failed without /$pattern/: $out"
  fi
}

# jpath NAME JSONPATH: a field of an ApprovalRequest.
jpath() { kubectl -n "$NS" get approvalrequest "$1" -o jsonpath="$2"; }

expect_eq() {
  local what=$1 want=$2 got=$3
  if [[ $got == "$want" ]]; then pass "$what"; else fail "$what: want '$want', got '$got'"; fi
}

timestamp() { # timestamp OFFSET_SECONDS -> RFC 3339 UTC
  local t=$(( $(date +%s) + $1 ))
  date -u -d "@$t" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r "$t" +%Y-%m-%dT%H:%M:%SZ
}

# new_request NAME AGENT EXPIRES_IN_SECONDS: created by the agent's ServiceAccount, as the gate does.
new_request() {
  kubectl -n "$NS" create --as="$AGENT_SA" -f - >/dev/null <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata:
  name: $1
  labels: {kagent.dev/agent: $2, kagent.dev/tool: delete_file}
spec:
  agentRef: {name: $2}
  toolServer: {kind: RemoteMCPServer, name: filesystem-server, namespace: $NS}
  toolName: delete_file
  argumentsPreview: {path: /data/report.csv}
  argumentsSha256: "$(printf '%064d' 0)"
  argumentsBytes: 29
  requestedBy: $AGENT_SA
  message: "Run 'delete_file' with arguments {\"path\":\"/data/report.csv\"}?"
  expiresAt: $(timestamp "$3")
EOF
}

decision_patch() { # decision_patch TYPE DECIDED_BY
  printf '{"spec":{"decision":{"type":"%s","reason":"e2e","decidedBy":"%s"}}}' "$1" "$2"
}

echo "== setup (namespace $NS, admin $ADMIN)"
kubectl apply --server-side -f crds/ >/dev/null
waited "the CRDs Established" kubectl wait --for condition=established --timeout=60s crd/approvalrequests.kagent.dev >/dev/null
kubectl apply -f tests/chart/rendered/user-roles.default.yaml >/dev/null
if kubectl api-resources --api-group=admissionregistration.k8s.io -o name | grep -qx 'validatingadmissionpolicies.admissionregistration.k8s.io'; then
  kubectl apply -f tests/chart/rendered/admission-policy.default.yaml >/dev/null
  POLICY=1
else
  echo "note: no ValidatingAdmissionPolicy API (Kubernetes < 1.30): admission checks are skipped"
fi
if [[ $POLICY == 1 && $ADMIN == system:serviceaccount:* ]]; then
  echo "error: the kubeconfig user $ADMIN is a ServiceAccount; the admission policy lets only people decide"
  exit 1
fi
kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" create serviceaccount helper >/dev/null
# What the controller grants an agent (DESIGN §5).
kubectl -n "$NS" create role hitl-agent --verb=create,get,list,watch --resource=approvalrequests.kagent.dev >/dev/null
kubectl -n "$NS" create role hitl-agent-status --verb=patch --resource=approvalrequests.kagent.dev/status >/dev/null
kubectl -n "$NS" create rolebinding hitl-agent --role=hitl-agent --serviceaccount="$NS:helper" >/dev/null
kubectl -n "$NS" create rolebinding hitl-agent-status --role=hitl-agent-status --serviceaccount="$NS:helper" >/dev/null
# alice may decide in this namespace; mallory may patch but lacks the verb approve.
kubectl -n "$NS" create rolebinding alice-approves --clusterrole=hitl-approver --user=alice >/dev/null
kubectl -n "$NS" create role patch-only --verb=get,list,watch,patch --resource=approvalrequests.kagent.dev >/dev/null
kubectl -n "$NS" create rolebinding mallory-patches --role=patch-only --user=mallory >/dev/null

if [[ $POLICY == 1 ]]; then
  # Policies take effect asynchronously: wait until a forged requestedBy is refused.
  for _ in $(seq 1 30); do
    if ! kubectl -n "$NS" create --as="$AGENT_SA" -f - >/dev/null 2>&1 <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: policy-probe}
spec:
  agentRef: {name: helper}
  toolServer: {kind: RemoteMCPServer, name: filesystem-server, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf '%064d' 0)"
  argumentsBytes: 2
  requestedBy: someone-else
  expiresAt: $(timestamp 3600)
EOF
    then break; fi
    kubectl -n "$NS" delete approvalrequest policy-probe --ignore-not-found >/dev/null
    sleep 1
  done
fi

echo "== plugin: approve, deny, list, get"
new_request r1 helper 3600
new_request r2 helper 3600
expect_ok "plugin approves r1" "$PLUGIN" -n "$NS" approve r1 --reason "looks right"
expect_eq "r1 approved" "Approve" "$(jpath r1 '{.spec.decision.type}')"
expect_eq "r1 decidedBy is the caller" "$ADMIN" "$(jpath r1 '{.spec.decision.decidedBy}')"
expect_eq "r1 reason" "looks right" "$(jpath r1 '{.spec.decision.reason}')"
expect_fail "plugin refuses to re-decide r1" "already approved by $ADMIN" "$PLUGIN" -n "$NS" deny r1 --reason no
expect_fail "kubectl patch cannot change r1's decision" "write-once|cannot be changed" \
  kubectl -n "$NS" patch approvalrequest r1 --type merge -p "$(decision_patch Deny "$ADMIN")"
expect_fail "kubectl patch cannot remove r1's decision" "write-once|cannot be changed" \
  kubectl -n "$NS" patch approvalrequest r1 --type merge -p '{"spec":{"decision":null}}'
expect_ok "plugin denies r2" "$PLUGIN" -n "$NS" deny r2 --reason "wrong file"
expect_eq "r2 denied" "Deny" "$(jpath r2 '{.spec.decision.type}')"
expect_fail "plugin reports a missing request" "not found in namespace $NS" "$PLUGIN" -n "$NS" approve nope
expect_ok "plugin lists" bash -c "'$PLUGIN' -n '$NS' list | grep -E '^r1 +helper +delete_file .* Approved '"
expect_ok "plugin gets as json" bash -c "'$PLUGIN' -n '$NS' get r2 -o json | grep -q '\"decidedBy\": \"$ADMIN\"'"
expect_ok "plugin describes" bash -c "'$PLUGIN' -n '$NS' get r2 | grep -q '^Decision: *Deny by $ADMIN (wrong file)'"

echo "== plugin: batch approve and expiry"
new_request r5 helper 3600
new_request r6 helper 3600
new_request r7 other 3600
expect_ok "plugin approves every pending request of agent helper" "$PLUGIN" -n "$NS" approve --all --agent helper
expect_eq "r5 approved" "Approve" "$(jpath r5 '{.spec.decision.type}')"
expect_eq "r6 approved" "Approve" "$(jpath r6 '{.spec.decision.type}')"
expect_eq "r7 (other agent) untouched" "" "$(jpath r7 '{.spec.decision.type}')"
expect_ok "list --pending shows r7 only" bash -c "[[ \$('$PLUGIN' -n '$NS' list --pending | tail -n +2 | awk '{print \$1}') == r7 ]]"
new_request r8 helper -60
expect_fail "plugin refuses an expired request" "expired at" "$PLUGIN" -n "$NS" approve r8

echo "== lists longer than a page (the plugin reads 100 objects a page)"
expires=$(timestamp 3600)
for i in $(seq 1 120); do
  cat <<EOF
---
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: bulk-$i, labels: {kagent.dev/agent: bulk, kagent.dev/tool: delete_file}}
spec:
  agentRef: {name: bulk}
  toolServer: {kind: RemoteMCPServer, name: filesystem-server, namespace: $NS}
  toolName: delete_file
  argumentsPreview: {path: /data/$i.csv}
  argumentsSha256: "$(printf '%064d' "$i")"
  argumentsBytes: 20
  requestedBy: $AGENT_SA
  expiresAt: $expires
EOF
done | kubectl -n "$NS" create --as="$AGENT_SA" -f - >/dev/null
expect_eq "list -o json returns every request, over two pages" \
  "$(kubectl -n "$NS" get approvalrequests -o name | wc -l)" \
  "$("$PLUGIN" -n "$NS" list -o json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["items"]))')"
expect_ok "plugin approves the 120 pending requests of agent bulk, over two pages" "$PLUGIN" -n "$NS" approve --all --agent bulk
expect_eq "all 120 approved" "120" \
  "$(kubectl -n "$NS" get approvalrequests -l kagent.dev/agent=bulk -o jsonpath='{range .items[*]}{.spec.decision.type}{"\n"}{end}' | grep -c '^Approve$')"

echo "== kubectl patch"
new_request r3 helper 3600
expect_ok "alice (hitl-approver) approves r3 with kubectl patch" \
  kubectl -n "$NS" --as=alice patch approvalrequest r3 --type merge -p "$(decision_patch Approve alice)"
expect_eq "r3 decidedBy alice" "alice" "$(jpath r3 '{.spec.decision.decidedBy}')"
new_request r4 helper 3600
expect_fail "a user without patch cannot decide" "forbidden" \
  kubectl -n "$NS" --as=eve patch approvalrequest r4 --type merge -p "$(decision_patch Approve eve)"

# start_inbox USER: `kubectl hitl ui` acting as USER (a kubeconfig impersonating them), its base
# URL in INBOX_BASE[USER] and its token in INBOX_TOKEN[USER].
declare -A INBOX_BASE=() INBOX_TOKEN=() INBOX_PID=()
start_inbox() {
  local user=$1 kubeconfig out url
  kubeconfig=$(mktemp) out=$(mktemp)
  kubeconfig_as "$kubeconfig" "$user" system:authenticated
  KUBECONFIG=$kubeconfig "$PLUGIN" -n "$NS" ui --no-open >"$out" 2>&1 &
  INBOX_PID[$user]=$!
  for _ in $(seq 100); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*/#token=[0-9a-f]*' "$out" || true)
    [[ -n $url ]] && break
    sleep 0.1
  done
  rm -f "$kubeconfig"
  [[ -n $url ]] || { fail "the inbox as $user did not start: $(cat "$out")"; return; }
  INBOX_BASE[$user]=${url%%/#*}
  INBOX_TOKEN[$user]=${url##*token=}
}
stop_inboxes() { local pid; for pid in "${INBOX_PID[@]}"; do kill "$pid" 2>/dev/null || true; done; }
# inbox_decide USER NAME [ORIGIN]: approves NAME through USER's inbox as its page does (from
# ORIGIN, by default the inbox's own); prints the answer, then the HTTP status on a line of its own.
inbox_decide() {
  local user=$1 name=$2 origin=${3:-${INBOX_BASE[$1]}}
  curl -s --max-time 10 -w '\n%{http_code}' -X POST "${INBOX_BASE[$user]}/api/decisions" \
    -H "Origin: $origin" -H "X-Hitl-Token: ${INBOX_TOKEN[$user]}" -H 'Content-Type: application/json' \
    -d "{\"decision\":\"Approve\",\"requests\":[{\"namespace\":\"$NS\",\"name\":\"$name\"}]}"
}

# agent_status_patch NAME BODY: what the gate sends to record consumption, a merge patch of the
# status subresource with the agent's token (`kubectl patch --subresource=status` would first GET
# the status, which the agent's Role does not grant).
agent_status_patch() {
  kube_curl "$AGENT_KUBECONFIG" PATCH "/apis/kagent.dev/v1alpha2/namespaces/$NS/approvalrequests/$1/status" \
    -H 'Content-Type: application/merge-patch+json' -d "$2"
}

if [[ $POLICY == 1 ]]; then
  echo "== admission policy"
  AGENT_KUBECONFIG=$(mktemp)
  kubeconfig_with_token "$AGENT_KUBECONFIG" "$(kubectl -n "$NS" create token helper --duration=10m)" "$NS"
  expect_fail "decidedBy must be the caller" "decidedBy must be your username alice" \
    kubectl -n "$NS" --as=alice patch approvalrequest r4 --type merge -p "$(decision_patch Approve bob)"
  expect_fail "patch without the verb approve is refused" "needs the RBAC verb approve" \
    kubectl -n "$NS" --as=mallory patch approvalrequest r4 --type merge -p "$(decision_patch Approve mallory)"
  expect_eq "r4 still undecided" "" "$(jpath r4 '{.spec.decision.type}')"
  expect_fail "requestedBy must be the creator" "must be the creating user $ADMIN" \
    kubectl -n "$NS" create -f - <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: forged}
spec:
  agentRef: {name: helper}
  toolServer: {kind: RemoteMCPServer, name: filesystem-server, namespace: $NS}
  toolName: delete_file
  argumentsSha256: "$(printf '%064d' 0)"
  argumentsBytes: 2
  requestedBy: $AGENT_SA
  expiresAt: $(timestamp 3600)
EOF
  expect_fail "the agent may not write controller status fields" "conditions are the controller's" \
    agent_status_patch r3 "{\"status\":{\"conditions\":[{\"type\":\"Decided\",\"status\":\"True\",\"reason\":\"Forged\",\"message\":\"x\",\"lastTransitionTime\":\"$(timestamp 0)\"}]}}"
  expect_fail "the agent may not set another phase" "may only be set to Executed" \
    agent_status_patch r3 '{"status":{"phase":"Approved"}}'
  # What the gate writes when it forwards the approved call.
  expect_ok "the agent records consumption of r3" \
    agent_status_patch r3 "{\"status\":{\"consumedAt\":\"$(timestamp 0)\",\"consumedBy\":\"e2e\",\"phase\":\"Executed\",\"decidedAt\":\"$(timestamp 0)\",\"message\":\"Approved call forwarded by e2e\"}}"
  expect_eq "r3 executed" "Executed" "$(jpath r3 '{.status.phase}')"
  expect_fail "consumption is write-once" "write-once" \
    agent_status_patch r3 "{\"status\":{\"consumedAt\":\"$(timestamp 5)\"}}"

  echo "== the inbox (kubectl hitl ui), as alice and as mallory"
  new_request r9 helper 3600
  new_request r10 helper 3600
  start_inbox alice
  start_inbox mallory
  expect_ok "alice's inbox lists r9 as pending, acting as alice" \
    bash -c "curl -sN --max-time 3 '${INBOX_BASE[alice]}/events?token=${INBOX_TOKEN[alice]}' | grep -m1 '^data:' | grep -q '\"user\":\"alice\".*\"name\":\"r9\"'"
  out=$(inbox_decide alice r9 http://evil.example)
  expect_eq "a cross-origin decision is refused by the inbox" "403" "${out##*$'\n'}"
  expect_eq "r9 still undecided" "" "$(jpath r9 '{.spec.decision.type}')"
  out=$(inbox_decide alice r9)
  expect_ok "alice approves r9 in her inbox" grep -q '"ok":true' <<<"$out"
  expect_eq "r9 approved by alice through the inbox" "Approve alice" "$(jpath r9 '{.spec.decision.type} {.spec.decision.decidedBy}')"
  out=$(inbox_decide mallory r10)
  expect_ok "mallory's inbox shows the refusal and the rolebinding that would grant it" \
    bash -c "grep -q 'mallory may not decide approvalrequest/r10' <<<'$out' && grep -q 'needs the RBAC verb approve' <<<'$out' && grep -q 'create rolebinding hitl-approver-mallory' <<<'$out'"
  expect_eq "r10 still undecided" "" "$(jpath r10 '{.spec.decision.type}')"
  eve_kubeconfig=$(mktemp)
  kubeconfig_as "$eve_kubeconfig" eve system:authenticated
  expect_fail "eve's inbox (she cannot list requests) refuses to start" "you cannot list approvalrequests in namespace $NS" \
    timeout 10 env KUBECONFIG="$eve_kubeconfig" "$PLUGIN" -n "$NS" ui --no-open
  rm -f "$eve_kubeconfig"
fi

echo
if [[ $FAILURES -gt 0 ]]; then
  echo "FAILED: $FAILURES check(s)"
  exit 1
fi
echo "PASS: kubectl hitl e2e"
