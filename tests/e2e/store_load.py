"""Loops of requests against the session store (`hitl-operator sessions`) for
tests/e2e/sessions.sh, made as kagent's runtime makes them: `Authorization: Bearer <the pod's
projected token>`, `X-Agent-Name`, `user_id`, one keep-alive connection per store.

  store_load.py append URL TOKEN_FILE AGENT USER SESSION N ACKED [PREFIX]
      Appends events PREFIX0..PREFIX{N-1} (default prefix e-) to the session (made first), one
      after the other; each acknowledged one (201) is written to ACKED at once (flushed). A
      connection that fails (the store killed) or a 503 is retried with the same event id for
      up to 60 s, so that every event is sent until acknowledged; any other answer fails.
  store_load.py latency URL TOKEN_FILE AGENT USER SESSION N
      N appends, timed one by one; prints {"p50_ms", "p99_ms", "n"}.
  store_load.py alternate URL_A URL_B TOKEN_FILE AGENT USER SESSION N
      N appends to one session, even ones through A and odd ones through B, in turn.
  store_load.py race URL_A URL_B TOKEN_FILE AGENT USER SESSION N
      Two writers at once, one through each store, N appends each (ids a-i and b-i).
  store_load.py events URL TOKEN_FILE AGENT USER SESSION
      Prints the session's event ids, in the order the store returns them (order=asc,
      limit=-1), one a line.
"""

import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse


def kagent_id(agent):
    """X-Agent-Name as the runtime sends it: `<namespace>__NS__<name>`, `-` written `_`."""
    return agent.replace("-", "_").replace("/", "__NS__")


class Store:
    def __init__(self, url, token, agent, user):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = {
            "Authorization": f"Bearer {token}",
            "X-Agent-Name": kagent_id(agent),
            "Content-Type": "application/json",
        }
        self.agent, self.user = agent, user
        self.conn = None

    def request(self, method, path, body=None):
        """(status, parsed body); raises OSError / http.client errors when the connection fails."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            data = None if body is None else json.dumps(body)
            self.conn.request(method, path, body=data, headers=self.headers)
            resp = self.conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        return resp.status, (json.loads(raw) if raw else None)

    def q(self, path, **params):
        return path + "?" + urllib.parse.urlencode({"user_id": self.user, **params})

    def create(self, session):
        status, body = self.request("POST", self.q("/api/sessions"), {"agent_ref": self.agent, "id": session})
        if status != 201:
            sys.exit(f"store_load.py: creating session {session}: {status} {body}")

    def append(self, session, event_id):
        data = json.dumps({"id": event_id, "author": "user", "invocation_id": "inv",
                           "content": {"role": "user", "parts": [{"text": f"event {event_id}"}]}})
        return self.request("POST", self.q(f"/api/sessions/{session}/events"), {"id": event_id, "data": data})

    def append_until_acked(self, session, event_id, deadline_s=60):
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                status, body = self.append(session, event_id)
                if status == 201:
                    return
                if status != 503:
                    sys.exit(f"store_load.py: appending {event_id}: {status} {body}")
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                sys.exit(f"store_load.py: {event_id} not acknowledged within {deadline_s} s")
            time.sleep(0.05)

    def events(self, session):
        status, body = self.request("GET", self.q(f"/api/sessions/{session}", order="asc", limit="-1"))
        if status != 200:
            sys.exit(f"store_load.py: reading session {session}: {status} {body}")
        return [e["id"] for e in body["data"]["events"]]


def token_of(path):
    with open(path) as f:
        return f.read().strip()


def append(url, token_file, agent, user, session, n, acked, prefix="e-"):
    store = Store(url, token_of(token_file), agent, user)
    store.create(session)
    with open(acked, "a") as out:
        for i in range(int(n)):
            store.append_until_acked(session, f"{prefix}{i}")
            out.write(f"{prefix}{i}\n")
            out.flush()


def latency(url, token_file, agent, user, session, n):
    store = Store(url, token_of(token_file), agent, user)
    store.create(session)
    times = []
    for i in range(int(n)):
        start = time.perf_counter()
        status, body = store.append(session, f"lat-{i}")
        times.append((time.perf_counter() - start) * 1000)
        if status != 201:
            sys.exit(f"store_load.py: latency append {i}: {status} {body}")
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(json.dumps({"p50_ms": round(statistics.median(times), 2), "p99_ms": round(p99, 2), "n": len(times)}))


def alternate(url_a, url_b, token_file, agent, user, session, n):
    token = token_of(token_file)
    stores = [Store(url_a, token, agent, user), Store(url_b, token, agent, user)]
    stores[0].create(session)
    for i in range(int(n)):
        store = stores[i % 2]
        status, body = store.append(session, f"alt-{i}")
        if status != 201:
            sys.exit(f"store_load.py: alternate append {i} through {'AB'[i % 2]}: {status} {body}")


def race(url_a, url_b, token_file, agent, user, session, n):
    token = token_of(token_file)
    Store(url_a, token, agent, user).create(session)
    errors = []

    def writer(url, prefix):
        store = Store(url, token, agent, user)
        for i in range(int(n)):
            status, body = store.append(session, f"{prefix}-{i}")
            if status != 201:
                errors.append(f"{prefix}-{i}: {status} {body}")
                return

    threads = [threading.Thread(target=writer, args=(u, p)) for u, p in ((url_a, "a"), (url_b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit(f"store_load.py: race: {errors}")


def events(url, token_file, agent, user, session):
    for event_id in Store(url, token_of(token_file), agent, user).events(session):
        print(event_id)


COMMANDS = {"append": append, "latency": latency, "alternate": alternate, "race": race, "events": events}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
