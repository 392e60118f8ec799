#!/usr/bin/env bash
# make e2e: runs the e2e suites against the cluster in KUBECONFIG with plain kubectl, the built
# binaries (target/debug) and the npm MCP peers. Prints a SKIP line and exits 0 when no cluster
# is reachable. docs/e2e.md describes the suites and how to get a throwaway control plane.
#
# Usage: tests/e2e/run.sh [SUITE...]    SUITE: story, plugin, coexist, claim, freeze, quorum, edit, grants,
#        notify, escalate, slack, rewind, tool-risk, toolgate, toolgate-isolation, node-access, sessions, runtime, pods
#        (default: all, in that order)
#   story   tests/e2e/story.sh: chart install, two controller replicas, an Agent, the gate,
#           approvals, refusals, expiry, failover, figures
#   plugin  tests/e2e/plugin.sh: kubectl hitl and the admission policy, request by request
#   coexist tests/e2e/coexist.sh: next to kagent: --agent-selector and the ownership rule
#   claim   tests/e2e/claim.sh: exactly once: gates racing, a gate killed mid-claim, the request
#           changed during the claim, phases never going backwards
#   freeze  tests/e2e/freeze.sh: the freeze annotation on an Agent and on its Namespace
#   tool-risk tests/e2e/tool-risk.sh: a real SDK server's tool annotations on the request
#           (untrusted), shown by kubectl hitl; every removal or replacement of
#           spec.toolAnnotations refused by the CRD, with the admission policies and without
#   quorum  tests/e2e/quorum.sh: a rule asking for two approvals: 1/2 keeps the call waiting,
#           the same person twice, the requester and ServiceAccounts refused, 2/2 runs it once
#   edit    tests/e2e/edit.sh: edit, then approve: the edited call runs once and the model is
#           told; bob (approve only) and mallory refused; spec.edit and the edited binding
#           write-once; edits the rules deny or that need more approvals refused by the gate;
#           a quorum restarting on the edit; edits refused by the tool's input schema, by a
#           rule's edits.allowed=false, outside its edits.paths and probing a redacted value, nothing run; figure:
#           --patch vs a plain approval
#   grants  tests/e2e/grants.sh: ApprovalGrants: every admission rule, a condition, maxUses
#           under calls racing through two gates, revoke and delete, --remember session
#   notify  tests/e2e/notify.sh: ApprovalNotifiers with a real receiver: retries, reminders, a
#           leader change between attempts, expiry, no secret in any message
#   escalate tests/e2e/escalate.sh: deadlines that escalate: steps copied with instants, tier
#           approvers refused before their tier and admitted after, each step once across a
#           leader change (one message per step notifier), status.tier never decreasing, the
#           expiring notice and expiry (not denial), a missing step notifier as a Warning,
#           step latency figure
#   slack   tests/e2e/slack.sh: Approve from Slack: signed presses (forged, stale, replayed
#           refused), an unmapped user, mallory refused by the admission policy, alice approves
#   rewind  tests/e2e/rewind.sh: every generated way to remove, null, replace or rewind each
#           status field of a consumed request, an edited-and-executed one, a grant-decided one
#           and of used and revoked grants, and of spec.caller, escalation, edit, editApprovals,
#           toolAnnotations and a grant's revoked; every creation carrying spec.decision,
#           approvals, edit or editApprovals; as six identities, with the admission policies and
#           without; the same calls sent again never run
#   toolgate tests/e2e/toolgate.sh: a ToolGate shared by two callers with ServiceAccounts of
#           their own, the TypeScript and the Python SDK 2.x (MCP 2026-07-28) clients; who
#           calls, per-caller requests and grants, approve scoped to the ToolGate, a
#           SandboxAgent checked against kagent's own v1alpha3 CRDs
#   toolgate-isolation tests/e2e/toolgate-isolation.sh: one ToolGate cannot stop the
#           TokenReview binding of the others, a refused or deleted one grants nothing, no
#           planted object is adopted, no gate Secret is read by reference (issue 54)
#   node-access tests/e2e/node-access.sh: an Agent whose pods reach the node (privileged,
#           hostPath /var/lib/kubelet) is refused next to a gate naming the field, and with the
#           chart's allowAgentNodeAccess reported GateIsolated=False naming it (issue 59)
#   sessions tests/e2e/sessions.sh: the session store as the chart runs it, with its own
#           ServiceAccount and the chart's RBAC: auth by each Agent pod's bound token (refused
#           or scoped), kagent-adk 0.7.4 and 0.10.4's clients, SIGKILL in a loop of appends,
#           two stores on one Postgres (interleaved appends, the deleted-Agent sweep once),
#           quotas (507, metric, Event), append p50/p99 on SQLite, Postgres and memory
#   runtime tests/e2e/runtime.sh: kagent's own agent runtime (kagent-adk 0.7.4) started as the
#           rendered Deployment starts it, next to the gate and the session store, with a
#           scripted model: A2A turns through approve, deny, an edit (the model reads what changed), the pending answer and its retry,
#           an SSE tool server, a conversation across a restart of the store (0.7.4 and 0.10.4)
#   pods    tests/e2e/pods.sh: on a node (SKIP without one): the images built here, helm install,
#           the Agent's pod with kagent's runtime and the gate sidecar, tool server and model
#           pods, A2A through the Agent's Service, Sidecar vs Gateway reach under NetworkPolicy, a
#           ToolGate caller pod whose token rotates, faults (gate killed, leader deleted, kubelet
#           restarted, tool server gone), helm upgrade and uninstall, figures
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "SKIP: no Kubernetes cluster reachable (KUBECONFIG=${KUBECONFIG:-~/.kube/config}); e2e suites not run"
  exit 0
fi

suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(story plugin coexist claim freeze quorum edit grants notify escalate slack rewind tool-risk toolgate toolgate-isolation node-access sessions runtime pods)

echo "== e2e: build and test dependencies"
cargo build --bins
export PATH="$PWD/target/debug:$PATH"
make --no-print-directory peers chart-venv runtime-peers

status=0
for suite in "${suites[@]}"; do
  script=tests/e2e/$suite.sh
  [ -f "$script" ] || { echo "FAIL: no suite $script"; status=1; continue; }
  echo
  echo "== e2e: $script"
  start=$SECONDS
  if bash "$script"; then
    echo "PASS: $script ($((SECONDS - start)) s)"
  else
    echo "FAIL: $script ($((SECONDS - start)) s)"
    status=1
  fi
done
exit "$status"
