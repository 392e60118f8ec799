"""Renders charts/hitl-operator with the real Helm engine for the e2e suites (story.sh,
toolgate.sh, toolgate-isolation.sh through lib.sh's `chart_controller`; sessions.sh).

Usage: python chart.py OUTDIR RELEASE NAMESPACE   (run with the .venv of `make chart-test`)

Writes, from one `helm install`-style render with the default values (or those of the JSON
object in $HITL_CHART_VALUES, as `--set` would give them):
  OUTDIR/crds.yaml            the chart's CRDs (templates/crds.yaml), applied first
  OUTDIR/manifests.yaml       every template (apply with -n NAMESPACE, as Helm does), the
                              controller Deployment and the session store's (RELEASE-sessions)
                              with replicas 0: they run as local processes instead (a cluster
                              without a kubelet runs no pods, and on one with a kubelet the
                              controllers would compete for the Lease)
  OUTDIR/controller.json      the controller container (container.py turns it into args, env)
  OUTDIR/controller.sa        the controller's ServiceAccount name
and, when the chart renders the session store (sessions.enabled):
  OUTDIR/sessions.json        the store's container
  OUTDIR/sessions.sa          the store's ServiceAccount name
  OUTDIR/sessions-rbac.yaml   the store's ServiceAccount, (Cluster)Roles and their bindings: what
                              sessions.sh applies alone, to run the store with its own identity

The chart renders two Deployments: the controller (its container is named `controller`) and
the store (`RELEASE-sessions`, container `sessions`); each is picked by name.
"""

import json
import os
import pathlib
import sys

import helm_python
import yaml

CHART = pathlib.Path(__file__).resolve().parents[2] / "charts" / "hitl-operator"


def main(outdir, release, namespace):
    out = pathlib.Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    chart = helm_python.Chart.load(CHART)
    docs = []
    for path, text in sorted(chart.render(json.loads(os.environ.get("HITL_CHART_VALUES", "{}")), name=release, namespace=namespace, is_install=True).items()):
        if not path.endswith("NOTES.txt"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    docs = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    (out / "crds.yaml").write_text(yaml.safe_dump_all(crds, sort_keys=False))
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    sessions_name = f"{release[:54].rstrip('-')}-sessions"
    controllers = [d for n, d in deployments.items() if n != sessions_name and has_container(d, "controller")]
    if len(controllers) != 1:
        sys.exit(f"chart.py: want one controller Deployment (container 'controller'), rendered: {sorted(deployments)}")
    unknown = set(deployments) - {controllers[0]["metadata"]["name"], sessions_name}
    if unknown:
        sys.exit(f"chart.py: unexpected Deployments rendered: {sorted(unknown)}")
    for deployment in deployments.values():
        deployment["spec"]["replicas"] = 0
    (out / "manifests.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))

    pod = controllers[0]["spec"]["template"]["spec"]
    (out / "controller.json").write_text(json.dumps(container_named(controllers[0], "controller")))
    (out / "controller.sa").write_text(pod["serviceAccountName"] + "\n")

    store = deployments.get(sessions_name)
    if store is not None:
        store_pod = store["spec"]["template"]["spec"]
        account = store_pod["serviceAccountName"]
        (out / "sessions.json").write_text(json.dumps(container_named(store, "sessions")))
        (out / "sessions.sa").write_text(account + "\n")
        rbac = [d for d in docs if is_store_identity(d, account)]
        (out / "sessions-rbac.yaml").write_text(yaml.safe_dump_all(rbac, sort_keys=False))


def has_container(deployment, name):
    return any(c["name"] == name for c in deployment["spec"]["template"]["spec"]["containers"])


def container_named(deployment, name):
    found = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    if len(found) != 1:
        sys.exit(f"chart.py: Deployment {deployment['metadata']['name']} has no container {name!r}")
    return found[0]


def is_store_identity(doc, account):
    """The store's ServiceAccount, and each (Cluster)Role bound to it with its binding."""
    if doc["kind"] == "ServiceAccount":
        return doc["metadata"]["name"] == account
    if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
        return any(s.get("kind") == "ServiceAccount" and s.get("name") == account for s in doc.get("subjects", []))
    if doc["kind"] in ("Role", "ClusterRole"):
        return doc.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component") == "session-store"
    return False

if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
