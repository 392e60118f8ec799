"""Runs kagent's agent runtime as the Agent's rendered Deployment runs its agent container.

    python3 agent_pod.py NAMESPACE DEPLOYMENT VENV WORKDIR [POD_NAME]

Reads the Deployment from the cluster in KUBECONFIG (kubectl), then starts the container's
command (the image's entrypoint, `kagent-adk static`, unless the container sets `command`) with
exactly its args and env, and every volume it mounts at its mount path:
- env: values as they are; `fieldRef` from the pod's namespace, name and ServiceAccount;
  `secretKeyRef` and `configMapKeyRef` read from the cluster;
- volumes: Secret and ConfigMap volumes (their items, or every key) written as files; a
  projected ServiceAccount token made with `kubectl create token --audience`, as the kubelet
  makes it; emptyDir as an empty directory. A token of the session store's audience
  (hitl-operator-sessions), which the store takes only when bound to an Agent's pod, is bound
  to the Deployment's pod as the kubelet binds it (`--bound-object-kind Pod`): on a cluster
  without a node that pod exists, Pending, made by the ReplicaSet. It is then also the pod whose
  name the container sees (fieldRef metadata.name), unless POD_NAME is given.
The mounts are bind mounts in a private mount namespace (`unshare -m`): the runtime reads
/config and /var/run/secrets/tokens/kagent-token as in the pod (each mount point is created
empty on the host when missing). Anything else the container asks for is refused by name, so
the test never runs something other than what the Deployment says.
"""

import base64
import json
import os
import shlex
import subprocess
import sys
import time

# kagent's agent image (cr.kagent.dev/kagent-dev/kagent/app): ENTRYPOINT ["kagent-adk", "static"].
IMAGE_ENTRYPOINT = ["kagent-adk", "static"]
AGENT_CONTAINER = "agent"
# The audience of the session store's tokens (src/contract/session_store.rs): bound to the pod.
SESSION_STORE_AUDIENCE = "hitl-operator-sessions"


def kubectl(*args):
    return subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True).stdout


def get(namespace, kind, name):
    return json.loads(kubectl("-n", namespace, "get", kind, name, "-o", "json"))


def key_of(namespace, kind, ref):
    data = get(namespace, kind, ref["name"]).get("data", {})
    if ref["key"] not in data:
        sys.exit(f"agent_pod.py: {kind} {ref['name']} has no key {ref['key']}")
    value = data[ref["key"]]
    return base64.b64decode(value).decode() if kind == "secret" else value


def env_of(container, namespace, pod, service_account):
    fields = {
        "metadata.namespace": namespace,
        "metadata.name": pod,
        "spec.serviceAccountName": service_account,
    }
    env = {}
    for var in container.get("env", []):
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = var.get("value", "")
        elif "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if path not in fields:
                sys.exit(f"agent_pod.py: env {var['name']}: unsupported fieldRef {path}")
            env[var["name"]] = fields[path]
        elif "secretKeyRef" in source:
            env[var["name"]] = key_of(namespace, "secret", source["secretKeyRef"])
        elif "configMapKeyRef" in source:
            env[var["name"]] = key_of(namespace, "configmap", source["configMapKeyRef"])
        else:
            sys.exit(f"agent_pod.py: env {var['name']}: unsupported source {source}")
    return env


def write_items(directory, data, items, decode):
    os.makedirs(directory, exist_ok=True)
    pairs = [(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]
    for key, path in pairs:
        if key not in data:
            sys.exit(f"agent_pod.py: volume item {key} is missing")
        target = os.path.join(directory, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(base64.b64decode(data[key]) if decode else data[key].encode())


def pod_of(namespace, deployment, seconds=60):
    """(name, uid) of the one live pod of the Deployment's newest ReplicaSet (a rolled
    Deployment whose pods never turn available keeps the old ReplicaSet's pod too), waiting up
    to `seconds` for the ReplicaSet to make it."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return newest_pod(namespace, deployment)
        except LookupError as e:
            if time.monotonic() > deadline:
                sys.exit(f"agent_pod.py: {e} (after {seconds} s)")
            time.sleep(0.2)


def newest_pod(namespace, deployment):
    found = get(namespace, "deployment", deployment)
    if found.get("status", {}).get("observedGeneration") != found["metadata"].get("generation"):
        raise LookupError(f"Deployment {deployment}'s controller has not seen its last change yet")
    revision = found["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision")
    owned = lambda o, kind, name: any(r.get("controller") and r["kind"] == kind and r["name"] == name for r in o["metadata"].get("ownerReferences", []))
    sets = [
        rs["metadata"]["name"]
        for rs in json.loads(kubectl("-n", namespace, "get", "replicasets", "-o", "json"))["items"]
        if owned(rs, "Deployment", deployment)
        and rs["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision") == revision
    ]
    if len(sets) != 1:
        raise LookupError(f"want one ReplicaSet of Deployment {deployment} at revision {revision}, found {sets}")
    pods = json.loads(kubectl("-n", namespace, "get", "pods", "-o", "json"))["items"]
    live = [p for p in pods if owned(p, "ReplicaSet", sets[0]) and not p["metadata"].get("deletionTimestamp")]
    if len(live) != 1:
        raise LookupError(f"want one pod of ReplicaSet {sets[0]}, found {[p['metadata']['name'] for p in live]}")
    return live[0]["metadata"]["name"], live[0]["metadata"]["uid"]


def volume_dir(volume, namespace, service_account, workdir, bound_pod=None):
    """A directory holding what `volume` puts in the pod."""
    directory = os.path.join(workdir, "volumes", volume["name"])
    if "secret" in volume:
        secret = get(namespace, "secret", volume["secret"]["secretName"])
        write_items(directory, secret.get("data", {}), volume["secret"].get("items"), True)
    elif "configMap" in volume:
        config_map = get(namespace, "configmap", volume["configMap"]["name"])
        write_items(directory, config_map.get("data", {}), volume["configMap"].get("items"), False)
    elif "emptyDir" in volume:
        os.makedirs(directory, exist_ok=True)
    elif "projected" in volume:
        os.makedirs(directory, exist_ok=True)
        for source in volume["projected"]["sources"]:
            token = source.get("serviceAccountToken")
            if token is None:
                sys.exit(f"agent_pod.py: volume {volume['name']}: unsupported projection {source}")
            seconds = max(600, token.get("expirationSeconds", 3600))
            args = ["-n", namespace, "create", "token", service_account, f"--duration={seconds}s"]
            if token.get("audience"):
                args.append(f"--audience={token['audience']}")
            if token.get("audience") == SESSION_STORE_AUDIENCE:
                if bound_pod is None:
                    sys.exit("agent_pod.py: a session store token needs the Deployment's pod to bind it to")
                name, uid = bound_pod
                args += ["--bound-object-kind=Pod", f"--bound-object-name={name}", f"--bound-object-uid={uid}"]
            with open(os.path.join(directory, token["path"]), "w") as f:
                f.write(kubectl(*args).strip())
    else:
        sys.exit(f"agent_pod.py: volume {volume['name']}: unsupported source {volume}")
    return directory


def main(namespace, deployment, venv, workdir, pod=None):
    spec = get(namespace, "deployment", deployment)["spec"]["template"]["spec"]
    containers = [c for c in spec["containers"] if c["name"] == AGENT_CONTAINER]
    if len(containers) != 1:
        sys.exit(f"agent_pod.py: Deployment {deployment} has no container {AGENT_CONTAINER!r}")
    container = containers[0]
    service_account = spec.get("serviceAccountName", "default")
    binds_to_pod = any(
        source.get("serviceAccountToken", {}).get("audience") == SESSION_STORE_AUDIENCE
        for v in spec.get("volumes", [])
        for source in v.get("projected", {}).get("sources", [])
    )
    bound_pod = pod_of(namespace, deployment) if binds_to_pod else None
    pod = pod or (bound_pod[0] if bound_pod else f"{deployment}-e2e-agent")
    env = env_of(container, namespace, pod, service_account)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    binds = []
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes:
            sys.exit(f"agent_pod.py: mount {mount['name']} names no volume")
        source = volume_dir(volumes[mount["name"]], namespace, service_account, workdir, bound_pod)
        binds.append((source, mount["mountPath"], mount.get("readOnly", False)))
    command = container.get("command") or IMAGE_ENTRYPOINT
    command = [os.path.join(venv, "bin", command[0]), *command[1:], *container.get("args", [])]
    env["PATH"] = os.path.join(venv, "bin") + ":/usr/bin:/bin"
    env["HOME"] = workdir
    script = ["set -e"]
    for source, target, read_only in binds:
        script.append(f"mkdir -p {shlex.quote(target)}")
        script.append(f"mount --bind {shlex.quote(source)} {shlex.quote(target)}")
        if read_only:
            script.append(f"mount -o remount,bind,ro {shlex.quote(target)}")
    script.append("exec env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + shlex.join(command))
    bound = f"; session store token bound to pod {bound_pod[0]}" if bound_pod else ""
    print(f"agent_pod.py: {shlex.join(command)} (mounts: {', '.join(t for _, t, _ in binds)}{bound})", flush=True)
    os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)])


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    main(*sys.argv[1:])
