"""The MCP client of kagent's runtime (the `mcp` package its venv pins: 1.12.3 in kagent-adk
0.7.4, 1.30.0 in 0.10.4) on one Streamable HTTP session across a restart of the tool server,
for tests/gate/restart.rs.

Usage: python mcp_restart_client.py URL SIGNALS_DIR

Calls read_file {"path": "/one"}, writes the session id to SIGNALS_DIR/before, waits for
SIGNALS_DIR/restarted (the test restarted the server), gives the client's event stream a moment
to notice, then calls read_file with "/two" and "/three", each within 20 s. Prints one JSON line
per call: {"path", "text", "is_error", "session"}.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def main(url: str, signals: str) -> None:
    async with streamablehttp_client(url) as (read, write, session_id):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def read_file(path: str) -> None:
                result = await asyncio.wait_for(session.call_tool("read_file", {"path": path}), 20)
                text = result.content[0].text if result.content else ""
                print(json.dumps({"path": path, "text": text, "is_error": result.isError, "session": session_id()}), flush=True)

            await read_file("/one")
            with open(os.path.join(signals, "before"), "w", encoding="utf-8") as f:
                f.write(session_id() or "")
            while not os.path.exists(os.path.join(signals, "restarted")):
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.5)
            await read_file("/two")
            await read_file("/three")


asyncio.run(main(sys.argv[1], sys.argv[2]))
