//! Whether the agent can reach its gated tool servers only through the gate: the
//! `GateIsolated` condition, computed from what was rendered (pure).
//!
//! In Sidecar placement the agent container shares the gate's network, so the only thing
//! between it and a server is a credential that only gate.json holds. In Gateway placement
//! the egress NetworkPolicy closes the cluster's own addresses to the agent pods, but not the
//! world outside: a server outside the cluster is protected only by a credential again.

use crate::api::GatePlacement;
use crate::api::agent::ToolServerKind;
use crate::gate::config::GateServer;
use crate::render::network::{Cidr, host_in_cluster};
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

/// The verdict for an Agent whose gate guards `servers`; `None` when no server has a tool
/// that requires approval or that a rule may hold or deny (there is nothing to go around).
pub fn isolation(
    placement: GatePlacement,
    servers: &[GateServer],
    gate_service: &str,
    cluster_cidrs: &[Cidr],
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

    use super::*;
    use crate::api::remote_mcp_server::McpProtocol;
    use crate::render::config::McpParams;
    use crate::render::network::default_cluster_cidrs;

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
        }
    }

    fn verdict(placement: GatePlacement, servers: &[GateServer]) -> Option<Isolation> {
        isolation(placement, servers, "a-gate", &default_cluster_cidrs())
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
}
