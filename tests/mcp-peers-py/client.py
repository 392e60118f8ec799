"""Drives an MCP server (here: through the gate) with the official Python SDK's `mcp.Client`
(mcp==2.3.0, revision 2026-07-28 by default), for the gate tests.

Usage: python client.py URL 'JSON_STEPS' ['JSON_OPTIONS']

Options: {"confirm": true, "note": "..."} is what the client answers when the server asks for
input (elicitation); without "confirm" the client declines. {"token": "..."} sends
`Authorization: Bearer <token>` with every request (a caller's identity at a shared gate).
Steps:
  {"op": "list"}                                 -> {"op", "tools": [names]}
  {"op": "call", "name": ..., "args": {...}}     -> {"op", "result": <the result as the SDK parsed
                                                    it, in wire names>, "asked": [messages]}
                                                    or {"op", "error": "..."}
Prints one JSON line per step. `asked` lists the questions the server asked during the call
(each an input-required round the client answered).
"""

import json
import sys

import anyio

import mcp
from mcp import types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL = sys.argv[1]
STEPS = json.loads(sys.argv[2])
OPTIONS = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}


async def main() -> None:
    asked: list[str] = []

    async def on_elicit(context, params):
        asked.append(params.message)
        if "confirm" not in OPTIONS:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(
            action="accept",
            content={"confirm": OPTIONS["confirm"], "note": OPTIONS.get("note", "")},
        )

    server = URL
    if "token" in OPTIONS:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {OPTIONS['token']}"})
        server = streamable_http_client(URL, http_client=http)
    async with mcp.Client(server, elicitation_callback=on_elicit, read_timeout_seconds=120) as client:
        for step in STEPS:
            op = step["op"]
            try:
                if op == "list":
                    listed = await client.list_tools()
                    out = {"op": op, "tools": [t.name for t in listed.tools]}
                elif op == "call":
                    asked.clear()
                    result = await client.call_tool(step["name"], step.get("args", {}))
                    out = {
                        "op": op,
                        "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
                        "asked": list(asked),
                    }
                else:
                    out = {"op": op, "error": f"unknown step {op!r}"}
            except Exception as e:  # reported, not raised: the test decides
                out = {"op": op, "error": f"{type(e).__name__}: {e}"}
            print(json.dumps(out), flush=True)


anyio.run(main)
