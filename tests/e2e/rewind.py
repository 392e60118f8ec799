"""Generated status attacks on the real apiserver (tests/e2e/rewind.sh; issue 41).

For every status field of ApprovalRequest and ApprovalGrant, as read from the installed CRDs,
for spec.revoked of a grant and for spec.caller of both (its values generated from the CRD's
schema of it, as read from the apiserver: every property replaced, each optional one dropped,
the whole object emptied; given where it is absent), this writes every kind of removal, null,
replacement and rewind
a client can send -- merge patch, JSON patch, PUT, server-side apply under a new field manager
and under the managers that own the field -- to the status subresource and to the main resource,
as every identity given. It fails on any accepted write that moves a guarantee backwards:

  ApprovalRequest  status.consumedAt and status.consumedBy write-once; a finished status.phase
                   final; status.decidedAt write-once and only on a decided request;
                   status.notifications only grow (attempts never fall, deliveredAt write-once);
                   status.tier never falls, status.escalations only grow, spec.escalation fixed
  ApprovalGrant    status.uses never falls nor passes spec.maxUses; lastUsedAt never goes back;
                   lastUsedAt/lastUsedBy change only with a new use; spec.revoked never reverts
  both             spec.caller (a shared gate's caller) is never added, removed or changed

and, with --policies on, on any accepted write of a grant's status by anyone but its own gate
and the status owners. After each accepted write that changed the object, the replay command is
run (the same call through the real gate) and must print the same count of runs as before;
once per distinct state of what the gate reads (the spec and GATE_READS).

Usage: rewind.py --policies on|off --ns NS --target PLURAL NAME HISTORY REPLAY...
                 IDENTITY=KUBECONFIG...
Prints one line per attack class and a summary; exits 1 on any broken guarantee.
"""

import argparse
import base64
import copy
import http.client
import json
import os
import ssl
import subprocess
import sys
import tempfile
import urllib.parse

GROUP, VERSION = "kagent.dev", "v1alpha2"
FINISHED = {"Denied", "Expired", "Executed", "Cancelled"}
# A grant's status may be written by the controller and the extra status writers (all of them
# exempt from the policy) and by the gate of the grant's own agent; under --policies on, any
# other identity that gets a grant-status write through is a failure.
GRANT_STATUS_WRITERS = {"admin", "controller", "agent"}
# The status fields the gate reads when it judges a request or a grant (gate::decision,
# gate::grants); a replay is needed once per distinct value of these and the spec.
GATE_READS = ("phase", "decidedAt", "consumedAt", "consumedBy", "uses", "lastUsedAt", "lastUsedBy")
# The spec fields attacked, by kind: the values to write, or None to generate them from the
# CRD's schema of the field (other_values) and the object's current value.
SPEC_FIELDS = {
    "approvalrequests": {"caller": None, "escalation": None},
    "approvalgrants": {"revoked": [False], "caller": None},
}


class Identity:
    """One user's connection to the apiserver, from a kubeconfig (token, client certificate or
    impersonation), kept alive across requests."""

    def __init__(self, name, kubeconfig):
        self.name = name
        view = json.loads(subprocess.check_output(
            ["kubectl", "--kubeconfig", kubeconfig, "config", "view", "--raw", "--minify",
             "--flatten", "-o", "json"]))
        cluster = view["clusters"][0]["cluster"]
        user = view["users"][0]["user"]
        url = urllib.parse.urlsplit(cluster["server"])
        context = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            context.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        if user.get("client-certificate-data"):
            with tempfile.NamedTemporaryFile("w", delete=False) as cert:
                cert.write(base64.b64decode(user["client-certificate-data"]).decode())
                cert.write(base64.b64decode(user["client-key-data"]).decode())
            context.load_cert_chain(cert.name)
            os.unlink(cert.name)
        self.headers = {}
        if user.get("token"):
            self.headers["Authorization"] = "Bearer " + user["token"]
        if user.get("as"):
            self.headers["Impersonate-User"] = user["as"]
        self.groups = user.get("as-groups") or []
        self.host, self.port, self.context = url.hostname, url.port or 443, context
        self.conn = None

    def request(self, method, path, body=None, content_type="application/json"):
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = content_type
            body = json.dumps(body).encode()
        # http.client sends one value per header name; impersonated groups need one each.
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(
                    self.host, self.port, context=self.context, timeout=30)
            try:
                self.conn.putrequest(method, path)
                for key, value in headers.items():
                    self.conn.putheader(key, value)
                for group in self.groups:
                    self.conn.putheader("Impersonate-Group", group)
                if body is not None:
                    self.conn.putheader("Content-Length", str(len(body)))
                self.conn.endheaders(body)
                resp = self.conn.getresponse()
                data = resp.read()
                return resp.status, json.loads(data) if data else {}
            except (http.client.HTTPException, OSError):
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def path_of(ns, plural, name, status):
    return f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}/{name}" + ("/status" if status else "")


def properties(admin, plural, part):
    """The properties of `part` (spec or status) of a CRD as the apiserver serves it:
    name -> schema."""
    code, crd = admin.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}")
    assert code == 200, crd
    version = next(v for v in crd["spec"]["versions"] if v["name"] == VERSION)
    return version["schema"]["openAPIV3Schema"]["properties"][part]["properties"]


def spec_attacks(spec_schema, spec, wanted):
    """(field, values) for each spec field of `wanted`: its given values, or those generated
    from its schema and current value."""
    return [(field, values if values is not None else other_values(spec_schema[field], spec.get(field)))
            for field, values in wanted.items()]


def other_values(schema, current):
    """Values other than `current` that a writer could put in a field of `schema`: every other
    enum value, an earlier and a later time, smaller, zero and larger numbers, another string,
    an empty list and the list with each entry rewound or dropped."""
    kind, fmt = schema.get("type"), schema.get("format")
    if "enum" in schema:
        return [v for v in schema["enum"] if v != current]
    if kind == "string" and fmt == "date-time":
        return [v for v in ("2020-01-01T00:00:00Z", "2099-01-01T00:00:00Z") if v != current]
    if kind == "string":
        return ["forged"]
    if kind == "integer":
        base = current if isinstance(current, int) else 0
        return sorted({base - 1, 0, base + 1} - {current})
    if kind == "boolean":
        return [not current] if isinstance(current, bool) else [False, True]
    if kind == "object" and "properties" in schema:
        base = current if isinstance(current, dict) else {}
        values = [{}]
        for key, sub in schema["properties"].items():
            for value in other_values(sub, base.get(key)):
                values.append({**base, key: value})
            if key in base and key not in schema.get("required", []):
                values.append({k: v for k, v in base.items() if k != key})
        return values
    if kind == "array":
        values = [[]]
        if schema.get("items", {}).get("type") == "string":
            values.append(list(current or []) + ["forged"])
        for i, item in enumerate(current or []):
            values.append([x for j, x in enumerate(current) if j != i])
            for key, sub in schema.get("items", {}).get("properties", {}).items():
                for value in other_values(sub, item.get(key)) if isinstance(item, dict) and key in item else []:
                    rewound = copy.deepcopy(current)
                    rewound[i][key] = value
                    values.append(rewound)
                if isinstance(item, dict) and key in item and key not in schema["items"].get("required", []):
                    dropped = copy.deepcopy(current)
                    del dropped[i][key]
                    values.append(dropped)
        return values
    return [{}]


def attacks(obj, fields, history, managers, spec_fields=()):
    """Every write that removes, nulls, replaces or rewinds a field (or the whole status), as
    (label, subresource, method, content type, body builder); a builder takes the object as
    read just before the write (for resourceVersion-free PUT bodies)."""
    status = obj.get("status", {})
    out = []

    def merge(label, patch, sub=True):
        out.append((label + (" (status)" if sub else " (main)"), sub, "PATCH",
                    "application/merge-patch+json", lambda _o: patch))

    def jsonpatch(label, ops, sub=True):
        out.append((label + (" (status)" if sub else " (main)"), sub, "PATCH",
                    "application/json-patch+json", lambda _o: ops))

    def put(label, build, sub=True):
        def body(o):
            o = copy.deepcopy(o)
            build(o)
            return o
        out.append((label + (" (status)" if sub else " (main)"), sub, "PUT", "application/json", body))

    def apply(label, manager, part, value, sub=True):
        def body(o):
            return {"apiVersion": f"{GROUP}/{VERSION}", "kind": o["kind"],
                    "metadata": {"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"]},
                    part: value}
        out.append((f"{label} by SSA as {manager}" + (" (status)" if sub else " (main)"), sub,
                    f"PATCH?fieldManager={manager}&force=true", "application/apply-patch+yaml", body))

    for sub in (True, False):
        merge("status: null", {"status": None}, sub)
        merge("status: {}", {"status": {}}, sub)
        jsonpatch("remove /status", [{"op": "remove", "path": "/status"}], sub)
        jsonpatch("replace /status with {}", [{"op": "replace", "path": "/status", "value": {}}], sub)
        put("PUT without status", lambda o: o.pop("status", None), sub)
        for i, old in enumerate(history):
            put(f"PUT status of version {i}", lambda o, old=old: o.__setitem__("status", copy.deepcopy(old)), sub)
            merge(f"merge status of version {i}", {"status": old or None}, sub)
        for field, schema in fields.items():
            current = status.get(field)
            merge(f"status.{field}: null", {"status": {field: None}}, sub)
            jsonpatch(f"remove /status/{field}", [{"op": "remove", "path": f"/status/{field}"}], sub)
            put(f"PUT without status.{field}", lambda o, f=field: o.get("status", {}).pop(f, None), sub)
            for value in other_values(schema, current):
                short = json.dumps(value)[:40]
                merge(f"status.{field}: {short}", {"status": {field: value}}, sub)
                jsonpatch(f"replace /status/{field} {short}",
                          [{"op": "add", "path": f"/status/{field}", "value": value}], sub)
                put(f"PUT status.{field} {short}",
                    lambda o, f=field, v=value: o.setdefault("status", {}).__setitem__(f, v), sub)
                apply(f"status.{field} {short}", "rewind-e2e", "status", {field: value}, sub)
        # A field manager that owns fields drops them by applying without them.
        for manager in managers:
            apply("status without its fields", manager, "status", {}, sub)
    for field, values in spec_fields:
        merge(f"spec.{field}: null", {"spec": {field: None}}, False)
        jsonpatch(f"remove /spec/{field}", [{"op": "remove", "path": f"/spec/{field}"}], False)
        put(f"PUT without spec.{field}", lambda o, f=field: o["spec"].pop(f, None), False)
        for value in values:
            short = json.dumps(value)[:40]
            merge(f"spec.{field}: {short}", {"spec": {field: value}}, False)
            jsonpatch(f"add /spec/{field} {short}", [{"op": "add", "path": f"/spec/{field}", "value": value}], False)
            put(f"PUT spec.{field} {short}", lambda o, f=field, v=value: o["spec"].__setitem__(f, v), False)
        for manager in managers:
            spec = {k: v for k, v in obj["spec"].items() if k != field}
            apply(f"spec without {field}", manager, "spec", spec, False)
    return out


def request_broken(before, after):
    """The guarantees of an ApprovalRequest that `after` breaks against `before`."""
    b, a = before.get("status", {}), after.get("status", {})
    broken = []
    for field in ("consumedAt", "consumedBy", "decidedAt"):
        if field in b and a.get(field) != b[field]:
            broken.append(f"status.{field} {b[field]!r} -> {a.get(field)!r}")
    if b.get("phase") in FINISHED and a.get("phase") != b["phase"]:
        broken.append(f"finished phase {b['phase']} -> {a.get('phase')!r}")
    if "decidedAt" in a and "decision" not in after["spec"] and "grant" not in after["spec"]:
        broken.append("status.decidedAt on an undecided request")
    if a.get("tier", 0) < b.get("tier", 0):
        broken.append(f"status.tier {b.get('tier')} -> {a.get('tier')!r}")
    lost = [e for e in b.get("escalations", []) if e not in a.get("escalations", [])]
    if lost:
        broken.append(f"status.escalations lost or changed {lost!r}")
    if after["spec"].get("escalation") != before["spec"].get("escalation"):
        broken.append("spec.escalation changed")
    return broken + caller_broken(before, after)


def caller_broken(before, after):
    """spec.caller, a shared gate's caller, is never added, removed or changed."""
    b, a = before["spec"].get("caller"), after["spec"].get("caller")
    return [] if a == b else [f"spec.caller {b!r} -> {a!r}"]


def grant_broken(before, after):
    """The guarantees of an ApprovalGrant that `after` breaks against `before`."""
    b, a = before.get("status", {}), after.get("status", {})
    broken = []
    if a.get("uses", 0) < b.get("uses", 0):
        broken.append(f"status.uses {b.get('uses')} -> {a.get('uses')}")
    if "maxUses" in after["spec"] and a.get("uses", 0) > after["spec"]["maxUses"]:
        broken.append(f"status.uses {a.get('uses')} above maxUses")
    if "lastUsedAt" in b and a.get("lastUsedAt", "") < b["lastUsedAt"]:
        broken.append(f"status.lastUsedAt {b['lastUsedAt']} -> {a.get('lastUsedAt')!r}")
    if a.get("uses", 0) <= b.get("uses", 0):
        for field in ("lastUsedAt", "lastUsedBy"):
            if a.get(field) != b.get(field):
                broken.append(f"status.{field} changed without a use: {b.get(field)!r} -> {a.get(field)!r}")
    if before["spec"].get("revoked") and not after["spec"].get("revoked"):
        broken.append("spec.revoked reverted")
    return broken + caller_broken(before, after)


def replay(command):
    """Runs the same call again through the gate; prints and returns its runs count."""
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        raise SystemExit(f"replay failed: {out.stdout}{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


def run(args):
    identities = {}
    for spec in args.identities:
        name, kubeconfig = spec.split("=", 1)
        identities[name] = Identity(name, kubeconfig)
    admin = identities["admin"]
    targets = []
    for plural, name, history, replay_cmd in args.target:
        grant = plural == "approvalgrants"
        targets.append((plural, name, grant_broken if grant else request_broken, replay_cmd,
                        json.loads(history)))
    failures, rows = [], []
    print(f"policies {args.policies}: kind, object, identity, writes", flush=True)
    for plural, name, broken_by, replay_cmd, history in targets:
        fields = properties(admin, plural, "status")
        spec_schema = properties(admin, plural, "spec")
        baseline = replay(replay_cmd)
        replayed = set()
        for who, identity in identities.items():
            tried = accepted = replays = 0
            code, obj = admin.request("GET", path_of(args.ns, plural, name, False))
            assert code == 200, obj
            managers = sorted({m["manager"] for m in obj["metadata"].get("managedFields", [])})
            spec_fields = spec_attacks(spec_schema, obj["spec"], SPEC_FIELDS[plural])
            for label, sub, method, ctype, build in attacks(obj, fields, history, managers, spec_fields):
                code, before = admin.request("GET", path_of(args.ns, plural, name, False))
                if code != 200:
                    failures.append(f"{plural}/{name} as {who}, before {label}: gone ({code}), "
                                    "deleted after an earlier accepted write")
                    print("BROKEN: " + failures[-1], flush=True)
                    break
                path = path_of(args.ns, plural, name, sub)
                verb, _, query = method.partition("?")
                code, answer = identity.request(verb, path + ("?" + query if query else ""),
                                                build(before), ctype)
                tried += 1
                if code >= 300:
                    continue
                accepted += 1
                code, after = admin.request("GET", path_of(args.ns, plural, name, False))
                if code != 200:
                    failures.append(f"{plural}/{name} as {who}, {label}: gone after the write ({code})")
                    print("BROKEN: " + failures[-1], flush=True)
                    break
                broken = broken_by(before, after)
                if plural == "approvalgrants" and sub and args.policies == "on" \
                        and who not in GRANT_STATUS_WRITERS \
                        and after.get("status") != before.get("status"):
                    broken.append(f"{who} wrote the status of a grant of another agent")
                for why in broken:
                    failures.append(f"{plural}/{name} as {who}, {label}: {why}")
                    print("BROKEN: " + failures[-1], flush=True)
                # The gate decides on the spec and on these status fields alone (not on the
                # controller's conditions, message or notification records): a state already
                # replayed needs no second replay.
                status = after.get("status", {})
                state = json.dumps([after["spec"]] + [status.get(f) for f in GATE_READS], sort_keys=True)
                if after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"] \
                        and state not in replayed:
                    replayed.add(state)
                    replays += 1
                    runs = replay(replay_cmd)
                    if runs != baseline:
                        failures.append(f"{plural}/{name} as {who}, {label}: the call ran again "
                                        f"(runs {baseline} -> {runs})")
                        print("BROKEN: " + failures[-1], flush=True)
                        baseline = runs
            rows.append(f"{plural:17} {name[:24]:24} {who:11} {tried:5} tried {accepted:4} "
                        f"accepted {tried - accepted:5} refused {replays:3} replays")
            print("  " + rows[-1], flush=True)
    print(f"{len(rows)} identity x kind runs, {len(failures)} broken guarantees")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", choices=("on", "off"), required=True)
    parser.add_argument("--ns", required=True)
    parser.add_argument("--target", nargs=4, action="append", required=True,
                        metavar=("PLURAL", "NAME", "HISTORY", "REPLAY"),
                        help="an object to attack (approvalrequests or approvalgrants), a JSON "
                             "list of its earlier statuses, and a command that sends its call "
                             "again and prints the call's runs")
    parser.add_argument("identities", nargs="+", help="NAME=KUBECONFIG; one must be admin")
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
