"""Renders charts/hitl-operator with the real Helm engine for tests/e2e/story.sh.

Usage: python chart.py OUTDIR RELEASE NAMESPACE   (run with the .venv of `make chart-test`)

Writes, from one `helm install`-style render with the default values (or those of the JSON
object in $HITL_CHART_VALUES, as `--set` would give them):
  OUTDIR/crds.yaml            the chart's CRDs (templates/crds.yaml), applied first
  OUTDIR/manifests.yaml       every template (apply with -n NAMESPACE, as Helm does), the
                              controller Deployment with replicas 0: its replicas run as local
                              processes instead (a cluster without a kubelet runs no pods, and
                              on one with a kubelet they would compete for the Lease)
  OUTDIR/controller.json      the controller container (container.py turns it into args, env)
  OUTDIR/controller.sa        the controller's ServiceAccount name
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
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    if len(deployments) != 1:
        sys.exit(f"chart.py: {len(deployments)} Deployments rendered, want 1")
    deployment = deployments[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    deployment["spec"]["replicas"] = 0
    (out / "manifests.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))

    (out / "controller.json").write_text(json.dumps(container))
    (out / "controller.sa").write_text(pod["serviceAccountName"] + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
