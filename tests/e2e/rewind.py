"""Generated status attacks on the real apiserver (tests/e2e/rewind.sh; issues 41 and 60).

For every status field of ApprovalRequest and ApprovalGrant, as read from the installed CRDs,
for spec.revoked of a grant, for spec.caller of both, and for a request's spec.escalation,
spec.edit, spec.editApprovals and spec.toolAnnotations (the values of each generated from the
CRD's schema of it, as read from the apiserver, and the target's current value: every property
replaced, nulled, each optional one dropped, the whole object emptied; given where it is
absent; a list's entries each dropped or rewound, and one appended; a digest a value its
pattern admits), this writes every kind of removal, null (merge-patch null, JSON-patch remove,
and an explicit null by JSON patch and PUT), replacement and rewind a client can send -- merge
patch, JSON patch, PUT, server-side apply under a new field manager and under the managers that
own the field -- to the status subresource and to the main resource, as every identity given.
Then each identity creates (dry run) a copy of each target request with each non-empty set of
the fields no request may be created with (spec.decision, approvals, edit, editApprovals), by
POST and by server-side apply, the copy without them admitted for cluster-admin. It fails on
any accepted write or creation that moves a guarantee backwards:

  ApprovalRequest  status.consumedAt and status.consumedBy write-once; a finished status.phase
                   final; status.decidedAt write-once and only on a decided request;
                   status.notifications only grow (attempts never fall, deliveredAt write-once);
                   status.tier never falls, status.escalations only grow, spec.escalation fixed;
                   spec.edit (and each of its properties) write-once, never added after
                   spec.decision, never on a grant-decided request; spec.editApprovals
                   append-only and closed by spec.decision; status.editedArgumentsSha256
                   write-once, only with status.consumedAt and spec.edit; spec.toolAnnotations
                   set at creation or never (never added, removed, nulled or changed);
                   spec.decision, approvals, edit and editApprovals never set at creation
  ApprovalGrant    status.uses never falls nor passes spec.maxUses; lastUsedAt never goes back;
                   lastUsedAt/lastUsedBy change only with a new use; spec.revoked never reverts
  both             spec.caller (a shared gate's caller) is never added, removed or changed

and, with --policies on, on any accepted write of a grant's status by anyone but its own gate
and the status owners. After each accepted write that changed the object, the replay command is
run (the same call through the real gate) and must print the same count of runs as before;
once per distinct state of what the gate reads (the spec and GATE_READS).

Usage: rewind.py --policies on|off --ns NS [--jobs N] --target PLURAL NAME HISTORY REPLAY...
                 IDENTITY=KUBECONFIG...
Prints one line per object and identity (writes tried, accepted, refused; replays), one per
object and identity for the creations, then one per object and class (the field attacked,
"status" for the whole status, "create" for the creations) over every identity, and a summary;
exits 1 on any broken guarantee.
"""

import argparse
import base64
import concurrent.futures
import copy
import http.client
import itertools
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

GROUP, VERSION = "kagent.dev", "v1alpha2"
FINISHED = {"Denied", "Expired", "Executed", "Cancelled"}
# A grant's status may be written by the controller and the extra status writers (all of them
# exempt from the policy) and by the gate of the grant's own agent; under --policies on, any
# other identity that gets a grant-status write through is a failure.
GRANT_STATUS_WRITERS = {"admin", "controller", "agent"}
# The status fields the gate reads when it judges a request or a grant (gate::decision,
# gate::grants); a replay is needed once per distinct value of these and the spec.
GATE_READS = ("phase", "decidedAt", "consumedAt", "consumedBy", "editedArgumentsSha256", "uses",
              "lastUsedAt", "lastUsedBy")
# The spec fields attacked, by kind: the values to write, or None to generate them from the
# CRD's schema of the field (other_values) and the object's current value.
SPEC_FIELDS = {
    "approvalrequests": {"caller": None, "escalation": None, "edit": None, "editApprovals": None,
                         "toolAnnotations": None},
    "approvalgrants": {"revoked": [False], "caller": None},
}
# The spec fields of a request that only a later write may add: a request created with any of
# them (each alone and together, their values those of a target that has them) must be refused.
NEVER_AT_CREATION = {"approvalrequests": ("decision", "approvals", "edit", "editApprovals"),
                     "approvalgrants": ()}


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
    if kind == "string" and "pattern" in schema:
        # A value the schema admits (a digest's hex), so that the CEL rules, not the
        # pattern, must refuse it.
        fits = [v for v in ("forged", "0" * 64, "f" * 64, "ab" * 32)
                if re.search(schema["pattern"], v) and v != current
                and schema.get("minLength", 0) <= len(v) <= schema.get("maxLength", len(v))]
        return fits[:2]
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
            if key in base:
                values.append({**base, key: None})
        return values
    if kind == "array":
        values = [[]]
        if schema.get("items", {}).get("type") == "string":
            values.append(list(current or []) + ["forged"])
        elif schema.get("items", {}).get("type") == "object":
            values.append(list(current or []) + [new_item(schema["items"], current or [])])
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


def new_item(schema, entries):
    """An entry of a list of objects of `schema` that none of `entries` is: each required
    property generated (a list-map key made unique)."""
    item = {}
    for key in schema.get("required", []):
        value = other_values(schema["properties"][key], None)[0]
        if isinstance(value, str):
            taken = {e.get(key) for e in entries if isinstance(e, dict)}
            value = next(f"{value}-{i}" if i else value for i in itertools.count() if
                         (f"{value}-{i}" if i else value) not in taken)
        item[key] = value
    return item


def attacks(obj, fields, history, managers, spec_fields=()):
    """Every write that removes, nulls, replaces or rewinds a field (or the whole status), as
    (class, label, subresource, method, content type, body builder); the class is the field
    attacked ("status" for the whole status); a builder takes the object as read just before
    the write (for resourceVersion-free PUT bodies)."""
    status = obj.get("status", {})
    out = []
    cls = "status"

    def merge(label, patch, sub=True):
        out.append((cls, label + (" (status)" if sub else " (main)"), sub, "PATCH",
                    "application/merge-patch+json", lambda _o: patch))

    def jsonpatch(label, ops, sub=True):
        out.append((cls, label + (" (status)" if sub else " (main)"), sub, "PATCH",
                    "application/json-patch+json", lambda _o: ops))

    def put(label, build, sub=True):
        def body(o):
            o = copy.deepcopy(o)
            build(o)
            return o
        out.append((cls, label + (" (status)" if sub else " (main)"), sub, "PUT", "application/json", body))

    def apply(label, manager, part, value, sub=True):
        def body(o):
            return {"apiVersion": f"{GROUP}/{VERSION}", "kind": o["kind"],
                    "metadata": {"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"]},
                    part: value}
        out.append((cls, f"{label} by SSA as {manager}" + (" (status)" if sub else " (main)"), sub,
                    f"PATCH?fieldManager={manager}&force=true", "application/apply-patch+yaml", body))

    for sub in (True, False):
        cls = "status"
        merge("status: null", {"status": None}, sub)
        merge("status: {}", {"status": {}}, sub)
        jsonpatch("remove /status", [{"op": "remove", "path": "/status"}], sub)
        jsonpatch("replace /status with {}", [{"op": "replace", "path": "/status", "value": {}}], sub)
        put("PUT without status", lambda o: o.pop("status", None), sub)
        for i, old in enumerate(history):
            put(f"PUT status of version {i}", lambda o, old=old: o.__setitem__("status", copy.deepcopy(old)), sub)
            merge(f"merge status of version {i}", {"status": old or None}, sub)
        for field, schema in fields.items():
            cls = f"status.{field}"
            current = status.get(field)
            merge(f"status.{field}: null", {"status": {field: None}}, sub)
            jsonpatch(f"remove /status/{field}", [{"op": "remove", "path": f"/status/{field}"}], sub)
            put(f"PUT without status.{field}", lambda o, f=field: o.get("status", {}).pop(f, None), sub)
            # An explicit null (kept by the apiserver where the schema is nullable).
            jsonpatch(f"add /status/{field} null", [{"op": "add", "path": f"/status/{field}", "value": None}], sub)
            put(f"PUT status.{field} null", lambda o, f=field: o.setdefault("status", {}).__setitem__(f, None), sub)
            for value in other_values(schema, current):
                short = json.dumps(value)[:40]
                merge(f"status.{field}: {short}", {"status": {field: value}}, sub)
                jsonpatch(f"replace /status/{field} {short}",
                          [{"op": "add", "path": f"/status/{field}", "value": value}], sub)
                put(f"PUT status.{field} {short}",
                    lambda o, f=field, v=value: o.setdefault("status", {}).__setitem__(f, v), sub)
                apply(f"status.{field} {short}", "rewind-e2e", "status", {field: value}, sub)
        # A field manager that owns fields drops them by applying without them.
        cls = "status"
        for manager in managers:
            apply("status without its fields", manager, "status", {}, sub)
    for field, values in spec_fields:
        cls = f"spec.{field}"
        merge(f"spec.{field}: null", {"spec": {field: None}}, False)
        jsonpatch(f"remove /spec/{field}", [{"op": "remove", "path": f"/spec/{field}"}], False)
        put(f"PUT without spec.{field}", lambda o, f=field: o["spec"].pop(f, None), False)
        jsonpatch(f"add /spec/{field} null", [{"op": "add", "path": f"/spec/{field}", "value": None}], False)
        put(f"PUT spec.{field} null", lambda o, f=field: o["spec"].__setitem__(f, None), False)
        for value in values:
            short = json.dumps(value)[:40]
            merge(f"spec.{field}: {short}", {"spec": {field: value}}, False)
            jsonpatch(f"add /spec/{field} {short}", [{"op": "add", "path": f"/spec/{field}", "value": value}], False)
            put(f"PUT spec.{field} {short}", lambda o, f=field, v=value: o["spec"].__setitem__(f, v), False)
            apply(f"spec.{field} {short}", "rewind-e2e", "spec", {field: value}, False)
        for manager in managers:
            spec = {k: v for k, v in obj["spec"].items() if k != field}
            apply(f"spec without {field}", manager, "spec", spec, False)
    return out


def creations(obj, plural, fields):
    """Every creation of a copy of `obj` (spec only, a new name) carrying one or more of the
    spec fields `fields` that no request may be created with, each with its value on `obj`, as
    (label, spec); first (None, spec) with none of them, which must be admitted."""
    present = [f for f in fields if obj["spec"].get(f) is not None]
    base = {k: v for k, v in obj["spec"].items() if k not in fields}
    out = [(None, base)]
    for n in range(1, len(present) + 1):
        for chosen in itertools.combinations(present, n):
            spec = {**base, **{f: obj["spec"][f] for f in chosen}}
            out.append(("create with " + "+".join(f"spec.{f}" for f in chosen), spec))
    return out


def present(value):
    """`value` without its explicit nulls: a field set to null is absent to every reader (the
    apiserver's CEL has(), the gate and kubectl hitl alike), so the guarantees are checked on
    what is present."""
    if isinstance(value, dict):
        return {k: present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [present(v) for v in value]
    return value


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
    return broken + edit_broken(before, after) + caller_broken(before, after)


def edit_broken(before, after):
    """spec.edit write-once and never added once decided or on a grant-decided request;
    spec.editApprovals append-only and closed by the decision; status.editedArgumentsSha256
    write-once and only with status.consumedAt and spec.edit; spec.toolAnnotations never
    added, removed or changed."""
    bs, as_ = before["spec"], after["spec"]
    b, a = before.get("status", {}), after.get("status", {})
    broken = []
    if bs.get("edit") is not None and as_.get("edit") != bs["edit"]:
        broken.append(f"spec.edit {bs['edit']!r} -> {as_.get('edit')!r}")
    if bs.get("edit") is None and as_.get("edit") is not None and bs.get("decision") is not None:
        broken.append("spec.edit added after spec.decision")
    if as_.get("grant") is not None and (as_.get("edit") is not None or as_.get("editApprovals")):
        broken.append("spec.edit or spec.editApprovals on a grant-decided request")
    old, new = bs.get("editApprovals") or [], as_.get("editApprovals") or []
    lost = [e for e in old if e not in new]
    if lost:
        broken.append(f"spec.editApprovals lost or changed {lost!r}")
    if bs.get("decision") is not None and len(new) != len(old):
        broken.append(f"spec.editApprovals {len(old)} -> {len(new)} entries after spec.decision")
    if b.get("editedArgumentsSha256") is not None \
            and a.get("editedArgumentsSha256") != b["editedArgumentsSha256"]:
        broken.append(f"status.editedArgumentsSha256 {b['editedArgumentsSha256']!r} -> "
                      f"{a.get('editedArgumentsSha256')!r}")
    if a.get("editedArgumentsSha256") is not None \
            and (a.get("consumedAt") is None or as_.get("edit") is None):
        broken.append("status.editedArgumentsSha256 without status.consumedAt and spec.edit")
    if as_.get("toolAnnotations") != bs.get("toolAnnotations"):
        broken.append(f"spec.toolAnnotations {bs.get('toolAnnotations')!r} -> {as_.get('toolAnnotations')!r}")
    return broken


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


def create_all(args, identities, targets, failures, rows, classes):
    """Each identity creates (a dry run: nothing is stored) a copy of each target that has a
    field no request may be created with, by POST and by server-side apply under a new name;
    any admitted is a failure. The copy without them must be admitted for cluster-admin
    without the policies (else the refusals would prove nothing)."""
    admin = identities["admin"]
    for plural, name, *_ in targets:
        fields = NEVER_AT_CREATION[plural]
        code, obj = admin.request("GET", path_of(args.ns, plural, name, False))
        assert code == 200, obj
        made = creations(obj, plural, fields)
        if len(made) == 1:
            continue
        collection = f"/apis/{GROUP}/{VERSION}/namespaces/{args.ns}/{plural}"
        for who, identity in identities.items():
            tried = accepted = 0
            for i, (label, spec) in enumerate(made):
                new = f"rewind-create-{i}"
                body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": obj["kind"],
                        "metadata": {"name": new, "namespace": args.ns}, "spec": spec}
                for method, path, ctype in (
                        ("POST", collection + "?dryRun=All", "application/json"),
                        ("PATCH", f"{collection}/{new}?dryRun=All&fieldManager=rewind-e2e&force=true",
                         "application/apply-patch+yaml")):
                    code, answer = identity.request(method, path, body, ctype)
                    if label is None:
                        if who == "admin" and args.policies == "off" and code >= 300:
                            failures.append(f"{plural}/{name}: its copy without {'/'.join(fields)} "
                                            f"is refused to {who} by {method} ({code}): "
                                            f"{answer.get('message')}")
                            print("BROKEN: " + failures[-1], flush=True)
                        continue
                    tried += 1
                    cls = classes.setdefault(f"{plural} {name[:24]} create", [0, 0])
                    cls[0] += 1
                    if code < 300:
                        accepted += 1
                        cls[1] += 1
                        failures.append(f"{plural}/{name} as {who}: {label} by {method} admitted")
                        print("BROKEN: " + failures[-1], flush=True)
            rows.append(f"{plural:17} {name[:24]:24} {who:11} {tried:5} tried {accepted:4} "
                        f"accepted {tried - accepted:5} refused (creations with "
                        f"{', '.join('spec.' + f for f in fields)})")
            print("  " + rows[-1], flush=True)


def connect(args):
    """The identities given, each with a connection of its own (one set per thread)."""
    identities = {}
    for spec in args.identities:
        name, kubeconfig = spec.split("=", 1)
        identities[name] = Identity(name, kubeconfig)
    return identities


def attack(args, target, out):
    """Every generated write to one target, as every identity; its rows, failures and class
    counts ("plural name class" -> [tried, accepted]) go to `out`."""
    plural, name, broken_by, replay_cmd, history = target
    rows, failures, classes = out["rows"], out["failures"], out["classes"]
    identities = connect(args)
    admin = identities["admin"]

    def fail(why):
        failures.append(why)
        print("BROKEN: " + why, flush=True)

    fields = properties(admin, plural, "status")
    spec_schema = properties(admin, plural, "spec")
    baseline = replay(replay_cmd)
    replayed = set()
    for who, identity in identities.items():
        began = time.monotonic()
        tried = accepted = replays = 0
        code, obj = admin.request("GET", path_of(args.ns, plural, name, False))
        assert code == 200, obj
        managers = sorted({m["manager"] for m in obj["metadata"].get("managedFields", [])})
        spec_fields = spec_attacks(spec_schema, obj["spec"], SPEC_FIELDS[plural])
        for cls, label, sub, method, ctype, build in attacks(obj, fields, history, managers, spec_fields):
            code, before = admin.request("GET", path_of(args.ns, plural, name, False))
            if code != 200:
                fail(f"{plural}/{name} as {who}, before {label}: gone ({code}), "
                     "deleted after an earlier accepted write")
                break
            path = path_of(args.ns, plural, name, sub)
            verb, _, query = method.partition("?")
            code, answer = identity.request(verb, path + ("?" + query if query else ""),
                                            build(before), ctype)
            tried += 1
            counts = classes.setdefault(f"{plural} {name[:24]} {cls}", [0, 0])
            counts[0] += 1
            if code >= 300:
                continue
            accepted += 1
            counts[1] += 1
            # A write answers with the object as stored (the main resource and status alike).
            after = answer
            if not answer.get("metadata", {}).get("resourceVersion"):
                code, after = admin.request("GET", path_of(args.ns, plural, name, False))
                if code != 200:
                    fail(f"{plural}/{name} as {who}, {label}: gone after the write ({code})")
                    break
            broken = broken_by(present(before), present(after))
            if plural == "approvalgrants" and sub and args.policies == "on" \
                    and who not in GRANT_STATUS_WRITERS \
                    and after.get("status") != before.get("status"):
                broken.append(f"{who} wrote the status of a grant of another agent")
            for why in broken:
                fail(f"{plural}/{name} as {who}, {label}: {why}")
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
                    fail(f"{plural}/{name} as {who}, {label}: the call ran again "
                         f"(runs {baseline} -> {runs})")
                    baseline = runs
        rows.append(f"{plural:17} {name[:24]:24} {who:11} {tried:5} tried {accepted:4} "
                    f"accepted {tried - accepted:5} refused {replays:3} replays "
                    f"{time.monotonic() - began:6.1f} s")
        print("  " + rows[-1], flush=True)


def run(args):
    targets = []
    for plural, name, history, replay_cmd in args.target:
        grant = plural == "approvalgrants"
        targets.append((plural, name, grant_broken if grant else request_broken, replay_cmd,
                        json.loads(history)))
    print(f"policies {args.policies}: kind, object, identity, writes", flush=True)
    # The targets are distinct objects, each replayed by a call of its own: they are attacked
    # side by side (--jobs at a time), each in its own order of identities.
    outs = [{"rows": [], "failures": [], "classes": {}} for _ in targets]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for done in [pool.submit(attack, args, t, o) for t, o in zip(targets, outs)]:
            done.result()
    rows = [r for o in outs for r in o["rows"]]
    failures = [f for o in outs for f in o["failures"]]
    classes = {k: v for o in outs for k, v in o["classes"].items()}
    create_all(args, connect(args), targets, failures, rows, classes)
    print(f"policies {args.policies}: kind, object, class, writes over every identity")
    for key, (tried, accepted) in classes.items():
        plural, name, cls = key.split(" ", 2)
        print(f"  {plural:17} {name:24} {cls:32} {tried:5} tried {accepted:4} accepted "
              f"{tried - accepted:5} refused")
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
    parser.add_argument("--jobs", type=int, default=3, help="targets attacked at a time")
    parser.add_argument("identities", nargs="+", help="NAME=KUBECONFIG; one must be admin")
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
