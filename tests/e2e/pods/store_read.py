"""Asks the session store for PATH from inside an Agent's agent container, exactly as kagent's
runtime asks it: KAGENT_URL, the pod's projected token (/var/run/secrets/tokens/kagent-token,
audience hitl-operator-sessions) as a Bearer token, X-Agent-Name as the runtime names its Agent
(KAGENT_NAMESPACE__NS__KAGENT_NAME, each '-' as '_'), and X-User-ID.

    python3 store_read.py PATH USER_ID [X_AGENT_NAME]    (PATH: /api/sessions/ID?user_id=...)

Prints one JSON line: {"status", "agent_name", "body"} (the body cut at 1 MB).
"""

import json
import os
import sys
import urllib.error
import urllib.request

TOKEN = "/var/run/secrets/tokens/kagent-token"


def main(path, user_id, agent_name=None):
    if agent_name is None:
        ns, name = os.environ["KAGENT_NAMESPACE"], os.environ["KAGENT_NAME"]
        agent_name = ns.replace("-", "_") + "__NS__" + name.replace("-", "_")
    with open(TOKEN, encoding="utf-8") as f:
        token = f.read().strip()
    request = urllib.request.Request(
        os.environ["KAGENT_URL"].rstrip("/") + path,
        headers={"Authorization": f"Bearer {token}", "X-Agent-Name": agent_name, "X-User-ID": user_id},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    print(json.dumps({"status": status, "agent_name": agent_name, "body": body.decode(errors="replace")[:1000000]}))


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(*sys.argv[1:])
