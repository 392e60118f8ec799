"""What a namespace's pods were doing, for tests/e2e/lib.sh's explain_wait (a wait that failed).

Usage: kubectl get pods -o json | explain.py pods
       kubectl get events -o json | explain.py events [LAST]

`pods` prints each pod's phase, conditions and containers' states on stderr, and on stdout one
"POD CONTAINER RESTARTS" line for each container that has logs to show (it runs, ran, or
restarted). `events` prints the Events oldest first, the LAST of them (default 40).
"""

import datetime
import json
import sys


def pods(items):
    if not items:
        print("(no pods)", file=sys.stderr)
    for pod in items:
        meta, status = pod["metadata"], pod.get("status", {})
        deleted = " (being deleted)" if meta.get("deletionTimestamp") else ""
        node = pod["spec"].get("nodeName") or "none"
        print(f"{meta['name']}: {status.get('phase', '?')}{deleted}, node {node}", file=sys.stderr)
        for c in status.get("conditions", []):
            why = " ".join(x for x in (c.get("reason"), c.get("message")) if x)
            print(f"  {c['type']}={c['status']} since {c.get('lastTransitionTime')}" + (f": {why}" if why else ""),
                  file=sys.stderr)
        for kind in ("initContainerStatuses", "containerStatuses"):
            for c in status.get(kind, []):
                state = c.get("state", {})
                now = "; ".join(
                    name + "".join(f" {k}={v}" for k, v in detail.items()
                                   if k in ("reason", "exitCode", "message", "startedAt"))
                    for name, detail in state.items())
                last = c.get("lastState", {}).get("terminated")
                before = (f"; before: terminated reason={last.get('reason')} exitCode={last.get('exitCode')}"
                          f" at {last.get('finishedAt')}") if last else ""
                restarts = c.get("restartCount", 0)
                print(f"  container {c['name']} ({c.get('image')}): ready={c.get('ready')} restarts={restarts},"
                      f" {now}{before}", file=sys.stderr)
                if "running" in state or "terminated" in state or restarts:
                    print(meta["name"], c["name"], restarts)


def when(event):
    return (event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
            or event["metadata"]["creationTimestamp"])


def instant(event):
    """when(event) as a time, to sort by: it is in seconds or in microseconds."""
    return datetime.datetime.fromisoformat(when(event).replace("Z", "+00:00"))


def events(items, last):
    items = sorted(items, key=instant)
    if not items:
        print("(no events)")
    for e in items[-last:]:
        o = e.get("involvedObject") or e.get("regarding") or {}
        count = f" (x{e['count']})" if (e.get("count") or 1) > 1 else ""
        message = " ".join((e.get("message") or e.get("note") or "").split())
        print(f"{when(e)} {e.get('type')} {e.get('reason')} {o.get('kind')}/{o.get('name')}{count}: {message}")


if __name__ == "__main__":
    items = json.load(sys.stdin)["items"]
    if sys.argv[1] == "pods":
        pods(items)
    elif sys.argv[1] == "events":
        events(items, int(sys.argv[2]) if len(sys.argv) > 2 else 40)
    else:
        sys.exit(f"explain.py: unknown view {sys.argv[1]}")
