//! Whether the agent can reach its gated tool servers only through the gate: the
//! `GateIsolated` condition, computed from what was rendered (pure).
//!
//! First the node: if a container of the agent's pods other than the gate can reach the node
//! ([`super::node_access`]), the kubelet's folder there holds what the gate's volumes hold,
//! and nothing is isolated. Then the pods: if the agent container mounts a volume that reaches one of the gate
//! container's (gate.json, the binding key, the gate's token; see [`super::agent_volumes`]),
//! nothing is isolated. Then the network: in Sidecar placement the agent container shares the
//! gate's network, so the only thing between it and a server is a credential that only
//! gate.json holds. In Gateway placement the egress NetworkPolicy closes the cluster's own
//! addresses to the agent pods, but not the world outside: a server outside the cluster is
//! protected only by a credential again.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

use crate::api::GatePlacement;
use crate::api::agent::ToolServerKind;
use crate::cidr::Cidr;
use crate::contract::gate_config::GateServer;
use crate::render::agent_volumes::{Reach, Sharing, reach};
use crate::render::network::host_in_cluster;
use crate::render::node_access::NodeAccess;
use crate::render::objects::{AGENT_CONTAINER, AgentObjects, GATE_CONTAINER};
use crate::render::proxy::PROXY_HOST_HEADER;

/// The verdict for the `GateIsolated` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Isolation {
    /// Whether every server with gated tools is out of the agent's direct reach.
    pub isolated: bool,
    /// Condition reason.
    pub reason: &'static str,
    /// Condition message, naming the servers.
    pub message: String,
}

/// False: the sidecar's network is the agent's, and a server takes calls without credentials.
pub const SIDECAR_SHARES_NETWORK: &str = "SidecarSharesNetwork";
/// True: in Sidecar placement, every gated server needs headers only the gate holds.
pub const CREDENTIALS_ONLY_IN_GATE: &str = "CredentialsOnlyInGate";
/// True: in Gateway placement, every gated server is in the cluster or needs credentials.
pub const GATEWAY_ISOLATED: &str = "GatewayIsolated";
/// False: in Gateway placement, a gated server outside the cluster takes calls without
/// credentials.
pub const EXTERNAL_SERVER_REACHABLE: &str = "ExternalServerReachable";
/// False: the agent container mounts one of the gate container's volumes, or a volume with
/// what one of them holds.
pub const AGENT_MOUNTS_GATE_VOLUME: &str = "AgentMountsGateVolume";
/// False: a container of the agent's pods other than the gate can reach the node, where the
/// kubelet keeps the gate's volumes.
pub const AGENT_REACHES_NODE: &str = "AgentReachesNode";

fn pod_spec(deployment: &Deployment) -> Option<&PodSpec> {
    deployment.spec.as_ref()?.template.spec.as_ref()
}

/// The volumes of `pod` that `container` mounts.
fn mounted<'p>(pod: &'p PodSpec, container: &Container) -> Vec<&'p Volume> {
    let volumes = pod.volumes.as_deref().unwrap_or_default();
    container
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| volumes.iter().find(|v| v.name == m.name))
        .collect()
}

/// The first volume the agent container mounts, in the rendered pods, that reaches a volume
/// the gate container mounts: the agent's volume, the gate's, and how.
fn gate_volume_in_agent(
    objects: &AgentObjects,
    runtime_token: &Volume,
) -> Option<(String, String, Reach)> {
    let agent_pod = pod_spec(&objects.deployment)?;
    let agent = agent_pod
        .containers
        .iter()
        .find(|c| c.name == AGENT_CONTAINER)?;
    let (gate_deployment, gate_pod, gate) =
        objects.deployments().into_iter().find_map(|deployment| {
            let pod = pod_spec(deployment)?;
            let gate = pod
                .containers
                .iter()
                .chain(pod.init_containers.iter().flatten())
                .find(|c| c.name == GATE_CONTAINER)?;
            Some((deployment, pod, gate))
        })?;
    let sharing = Sharing {
        same_pod: std::ptr::eq(gate_deployment, &objects.deployment),
        same_identity: agent_pod.service_account_name == gate_pod.service_account_name,
    };
    let theirs = mounted(gate_pod, gate);
    // The runtime's own token (audience the session store's or kagent's) is no credential
    // the gate holds: the Kubernetes API refuses it.
    let mut agent_volumes = mounted(agent_pod, agent)
        .into_iter()
        .filter(|volume| *volume != runtime_token);
    agent_volumes.find_map(|mine| {
        theirs.iter().find_map(|gate_volume| {
            reach(mine, gate_volume, sharing)
                .map(|(_, how)| (mine.name.clone(), gate_volume.name.clone(), how))
        })
    })
}

fn describe(server: &GateServer) -> String {
    format!(
        "{} {}/{} ({})",
        server.kind.as_str(),
        server.namespace,
        server.name,
        server.restricted_tools().join(", ")
    )
}

fn host(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The verdict for an Agent whose gate guards `servers`, rendered as `objects` with the
/// runtime's token volume `runtime_token`, whose pods reach the node through `node_access`
/// ([`super::node_access::agent_pods`]); `None` when no server has a tool that requires
/// approval or that a rule may hold or deny (there is nothing to go around).
pub fn isolation(
    placement: GatePlacement,
    servers: &[GateServer],
    objects: &AgentObjects,
    gate_service: &str,
    cluster_cidrs: &[Cidr],
    runtime_token: &Volume,
    node_access: &[NodeAccess],
) -> Option<Isolation> {
    let gated: Vec<&GateServer> = servers
        .iter()
        .filter(|server| !server.restricted_tools().is_empty())
        .collect();
    if gated.is_empty() {
        return None;
    }
    // Any header from headersFrom lives only in gate.json; the agent cannot send it. The
    // proxy's routing header is no credential: the agent can send it as well as the gate.
    let open = |server: &&&GateServer| {
        server
            .params
            .headers
            .keys()
            .all(|name| name.eq_ignore_ascii_case(PROXY_HOST_HEADER))
    };
    let names = |servers: Vec<&&GateServer>| {
        servers
            .into_iter()
            .map(|s| describe(s))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !node_access.is_empty() {
        let fields: Vec<String> = node_access
            .iter()
            .map(|access| format!("{} ({})", access.field, access.why))
            .collect();
        let whose = match placement {
            GatePlacement::Sidecar => {
                "the pod's gate.json with the tool servers' credentials, its binding key and the gate's token"
            }
            GatePlacement::Gateway => {
                "the volumes of a gate pod on the same node (gate.json with the tool servers' credentials, the binding key, the gate's token), and the node's network is not confined by the NetworkPolicies"
            }
        };
        return Some(Isolation {
            isolated: false,
            reason: AGENT_REACHES_NODE,
            message: format!(
                "the agent's pods can reach the node they run on: {}; the kubelet keeps {whose} under its folder there (/var/lib/kubelet), so the agent can call {} directly or act as the gate, skipping approval",
                fields.join("; "),
                names(gated.iter().collect())
            ),
        });
    }
    if let Some((mine, theirs, how)) = gate_volume_in_agent(objects, runtime_token) {
        let what = match how {
            Reach::Name => format!("the approval gate's volume {theirs:?}"),
            Reach::Secret(secret) => format!(
                "volume {mine:?}, which carries Secret {secret:?} of the approval gate's volume {theirs:?}"
            ),
            Reach::Token => format!(
                "volume {mine:?}, a token of the ServiceAccount the approval gate runs as (the gate's volume {theirs:?})"
            ),
        };
        return Some(Isolation {
            isolated: false,
            reason: AGENT_MOUNTS_GATE_VOLUME,
            message: format!(
                "the agent container mounts {what}: what only the gate may hold (the tool servers' credentials, the binding key, its Kubernetes token) is open to the agent, which can then call {} directly or act as the gate, skipping approval",
                names(gated.iter().collect())
            ),
        });
    }
    Some(match placement {
        GatePlacement::Sidecar => {
            let reachable: Vec<_> = gated.iter().filter(open).collect();
            if reachable.is_empty() {
                Isolation {
                    isolated: true,
                    reason: CREDENTIALS_ONLY_IN_GATE,
                    message: format!(
                        "the agent container shares the gate sidecar's network, but every server with gated tools gets headers that only the gate holds: {} (this holds as long as those servers refuse calls without them)",
                        names(gated.iter().collect())
                    ),
                }
            } else {
                Isolation {
                    isolated: false,
                    reason: SIDECAR_SHARES_NETWORK,
                    message: format!(
                        "the agent container shares the gate sidecar's network and can call {} directly, skipping approval: no credential that only the gate holds is needed; set spec.declarative.approval.placement: Gateway to run the gate in pods of its own behind NetworkPolicies",
                        names(reachable)
                    ),
                }
            }
        }
        GatePlacement::Gateway => {
            let outside = |server: &&&GateServer| {
                server.kind == ToolServerKind::RemoteMCPServer
                    && !host_in_cluster(&server.params.url, cluster_cidrs)
            };
            let reachable: Vec<_> = gated.iter().filter(open).filter(outside).collect();
            if reachable.is_empty() {
                Isolation {
                    isolated: true,
                    reason: GATEWAY_ISOLATED,
                    message: format!(
                        "the agent pods reach servers with gated tools only through Service {gate_service}: in-cluster addresses are closed to them by NetworkPolicy (enforced only by a CNI that implements NetworkPolicy), and servers outside the cluster get headers that only the gate holds"
                    ),
                }
            } else {
                let hosts: Vec<String> = reachable
                    .iter()
                    .map(|s| format!("{} at {}", describe(s), host(&s.params.url)))
                    .collect();
                Isolation {
                    isolated: false,
                    reason: EXTERNAL_SERVER_REACHABLE,
                    message: format!(
                        "the agent pods may reach addresses outside the cluster, and these servers with gated tools are not in the cluster (not *.svc, *.svc.cluster.local or an IP in the cluster CIDRs) and need no credentials, so the agent can call them directly, skipping approval: {}; give them headersFrom credentials, or address in-cluster servers as <service>.<namespace>.svc",
                        hosts.join(", ")
                    ),
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::VolumeMount;

    use super::*;
    use crate::api::remote_mcp_server::McpProtocol;
    use crate::api::{Agent, ApprovalMode};
    use crate::contract::agent_config::McpParams;
    use crate::render::RenderOptions;
    use crate::render::model::RenderedModel;
    use crate::render::network::default_cluster_cidrs;
    use crate::render::node_access;
    use crate::render::objects::{self, ObjectInputs};

    fn server(name: &str, url: &str, gated: &[&str], headers: &[&str]) -> GateServer {
        GateServer {
            namespace: "ns".into(),
            name: name.into(),
            kind: ToolServerKind::RemoteMCPServer,
            protocol: McpProtocol::StreamableHttp,
            route: GateServer::route_for("ns", name),
            params: McpParams {
                url: url.into(),
                headers: headers
                    .iter()
                    .map(|h| (h.to_string(), "secret".to_string()))
                    .collect::<BTreeMap<_, _>>(),
                timeout: None,
                sse_read_timeout: None,
                terminate_on_close: None,
            },
            tools: vec!["read_file".into(), "delete_file".into()],
            require_approval: gated.iter().map(|t| t.to_string()).collect(),
            allowed_headers: Vec::new(),
            rules: Vec::new(),
            trust_tool_annotations: false,
            accepted_tools: Default::default(),
        }
    }

    use crate::render::session_api::{SessionApi, SessionApiUrl};

    /// The session API of every test Agent: the default store.
    fn session_api() -> SessionApi {
        SessionApi::Store(SessionApiUrl::default_store())
    }

    /// The objects of a plain Agent `a` whose gate runs in `placement`.
    fn rendered(placement: GatePlacement) -> AgentObjects {
        let agent: Agent = serde_saphyr::from_str(
            "apiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {name: a, namespace: ns}\nspec: {type: Declarative, declarative: {}}",
        )
        .unwrap();
        objects::build(&ObjectInputs {
            agent: &agent,
            options: &RenderOptions::default(),
            mode: ApprovalMode::Gate,
            placement,
            model: &RenderedModel::default(),
            skills: None,
            secret_data: BTreeMap::new(),
            config_hash: "h",
            session_api: &session_api(),
        })
    }

    fn verdict(placement: GatePlacement, servers: &[GateServer]) -> Option<Isolation> {
        verdict_for(placement, servers, &rendered(placement))
    }

    fn verdict_for(
        placement: GatePlacement,
        servers: &[GateServer],
        objects: &AgentObjects,
    ) -> Option<Isolation> {
        isolation(
            placement,
            servers,
            objects,
            "a-gate",
            &default_cluster_cidrs(),
            &session_api().token_volume(),
            &node_access::deployment(&objects.deployment, Some(GATE_CONTAINER)),
        )
    }

    fn agent_pod(objects: &mut AgentObjects) -> &mut PodSpec {
        objects
            .deployment
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
    }

    /// Mounts `volume` of the agent's pod into the agent container, adding it to the pod when
    /// given whole.
    fn mount_in_agent(objects: &mut AgentObjects, name: &str, volume: Option<Volume>) {
        let pod = agent_pod(objects);
        pod.volumes.get_or_insert_default().extend(volume);
        pod.containers[0]
            .volume_mounts
            .get_or_insert_default()
            .push(VolumeMount {
                name: name.to_owned(),
                mount_path: "/mnt/x".to_owned(),
                ..VolumeMount::default()
            });
    }

    /// Servers that would be isolated but for the pods: one needing gate-only credentials.
    fn credentialed() -> [GateServer; 1] {
        [server(
            "pay",
            "http://pay.ns.svc/mcp",
            &["delete_file"],
            &["Authorization"],
        )]
    }

    #[test]
    fn absent_when_nothing_requires_approval() {
        let servers = [server("fs", "http://fs.ns.svc/mcp", &[], &[])];
        assert_eq!(verdict(GatePlacement::Sidecar, &servers), None);
        assert_eq!(verdict(GatePlacement::Gateway, &servers), None);
        assert_eq!(verdict(GatePlacement::Sidecar, &[]), None);
    }

    #[test]
    fn sidecar_names_each_gated_server_without_credentials() {
        let servers = [
            server("fs", "http://fs.ns.svc/mcp", &["delete_file"], &[]),
            server(
                "db",
                "http://db.ns.svc/mcp",
                &["delete_file", "read_file"],
                &[],
            ),
            server(
                "pay",
                "http://pay.ns.svc/mcp",
                &["delete_file"],
                &["Authorization"],
            ),
            server("docs", "http://docs.ns.svc/mcp", &[], &[]),
        ];
        let found = verdict(GatePlacement::Sidecar, &servers).unwrap();
        assert!(!found.isolated);
        assert_eq!(found.reason, "SidecarSharesNetwork");
        assert!(
            found.message.contains(
                "can call RemoteMCPServer ns/fs (delete_file), RemoteMCPServer ns/db (delete_file, read_file) directly"
            ),
            "{}",
            found.message
        );
        assert!(found.message.contains("placement: Gateway"));
        assert!(!found.message.contains("pay") && !found.message.contains("docs"));
    }

    #[test]
    fn sidecar_is_isolated_when_every_gated_server_needs_gate_only_credentials() {
        let servers = [
            server(
                "pay",
                "http://pay.ns.svc/mcp",
                &["delete_file"],
                &["Authorization"],
            ),
            server("docs", "http://docs.ns.svc/mcp", &[], &[]),
        ];
        let found = verdict(GatePlacement::Sidecar, &servers).unwrap();
        assert!(found.isolated);
        assert_eq!(found.reason, "CredentialsOnlyInGate");
        assert!(
            found
                .message
                .contains("RemoteMCPServer ns/pay (delete_file)")
        );
    }

    #[test]
    fn gateway_is_isolated_for_in_cluster_servers_and_credentialed_external_ones() {
        let mut service = server("svc", "http://svc.ns:3000/mcp", &["delete_file"], &[]);
        service.kind = ToolServerKind::Service;
        let servers = [
            server("fs", "http://fs.ns.svc:3000/mcp", &["delete_file"], &[]),
            server(
                "local",
                "http://fs.ns.svc.cluster.local/mcp",
                &["delete_file"],
                &[],
            ),
            server("ip", "http://10.96.3.4:8080/mcp", &["delete_file"], &[]),
            server(
                "saas",
                "https://mcp.example.com/mcp",
                &["delete_file"],
                &["Authorization"],
            ),
            server("ungated", "https://open.example.com/mcp", &[], &[]),
            service,
        ];
        let found = verdict(GatePlacement::Gateway, &servers).unwrap();
        assert!(found.isolated, "{found:?}");
        assert_eq!(found.reason, "GatewayIsolated");
        assert!(found.message.contains("Service a-gate"));
    }

    #[test]
    fn gateway_names_external_servers_without_credentials() {
        let servers = [
            server("fs", "http://fs.ns.svc:3000/mcp", &["delete_file"], &[]),
            server(
                "saas",
                "https://mcp.example.com/mcp?token=x",
                &["delete_file"],
                &[],
            ),
            server("short", "http://fs.ns:3000/mcp", &["delete_file"], &[]),
        ];
        let found = verdict(GatePlacement::Gateway, &servers).unwrap();
        assert!(!found.isolated);
        assert_eq!(found.reason, "ExternalServerReachable");
        assert!(
            found.message.contains(
                "RemoteMCPServer ns/saas (delete_file) at mcp.example.com, RemoteMCPServer ns/short (delete_file) at fs.ns;"
            ),
            "{}",
            found.message
        );
        assert!(!found.message.contains("token"), "no URL query in messages");
        assert!(!found.message.contains("ns/fs "));
    }

    #[test]
    fn the_agent_container_mounting_any_gate_volume_is_not_isolated() {
        let servers = credentialed();
        let clean = rendered(GatePlacement::Sidecar);
        assert!(
            verdict_for(GatePlacement::Sidecar, &servers, &clean)
                .unwrap()
                .isolated
        );
        // Every volume the rendered gate container mounts, one at a time.
        let pod = pod_spec(&clean.deployment).unwrap();
        let gate = &pod.init_containers.as_ref().unwrap()[0];
        let gate_volumes = mounted(pod, gate);
        assert_eq!(gate_volumes.len(), 3);
        for volume in gate_volumes {
            let mut leaky = clean.clone();
            mount_in_agent(&mut leaky, &volume.name, None);
            let found = verdict_for(GatePlacement::Sidecar, &servers, &leaky).unwrap();
            assert!(!found.isolated, "{}", volume.name);
            assert_eq!(found.reason, "AgentMountsGateVolume");
            assert!(
                found.message.starts_with(&format!(
                    "the agent container mounts the approval gate's volume {:?}: ",
                    volume.name
                )),
                "{}",
                found.message
            );
            assert!(
                found
                    .message
                    .contains("RemoteMCPServer ns/pay (delete_file)")
            );
        }
    }

    #[test]
    fn a_volume_with_what_a_gate_volume_holds_is_not_isolated_in_either_placement() {
        let servers = credentialed();
        for placement in [GatePlacement::Sidecar, GatePlacement::Gateway] {
            for secret in ["a", "a-binding-key"] {
                let mut leaky = rendered(placement);
                let volume: Volume = serde_saphyr::from_str(&format!(
                    "{{name: mine, secret: {{secretName: {secret}}}}}"
                ))
                .unwrap();
                mount_in_agent(&mut leaky, "mine", Some(volume));
                let found = verdict_for(placement, &servers, &leaky).unwrap();
                assert_eq!(
                    found.reason, "AgentMountsGateVolume",
                    "{placement:?} {secret}"
                );
                assert!(
                    found
                        .message
                        .contains(&format!("volume \"mine\", which carries Secret {secret:?}")),
                    "{}",
                    found.message
                );
            }
        }
        // A token of the pods' own identity: the gate's in Sidecar placement, not in Gateway.
        let token: Volume = serde_saphyr::from_str(
            "{name: mine, projected: {sources: [{serviceAccountToken: {path: t}}]}}",
        )
        .unwrap();
        let mut sidecar = rendered(GatePlacement::Sidecar);
        mount_in_agent(&mut sidecar, "mine", Some(token.clone()));
        let found = verdict_for(GatePlacement::Sidecar, &servers, &sidecar).unwrap();
        assert!(!found.isolated);
        assert!(
            found
                .message
                .contains("a token of the ServiceAccount the approval gate runs as")
        );
        let mut gateway = rendered(GatePlacement::Gateway);
        mount_in_agent(&mut gateway, "mine", Some(token));
        let found = verdict_for(GatePlacement::Gateway, &servers, &gateway).unwrap();
        assert_eq!(found.reason, "GatewayIsolated");
    }

    /// Container fields that reach the node: the security context to set (JSON), and the
    /// field path under the container that the verdict must name.
    fn container_cases() -> Vec<(serde_json::Value, String)> {
        let mut cases = vec![
            (
                serde_json::json!({"privileged": true}),
                "securityContext.privileged".to_owned(),
            ),
            (
                serde_json::json!({"windowsOptions": {"hostProcess": true}}),
                "securityContext.windowsOptions.hostProcess".to_owned(),
            ),
        ];
        for (name, _) in node_access::NODE_CAPABILITIES {
            // As written, lower case, and with the CAP_ prefix, after a harmless one.
            for spelled in [
                name.to_string(),
                name.to_ascii_lowercase(),
                format!("CAP_{name}"),
            ] {
                cases.push((
                    serde_json::json!({"capabilities": {"add": ["NET_BIND_SERVICE", spelled]}}),
                    "securityContext.capabilities.add[1]".to_owned(),
                ));
            }
        }
        cases
    }

    /// Pod fields that reach the node: the pod spec fields to merge in (JSON), and the path
    /// the verdict must name, under the pod spec.
    fn pod_cases(volumes_before: usize) -> Vec<(serde_json::Value, String)> {
        let mut cases: Vec<(serde_json::Value, String)> = ["hostPID", "hostNetwork", "hostIPC"]
            .into_iter()
            .map(|field| (serde_json::json!({ field: true }), field.to_owned()))
            .collect();
        cases.push((
            serde_json::json!({"securityContext": {"windowsOptions": {"hostProcess": true}}}),
            "securityContext.windowsOptions.hostProcess".to_owned(),
        ));
        for (source, field) in [
            (
                serde_json::json!({"hostPath": {"path": "/var/lib/kubelet"}}),
                "hostPath",
            ),
            (
                serde_json::json!({"hostPath": {"path": "/tmp/x", "type": "DirectoryOrCreate"}}),
                "hostPath",
            ),
            (
                serde_json::json!({"gitRepo": {"repository": "https://example.com/r.git"}}),
                "gitRepo",
            ),
        ] {
            let mut volume = source;
            volume["name"] = "node".into();
            cases.push((
                serde_json::json!({ "volumes": [volume] }),
                format!("volumes[{volumes_before}].{field}"),
            ));
        }
        cases
    }

    fn set_security_context(container: &mut Container, context: &serde_json::Value) {
        container.security_context = Some(serde_json::from_value(context.clone()).unwrap());
    }

    /// `pod` with the fields of `patch` set (volumes appended).
    fn patch_pod(pod: &mut PodSpec, patch: &serde_json::Value) {
        let mut value = serde_json::to_value(&*pod).unwrap();
        for (key, field) in patch.as_object().unwrap() {
            match (key.as_str(), value[key].as_array_mut()) {
                ("volumes", Some(volumes)) => volumes.extend(field.as_array().unwrap().clone()),
                _ => value[key] = field.clone(),
            }
        }
        *pod = serde_json::from_value(value).unwrap();
    }

    fn assert_reaches_node(found: Option<Isolation>, field: &str, case: &str) {
        let found = found.unwrap();
        assert!(!found.isolated, "{case}");
        assert_eq!(found.reason, "AgentReachesNode", "{case}");
        assert!(
            found.message.contains(&format!(
                "the agent's pods can reach the node they run on: Deployment ns/a spec.template.spec.{field} ("
            )),
            "{case}: {}",
            found.message
        );
        assert!(
            found
                .message
                .contains("RemoteMCPServer ns/pay (delete_file)"),
            "{case}"
        );
    }

    #[test]
    fn every_node_field_of_every_container_but_the_gate_and_of_the_pod_is_named() {
        let servers = credentialed();
        let mut checked = 0;
        for placement in [GatePlacement::Sidecar, GatePlacement::Gateway] {
            let clean = rendered(placement);
            assert!(
                verdict_for(placement, &servers, &clean).unwrap().isolated,
                "{placement:?}"
            );
            // The agent container, and an init container beside the gate (if any).
            let inits = pod_spec(&clean.deployment)
                .unwrap()
                .init_containers
                .as_ref()
                .map_or(0, Vec::len);
            for (context, field) in container_cases() {
                let mut agent = clean.clone();
                set_security_context(&mut agent_pod(&mut agent).containers[0], &context);
                let case = format!("{placement:?} agent container {context}");
                let path = format!("containers[0].{field}");
                assert_reaches_node(verdict_for(placement, &servers, &agent), &path, &case);

                let mut init = clean.clone();
                let mut extra = Container {
                    name: "extra".to_owned(),
                    ..Container::default()
                };
                set_security_context(&mut extra, &context);
                agent_pod(&mut init)
                    .init_containers
                    .get_or_insert_default()
                    .push(extra);
                let case = format!("{placement:?} init container {context}");
                let path = format!("initContainers[{inits}].{field}");
                assert_reaches_node(verdict_for(placement, &servers, &init), &path, &case);
                checked += 2;
            }
            let volumes = pod_spec(&clean.deployment)
                .unwrap()
                .volumes
                .as_ref()
                .map_or(0, Vec::len);
            for (patch, field) in pod_cases(volumes) {
                let mut pod = clean.clone();
                patch_pod(agent_pod(&mut pod), &patch);
                let case = format!("{placement:?} pod {patch}");
                assert_reaches_node(verdict_for(placement, &servers, &pod), &field, &case);
                checked += 1;
            }
        }
        assert_eq!(
            checked,
            2 * (2 * (2 + 3 * node_access::NODE_CAPABILITIES.len()) + 7)
        );
    }

    #[test]
    fn the_gate_containers_own_fields_and_weaker_settings_keep_the_verdict() {
        let servers = credentialed();
        let clean = rendered(GatePlacement::Sidecar);
        // The gate sidecar itself is not the agent.
        let mut gate_privileged = clean.clone();
        set_security_context(
            &mut agent_pod(&mut gate_privileged)
                .init_containers
                .as_mut()
                .unwrap()[0],
            &serde_json::json!({"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}}),
        );
        assert_eq!(
            pod_spec(&gate_privileged.deployment)
                .unwrap()
                .init_containers
                .as_ref()
                .unwrap()[0]
                .name,
            GATE_CONTAINER
        );
        let found = verdict_for(GatePlacement::Sidecar, &servers, &gate_privileged).unwrap();
        assert_eq!(found.reason, "CredentialsOnlyInGate");
        // What is weaker than a way to the node is not counted (docs/placement.md).
        for context in [
            serde_json::json!({"allowPrivilegeEscalation": true}),
            serde_json::json!({"seccompProfile": {"type": "Unconfined"}}),
            serde_json::json!({"appArmorProfile": {"type": "Unconfined"}}),
            serde_json::json!({"procMount": "Unmasked"}),
            serde_json::json!({"privileged": false, "runAsUser": 0}),
            serde_json::json!({"capabilities": {"add": ["NET_ADMIN", "NET_RAW", "DAC_OVERRIDE", "CHOWN", "SYS_CHROOT", "MKNOD"]}}),
        ] {
            let mut agent = clean.clone();
            set_security_context(&mut agent_pod(&mut agent).containers[0], &context);
            let found = verdict_for(GatePlacement::Sidecar, &servers, &agent).unwrap();
            assert_eq!(found.reason, "CredentialsOnlyInGate", "{context}");
        }
        let mut pod = clean.clone();
        patch_pod(
            agent_pod(&mut pod),
            &serde_json::json!({"hostPID": false, "hostNetwork": false, "volumes": [{"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}}]}),
        );
        let found = verdict_for(GatePlacement::Sidecar, &servers, &pod).unwrap();
        assert_eq!(found.reason, "CredentialsOnlyInGate");
    }

    #[test]
    fn gateway_says_the_node_holds_a_gate_pods_volumes_and_escapes_the_policies() {
        let servers = credentialed();
        let mut pod = rendered(GatePlacement::Gateway);
        patch_pod(
            agent_pod(&mut pod),
            &serde_json::json!({"hostNetwork": true}),
        );
        let found = verdict_for(GatePlacement::Gateway, &servers, &pod).unwrap();
        assert!(
            found
                .message
                .contains("the volumes of a gate pod on the same node"),
            "{}",
            found.message
        );
        assert!(
            found
                .message
                .contains("not confined by the NetworkPolicies")
        );
    }
}
