"""A webhook receiver for tests/e2e/notify.sh, escalate.sh and pods.sh (in a pod): records every POST and fails on request.

Usage: python3 receiver.py PORT LOG [HOST]   (HOST: the address to listen on, 127.0.0.1)
  POST /fail?path=/hook&n=2   the next 2 POSTs to /hook get 503 (counted per path)
  POST <any other path>       appended to LOG as one JSON line {path, contentType, body};
                              503 while that path has failures left, else 200
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PORT, LOG = int(sys.argv[1]), sys.argv[2]
failures = {}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        url = urlparse(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        with lock:
            if url.path == "/fail":
                query = parse_qs(url.query)
                failures[query["path"][0]] = int(query["n"][0])
                status = 204
            else:
                with open(LOG, "a") as log:
                    log.write(json.dumps({"path": url.path, "contentType": self.headers.get("Content-Type"), "body": body}) + "\n")
                left = failures.get(url.path, 0)
                failures[url.path] = max(0, left - 1)
                status = 503 if left > 0 else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


HOST = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
ThreadingHTTPServer((HOST, PORT), Handler).serve_forever()
