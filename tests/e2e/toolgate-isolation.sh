#!/usr/bin/env bash
# ToolGates kept apart on a real control plane (issue 54): one ToolGate cannot stop the
# TokenReview binding of the others, a refused or deleted ToolGate grants nothing, nothing is
# adopted that the controller did not make, and no ToolGate or RemoteMCPServer reads a gate's
# Secrets. docs/e2e.md explains each step.
#
#  1. install: the chart's CRDs, RBAC and admission policies; the controller as the chart runs
#     it (with --token-review-binding)
#  2. a ServiceAccount ci-gate made by hand: ToolGate ci is refused (OwnedByAnotherController),
#     its Ready says TokenReviewNotBound, and team-a/ci-gate is not bound and may not create
#     TokenReviews; a deleted ToolGate's ServiceAccount leaves the binding
#  3. a ToolGate named with 250 characters is refused by the apiserver (the CRD's own rule); a
#     ToolGate of another namespace made after it is bound and may create TokenReviews
#  4. a binding key planted beforehand, labelled as ours: the ToolGate is refused, the Secret
#     keeps its key, no gate Deployment mounts it
#  5. a ToolGate's headersFrom and a RemoteMCPServer's naming another gate's Secret (gate.json,
#     the binding key) are refused, and nothing reaches the URL they name
#
# Each check is reported on its own (MISS) and the suite fails at the end if any missed, so that
# a run on code without these defences shows every one that is missing.
#
# Needs: cargo build --bins and the chart venv (make chart-venv; run.sh sees to them).
# HITL_E2E_KEEP=1 keeps the namespaces. Installs release "hitl" in hitl-system: use a
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
throwaway hitl-e2e-isolation
NS_B=$NS-b

[ -x "$BIN" ] || fail "$BIN missing: cargo build --bins"
"$VENV_PY" -c 'import helm_python' 2>/dev/null || fail "no helm_python in .venv: make chart-venv"

cleanup() {
  local rc=$?
  trap - ERR
  stop_all
  if [ "${HITL_E2E_KEEP:-0}" = 1 ]; then
    echo "kept: namespaces $NS $NS_B, work folder $WORK"
    return "$rc"
  fi
  kubectl delete namespace "$NS" "$NS_B" --wait=false --ignore-not-found >/dev/null 2>&1 || true
  if [ -s "$WORK/chart/manifests.yaml" ]; then
    kubectl delete -n "$SYS_NS" -f "$WORK/chart/manifests.yaml" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    [ -z "${LEASE:-}" ] || kubectl -n "$SYS_NS" delete lease "$LEASE" --ignore-not-found >/dev/null 2>&1 || true
  fi
  [ -z "$TOKEN_REVIEW_BINDING" ] || kubectl delete clusterrolebinding "$TOKEN_REVIEW_BINDING" --ignore-not-found >/dev/null 2>&1 || true
  [ "${CREATED_SYS_NS:-0}" = 1 ] && kubectl delete namespace "$SYS_NS" --wait=false >/dev/null 2>&1
  if [ "$rc" = 0 ]; then rm -rf "$WORK"; else echo "logs kept in $WORK"; fi
  return "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
TOKEN_REVIEW_BINDING=
# Kinds named with their version: kubectl's discovery cache may still map them to another
# version after a suite that swapped a CRD (toolgate.sh installs kagent's own v1alpha3 ones).
TG_KIND=toolgates.v1alpha2.kagent.dev
RMCP_KIND=remotemcpservers.v1alpha2.kagent.dev

# Each attack is checked on its own: a check that fails is reported (miss) and the suite goes
# on, failing at the end with every miss listed.
MISSES=()
miss() {
  echo "MISS - $*"
  MISSES+=("$*")
}
# within_s SECONDS COMMAND...: COMMAND succeeds within SECONDS (tried every 0.2 s).
within_s() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# in NAMESPACE OBJECT JSONPATH: a field of an object.
in_ns() { kubectl -n "$1" get "$2" -o "jsonpath=$3"; }
# condition NAMESPACE OBJECT TYPE FIELD: a field of a condition; empty when it cannot be read
# (the check that wanted it then misses, with what it saw).
condition() { in_ns "$1" "$2" "{.status.conditions[?(@.type==\"$3\")].$4}" 2>>"$WORK/reads.err" || true; }
# bound NAMESPACE SA: the ServiceAccount is a subject of the TokenReview binding.
bound() {
  kubectl get clusterrolebinding "$TOKEN_REVIEW_BINDING" -o jsonpath='{range .subjects[*]}{.namespace}/{.name}{"\n"}{end}' |
    grep -qx "$1/$2"
}
not_bound() { ! bound "$1" "$2"; }
# may_review NAMESPACE SA: the apiserver's own answer, whether the account may create TokenReviews.
may_review() { [ "$(kubectl auth can-i create tokenreviews --as="system:serviceaccount:$1:$2" 2>/dev/null)" = yes ]; }
may_not_review() { ! may_review "$1" "$2"; }
accepted_is() { [ "$(condition "$1" "$TG_KIND/$2" Accepted status)" = "$3" ]; }
tool_gate() { # NAMESPACE NAME [SPEC-EXTRA]: a ToolGate on an inline url
  kubectl -n "$1" apply -f - <<EOF
apiVersion: kagent.dev/v1alpha2
kind: ToolGate
metadata: {name: $2}
spec:
  server: {url: "http://127.0.0.1:9/mcp"${3:-}}
  toolNames: [echo]
EOF
}

# ---------------------------------------------------------------------------------------------
step "1. install the chart and run its controller"
chart_controller
[ -n "$TOKEN_REVIEW_BINDING" ] || fail "the chart's controller args have no --token-review-binding: ${CONTROLLER_ARGS[*]}"
kubectl apply --server-side --force-conflicts -f "$WORK/chart/crds.yaml" >/dev/null
# Right after the apply a CRD may have no conditions yet, which kubectl wait takes for an error.
established() { kubectl wait --for=condition=Established --timeout=5s crd/toolgates.kagent.dev crd/remotemcpservers.kagent.dev; }
wait_for "the CRDs Established" 60 established
system_namespace
kubectl apply --server-side -n "$SYS_NS" -f "$WORK/chart/manifests.yaml" >/dev/null
kubectl create namespace "$NS" >/dev/null
kubectl create namespace "$NS_B" >/dev/null
kubeconfig_with_token "$WORK/controller.kubeconfig" \
  "$(kubectl -n "$SYS_NS" create token "$CONTROLLER_SA" --duration=2h)" "$SYS_NS"
METRICS_PORT=$(free_port)
start_chart_controller controller "$WORK/controller.log" "$RELEASE-hitl-operator-e2e" "$METRICS_PORT" \
  "$WORK/controller.kubeconfig"
wait_for "the controller's /readyz" 60 http_ok "http://127.0.0.1:$METRICS_PORT/readyz"
ok "controller running as $SYS_NS/$CONTROLLER_SA, keeping ClusterRoleBinding $TOKEN_REVIEW_BINDING"

# ---------------------------------------------------------------------------------------------
step "2. a refused ToolGate grants nothing; a deleted one's ServiceAccount leaves the binding"
kubectl -n "$NS" create serviceaccount ci-gate >/dev/null
tool_gate "$NS" ci >/dev/null
within_s 30 accepted_is "$NS" ci False || miss "ToolGate ci not refused within 30 s"
if [ "$(condition "$NS" $TG_KIND/ci Accepted reason)" = OwnedByAnotherController ]; then
  ok "ToolGate ci: Accepted=False OwnedByAnotherController: $(condition "$NS" $TG_KIND/ci Accepted message)"
else
  miss "ToolGate ci: Accepted reason $(condition "$NS" $TG_KIND/ci Accepted reason), want OwnedByAnotherController"
fi
# The keeper has synced since ci was refused once a ToolGate made after it is bound.
tool_gate "$NS" after-ci >/dev/null
within_s 30 bound "$NS" after-ci-gate || miss "$NS/after-ci-gate not in $TOKEN_REVIEW_BINDING within 30 s"
if not_bound "$NS" ci-gate && may_not_review "$NS" ci-gate; then
  ok "$NS/ci-gate is not bound and may not create TokenReviews"
else
  miss "$NS/ci-gate (made by hand, ToolGate ci refused) is in $TOKEN_REVIEW_BINDING or may create TokenReviews"
fi
if [ "$(condition "$NS" $TG_KIND/ci Ready reason)" = TokenReviewNotBound ]; then
  ok "ToolGate ci: Ready=False TokenReviewNotBound: $(condition "$NS" $TG_KIND/ci Ready message)"
else
  miss "ToolGate ci: Ready $(condition "$NS" $TG_KIND/ci Ready status) $(condition "$NS" $TG_KIND/ci Ready reason), want False TokenReviewNotBound"
fi
tool_gate "$NS_B" gone >/dev/null
if within_s 30 bound "$NS_B" gone-gate; then
  start=$(now)
  kubectl -n "$NS_B" delete "$TG_KIND" gone --wait=false >/dev/null
  if within_s 30 not_bound "$NS_B" gone-gate && within_s 30 may_not_review "$NS_B" gone-gate; then
    ok "ToolGate $NS_B/gone deleted: its ServiceAccount left the binding in $(elapsed "$start") s"
  else
    miss "ToolGate $NS_B/gone deleted: $NS_B/gone-gate still bound or may create TokenReviews after 30 s"
  fi
else
  miss "ToolGate $NS_B/gone never bound: cannot check that deleting it unbinds it"
fi

# ---------------------------------------------------------------------------------------------
step "3. one ToolGate cannot stop the binding of the others"
LONG=$(printf 'l%.0s' $(seq 250))
start=$(now)
if tool_gate "$NS" "$LONG" >"$WORK/long.out" 2>&1; then
  miss "the apiserver took a ToolGate named with 250 characters (its gate ServiceAccount has 255)"
elif ! grep -qF "a ToolGate's name must be at most 58 characters" "$WORK/long.out"; then
  miss "the 250-character name was refused, but not by the name rule: $(cat "$WORK/long.out")"
else
  ok "a 250-character name is refused by the apiserver: $(head -c 300 "$WORK/long.out")"
fi
tool_gate "$NS" "edge-$(printf 'e%.0s' $(seq 53))" >/dev/null || miss "a 58-character name was refused"
tool_gate "$NS_B" later >/dev/null
within_s 30 accepted_is "$NS_B" later True || miss "ToolGate $NS_B/later not Accepted within 30 s"
if within_s 30 bound "$NS_B" later-gate && within_s 30 may_review "$NS_B" later-gate; then
  ok "ToolGate $NS_B/later (made after): bound, may create TokenReviews ($(elapsed "$start") s)"
  # The ToolGate is looked at again within 5 s of being bound.
  ready_waits_no_more() { [ "$(condition "$NS_B" $TG_KIND/later Ready reason)" != TokenReviewNotBound ]; }
  if within_s 15 ready_waits_no_more; then
    ok "its Ready ($(condition "$NS_B" $TG_KIND/later Ready reason)) no longer waits for the binding"
  else
    miss "ToolGate $NS_B/later is bound but its Ready still says TokenReviewNotBound after 15 s"
  fi
else
  miss "ToolGate $NS_B/later (Accepted=$(condition "$NS_B" $TG_KIND/later Accepted status)): $NS_B/later-gate not bound or may not create TokenReviews after 30 s; its Ready: $(condition "$NS_B" $TG_KIND/later Ready status) $(condition "$NS_B" $TG_KIND/later Ready reason)"
fi

# ---------------------------------------------------------------------------------------------
step "4. a planted binding key is never adopted"
PLANTED_KEY=attacker-chose-this-key-of-32-bytes!
kubectl -n "$NS" create secret generic planted-gate-binding-key --from-literal=key="$PLANTED_KEY" >/dev/null
kubectl -n "$NS" label secret planted-gate-binding-key app.kubernetes.io/managed-by=hitl-operator >/dev/null
tool_gate "$NS" planted >/dev/null
within_s 30 accepted_is "$NS" planted False || true
reason=$(condition "$NS" $TG_KIND/planted Accepted reason)
message=$(condition "$NS" $TG_KIND/planted Accepted message)
if [ "$reason" = OwnedByAnotherController ] && grep -qF "Secret $NS/planted-gate-binding-key" <<<"$message"; then
  ok "ToolGate planted: Accepted=False OwnedByAnotherController: $message"
else
  miss "ToolGate planted: Accepted $(condition "$NS" $TG_KIND/planted Accepted status) $reason ($message), want False OwnedByAnotherController naming the Secret"
fi
[ -z "$(in_ns "$NS" secret/planted-gate-binding-key '{.metadata.ownerReferences}')" ] ||
  miss "the planted Secret got an ownerReference: $(in_ns "$NS" secret/planted-gate-binding-key '{.metadata.ownerReferences}')"
[ "$(in_ns "$NS" secret/planted-gate-binding-key '{.data.key}' | base64 -d)" = "$PLANTED_KEY" ] ||
  miss "the planted Secret's key changed"
if kubectl -n "$NS" get deployment planted-gate >/dev/null 2>&1; then
  miss "Deployment planted-gate exists, mounting Secret $(in_ns "$NS" deployment/planted-gate '{.spec.template.spec.volumes[?(@.name=="binding-key")].secret.secretName}')"
else
  ok "no Deployment planted-gate mounts the planted key"
fi
not_bound "$NS" planted-gate || miss "$NS/planted-gate is in $TOKEN_REVIEW_BINDING"

# ---------------------------------------------------------------------------------------------
step "5. no ToolGate or RemoteMCPServer reads another gate's Secrets"
tool_gate "$NS" victim >/dev/null
within_s 30 kubectl -n "$NS" get secret victim-gate victim-gate-binding-key ||
  fail "ToolGate victim's Secrets victim-gate and victim-gate-binding-key not made within 30 s"
LISTEN_PORT=$(free_port)
start listener "$WORK/listener.log" python3 -c '
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        with open(sys.argv[2], "a") as log:
            log.write(repr(dict(self.headers)) + "\n")
        self.send_response(500); self.end_headers()
    do_GET = do_POST
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$LISTEN_PORT" "$WORK/received"
wait_for "the listener" 10 http_up "http://127.0.0.1:$LISTEN_PORT/"
: >"$WORK/received"
tool_gate "$NS" thief ", headersFrom: [{name: X-Stolen, valueFrom: {type: Secret, name: victim-gate, key: gate.json}}]" >/dev/null
tool_gate "$NS" thief-key ", headersFrom: [{name: X-Stolen, valueFrom: {type: Secret, name: victim-gate-binding-key, key: key}}]" >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: thief-server}
spec:
  url: http://127.0.0.1:$LISTEN_PORT/mcp
  headersFrom: [{name: X-Stolen, valueFrom: {type: Secret, name: victim-gate, key: gate.json}}]
---
apiVersion: kagent.dev/v1alpha2
kind: ToolGate
metadata: {name: thief-via-server}
spec:
  server: {remoteMCPServer: thief-server}
  toolNames: [echo]
YAML
within_s 30 accepted_is "$NS" thief False || true
message=$(condition "$NS" $TG_KIND/thief Accepted message)
if grep -qF 'Forbidden: key "gate.json" of Secret "victim-gate" is an approval gate'"'"'s' <<<"$message"; then
  ok "ToolGate thief ($(condition "$NS" $TG_KIND/thief Accepted reason)): $message"
else
  miss "ToolGate thief (headersFrom victim-gate/gate.json): Accepted $(condition "$NS" $TG_KIND/thief Accepted status): $message"
fi
within_s 30 accepted_is "$NS" thief-key False || true
message=$(condition "$NS" $TG_KIND/thief-key Accepted message)
if grep -qF 'Forbidden: key "key" of Secret "victim-gate-binding-key" is an approval gate'"'"'s' <<<"$message"; then
  ok "ToolGate thief-key ($(condition "$NS" $TG_KIND/thief-key Accepted reason)): $message"
else
  miss "ToolGate thief-key (headersFrom victim-gate-binding-key/key): Accepted $(condition "$NS" $TG_KIND/thief-key Accepted status) $(condition "$NS" $TG_KIND/thief-key Accepted reason): $message"
fi
server_refused() { [ "$(condition "$NS" $RMCP_KIND/thief-server Accepted reason)" = InvalidSpec ]; }
within_s 30 server_refused || true
message=$(condition "$NS" $RMCP_KIND/thief-server Accepted message)
if grep -qF 'Forbidden: key "gate.json" of Secret "victim-gate" is an approval gate'"'"'s' <<<"$message"; then
  ok "RemoteMCPServer thief-server: $message"
else
  miss "RemoteMCPServer thief-server (headersFrom victim-gate/gate.json): $(condition "$NS" $RMCP_KIND/thief-server Accepted reason): $message"
fi
within_s 30 accepted_is "$NS" thief-via-server False || true
if [ "$(condition "$NS" $TG_KIND/thief-via-server Accepted reason)" = InvalidSpec ]; then
  ok "ToolGate thief-via-server: $(condition "$NS" $TG_KIND/thief-via-server Accepted message)"
else
  miss "ToolGate thief-via-server: Accepted $(condition "$NS" $TG_KIND/thief-via-server Accepted status) $(condition "$NS" $TG_KIND/thief-via-server Accepted reason)"
fi
for secret in thief-gate thief-key-gate thief-via-server-gate; do
  if kubectl -n "$NS" get secret "$secret" >/dev/null 2>&1 &&
    in_ns "$NS" "secret/$secret" '{.data.gate\.json}' | base64 -d | grep -q X-Stolen; then
    miss "Secret $secret's gate.json carries the stolen header (its gate would send it to the ToolGate's URL)"
  fi
done
sleep 2
if [ -s "$WORK/received" ]; then
  miss "requests with the stolen header reached the thieves' URL: $(head -c 400 "$WORK/received")"
else
  ok "nothing reached http://127.0.0.1:$LISTEN_PORT (their URL)"
fi

echo
if [ ${#MISSES[@]} -gt 0 ]; then
  printf 'MISS - %s\n' "${MISSES[@]}"
  fail "${#MISSES[@]} check(s) of issue 54 failed"
fi
echo "PASS: ToolGates kept apart: the binding, adoption and gate Secrets (issue 54)"
