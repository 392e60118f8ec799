"""A ToolGate's caller in a pod, with the MCP Python SDK kagent's runtime ships (mcp 1.12): the
caller's identity is a projected ServiceAccount token the kubelet writes and rotates, read
from its file for every HTTP request, as docs/placement.md tells clients to.

    python3 toolgate_caller.py loop URL TOKEN_FILE TOOL PATH INTERVAL   TOOL every INTERVAL s, in one session while calls succeed
    python3 toolgate_caller.py once URL TOKEN_FILE TOOL PATH            one call; prints the result

Each call prints one JSON line: {"time", "token", "issued", "ok", "text"}: `token` is the first
12 hex digits of the token's SHA-256 (which token the call went with; never the token), `issued`
its `iat` claim.
"""

import asyncio
import base64
import hashlib
import json
import sys
import time

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


class ProjectedToken(httpx.Auth):
    """`Authorization: Bearer <the file's token>`, read anew for each request."""

    def __init__(self, path):
        self.path = path
        self.last = ""
        self.issued = None
        self.ok = False

    def auth_flow(self, request):
        with open(self.path) as f:
            token = f.read().strip()
        self.last = hashlib.sha256(token.encode()).hexdigest()[:12]
        claims = token.split(".")[1]
        self.issued = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["iat"]
        request.headers["Authorization"] = f"Bearer {token}"
        yield request


async def call(session, auth, tool, path):
    try:
        result = await session.call_tool(tool, {"path": path})
        text = " ".join(c.text for c in result.content if getattr(c, "text", None))
        ok = not result.isError
    except Exception as error:  # the line says what failed; the loop goes on
        text, ok = f"{type(error).__name__}: {error}", False
    print(json.dumps({"time": time.time(), "token": auth.last, "issued": auth.issued, "ok": ok, "text": text}), flush=True)
    auth.ok = ok
    return ok


async def session_calls(mode, url, auth, tool, path, interval):
    """One MCP session: one call (`once`), or calls every INTERVAL s until one fails."""
    async with streamablehttp_client(url, auth=auth, timeout=60, sse_read_timeout=600) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            while await call(session, auth, tool, path) and mode == "loop":
                await asyncio.sleep(interval)
            return mode == "once" and auth.ok


async def main(mode, url, token_file, tool, path, interval="10"):
    auth = ProjectedToken(token_file)
    if mode == "once":
        return 0 if await session_calls(mode, url, auth, tool, path, 0) else 1
    while True:  # a failed call or session (the gate restarted, say) starts a new session
        try:
            await session_calls(mode, url, auth, tool, path, float(interval))
        except Exception as error:
            print(json.dumps({"time": time.time(), "token": auth.last, "issued": auth.issued, "ok": False, "text": f"session: {error!r}"}), flush=True)
        await asyncio.sleep(float(interval))


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:])))
