"""An MCP server on the official Python SDK (mcp==2.3.0, revision 2026-07-28), for the gate tests.

Usage: python server.py PORT RECORD_FILE

Serves Streamable HTTP at http://127.0.0.1:PORT/mcp with four tools:
  echo(message)          ungated in the tests: answers "Echo: <message>"
  delete_file(path)      gated in the tests; `path` is mirrored in the `Mcp-Param-Path` header
  wipe_dir(path)         asks the client to confirm (an input-required round) before it runs
  get_secret()           never offered by the gate (hidden)
Every tool that runs to completion appends one JSON line {"tool", "args"} to RECORD_FILE, so
a test knows exactly what ran, and how often.
"""

import json
import sys
from typing import Annotated

from pydantic import BaseModel, Field

from mcp.server.mcpserver import Elicit, MCPServer, Resolve

PORT = int(sys.argv[1])
RECORD = sys.argv[2]

mcp = MCPServer("hitl-py-peer")


def record(tool: str, args: dict) -> None:
    with open(RECORD, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "args": args}) + "\n")
        f.flush()


@mcp.tool()
def echo(message: str) -> str:
    """Echoes the message."""
    record("echo", {"message": message})
    return f"Echo: {message}"


@mcp.tool()
def delete_file(path: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Path"})]) -> str:
    """Deletes a file (pretends to)."""
    record("delete_file", {"path": path})
    return f"deleted {path}"


class Confirm(BaseModel):
    """The client's answer to "really wipe?"."""

    confirm: bool
    note: str = ""


def ask_confirm(path: str) -> Elicit[Confirm]:
    return Elicit(f"Really wipe {path}?", Confirm)


@mcp.tool()
def wipe_dir(path: str, answer: Annotated[Confirm, Resolve(ask_confirm)]) -> str:
    """Wipes a directory (pretends to) once the client confirms."""
    if not answer.confirm:
        return f"kept {path}"
    record("wipe_dir", {"path": path, "note": answer.note})
    return f"wiped {path} ({answer.note})"


@mcp.tool()
def get_secret() -> str:
    """A tool the gate never offers."""
    record("get_secret", {})
    return "s3cret"


if __name__ == "__main__":
    mcp.run(transport="streamable-http", host="127.0.0.1", port=PORT)
