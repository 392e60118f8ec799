"""Prints what a local process needs to run a pod's container: its args or its env.

Usage: python3 container.py args|env FILE.json    (FILE.json: one container of a pod spec)
  args: one argument per line
  env:  NAME=VALUE per line; a downward-API value is printed as NAME=fieldRef:<fieldPath>,
        for the caller to fill in (story.sh knows the "pod" name and namespace)
Anything else in env (secretKeyRef, configMapKeyRef, resourceFieldRef) is an error: the suites
run only the controller and the gate, which use none.
"""

import json
import sys


def main(what, path):
    with open(path) as f:
        container = json.load(f)
    if what == "args":
        lines = container.get("command", [])[1:] + container.get("args", [])
    elif what == "env":
        lines = []
        for var in container.get("env", []):
            if "value" in var:
                lines.append(f"{var['name']}={var['value']}")
            elif "fieldRef" in var.get("valueFrom", {}):
                lines.append(f"{var['name']}=fieldRef:{var['valueFrom']['fieldRef']['fieldPath']}")
            else:
                sys.exit(f"container.py: env {var['name']}: unsupported source {var.get('valueFrom')}")
    else:
        sys.exit(__doc__)
    for line in lines:
        if "\n" in line:
            sys.exit(f"container.py: a value with a newline: {line!r}")
        print(line)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
