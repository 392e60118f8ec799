"""Ungated calls through a gate from inside a pod, for the gate container's cgroup figures
(tests/e2e/pods.sh): CLIENTS threads, each with its own MCP session over a kept-alive HTTP
connection, send CALLS `tools/call` TOOL {path} between them. Standard library only, so it runs
in kagent's runtime image (`kubectl exec -i ... -- python3 - ARGS < ungated_load.py`).

    python3 ungated_load.py URL TOOL CALLS CLIENTS

Prints one JSON line: {"calls", "errors", "seconds"}.
"""

import http.client
import json
import sys
import threading
import time
import urllib.parse


def post(conn, path, headers, body):
    conn.request("POST", path, json.dumps(body), headers)
    response = conn.getresponse()
    data = response.read()
    return response, data


def client(url, tool, calls, errors):
    target = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    response, _ = post(conn, target.path, headers, {
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "ungated-load", "version": "1"}}})
    session = response.getheader("mcp-session-id")
    if session:
        headers["mcp-session-id"] = session
    headers["mcp-protocol-version"] = "2025-06-18"
    post(conn, target.path, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    for i in range(calls):
        response, data = post(conn, target.path, headers, {
            "jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": tool, "arguments": {"path": f"/load/{threading.get_ident()}/{i}"}}})
        if response.status != 200 or b'"isError":true' in data or b'"error"' in data:
            errors.append(data[:200])


def main(url, tool, calls, clients):
    calls, clients = int(calls), int(clients)
    errors = []
    threads = [threading.Thread(target=client, args=(url, tool, calls // clients, errors)) for _ in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"calls": calls // clients * clients, "errors": len(errors), "seconds": time.monotonic() - start}))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
