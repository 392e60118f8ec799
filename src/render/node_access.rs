//! What in a pod reaches the node it runs on (pure). The kubelet keeps every pod's volumes
//! under its folder on the node (`/var/lib/kubelet/pods/<uid>/volumes`): beside an approval
//! gate, that is gate.json with the tool servers' credentials, the binding key and the gate's
//! token. A container of the agent's pods that reaches the node can read them, and call the
//! servers itself or act as the gate.
//!
//! Counted (docs/placement.md, "Node access"): a container that is `privileged`, runs as a
//! Windows `hostProcess`, or adds one of [`NODE_CAPABILITIES`]; a pod with `hostPID`,
//! `hostNetwork`, `hostIPC` or a Windows `hostProcess`; a `hostPath` or `gitRepo` volume.
//! Not counted, because alone they give no way to the node: `allowPrivilegeEscalation` (a
//! setuid program gains at most the capabilities the container already has), seccomp and
//! AppArmor `Unconfined` and SELinux options (they lift a filter against kernel exploits, not
//! a door), `procMount: Unmasked` (the apiserver takes it only with `hostUsers: false`, where
//! root in the container is no one on the node), host ports, and volumes whose source an
//! administrator chose (PersistentVolumes, CSI drivers).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Container, PodSecurityContext, PodSpec, SecurityContext, Volume, WindowsSecurityContextOptions,
};
use kube::ResourceExt;

use crate::api::Agent;
use crate::render::objects::{AgentObjects, GATE_CONTAINER};

/// One field of a pod that reaches the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAccess {
    /// Where it is: the Agent's field (`spec.declarative.deployment.volumes[2].hostPath`), or
    /// a rendered Deployment's (`Deployment ns/a spec.template.spec.hostPID`).
    pub field: String,
    /// What it gives.
    pub why: String,
}

/// The added capabilities that reach the node, each with what it gives; compared without
/// case and without a `CAP_` prefix, as container runtimes take them. Those a runtime grants
/// every container anyway (`CHOWN`, `DAC_OVERRIDE`, `MKNOD`, `SYS_CHROOT`, ...) and those
/// confined to the pod's own namespaces (`NET_ADMIN`, `NET_RAW`) are not here.
pub const NODE_CAPABILITIES: &[(&str, &str)] = &[
    ("ALL", "every capability, each of the others here included"),
    (
        "SYS_ADMIN",
        "mounts filesystems and cgroups: the node's disks, the cgroup release_agent escape",
    ),
    ("SYS_MODULE", "loads modules into the node's kernel"),
    (
        "SYS_RAWIO",
        "raw access to the node's devices, I/O ports and kernel memory",
    ),
    (
        "SYS_PTRACE",
        "reads and writes the memory of every process it can see (the node's with hostPID)",
    ),
    (
        "DAC_READ_SEARCH",
        "opens any file of the node's filesystem by its handle (open_by_handle_at), the kubelet's folder included",
    ),
    (
        "BPF",
        "loads eBPF programs, which with PERFMON read the node's kernel memory",
    ),
    (
        "PERFMON",
        "traces every process of the node (perf events, eBPF probes)",
    ),
];

/// What adding capability `name` gives, if it reaches the node (`sys_admin`, `CAP_SYS_ADMIN`
/// and `SYS_ADMIN` alike).
pub fn capability(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    NODE_CAPABILITIES
        .iter()
        .find(|(known, _)| *known == bare)
        .map(|(_, why)| *why)
}

fn found(field: String, why: impl Into<String>) -> NodeAccess {
    NodeAccess {
        field,
        why: why.into(),
    }
}

fn host_process(field: &str, windows: Option<&WindowsSecurityContextOptions>) -> Vec<NodeAccess> {
    windows
        .filter(|w| w.host_process == Some(true))
        .map(|_| {
            found(
                format!("{field}.windowsOptions.hostProcess"),
                "runs as a process of the Windows node itself",
            )
        })
        .into_iter()
        .collect()
}

/// What a container's security context at `field` gives of the node.
pub fn security_context(field: &str, context: &SecurityContext) -> Vec<NodeAccess> {
    let mut access = Vec::new();
    if context.privileged == Some(true) {
        access.push(found(
            format!("{field}.privileged"),
            "a privileged container has every capability and the node's devices",
        ));
    }
    let added = context
        .capabilities
        .iter()
        .flat_map(|c| c.add.iter().flatten());
    for (index, name) in added.enumerate() {
        if let Some(why) = capability(name) {
            access.push(found(
                format!("{field}.capabilities.add[{index}]"),
                format!("capability {name}: {why}"),
            ));
        }
    }
    access.extend(host_process(field, context.windows_options.as_ref()));
    access
}

/// What a pod's security context at `field` gives of the node.
pub fn pod_security_context(field: &str, context: &PodSecurityContext) -> Vec<NodeAccess> {
    host_process(field, context.windows_options.as_ref())
}

/// What a volume at `field` gives of the node.
pub fn volume(field: &str, volume: &Volume) -> Vec<NodeAccess> {
    let mut access = Vec::new();
    if let Some(host_path) = &volume.host_path {
        access.push(found(
            format!("{field}.hostPath"),
            format!(
                "volume {:?} mounts the node's {:?}",
                volume.name, host_path.path
            ),
        ));
    }
    if volume.git_repo.is_some() {
        access.push(found(
            format!("{field}.gitRepo"),
            format!(
                "volume {:?} has the kubelet run git on the node (CVE-2024-10220 ran a repository's hooks there)",
                volume.name
            ),
        ));
    }
    access
}

fn container(field: &str, container: &Container) -> Vec<NodeAccess> {
    container
        .security_context
        .as_ref()
        .map(|context| security_context(&format!("{field}.securityContext"), context))
        .unwrap_or_default()
}

/// What `pod`, at `field`, gives of the node to its containers other than `except` (the
/// approval gate beside the agent, whose own settings are the operator's): each container's
/// and init container's security context, the host namespaces, the pod's security context
/// and its volumes.
pub fn pod(field: &str, pod: &PodSpec, except: Option<&str>) -> Vec<NodeAccess> {
    let mut access = Vec::new();
    let lists = [
        ("containers", Some(&pod.containers)),
        ("initContainers", pod.init_containers.as_ref()),
    ];
    for (list, containers) in lists {
        for (index, c) in containers.into_iter().flatten().enumerate() {
            if Some(c.name.as_str()) != except {
                access.extend(container(&format!("{field}.{list}[{index}]"), c));
            }
        }
    }
    let namespaces = [
        (
            "hostPID",
            pod.host_pid,
            "the node's processes, and through /proc their files",
        ),
        (
            "hostNetwork",
            pod.host_network,
            "the node's network: the kubelet's ports, every address the node may reach, no NetworkPolicy",
        ),
        (
            "hostIPC",
            pod.host_ipc,
            "the node's shared memory and message queues",
        ),
    ];
    for (name, set, why) in namespaces {
        if set == Some(true) {
            access.push(found(format!("{field}.{name}"), why));
        }
    }
    if let Some(context) = &pod.security_context {
        access.extend(pod_security_context(
            &format!("{field}.securityContext"),
            context,
        ));
    }
    for (index, v) in pod.volumes.iter().flatten().enumerate() {
        access.extend(volume(&format!("{field}.volumes[{index}]"), v));
    }
    access
}

/// What the Agent's own `spec.declarative.deployment` asks for that reaches the node: the
/// agent container's `securityContext` (which the skills init container runs under too),
/// `podSecurityContext` and `volumes`.
pub fn agent(agent: &Agent) -> Vec<NodeAccess> {
    const FIELD: &str = "spec.declarative.deployment";
    let Some(deployment) = agent
        .spec
        .declarative
        .as_ref()
        .and_then(|d| d.deployment.as_deref())
    else {
        return Vec::new();
    };
    let mut access = Vec::new();
    if let Some(context) = &deployment.security_context {
        access.extend(security_context(
            &format!("{FIELD}.securityContext"),
            context,
        ));
    }
    if let Some(context) = &deployment.pod_security_context {
        access.extend(pod_security_context(
            &format!("{FIELD}.podSecurityContext"),
            context,
        ));
    }
    for (index, v) in deployment.volumes.iter().enumerate() {
        access.extend(volume(&format!("{FIELD}.volumes[{index}]"), v));
    }
    access
}

/// What a rendered Deployment's pods give of the node to their containers other than
/// `except`, fields named `Deployment <namespace>/<name> spec.template.spec...`.
pub fn deployment(deployment: &Deployment, except: Option<&str>) -> Vec<NodeAccess> {
    let Some(spec) = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
    else {
        return Vec::new();
    };
    let field = format!(
        "Deployment {}/{} spec.template.spec",
        deployment.namespace().unwrap_or_default(),
        deployment.name_any()
    );
    pod(&field, spec, except)
}

/// What the agent's pods, as rendered in `objects`, give of the node: named by the Agent's
/// own fields when it asks for it itself, else by the rendered Deployment's (the operator's
/// part of the pods, which the tests keep clear of all of it).
pub fn agent_pods(owner: &Agent, objects: &AgentObjects) -> Vec<NodeAccess> {
    let rendered = deployment(&objects.deployment, Some(GATE_CONTAINER));
    if rendered.is_empty() {
        return rendered;
    }
    let own = agent(owner);
    if own.is_empty() { rendered } else { own }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_compared_without_case_or_prefix() {
        for name in [
            "SYS_ADMIN",
            "sys_admin",
            "CAP_SYS_ADMIN",
            "cap_Sys_Admin",
            " SYS_ADMIN ",
        ] {
            assert!(capability(name).is_some(), "{name}");
        }
        for name in ["all", "CAP_ALL", "dac_read_search", "Cap_Bpf"] {
            assert!(capability(name).is_some(), "{name}");
        }
        for name in [
            "NET_BIND_SERVICE",
            "CHOWN",
            "DAC_OVERRIDE",
            "MKNOD",
            "SYS_CHROOT",
            "NET_ADMIN",
            "NET_RAW",
            "SYS_ADMINX",
            "CAP_",
            "",
        ] {
            assert_eq!(capability(name), None, "{name}");
        }
    }

    #[test]
    fn each_listed_capability_has_a_reason() {
        for (name, why) in NODE_CAPABILITIES {
            assert_eq!(name.to_ascii_uppercase(), *name);
            assert!(!name.starts_with("CAP_"));
            assert!(why.len() > 10, "{name}");
        }
    }
}
