"""Sends one A2A `message/send` to an agent and prints what came back.

    python3 a2a_send.py URL TEXT [CONTEXT_ID]

Prints one JSON line: {"state", "text", "context_id", "seconds"}: the task's final state, every
text part of its artifacts and status message joined, and the conversation's context id (give
it back to continue the same session). Exits 1 on a JSON-RPC error or no answer.
"""

import json
import sys
import time
import urllib.request
import uuid


def texts(value):
    """Every `text` of the parts under `value`."""
    if isinstance(value, dict):
        found = [value["text"]] if value.get("kind") == "text" and "text" in value else []
        return found + [t for v in value.values() for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


def main(url, text, context_id=None):
    message = {
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        "messageId": str(uuid.uuid4()),
        "kind": "message",
    }
    if context_id:
        message["contextId"] = context_id
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    start = time.monotonic()
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.load(response)
    seconds = time.monotonic() - start
    if "error" in answer or "result" not in answer:
        print(json.dumps({"error": answer.get("error", answer), "seconds": seconds}))
        sys.exit(1)
    task = answer["result"]
    out = {
        "state": task.get("status", {}).get("state"),
        "text": "\n".join(texts(task.get("artifacts", [])) + texts(task.get("status", {}))),
        "context_id": task.get("contextId"),
        "seconds": round(seconds, 3),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(*sys.argv[1:])
