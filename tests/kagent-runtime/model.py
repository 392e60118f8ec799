"""A scripted OpenAI-compatible model server for the runtime tests: deterministic, no model.

    python model.py PORT LOG [HOST]      (HOST: default 127.0.0.1; a pod gives 0.0.0.0)

Serves POST /v1/chat/completions (and /chat/completions), plain or streamed. The script:
- the last message is the user's `CALL <tool> <json arguments>`: ask for that tool call;
- the last message is a tool result: answer `TOOL RESULT: <the result's text>`;
- anything else: answer `OK`.
Every request's messages are appended to LOG as one JSON line, so a test can read what the
model was told (a denial's reason, say).
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
LOG = sys.argv[2]
HOST = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"


def text_of(content):
    """The text of a message's content, a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def reply(messages, calls_so_far):
    """The assistant message the script gives after `messages`."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return {"role": "assistant", "content": "TOOL RESULT: " + text_of(last.get("content"))}
    text = text_of(last.get("content")).strip()
    if last.get("role") == "user" and text.startswith("CALL "):
        _, tool, arguments = (text.split(" ", 2) + ["{}"])[:3]
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{calls_so_far}",
                    "type": "function",
                    "function": {"name": tool, "arguments": arguments},
                }
            ],
        }
    return {"role": "assistant", "content": "OK"}


class Handler(BaseHTTPRequestHandler):
    calls = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        messages = body.get("messages", [])
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps({"at": time.time(), "messages": messages}) + "\n")
        Handler.calls += 1
        message = reply(messages, Handler.calls)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if body.get("stream"):
            delta = dict(message)
            if delta.get("tool_calls"):
                delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(delta["tool_calls"])]
            chunks = [
                {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
            ]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                chunk.update(id="chatcmpl-1", object="chat.completion.chunk", created=0, model=body.get("model", "scripted"))
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        answer = json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


if __name__ == "__main__":
    ThreadingHTTPServer((HOST, PORT), Handler).serve_forever()
