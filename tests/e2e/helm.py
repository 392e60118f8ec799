"""The `helm` commands the README gives, run by the real Helm engine (Helm v4's Go SDK, through
helm-python-sdk's install, upgrade and uninstall actions): no Helm binary is published where
this project's CI can download one.

Usage (run with the .venv of `make chart-test`; KUBECONFIG selects the cluster):
  python helm.py install RELEASE CHART [-n NS] [--create-namespace] [--set K=V]... [--wait] [--timeout S]
  python helm.py upgrade RELEASE CHART [-n NS] [--set K=V]... [--reuse-values] [--wait] [--timeout S]
  python helm.py uninstall RELEASE [-n NS] [--wait] [--timeout S]

`--wait` waits as `helm --wait` does (the watcher strategy: every resource ready, Deployments
available). Prints the release's name, namespace, revision and status, as one line.
"""

import argparse
import sys

import helm_python


def main(argv):
    parser = argparse.ArgumentParser(prog="helm.py")
    parser.add_argument("action", choices=["install", "upgrade", "uninstall"])
    parser.add_argument("release")
    parser.add_argument("chart", nargs="?")
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("--create-namespace", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="K=V")
    parser.add_argument("--reuse-values", action="store_true")
    parser.add_argument("--wait", action="store_true")
    parser.add_argument("--timeout", type=int, default=300, metavar="SECONDS")
    args = parser.parse_args(argv)
    if (args.chart is None) != (args.action == "uninstall"):
        parser.error(f"{args.action} takes {'no chart' if args.action == 'uninstall' else 'a chart'}")

    # Each --set is parsed into the same values, later ones winning, as the helm CLI does.
    values = {}
    for expression in args.set:
        merge(values, helm_python.parse_set_string(expression))
    wait = "watcher" if args.wait else None
    config = helm_python.Config(namespace=args.namespace)
    if args.action == "install":
        release = config.install(
            args.chart, args.release, values, namespace=args.namespace, wait=wait,
            timeout=args.timeout, create_namespace=args.create_namespace,
        )
    elif args.action == "upgrade":
        release = config.upgrade(
            args.chart, args.release, values, namespace=args.namespace, wait=wait,
            timeout=args.timeout, reuse_values=args.reuse_values,
        )
    else:
        release = config.uninstall(args.release, wait=wait, timeout=args.timeout)["release"]
    print(f"{release.get('name')} namespace={release.get('namespace')} revision={release.get('revision')} status={release.get('status')}")


def merge(into, values):
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except helm_python.HelmError as error:
        sys.exit(f"Error: {error}")
