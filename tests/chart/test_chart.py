"""Tests of charts/hitl-operator with the real Helm engine (helm-python-sdk embeds Helm's Go SDK).

Run with `make chart-test`. `HITL_BLESS=1` (`make chart-bless`) rewrites the rendered copies in
tests/chart/rendered/: tests/admission_policy.rs evaluates their CEL with kube-cel and
tests/e2e/plugin.sh applies them to a cluster.
"""

import os
import pathlib

import helm_python
import kubernetes_validate
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "hitl-operator"
RENDERED = pathlib.Path(__file__).resolve().parent / "rendered"
RELEASE = "hitl"
NAMESPACE = "hitl-system"
FULLNAME = "hitl-hitl-operator"
CONTROLLER_USER = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
KUBE_VERSION = "1.33.0"
# The session store (`hitl-operator sessions`): `<release>-sessions`.
SESSIONS = f"{RELEASE}-sessions"
SESSIONS_URL = f"http://{SESSIONS}.{NAMESPACE}.svc:8083"
POSTGRES = {"sessions": {"postgres": {"existingSecret": "sessions-db"}}}

# Value sets whose renderings are checked in (see RENDERED_COPIES).
POLICY_VARIANTS = {
    "default": {},
    "permissive": {
        "admissionPolicy": {
            "allowRequesterToDecide": True,
            "allowServiceAccountsToDecide": True,
            "extraStatusWriters": ["ops-admin"],
        }
    },
    # The quota in two namespaces; tests/bench/storage.sh applies the one of `agents`.
    "enabled": {"quota": {"approvalRequests": {"enabled": True, "namespaces": ["agents", "team-b"]}}},
}


@pytest.fixture(scope="module")
def chart():
    return helm_python.Chart.load(CHART)


def render_docs(chart, values=None, namespace=NAMESPACE):
    """Render with Helm and return the template path -> text map and the parsed objects."""
    out = chart.render(values or {}, name=RELEASE, namespace=namespace, is_install=True)
    docs = []
    for path, text in out.items():
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return out, docs


def objects(chart, values=None):
    return render_docs(chart, values)[1]


def find(docs, kind, name=None):
    hits = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert hits, f"no {kind} {name or ''} rendered"
    return hits


def one(docs, kind, name=None):
    hits = find(docs, kind, name)
    assert len(hits) == 1, f"{len(hits)} {kind} objects named {name}"
    return hits[0]


def kinds(docs):
    return sorted(d["kind"] for d in docs)


def controller(docs):
    return one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]


def store_deployment(docs):
    return one(docs, "Deployment", SESSIONS)


def store(docs):
    [container] = store_deployment(docs)["spec"]["template"]["spec"]["containers"]
    return container


def args_map(container):
    """`--flag=value` args as a dict; bare `--flag` maps to True."""
    out = {}
    for arg in container["args"][1:]:
        key, _, value = arg.partition("=")
        out[key] = value if value else True
    return out


def rules_of(role):
    return [
        (tuple(r.get("apiGroups", [])), tuple(r["resources"]), tuple(r["verbs"])) for r in role["rules"]
    ]


def allows(role, group, resource, verb):
    return any(
        group in r.get("apiGroups", []) and resource in r["resources"] and verb in r["verbs"]
        for r in role["rules"]
    )


# ---------------------------------------------------------------- metadata, CRDs, lint


def test_chart_metadata_matches_crate(chart):
    cargo = (ROOT / "Cargo.toml").read_text()
    crate_version = next(
        line.split('"')[1] for line in cargo.splitlines() if line.startswith("version = ")
    )
    meta = chart.metadata
    assert meta["version"] == crate_version
    assert meta["appVersion"] == crate_version


def rendered_crds(chart, values=None):
    return [d for d in objects(chart, values) if d["kind"] == "CustomResourceDefinition"]


def test_chart_ships_every_crd_kept_on_uninstall(chart):
    crds = rendered_crds(chart)
    assert sorted(crd["metadata"]["name"] for crd in crds) == [
        "agents.kagent.dev",
        "approvalgrants.kagent.dev",
        "approvalnotifiers.kagent.dev",
        "approvalrequests.kagent.dev",
        "modelconfigs.kagent.dev",
        "remotemcpservers.kagent.dev",
        "toolgates.kagent.dev",
    ]
    files = {f.name: yaml.safe_load(f.read_text()) for f in (CHART / "files" / "crds").glob("*.yaml")}
    for crd in crds:
        # Deleting the release never deletes the CRDs (and so every Agent).
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        generated = files[f"{crd['metadata']['name']}.yaml"]
        assert crd["spec"] == generated["spec"], "the template changes nothing but the annotation"
    # No crds/ directory: Helm would install those itself, whatever crds.install says.
    assert not (CHART / "crds").exists()


def test_crds_can_be_left_to_kagent(chart):
    # Where kagent installed the CRDs, the chart installs none (with a lookup of an existing CRD
    # not of this release, `helm install` fails and says to set crds.install=false).
    assert rendered_crds(chart, {"crds": {"install": False}}) == []
    text = (CHART / "templates" / "crds.yaml").read_text()
    assert "crds.install=false" in text and "lookup" in text


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"watchNamespace": "agents", "metrics": {"serviceMonitor": {"enabled": True}}},
        {"admissionPolicy": {"enabled": False}, "replicaCount": 1, "leaderElection": {"enabled": False}},
        {"sessions": {"replicas": 3, "postgres": {"existingSecret": "sessions-db"}}},
        {"sessions": {"persistence": {"enabled": False}, "networkPolicy": {"enabled": False}}},
    ],
    ids=["default", "namespaced", "minimal", "sessions-postgres", "sessions-memory"],
)
def test_lint_strict_is_clean(values):
    result = helm_python.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSION}")
    assert result["errors"] == []
    # Severity 1 is INFO (e.g. "icon is recommended"); warnings and errors are 2 and above.
    assert [m for m in result["messages"] if m["severity"] >= 2] == []


# ---------------------------------------------------------------- defaults


def test_default_objects(chart):
    docs = objects(chart)
    assert kinds(docs) == sorted(
        [
            "ClusterRole",  # controller
            "ClusterRole",  # hitl-approver
            "ClusterRole",  # hitl-editor
            "ClusterRole",  # hitl-viewer
            "ClusterRole",  # token reviewer (the gates of ToolGates)
            "ClusterRole",  # keeper of the token reviewer's binding
            "ClusterRole",  # session store
            "ClusterRoleBinding",  # controller
            "ClusterRoleBinding",  # keeper of the token reviewer's binding
            "ClusterRoleBinding",  # session store
            "CustomResourceDefinition",  # Agent
            "CustomResourceDefinition",  # ApprovalGrant
            "CustomResourceDefinition",  # ApprovalNotifier
            "CustomResourceDefinition",  # ApprovalRequest
            "CustomResourceDefinition",  # ModelConfig
            "CustomResourceDefinition",  # RemoteMCPServer
            "CustomResourceDefinition",  # ToolGate
            "Deployment",  # controller
            "Deployment",  # session store
            "NetworkPolicy",  # session store
            "PersistentVolumeClaim",  # session store (SQLite)
            "PodDisruptionBudget",  # controller
            "Role",  # leader election
            "RoleBinding",
            "Service",  # controller metrics
            "Service",  # session store
            "ServiceAccount",  # controller
            "ServiceAccount",  # session store
            "ValidatingAdmissionPolicy",  # requester
            "ValidatingAdmissionPolicy",  # decision
            "ValidatingAdmissionPolicy",  # quorum
            "ValidatingAdmissionPolicy",  # status
            "ValidatingAdmissionPolicy",  # grant
            "ValidatingAdmissionPolicy",  # grant-status
            "ValidatingAdmissionPolicy",  # edit
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
        ]
    )
    for d in docs:
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                             "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            assert d["metadata"]["namespace"] == NAMESPACE, d["kind"]


def test_default_deployment(chart):
    docs = objects(chart)
    dep = one(docs, "Deployment", FULLNAME)
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == FULLNAME
    c = controller(docs)
    assert c["image"] == "ghcr.io/hitl-operator/hitl-operator:0.1.0"
    assert c["args"][0] == "controller"
    assert args_map(c) == {
        "--metrics-addr": "0.0.0.0:8080",
        "--log-format": "json",
        "--default-approval-mode": "Gate",
        "--default-placement": "Sidecar",
        "--allow-agent-node-access": "false",
        "--agent-image": "cr.kagent.dev/kagent-dev/kagent/app:0.7.4",
        "--gate-image": "ghcr.io/hitl-operator/hitl-operator:0.1.0",
        "--cluster-cidrs": "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16",
        "--token-review-binding": f"{FULLNAME}-toolgate-token-review",
        "--token-review-role": f"{FULLNAME}-token-reviewer",
        "--session-store-url": SESSIONS_URL,
        "--skills-init-image": "cr.kagent.dev/kagent-dev/kagent/skills-init:0.7.4",
        "--grant-max-ttl": "24h",
        "--default-max-open-requests": "50",
        "--leader-election": "true",
        "--lease-name": FULLNAME,
        "--lease-namespace": NAMESPACE,
    }
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_node_access_of_agents_is_refused_unless_the_value_allows_it(chart):
    # Default false: the controller refuses Agents whose pods reach the node next to a gate.
    assert args_map(controller(objects(chart)))["--allow-agent-node-access"] == "false"
    docs = objects(chart, {"allowAgentNodeAccess": True})
    assert args_map(controller(docs))["--allow-agent-node-access"] == "true"


def test_proxy_url_is_passed_to_the_controller(chart):
    docs = objects(chart, {"proxy": {"url": "http://proxy.kagent.svc.cluster.local:8080"}})
    assert args_map(controller(docs))["--proxy-url"] == "http://proxy.kagent.svc.cluster.local:8080"


def test_kagent_session_api_is_passed_to_the_controller(chart):
    args = args_map(controller(objects(chart)))
    assert "--kagent-url" not in args and "--kagent-grpc-url" not in args
    docs = objects(
        chart,
        {"kagent": {"url": "http://kagent-controller.kagent:8083", "grpcUrl": "kagent-controller.kagent:8084"}},
    )
    args = args_map(controller(docs))
    assert args["--kagent-url"] == "http://kagent-controller.kagent:8083"
    assert args["--kagent-grpc-url"] == "kagent-controller.kagent:8084"
    # kagent's controller keeps the conversations: the session store is not named.
    assert "--session-store-url" not in args


def test_restricted_security_context(chart):
    docs = objects(chart)
    pod = one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    sc = controller(docs)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_pod_disruption_budget(chart):
    docs = objects(chart)
    pdb = one(docs, "PodDisruptionBudget", FULLNAME)
    pod_labels = one(docs, "Deployment", FULLNAME)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    docs = objects(chart, {"podDisruptionBudget": {"enabled": False}})
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def test_metrics_service_selects_controller(chart):
    docs = objects(chart)
    svc = one(docs, "Service", f"{FULLNAME}-metrics")
    pod_labels = one(docs, "Deployment", FULLNAME)["spec"]["template"]["metadata"]["labels"]
    assert not svc["spec"]["selector"].items() <= store_deployment(docs)["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]


def test_controller_rbac_is_cluster_wide_and_least_privilege(chart):
    docs = objects(chart)
    role = one(docs, "ClusterRole", f"{FULLNAME}-controller")
    binding = one(docs, "ClusterRoleBinding", f"{FULLNAME}-controller")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": f"{FULLNAME}-controller"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    assert sorted(rules_of(role)) == sorted([
        (("kagent.dev",), ("agents", "remotemcpservers", "modelconfigs", "approvalnotifiers"),
         ("get", "list", "watch", "patch")),
        (("kagent.dev",), ("approvalrequests",), ("get", "list", "watch", "patch", "create", "delete")),
        (("kagent.dev",), ("agents/status", "remotemcpservers/status", "modelconfigs/status",
                           "approvalrequests/status", "approvalnotifiers/status"), ("patch",)),
        (("kagent.dev",), ("toolgates",), ("get", "list", "watch", "gate")),
        (("kagent.dev",), ("toolgates/status",), ("patch",)),
        (("kagent.dev",), ("agents/finalizers", "toolgates/finalizers"), ("update",)),
        (("kagent.dev",), ("approvalgrants",), ("get", "list")),
        (("kagent.dev",), ("approvalgrants/status",), ("patch",)),
        (("kagent.dev",), ("agents",), ("gate",)),
        (("apps",), ("deployments",), ("get", "list", "watch", "create", "patch", "delete")),
        (("",), ("services", "serviceaccounts", "secrets"), ("get", "list", "watch", "create", "patch", "delete")),
        (("rbac.authorization.k8s.io",), ("roles", "rolebindings"),
         ("get", "list", "watch", "create", "patch", "delete")),
        (("networking.k8s.io",), ("networkpolicies",), ("get", "list", "watch", "create", "patch", "delete")),
        (("",), ("configmaps",), ("get", "list", "watch")),
        (("", "events.k8s.io"), ("events",), ("create", "patch")),
        (("kagent.dev",), ("mcpservers",), ("get", "list", "watch")),
        (("",), ("namespaces",), ("get", "list", "watch")),
    ])
    for r in role["rules"]:
        assert "*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r.get("apiGroups", [])
    # What the controller grants agents (DESIGN §5) it must hold itself.
    for verb in ("create", "get", "list", "watch"):
        assert allows(role, "kagent.dev", "approvalrequests", verb)
    assert allows(role, "kagent.dev", "approvalrequests/status", "patch")
    # The gate reads grants and records their uses.
    for verb in ("get", "list"):
        assert allows(role, "kagent.dev", "approvalgrants", verb)
    assert allows(role, "kagent.dev", "approvalgrants/status", "patch")
    # The gate watches its own Agent (or ToolGate) for a freeze, and holds the verb gate on it.
    for verb in ("get", "list", "watch", "gate"):
        assert allows(role, "kagent.dev", "agents", verb)
        assert allows(role, "kagent.dev", "toolgates", verb)
    # Every verb of every Role the controller renders for an Agent (the golden renderings), or
    # the apiserver refuses to let it create the Role (RBAC escalation rule).
    rendered = 0
    for snapshot in (ROOT / "tests" / "snapshots").glob("render_golden__*.snap"):
        for doc in yaml.safe_load_all(snapshot.read_text().split("\n---\n", 2)[-1]):
            if not isinstance(doc, dict) or doc.get("kind") != "Role":
                continue
            for rule in doc["rules"]:
                for group in rule.get("apiGroups", []):
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            rendered += 1
                            assert allows(role, group, resource, verb), (snapshot.name, group, resource, verb)
    assert rendered > 0
    lease = one(docs, "Role", f"{FULLNAME}-leader-election")
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert rules_of(lease) == [(("coordination.k8s.io",), ("leases",), ("get", "list", "watch", "create", "update", "patch"))]


def test_user_roles(chart):
    docs = objects(chart)
    approver = one(docs, "ClusterRole", "hitl-approver")
    assert sorted(rules_of(approver)) == sorted([
        (("kagent.dev",), ("approvalrequests",), ("get", "list", "watch", "patch")),
        (("kagent.dev",), ("agents", "toolgates"), ("approve",)),
        (("kagent.dev",), ("approvalgrants",), ("get", "list", "watch", "create", "patch", "delete")),
    ])
    assert "rbac.authorization.k8s.io/aggregate-to-admin" not in approver["metadata"]["labels"]
    viewer = one(docs, "ClusterRole", "hitl-viewer")
    for verb in ("create", "patch", "update", "delete", "approve"):
        assert not any(verb in r["verbs"] for r in viewer["rules"])
    assert viewer["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"


def test_admission_policies_default(chart):
    docs = objects(chart)
    policies = {p["metadata"]["name"]: p for p in find(docs, "ValidatingAdmissionPolicy")}
    assert sorted(policies) == [f"{FULLNAME}-approval-{n}" for n in ("decision", "edit", "grant", "grant-status", "quorum", "requester", "status")]
    for p in policies.values():
        assert p["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert p["spec"]["failurePolicy"] == "Fail"
    bindings = find(docs, "ValidatingAdmissionPolicyBinding")
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(policies)
    for b in bindings:
        assert b["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in b["spec"]
    decision = policies[f"{FULLNAME}-approval-decision"]["spec"]
    assert decision["matchConstraints"]["resourceRules"][0]["resources"] == ["approvalrequests"]
    exprs = [v["expression"] for v in decision["validations"]]
    # The verb approve on the kind spec.agentRef names: agents, or toolgates (shared gates).
    assert exprs[0] == (
        "authorizer.group('kagent.dev').resource((has(object.spec.agentRef.kind) && "
        "object.spec.agentRef.kind == 'ToolGate' ? 'toolgates' : 'agents'))"
        ".namespace(object.metadata.namespace)"
        ".name(object.spec.agentRef.name).check('approve').allowed()"
    )
    assert "object.spec.decision.decidedBy == request.userInfo.username" in exprs
    caller = "!has(object.spec.caller) || object.spec.caller.username != request.userInfo.username"
    assert caller in exprs
    assert "object.spec.requestedBy != request.userInfo.username" in exprs
    assert "!request.userInfo.username.startsWith('system:serviceaccount:')" in exprs
    quorum = policies[f"{FULLNAME}-approval-quorum"]["spec"]
    quorum_exprs = [v["expression"] for v in quorum["validations"]]
    assert quorum_exprs[0] == exprs[0]
    assert caller in quorum_exprs
    assert "object.spec.requestedBy != request.userInfo.username" in quorum_exprs
    assert "!request.userInfo.username.startsWith('system:serviceaccount:')" in quorum_exprs
    status = policies[f"{FULLNAME}-approval-status"]["spec"]
    assert status["matchConstraints"]["resourceRules"][0]["resources"] == ["approvalrequests/status"]
    assert status["matchConditions"][0]["expression"] == f'!(request.userInfo.username in ["{CONTROLLER_USER}"])'


    grant = policies[f"{FULLNAME}-approval-grant"]["spec"]
    assert grant["matchConstraints"]["resourceRules"][0]["resources"] == ["approvalgrants"]
    assert grant["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    grant_exprs = [v["expression"] for v in grant["validations"]]
    assert grant_exprs[0] == exprs[0]
    assert "object.spec.grantedBy == request.userInfo.username" in grant_exprs
    assert "!request.userInfo.username.startsWith('system:serviceaccount:')" in grant_exprs
    assert ("timestamp(object.spec.expiresAt) - timestamp(object.metadata.creationTimestamp)"
            " <= duration('24h')") in grant_exprs
    # A grant's uses: only the gate of its own agent (the verb gate on that Agent), one a write.
    uses = policies[f"{FULLNAME}-approval-grant-status"]["spec"]
    assert uses["matchConstraints"]["resourceRules"][0]["resources"] == ["approvalgrants/status"]
    assert uses["matchConditions"][0]["expression"] == f'!(request.userInfo.username in ["{CONTROLLER_USER}"])'
    uses_exprs = [v["expression"] for v in uses["validations"]]
    assert uses_exprs[0] == exprs[0].replace("check('approve')", "check('gate')")


def test_grants_max_ttl_reaches_the_policy_and_the_controller_and_off_turns_them_off(chart):
    docs = objects(chart, {"grants": {"maxTTL": "90m"}})
    assert args_map(controller(docs))["--grant-max-ttl"] == "90m"
    grant = one(docs, "ValidatingAdmissionPolicy", f"{FULLNAME}-approval-grant")
    assert any("duration('90m')" in v["expression"] for v in grant["spec"]["validations"])
    off = objects(chart, {"grants": {"maxTTL": "off"}})
    assert args_map(controller(off))["--grant-max-ttl"] == "off"
    names = [d["metadata"]["name"] for d in off
             if d["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]
    assert f"{FULLNAME}-approval-grant" not in names


# ---------------------------------------------------------------- bounded storage


def test_default_max_open_requests_reaches_the_controller(chart):
    docs = objects(chart, {"defaultMaxOpenRequests": 200})
    assert args_map(controller(docs))["--default-max-open-requests"] == "200"


def test_no_quota_by_default(chart):
    assert not [d for d in objects(chart) if d["kind"] == "ResourceQuota"]
    assert not [d for d in objects(chart, {"watchNamespace": "agents"}) if d["kind"] == "ResourceQuota"]


def test_quota_on_approval_requests_in_each_namespace_named(chart):
    docs = objects(chart, {"quota": {"approvalRequests": {"enabled": True, "count": 500,
                                                          "namespaces": ["team-a", "team-b"]}}})
    quotas = find(docs, "ResourceQuota")
    assert sorted(q["metadata"]["namespace"] for q in quotas) == ["team-a", "team-b"]
    for q in quotas:
        assert q["metadata"]["name"] == f"{FULLNAME}-approval-requests"
        assert q["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        assert q["spec"] == {"hard": {"count/approvalrequests.kagent.dev": "500"}}
        kubernetes_validate.validate(q, KUBE_VERSION, strict=True)


def test_quota_defaults_to_the_watched_namespace_and_needs_one(chart):
    docs = objects(chart, {"watchNamespace": "agents", "quota": {"approvalRequests": {"enabled": True}}})
    [q] = find(docs, "ResourceQuota")
    assert q["metadata"]["namespace"] == "agents"
    assert q["spec"]["hard"] == {"count/approvalrequests.kagent.dev": "1000"}
    with pytest.raises(helm_python.HelmRenderError, match="quota.approvalRequests.namespaces"):
        objects(chart, {"quota": {"approvalRequests": {"enabled": True}}})


# ---------------------------------------------------------------- non-default values


def test_watch_namespace_uses_role_and_scoped_policies(chart):
    docs = objects(chart, {"watchNamespace": "agents"})
    assert not [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-controller")]
    # Cluster-wide, only the read of its own Namespace (for the freeze annotation).
    namespace_reader = one(docs, "ClusterRole", f"{FULLNAME}-agents-namespace")
    assert namespace_reader["rules"] == [{"apiGroups": [""], "resources": ["namespaces"],
                                          "resourceNames": ["agents"], "verbs": ["get", "list", "watch"]}]
    cluster_binding = one(docs, "ClusterRoleBinding", f"{FULLNAME}-agents-namespace")
    assert cluster_binding["roleRef"]["name"] == f"{FULLNAME}-agents-namespace"
    # Besides it, only the keeper of the ToolGates' TokenReview binding (cluster-scoped).
    # And the session store's TokenReviews (its other rules are a Role there, test_sessions_rbac_*).
    assert sorted(b["metadata"]["name"] for b in find(docs, "ClusterRoleBinding")) == [
        f"{FULLNAME}-agents-namespace", f"{FULLNAME}-token-review-keeper", f"{SESSIONS}-token-review"]
    assert cluster_binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    role = one(docs, "Role", f"{FULLNAME}-controller")
    assert role["metadata"]["namespace"] == "agents"
    assert allows(role, "kagent.dev", "approvalrequests", "delete")
    binding = one(docs, "RoleBinding", f"{FULLNAME}-controller")
    assert binding["metadata"]["namespace"] == "agents"
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    assert args_map(controller(docs))["--namespace"] == "agents"
    for b in find(docs, "ValidatingAdmissionPolicyBinding"):
        assert b["spec"]["matchResources"] == {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agents"}}
        }


def test_service_monitor(chart):
    docs = objects(chart, {"metrics": {"serviceMonitor": {"enabled": True, "interval": "15s",
                                                          "labels": {"release": "prom"}}}})
    sm = one(docs, "ServiceMonitor", FULLNAME)
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s",
                                        "scrapeTimeout": "10s"}]
    svc = one(docs, "Service", f"{FULLNAME}-metrics")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_custom_images_and_mode(chart):
    docs = objects(chart, {
        "image": {"repository": "registry.example/hitl", "tag": "1.2.3"},
        "agentImage": {"repository": "registry.example/kagent-app", "tag": "9.9.9"},
        "defaultApprovalMode": "Both",
        "defaultPlacement": "Gateway",
        "logFormat": "text",
        "leaderElection": {"leaseName": "my-lease"},
    })
    c = controller(docs)
    assert c["image"] == "registry.example/hitl:1.2.3"
    a = args_map(c)
    assert a["--agent-image"] == "registry.example/kagent-app:9.9.9"
    # The gate image follows the controller image unless set.
    assert a["--gate-image"] == "registry.example/hitl:1.2.3"
    assert a["--default-approval-mode"] == "Both"
    assert a["--default-placement"] == "Gateway"
    assert a["--log-format"] == "text"
    assert a["--lease-name"] == "my-lease"
    docs = objects(chart, {"gateImage": {"repository": "registry.example/gate", "tag": "7"}})
    assert args_map(controller(docs))["--gate-image"] == "registry.example/gate:7"


def test_cluster_cidrs_reach_the_controller(chart):
    docs = objects(chart, {"networkPolicy": {"clusterCIDRs": ["10.42.0.0/16", "10.43.0.0/16", "fd00::/8"]}})
    assert args_map(controller(docs))["--cluster-cidrs"] == "10.42.0.0/16,10.43.0.0/16,fd00::/8"


def test_notifiers_reach_loopback_and_link_local_only_where_allowed(chart):
    assert "--notifier-allow-cidrs" not in args_map(controller(objects(chart)))
    docs = objects(chart, {"notifiers": {"allowCIDRs": ["127.0.0.0/8", "::1/128"]}})
    assert args_map(controller(docs))["--notifier-allow-cidrs"] == "127.0.0.0/8,::1/128"


def test_agent_selector_reaches_the_controller(chart):
    assert "--agent-selector" not in args_map(controller(objects(chart)))
    docs = objects(chart, {"agentSelector": "kagent.dev/controller=hitl-operator"})
    assert args_map(controller(docs))["--agent-selector"] == "kagent.dev/controller=hitl-operator"


def test_single_replica_without_leader_election(chart):
    docs = objects(chart, {"replicaCount": 1, "leaderElection": {"enabled": False}})
    assert one(docs, "Deployment", FULLNAME)["spec"]["replicas"] == 1
    a = args_map(controller(docs))
    assert a["--leader-election"] == "false"
    assert "--lease-name" not in a and "--lease-namespace" not in a
    assert not [d for d in docs if d["kind"] in ("Role", "PodDisruptionBudget")]


def test_replicas_without_leader_election_fail(chart):
    with pytest.raises(helm_python.HelmRenderError, match="leaderElection.enabled=true"):
        objects(chart, {"replicaCount": 2, "leaderElection": {"enabled": False}})


def test_policy_options(chart):
    docs = objects(chart, POLICY_VARIANTS["permissive"])
    decision = one(docs, "ValidatingAdmissionPolicy", f"{FULLNAME}-approval-decision")
    exprs = [v["expression"] for v in decision["spec"]["validations"]]
    assert "object.spec.requestedBy != request.userInfo.username" not in exprs
    assert not any("system:serviceaccount:" in e for e in exprs)
    # The caller's own call stays out of its reach whatever the options say.
    caller = "!has(object.spec.caller) || object.spec.caller.username != request.userInfo.username"
    assert caller in exprs
    # The right to approve, who decides, the caller, the escalation tier and the quorum's own
    # approval: none of them is one of the options.
    assert any("object.spec.escalation.steps" in e for e in exprs)
    assert len(exprs) == 5
    quorum = one(docs, "ValidatingAdmissionPolicy", f"{FULLNAME}-approval-quorum")
    exprs = [v["expression"] for v in quorum["spec"]["validations"]]
    assert "object.spec.requestedBy != request.userInfo.username" not in exprs
    assert not any("system:serviceaccount:" in e for e in exprs)
    assert caller in exprs
    assert any("object.spec.escalation.steps" in e for e in exprs)
    assert len(exprs) == 5
    status = one(docs, "ValidatingAdmissionPolicy", f"{FULLNAME}-approval-status")
    assert status["spec"]["matchConditions"][0]["expression"] == (
        f'!(request.userInfo.username in ["{CONTROLLER_USER}","ops-admin"])'
    )


def test_policy_disabled(chart):
    docs = objects(chart, {"admissionPolicy": {"enabled": False}})
    assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    out, _ = render_docs(chart, {"admissionPolicy": {"enabled": False}})
    assert "WARNING: admissionPolicy.enabled=false" in out["hitl-operator/templates/NOTES.txt"]


def test_user_roles_options(chart):
    docs = objects(chart, {"rbac": {"approverRoleName": "team-approver", "aggregateApproverToAdmin": True}})
    approver = one(docs, "ClusterRole", "team-approver")
    assert approver["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    decision = one(docs, "ValidatingAdmissionPolicy", f"{FULLNAME}-approval-decision")
    assert "team-approver" in decision["spec"]["validations"][0]["messageExpression"]
    docs = objects(chart, {"rbac": {"userRoles": False}})
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"] == [
        f"{FULLNAME}-controller", f"{FULLNAME}-token-reviewer", f"{FULLNAME}-token-review-keeper", SESSIONS]


def test_existing_service_account(chart):
    docs = objects(chart, {"serviceAccount": {"create": False, "name": "ops-sa"}})
    # The session store keeps its own ServiceAccount.
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"] == [SESSIONS]
    assert one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["serviceAccountName"] == "ops-sa"
    status = one(docs, "ValidatingAdmissionPolicy", f"{FULLNAME}-approval-status")
    assert f"system:serviceaccount:{NAMESPACE}:ops-sa" in status["spec"]["matchConditions"][0]["expression"]


def test_notes_name_next_commands(chart):
    out, _ = render_docs(chart)
    notes = out["hitl-operator/templates/NOTES.txt"]
    assert f"kubectl -n {NAMESPACE} rollout status deployment/{FULLNAME}" in notes
    assert "--clusterrole=hitl-approver" in notes
    assert "kubectl hitl approve" in notes


# ---------------------------------------------------------------- the session store


def store_args(docs):
    assert store(docs)["args"][0] == "sessions"
    return args_map(store(docs))


def store_volumes(docs):
    pod = store_deployment(docs)["spec"]["template"]["spec"]
    return {v["name"]: v for v in pod.get("volumes", [])}


def store_mounts(docs):
    return {m["name"]: m for m in store(docs).get("volumeMounts", [])}


def no_kind(docs, kind, name=SESSIONS):
    return not [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]


def test_sessions_store_defaults_keep_sqlite_on_a_kept_claim(chart):
    docs = objects(chart)
    dep = store_deployment(docs)
    assert dep["metadata"]["namespace"] == NAMESPACE
    assert dep["spec"]["replicas"] == 1
    # One process at a time on the SQLite file: the old pod stops before the new one starts.
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    # What the controller's Agent egress NetworkPolicies select (the release namespace).
    assert pod_labels == {
        "app.kubernetes.io/component": "session-store",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/name": "hitl-sessions",
    }
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # Not the controller's pods, nor the other way round.
    controller_pods = one(docs, "Deployment", FULLNAME)["spec"]["template"]["metadata"]["labels"]
    assert not dep["spec"]["selector"]["matchLabels"].items() <= controller_pods.items()
    assert "app.kubernetes.io/managed-by" not in pod_labels, "the store is no Agent pod"
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SESSIONS
    assert pod["automountServiceAccountToken"] is True
    c = store(docs)
    assert c["image"] == "ghcr.io/hitl-operator/hitl-operator:0.1.0"
    assert store_args(docs) == {
        "--listen": "0.0.0.0:8083",
        "--health-listen": "0.0.0.0:8080",
        "--database": "sqlite:///var/lib/hitl-sessions/sessions.db",
        "--audience": "hitl-operator-sessions",
        "--max-sessions-per-agent": "10000",
        "--max-events-per-session": "10000",
        "--max-bytes-per-session": "32Mi",
        "--max-bytes-per-agent": "1Gi",
        "--max-tasks-per-agent": "10000",
        "--deleted-agent-grace": "168h",
        "--max-body-bytes": "8Mi",
        "--max-in-flight-bytes": "64Mi",
        "--log-format": "json",
    }
    assert not [a for a in c["args"] if a.startswith("--database-file")]
    assert c["ports"] == [
        {"name": "http", "containerPort": 8083, "protocol": "TCP"},
        {"name": "health", "containerPort": 8080, "protocol": "TCP"},
    ]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = {e["name"]: e for e in c["env"]}
    assert env["RUST_LOG"]["value"] == "info"
    # The SQLite file on the chart's claim.
    assert store_volumes(docs)["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": SESSIONS}}
    assert store_mounts(docs)["data"]["mountPath"] == "/var/lib/hitl-sessions"
    assert "database" not in store_volumes(docs)
    pvc = one(docs, "PersistentVolumeClaim", SESSIONS)
    assert pvc["metadata"]["namespace"] == NAMESPACE
    # `helm uninstall` leaves the claim, and every conversation on it.
    assert pvc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    assert "storageClassName" not in pvc["spec"], "the cluster's default StorageClass"
    # One replica: no PodDisruptionBudget for the store.
    assert no_kind(docs, "PodDisruptionBudget")


def test_sessions_service_selects_the_store_on_port_8083(chart):
    docs = objects(chart)
    svc = one(docs, "Service", SESSIONS)
    pod_labels = store_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"] == pod_labels
    assert svc["spec"]["ports"] == [
        {"name": "http", "port": 8083, "targetPort": "http", "protocol": "TCP"},
        {"name": "metrics", "port": 8080, "targetPort": "health", "protocol": "TCP"},
    ]
    for d in docs:
        if d["metadata"]["name"].startswith(SESSIONS):
            assert d["metadata"]["labels"]["app.kubernetes.io/component"] == "session-store"
            assert d["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_controller_points_every_agent_at_the_store(chart):
    args = args_map(controller(objects(chart)))
    assert args["--session-store-url"] == SESSIONS_URL == "http://hitl-sessions.hitl-system.svc:8083"
    assert "--kagent-url" not in args
    docs = objects(chart, {"kagent": {"url": "http://kagent-controller.kagent:8083"}})
    args = args_map(controller(docs))
    assert args["--kagent-url"] == "http://kagent-controller.kagent:8083"
    assert "--session-store-url" not in args
    # Installed but idle, and the notes say so.
    store_deployment(docs)
    out, _ = render_docs(chart, {"kagent": {"url": "http://kagent-controller.kagent:8083"}})
    assert "IDLE: kagent.url is set" in out["hitl-operator/templates/NOTES.txt"]


def test_sessions_can_be_left_to_kagent_and_only_to_kagent(chart):
    docs = objects(chart, {"kagent": {"url": "http://kagent-controller.kagent:8083"},
                           "sessions": {"enabled": False}})
    assert not [d for d in docs if d["metadata"]["name"].startswith(SESSIONS)]
    assert "--session-store-url" not in args_map(controller(docs))
    out, _ = render_docs(chart, {"kagent": {"url": "http://kagent-controller.kagent:8083"},
                                 "sessions": {"enabled": False}})
    assert "session store" not in out["hitl-operator/templates/NOTES.txt"]
    # Without kagent's controller the Agents' runtime would have nowhere to keep conversations.
    with pytest.raises(helm_python.HelmRenderError, match="sessions.enabled=false needs kagent.url"):
        objects(chart, {"sessions": {"enabled": False}})


def test_sessions_security_context_and_resources(chart):
    docs = objects(chart)
    pod = store_deployment(docs)["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["runAsUser"] == 65532 and psc["runAsGroup"] == 65532
    # The claim is writable by the store's group.
    assert psc["fsGroup"] == 65532
    assert psc["fsGroupChangePolicy"] == "OnRootMismatch"
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    c = store(docs)
    sc = c["securityContext"]
    # The same container security context as the controller's.
    assert sc == controller(docs)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # A writable scratch directory, bounded, on a read-only root.
    assert store_mounts(docs)["tmp"]["mountPath"] == "/tmp"
    assert store_volumes(docs)["tmp"]["emptyDir"] == {"sizeLimit": "64Mi"}
    assert c["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
    docs = objects(chart, {"sessions": {"resources": {"requests": {"memory": "128Mi"},
                                                      "limits": {"memory": "1Gi"}}}})
    # (Helm merges maps with the defaults: the cpu request stays.)
    assert store(docs)["resources"] == {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}
    # A podSecurityContext of one's own keeps its fsGroup and fsGroupChangePolicy.
    docs = objects(chart, {"podSecurityContext": {"fsGroup": 2000, "fsGroupChangePolicy": "Always"}})
    psc = store_deployment(docs)["spec"]["template"]["spec"]["securityContext"]
    assert psc["fsGroup"] == 2000 and psc["fsGroupChangePolicy"] == "Always"
    # Without an fsGroup, the store's pod still gets one: the claim must be writable.
    docs = objects(chart, {"podSecurityContext": {"fsGroup": None}})
    assert "fsGroup" not in one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["securityContext"]
    assert store_deployment(docs)["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 65532


def test_sessions_network_policy_admits_only_agent_pods_to_the_api(chart):
    docs = objects(chart)
    policy = one(docs, "NetworkPolicy", SESSIONS)
    pod_labels = store_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {
            "from": [{
                # The operator's Agent pods, in any namespace.
                "namespaceSelector": {},
                "podSelector": {
                    "matchLabels": {"app.kubernetes.io/managed-by": "hitl-operator"},
                    "matchExpressions": [{"key": "kagent.dev/agent", "operator": "Exists"}],
                },
            }],
            "ports": [{"port": 8083, "protocol": "TCP"}],
        },
        # Health and metrics: the kubelet's probes, Prometheus.
        {"ports": [{"port": 8080, "protocol": "TCP"}]},
    ]
    # With watchNamespace, only that namespace's Agent pods.
    docs = objects(chart, {"watchNamespace": "agents"})
    peer = one(docs, "NetworkPolicy", SESSIONS)["spec"]["ingress"][0]["from"][0]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "agents"}}
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "hitl-operator"}
    assert no_kind(objects(chart, {"sessions": {"networkPolicy": {"enabled": False}}}), "NetworkPolicy")


def test_sessions_rbac_cluster_wide(chart):
    docs = objects(chart)
    role = one(docs, "ClusterRole", SESSIONS)
    assert sorted(rules_of(role)) == sorted([
        (("authentication.k8s.io",), ("tokenreviews",), ("create",)),
        (("",), ("pods",), ("get",)),
        (("apps",), ("replicasets", "deployments"), ("get",)),
        (("kagent.dev",), ("agents",), ("get", "list", "watch")),
        (("", "events.k8s.io"), ("events",), ("create", "patch")),
    ])
    for r in role["rules"]:
        assert "*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r.get("apiGroups", [])
    binding = one(docs, "ClusterRoleBinding", SESSIONS)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SESSIONS}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SESSIONS, "namespace": NAMESPACE}]
    sa = one(docs, "ServiceAccount", SESSIONS)
    assert sa["metadata"]["namespace"] == NAMESPACE
    assert sa["automountServiceAccountToken"] is True
    # It reads and writes nothing else: no Secrets, no Agents' status, nothing it could escalate with.
    for resource in ("secrets", "configmaps", "serviceaccounts"):
        assert not allows(role, "", resource, "get")
    assert not allows(role, "kagent.dev", "agents", "patch")
    assert no_kind(docs, "Role") and no_kind(docs, "RoleBinding")


def test_sessions_rbac_with_watch_namespace(chart):
    docs = objects(chart, {"watchNamespace": "agents"})
    assert no_kind(docs, "ClusterRole") and no_kind(docs, "ClusterRoleBinding")
    role = one(docs, "Role", SESSIONS)
    assert role["metadata"]["namespace"] == "agents"
    assert sorted(rules_of(role)) == sorted([
        (("",), ("pods",), ("get",)),
        (("apps",), ("replicasets", "deployments"), ("get",)),
        (("kagent.dev",), ("agents",), ("get", "list", "watch")),
        (("", "events.k8s.io"), ("events",), ("create", "patch")),
    ])
    binding = one(docs, "RoleBinding", SESSIONS)
    assert binding["metadata"]["namespace"] == "agents"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SESSIONS}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SESSIONS, "namespace": NAMESPACE}]
    # TokenReviews have no namespace: cluster-wide, and nothing more.
    reviewer = one(docs, "ClusterRole", f"{SESSIONS}-token-review")
    assert rules_of(reviewer) == [(("authentication.k8s.io",), ("tokenreviews",), ("create",))]
    binding = one(docs, "ClusterRoleBinding", f"{SESSIONS}-token-review")
    assert binding["roleRef"]["name"] == f"{SESSIONS}-token-review"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SESSIONS, "namespace": NAMESPACE}]
    # rbac.create=false: the installer brings the store's permissions too.
    docs = objects(chart, {"rbac": {"create": False}})
    assert not [d for d in docs if d["kind"].startswith(("Role", "ClusterRole")) and d["metadata"]["name"].startswith(SESSIONS)]


@pytest.mark.parametrize(
    "values",
    [{"sessions": {"replicas": 2}}, {"sessions": {"replicas": 3, "persistence": {"enabled": False}}},
     {"sessions": {"replicas": 2, "persistence": {"existingClaim": "shared"}}}],
    ids=["sqlite", "memory", "existing-claim"],
)
def test_sessions_replicas_need_postgres(chart, values):
    with pytest.raises(helm_python.HelmRenderError, match="sessions.replicas > 1 needs sessions.postgres.existingSecret") as e:
        objects(chart, values)
    assert "SQLite is one file on one volume" in str(e.value)


def test_sessions_on_postgres_run_any_number_of_replicas(chart):
    docs = objects(chart, {"sessions": {"replicas": 3, "postgres": {"existingSecret": "sessions-db"}}})
    dep = store_deployment(docs)
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    args = store_args(docs)
    # The URL (with its password) is read from a file, never an argument.
    assert args["--database-file"] == "/etc/hitl-sessions/database/url"
    assert "--database" not in args
    assert not [a for a in store(docs)["args"] if "postgres://" in a]
    volumes = store_volumes(docs)
    assert volumes["database"]["secret"] == {"secretName": "sessions-db", "defaultMode": 0o440,
                                             "items": [{"key": "url", "path": "url"}]}
    assert store_mounts(docs)["database"] == {"name": "database", "mountPath": "/etc/hitl-sessions/database",
                                              "readOnly": True}
    assert "data" not in volumes and "data" not in store_mounts(docs)
    # No claim: the data is in Postgres.
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    pdb = one(docs, "PodDisruptionBudget", SESSIONS)
    assert pdb["metadata"]["namespace"] == NAMESPACE
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["template"]["metadata"]["labels"]
    # The controller's PodDisruptionBudget is its own.
    assert one(docs, "PodDisruptionBudget", FULLNAME)["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"
    out, _ = render_docs(chart, {"sessions": {"replicas": 3, "postgres": {"existingSecret": "sessions-db"}}})
    assert "in Postgres (the URL in Secret sessions-db, key url), 3 replica(s)" in out["hitl-operator/templates/NOTES.txt"]


def test_sessions_on_postgres_with_one_replica_and_another_key(chart):
    docs = objects(chart, {"sessions": {"postgres": {"existingSecret": "db", "key": "DATABASE_URL"}}})
    assert store_deployment(docs)["spec"]["strategy"]["type"] == "RollingUpdate"
    assert store_volumes(docs)["database"]["secret"]["items"] == [{"key": "DATABASE_URL", "path": "url"}]
    assert no_kind(docs, "PodDisruptionBudget")
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]


def test_sessions_without_persistence_are_in_memory(chart):
    values = {"sessions": {"persistence": {"enabled": False}}}
    docs = objects(chart, values)
    assert store_args(docs)["--database"] == "memory:"
    assert store_deployment(docs)["spec"]["strategy"] == {"type": "Recreate"}
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert sorted(store_volumes(docs)) == ["tmp"]
    assert sorted(store_mounts(docs)) == ["tmp"]
    out, _ = render_docs(chart, values)
    notes = out["hitl-operator/templates/NOTES.txt"]
    assert "WARNING: in memory" in notes and "lost each time the store's pod restarts" in notes


def test_sessions_on_an_existing_claim(chart):
    docs = objects(chart, {"sessions": {"persistence": {"existingClaim": "conversations"}}})
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert store_volumes(docs)["data"]["persistentVolumeClaim"] == {"claimName": "conversations"}
    assert store_args(docs)["--database"] == "sqlite:///var/lib/hitl-sessions/sessions.db"
    out, _ = render_docs(chart, {"sessions": {"persistence": {"existingClaim": "conversations"}}})
    notes = out["hitl-operator/templates/NOTES.txt"]
    assert "PersistentVolumeClaim conversations" in notes
    assert "delete pvc" not in notes, "not the chart's claim to tell you to delete"


def test_sessions_claim_class_and_size(chart):
    docs = objects(chart, {"sessions": {"persistence": {"storageClassName": "fast-ssd", "size": "20Gi"}}})
    pvc = one(docs, "PersistentVolumeClaim", SESSIONS)
    assert pvc["spec"]["storageClassName"] == "fast-ssd"
    assert pvc["spec"]["resources"] == {"requests": {"storage": "20Gi"}}


def test_sessions_quotas_retention_and_limits_reach_the_store(chart):
    docs = objects(chart, {"logFormat": "text", "logLevel": "debug", "sessions": {
        "quotas": {"sessionsPerAgent": 500, "eventsPerSession": 2000, "bytesPerSession": "8Mi",
                   "bytesPerAgent": "10Gi", "tasksPerAgent": 300},
        "retention": {"idle": "720h", "deletedAgentGrace": "24h"},
        "maxBodyBytes": "1Mi", "maxInFlightBytes": "128Mi",
    }})
    args = store_args(docs)
    assert {k: args[k] for k in (
        "--max-sessions-per-agent", "--max-events-per-session", "--max-bytes-per-session",
        "--max-bytes-per-agent", "--max-tasks-per-agent", "--idle-retention",
        "--deleted-agent-grace", "--max-body-bytes", "--max-in-flight-bytes", "--log-format")} == {
        "--max-sessions-per-agent": "500",
        "--max-events-per-session": "2000",
        "--max-bytes-per-session": "8Mi",
        "--max-bytes-per-agent": "10Gi",
        "--max-tasks-per-agent": "300",
        "--idle-retention": "720h",
        "--deleted-agent-grace": "24h",
        "--max-body-bytes": "1Mi",
        "--max-in-flight-bytes": "128Mi",
        "--log-format": "text",
    }
    assert {e["name"]: e.get("value") for e in store(docs)["env"]}["RUST_LOG"] == "debug"
    # Large counts stay integers (Helm reads numbers as floats).
    docs = objects(chart, {"sessions": {"quotas": {"sessionsPerAgent": 10000000}}})
    assert store_args(docs)["--max-sessions-per-agent"] == "10000000"
    # Idle retention is off unless set.
    assert "--idle-retention" not in store_args(objects(chart))


def test_sessions_image_and_scheduling(chart):
    docs = objects(chart, {"image": {"repository": "registry.example/hitl", "tag": "1.2.3"}})
    assert store(docs)["image"] == "registry.example/hitl:1.2.3"
    docs = objects(chart, {"image": {"tag": "1.2.3"},
                           "sessions": {"image": {"repository": "registry.example/sessions"}}})
    assert store(docs)["image"] == "registry.example/sessions:1.2.3"
    docs = objects(chart, {"sessions": {
        "image": {"repository": "registry.example/sessions", "tag": "7"},
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "storage", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    }})
    assert store(docs)["image"] == "registry.example/sessions:7"
    pod = store_deployment(docs)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["tolerations"] == [{"key": "storage", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["affinity"]["nodeAffinity"]
    # The controller's own scheduling values stay the controller's.
    assert "nodeSelector" not in one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]


def test_sessions_name_fits_a_dns_label_whatever_the_release(chart):
    release = "a-release-name-of-fifty-three-characters-exactly-wxyz"
    assert len(release) == 53  # Helm's own limit
    out = chart.render({}, name=release, namespace=NAMESPACE, is_install=True)
    docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if d]
    dep = one(docs, "Deployment", f"{release}-sessions")
    assert len(dep["metadata"]["name"]) <= 63
    one(docs, "Service", f"{release}-sessions")
    args = args_map(one(docs, "Deployment", f"{release}-hitl-operator"[:63].rstrip("-"))["spec"]["template"]["spec"]["containers"][0])
    assert args["--session-store-url"] == f"http://{release}-sessions.{NAMESPACE}.svc:8083"


def test_sessions_service_monitor(chart):
    docs = objects(chart, {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    sm = one(docs, "ServiceMonitor", SESSIONS)
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"].items() <= one(docs, "Service", SESSIONS)["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    # The controller's ServiceMonitor does not select the store's Service.
    controller_sm = one(docs, "ServiceMonitor", FULLNAME)
    assert not controller_sm["spec"]["selector"]["matchLabels"].items() <= one(docs, "Service", SESSIONS)["metadata"]["labels"].items()


def test_sessions_notes_say_the_claim_is_kept(chart):
    out, _ = render_docs(chart)
    notes = out["hitl-operator/templates/NOTES.txt"]
    assert f"in SQLite on PersistentVolumeClaim {SESSIONS}" in notes
    assert "`helm uninstall` keeps that claim" in notes
    assert f"kubectl -n {NAMESPACE} delete pvc {SESSIONS}" in notes
    assert f"kubectl -n {NAMESPACE} rollout status deployment/{SESSIONS}" in notes


@pytest.mark.parametrize(
    "values",
    [
        {"sessions": {"persistence": {"storageClassName": "fast-ssd"}}},
        {"sessions": {"persistence": {"enabled": False}}},
        {"sessions": {"persistence": {"existingClaim": "conversations"}}},
        {"sessions": {"replicas": 3, "postgres": {"existingSecret": "sessions-db"}}},
        {"watchNamespace": "agents", "sessions": {"replicas": 2, "postgres": {"existingSecret": "sessions-db"},
                                                  "retention": {"idle": "720h"}}},
    ],
    ids=["sqlite", "memory", "existing-claim", "postgres", "postgres-namespaced"],
)
def test_sessions_manifests_match_kubernetes_schemas(chart, values):
    docs = objects(chart, values)
    store_deployment(docs)
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


# ---------------------------------------------------------------- values.schema.json


@pytest.mark.parametrize(
    "values, message",
    [
        ({"defaultApprovalMode": "Auto"}, "defaultApprovalMode"),
        ({"replicaCount": -1}, "replicaCount"),
        ({"replicaCount": "2"}, "replicaCount"),
        ({"watchNamespace": "Not_A_Namespace"}, "watchNamespace"),
        ({"logFormat": "xml"}, "logFormat"),
        ({"image": {"repository": ""}}, "repository"),
        ({"agentImage": {"repository": "x", "tag": ""}}, "tag"),
        ({"metrics": {"port": 70000}}, "port"),
        ({"metrics": {"serviceMonitor": {"enabled": "yes"}}}, "enabled"),
        ({"admissionPolicy": {"allowRequesterToDecide": "true"}}, "allowRequesterToDecide"),
        ({"admissionPolicy": {"extraStatusWriters": ['a"b']}}, "extraStatusWriters"),
        ({"unknownKey": 1}, "unknownKey"),
        ({"rbac": {"approverRoleName": "Bad Name"}}, "approverRoleName"),
        ({"networkPolicy": {"clusterCIDRs": []}}, "clusterCIDRs"),
        ({"networkPolicy": {"clusterCIDRs": ["10.0.0.0"]}}, "clusterCIDRs"),
        ({"networkPolicy": {"clusterCIDRs": "10.0.0.0/8"}}, "clusterCIDRs"),
        ({"notifiers": {"allowCIDRs": ["localhost"]}}, "allowCIDRs"),
        ({"notifiers": {"allowCIDRs": "127.0.0.0/8"}}, "allowCIDRs"),
        ({"grants": {"maxTTL": "forever"}}, "maxTTL"),
        ({"grants": {"maxTTL": ""}}, "maxTTL"),
        ({"grants": {"maxTTL": "1d"}}, "maxTTL"),
        ({"allowAgentNodeAccess": "true"}, "allowAgentNodeAccess"),
        ({"allowAgentNodeAccess": 1}, "allowAgentNodeAccess"),
        ({"defaultMaxOpenRequests": 0}, "defaultMaxOpenRequests"),
        ({"defaultMaxOpenRequests": 1001}, "defaultMaxOpenRequests"),
        ({"quota": {"approvalRequests": {"count": 0}}}, "count"),
        ({"quota": {"approvalRequests": {"namespaces": ["Team_A"]}}}, "namespaces"),
        ({"quota": {"approvalRequests": {"namespaces": "team-a"}}}, "namespaces"),
        ({"quota": {"grants": {}}}, "grants"),
        ({"kagent": {"url": "http://kagent-controller.kagent:8083/api"}}, "url"),
        ({"kagent": {"grpcUrl": "http://kagent-controller.kagent:8084"}}, "grpcUrl"),
        ({"sessions": {"enabled": "yes"}}, "enabled"),
        ({"sessions": {"replicas": -1}}, "replicas"),
        ({"sessions": {"replicas": "2"}}, "replicas"),
        ({"sessions": {"unknownKey": 1}}, "unknownKey"),
        ({"sessions": {"image": {"repository": "Bad Repo"}}}, "repository"),
        ({"sessions": {"persistence": {"size": "lots"}}}, "size"),
        ({"sessions": {"persistence": {"storageClassName": "Fast_SSD"}}}, "storageClassName"),
        ({"sessions": {"persistence": {"existingClaim": "My Claim"}}}, "existingClaim"),
        ({"sessions": {"postgres": {"existingSecret": "db url"}}}, "existingSecret"),
        ({"sessions": {"postgres": {"key": ""}}}, "key"),
        ({"sessions": {"postgres": {"key": "a/b"}}}, "key"),
        ({"sessions": {"quotas": {"sessionsPerAgent": 0}}}, "sessionsPerAgent"),
        ({"sessions": {"quotas": {"eventsPerSession": "10000"}}}, "eventsPerSession"),
        ({"sessions": {"quotas": {"tasksPerAgent": 1.5}}}, "tasksPerAgent"),
        ({"sessions": {"quotas": {"bytesPerSession": "32MB"}}}, "bytesPerSession"),
        ({"sessions": {"quotas": {"bytesPerAgent": 1073741824}}}, "bytesPerAgent"),
        ({"sessions": {"quotas": {"bytesPerAgent": "0"}}}, "bytesPerAgent"),
        ({"sessions": {"retention": {"idle": "30d"}}}, "idle"),
        ({"sessions": {"retention": {"deletedAgentGrace": ""}}}, "deletedAgentGrace"),
        ({"sessions": {"retention": {"deletedAgentGrace": "off"}}}, "deletedAgentGrace"),
        ({"sessions": {"retention": {"idle": "0h"}}}, "idle"),
        ({"sessions": {"quotas": {"bytesPerSession": "1Ti"}}}, "bytesPerSession"),
        ({"sessions": {"maxBodyBytes": "8 MiB"}}, "maxBodyBytes"),
        ({"sessions": {"maxInFlightBytes": "-1"}}, "maxInFlightBytes"),
        ({"sessions": {"networkPolicy": {"enabled": 1}}}, "enabled"),
        ({"sessions": {"nodeSelector": {"disk": 1}}}, "nodeSelector"),
        ({"sessions": {"tolerations": {}}}, "tolerations"),
    ],
)
def test_schema_rejects_bad_values(chart, values, message):
    with pytest.raises(helm_python.HelmValuesError, match=message):
        chart.validate_schema(values)


def test_schema_accepts_defaults_and_examples(chart):
    chart.validate_schema({})
    for values in POLICY_VARIANTS.values():
        chart.validate_schema(values)
    chart.validate_schema({"watchNamespace": "agents", "defaultApprovalMode": "Runtime",
                           "image": {"tag": "sha256:" + "a" * 64}, "allowAgentNodeAccess": True})
    chart.validate_schema({"sessions": {
        "image": {"repository": "registry.example/hitl", "tag": "1.2.3"},
        "replicas": 3,
        "persistence": {"enabled": False, "size": "20Gi", "storageClassName": "fast-ssd",
                        "existingClaim": "my-claim"},
        "postgres": {"existingSecret": "sessions-db", "key": "DATABASE_URL"},
        "quotas": {"sessionsPerAgent": 1, "eventsPerSession": 50000, "bytesPerSession": "1048576",
                   "bytesPerAgent": "10Gi", "tasksPerAgent": 100},
        "retention": {"idle": "720h", "deletedAgentGrace": "1h30m"},
        "maxBodyBytes": "512Ki", "maxInFlightBytes": "1Gi",
        "networkPolicy": {"enabled": False},
        "resources": {"limits": {"memory": "1Gi"}},
        "nodeSelector": {"disk": "ssd"}, "tolerations": [{"operator": "Exists"}], "affinity": {},
    }})


# ---------------------------------------------------------------- offline Kubernetes schemas


@pytest.mark.parametrize("values", [{}, {"watchNamespace": "agents"}], ids=["default", "namespaced"])
def test_manifests_match_kubernetes_schemas(chart, values):
    for doc in objects(chart, values):
        if doc["kind"] == "ServiceMonitor":
            continue  # a prometheus-operator CRD, not in the Kubernetes schemas
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_crds_match_kubernetes_schemas(chart):
    for crd in rendered_crds(chart):
        kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)


# ---------------------------------------------------------------- rendered policy copies


# (template, value set): checked-in renderings used by tests/admission_policy.rs (CEL), by
# tests/e2e/plugin.sh and by tests/bench/storage.sh (applied to a real cluster without Helm).
RENDERED_COPIES = [
    ("admission-policy", "default"),
    ("admission-policy", "permissive"),
    ("user-roles", "default"),
    ("approval-request-quota", "enabled"),
]


@pytest.mark.parametrize("template, variant", RENDERED_COPIES)
def test_rendered_copy_is_current(chart, template, variant):
    out, _ = render_docs(chart, POLICY_VARIANTS[variant])
    text = out[f"hitl-operator/templates/{template}.yaml"].lstrip("\n")
    path = RENDERED / f"{template}.{variant}.yaml"
    if os.environ.get("HITL_BLESS") == "1":
        RENDERED.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run make chart-bless"
    assert path.read_text() == text, f"{path} is stale: run make chart-bless"


# ---------------------------------------------------------------- Slack interactions

SLACK = {"slack": {"interactions": {
    "enabled": True,
    "signingSecret": {"name": "slack-app", "key": "signing"},
    "users": {"U0ALICE": {"user": "alice@example.com", "groups": ["approvers"]},
              "U0BOB": {"user": "bob@example.com"}},
    "ingress": {"enabled": True, "host": "hitl.example.com", "tlsSecretName": "hitl-tls",
                "className": "nginx"},
}}}


def test_slack_interactions_are_off_by_default(chart):
    docs = objects(chart)
    assert not [a for a in controller(docs)["args"] if a.startswith("--slack")]
    assert not [d for d in docs if d["metadata"]["name"].endswith(("-slack", "-slack-users", "-slack-impersonator"))]
    cluster_roles = [d for d in docs if d["kind"] == "ClusterRole"]
    assert not [r for r in cluster_roles if allows(r, "", "users", "impersonate")], "no impersonation unless enabled"


def test_slack_interactions_serve_the_endpoint_with_the_mapping_and_impersonate_only_mapped_people(chart):
    docs = objects(chart, SLACK)
    container = controller(docs)
    args = args_map(container)
    assert args["--slack-interactions-addr"] == "0.0.0.0:8443"
    assert args["--slack-signing-secret-file"] == "/etc/hitl/slack/signing-secret"
    assert args["--slack-users-file"] == "/etc/hitl/slack-users/users.yaml"
    assert args["--slack-response-url-prefix"] == "https://hooks.slack.com/"
    assert {"name": "slack", "containerPort": 8443, "protocol": "TCP"} in container["ports"]
    volumes = {v["name"]: v for v in one(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["slack-signing-secret"]["secret"] == {
        "secretName": "slack-app", "items": [{"key": "signing", "path": "signing-secret"}]}
    assert volumes["slack-users"]["configMap"]["name"] == f"{FULLNAME}-slack-users"
    mapping = yaml.safe_load(one(docs, "ConfigMap", f"{FULLNAME}-slack-users")["data"]["users.yaml"])
    assert mapping == SLACK["slack"]["interactions"]["users"]
    role = one(docs, "ClusterRole", f"{FULLNAME}-slack-impersonator")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"],
         "resourceNames": ["alice@example.com", "bob@example.com"]},
        {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"], "resourceNames": ["approvers"]},
    ]
    binding = one(docs, "ClusterRoleBinding", f"{FULLNAME}-slack-impersonator")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    assert one(docs, "Service", f"{FULLNAME}-slack")["spec"]["ports"][0]["targetPort"] == "slack"
    ingress = one(docs, "Ingress", f"{FULLNAME}-slack")
    assert ingress["spec"]["rules"][0]["host"] == "hitl.example.com"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["path"] == "/slack/interactions"
    assert ingress["spec"]["tls"] == [{"hosts": ["hitl.example.com"], "secretName": "hitl-tls"}]


def test_slack_interactions_need_the_signing_secret(chart):
    values = {"slack": {"interactions": {"enabled": True, "users": {"U1": {"user": "a"}}}}}
    with pytest.raises(helm_python.HelmRenderError, match="signingSecret.name is required"):
        objects(chart, values)


@pytest.mark.parametrize("values", [{}, {"watchNamespace": "agents"}], ids=["default", "namespaced"])
def test_the_controller_may_keep_only_the_toolgates_token_review_binding(chart, values):
    docs = objects(chart, values)
    reviewer = one(docs, "ClusterRole", f"{FULLNAME}-token-reviewer")
    assert rules_of(reviewer) == [(("authentication.k8s.io",), ("tokenreviews",), ("create",))]
    keeper = one(docs, "ClusterRole", f"{FULLNAME}-token-review-keeper")
    assert keeper["rules"] == [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
         "resourceNames": [f"{FULLNAME}-token-reviewer"], "verbs": ["bind"]},
        # A server-side apply that creates the binding is authorized as a create.
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"],
         "resourceNames": [f"{FULLNAME}-toolgate-token-review"], "verbs": ["get", "patch", "create"]},
    ]
    binding = one(docs, "ClusterRoleBinding", f"{FULLNAME}-token-review-keeper")
    assert binding["roleRef"]["name"] == f"{FULLNAME}-token-review-keeper"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    args = args_map(controller(docs))
    assert args["--token-review-binding"] == f"{FULLNAME}-toolgate-token-review"
    assert args["--token-review-role"] == f"{FULLNAME}-token-reviewer"
    # The binding itself is the controller's: the chart does not ship it.
    assert not [d for d in docs if d["metadata"]["name"] == f"{FULLNAME}-toolgate-token-review"]
