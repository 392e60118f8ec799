"""Loads rendered agent configs with kagent's runtime's own code, as `kagent-adk static` does.

    VENV/bin/python check_config.py DIR...

Each DIR holds a config.json and an agent-card.json as mounted at /config. For each, the
runtime's `AgentConfig` and A2A `AgentCard` models validate them and `to_agent` builds the ADK
agent (its model and MCP toolsets; nothing is connected). Prints one line per DIR, `ok DIR` or
`FAIL DIR: reason` (the reason on that one line), and exits 1 if any failed.
"""

import json
import os
import sys

from a2a.types import AgentCard
from kagent.adk import AgentConfig


def check(directory):
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config = AgentConfig.model_validate(json.load(f))
    with open(os.path.join(directory, "agent-card.json"), encoding="utf-8") as f:
        AgentCard.model_validate(json.load(f))
    agent = config.to_agent("checked_agent")
    return f"{len(agent.tools)} tools"


def main(directories):
    failed = 0
    for directory in directories:
        try:
            print(f"ok {directory}: {check(directory)}")
        except Exception as error:  # every failure is reported, then the exit code says it
            failed += 1
            reason = " | ".join(str(error).splitlines())
            print(f"FAIL {directory}: {type(error).__name__}: {reason}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
