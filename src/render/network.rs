//! The network side of Gateway placement: the cluster's internal address ranges, whether a
//! tool server's host is inside the cluster, and the two NetworkPolicies that leave the agent
//! pods no path to in-cluster tool servers except through the gate (and no in-cluster path
//! at all but to the gate, DNS and the runtime's session API).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cidr::Cidr;

/// The label every Namespace carries with its own name (set by the apiserver).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The cluster CIDRs assumed when none are given: the RFC 1918 private ranges.
pub const DEFAULT_CLUSTER_CIDRS: [&str; 3] = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];

/// [`DEFAULT_CLUSTER_CIDRS`], parsed.
pub fn default_cluster_cidrs() -> Vec<Cidr> {
    DEFAULT_CLUSTER_CIDRS
        .iter()
        .map(|text| text.parse().expect("default CIDRs are valid"))
        .collect()
}

/// Whether the host of `url` is inside the cluster: a Service name (`*.svc`,
/// `*.svc.cluster.local`) or an IP address in `cluster_cidrs`. Short names (`fs`, `fs.ns`)
/// are not counted: outside the cluster's DNS search path they can mean anything.
pub fn host_in_cluster(url: &str, cluster_cidrs: &[Cidr]) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_ascii_lowercase))
    else {
        return false;
    };
    match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => cluster_cidrs.iter().any(|cidr| cidr.contains(ip)),
        Err(_) => {
            let domain = host.trim_end_matches('.');
            domain.ends_with(".svc") || domain.ends_with(".svc.cluster.local")
        }
    }
}

/// What the two policies are built from.
pub struct PolicyInputs<'a> {
    /// Metadata of the gate's policy (`<agent>-gate`).
    pub gate_metadata: ObjectMeta,
    /// Metadata of the agent's policy (`<agent>-egress`).
    pub egress_metadata: ObjectMeta,
    /// Labels selecting the agent pods.
    pub agent_pods: BTreeMap<String, String>,
    /// Labels selecting the gate pods.
    pub gate_pods: BTreeMap<String, String>,
    /// Port the gate serves MCP on.
    pub gate_port: i32,
    /// Port of the gate's `/healthz` and `/metrics`.
    pub metrics_port: i32,
    /// The cluster's internal ranges, closed to the agent pods.
    pub cluster_cidrs: &'a [Cidr],
    /// The rule that lets the agent pods reach their runtime's session API in the cluster
    /// ([`egress_to_service`]); `None` when it is outside.
    pub session_api: Option<NetworkPolicyEgressRule>,
}

/// The namespace of the Service a URL's host names as the pod's DNS resolves it
/// (`<service>.<namespace>`, optionally followed by `.svc` or `.svc.cluster.local`); `None`
/// for any other host.
fn service_namespace(host: &str) -> Option<&str> {
    let domain = host.trim_end_matches('.');
    let short = domain
        .strip_suffix(".svc.cluster.local")
        .or_else(|| domain.strip_suffix(".svc"))
        .unwrap_or(domain);
    match short.split('.').collect::<Vec<_>>()[..] {
        [service, namespace] if !service.is_empty() && !namespace.is_empty() => Some(namespace),
        _ => None,
    }
}

/// The egress rule that lets pods reach the in-cluster service at `url`, on the URL's port
/// (`default_port` when it names none; the port the service's pods listen on): a Service's
/// pods (`<service>.<namespace>[.svc[.cluster.local]]`) as those of its namespace, carrying
/// the label `pods` when given; an IP address in `cluster_cidrs` as itself. `None` for any
/// other host: the rule for addresses outside the cluster already lets pods reach it.
pub fn egress_to_service(
    url: &str,
    default_port: u16,
    pods: Option<(&str, &str)>,
    cluster_cidrs: &[Cidr],
) -> Option<NetworkPolicyEgressRule> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?.to_ascii_lowercase();
    let port = i32::from(url.port().unwrap_or(default_port));
    let peer = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) if cluster_cidrs.iter().any(|cidr| cidr.contains(ip)) => NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 }),
                except: None,
            }),
            ..NetworkPolicyPeer::default()
        },
        Ok(_) => return None,
        Err(_) => NetworkPolicyPeer {
            namespace_selector: Some(selector(&BTreeMap::from([(
                NAMESPACE_NAME_LABEL.to_owned(),
                service_namespace(&host)?.to_owned(),
            )]))),
            pod_selector: pods.map(|(label, value)| {
                selector(&BTreeMap::from([(label.to_owned(), value.to_owned())]))
            }),
            ..NetworkPolicyPeer::default()
        },
    };
    Some(NetworkPolicyEgressRule {
        to: Some(vec![peer]),
        ports: Some(vec![tcp(port)]),
    })
}

fn tcp(port: i32) -> NetworkPolicyPort {
    port_of("TCP", port)
}

fn port_of(protocol: &str, port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.to_owned()),
        port: Some(IntOrString::Int(port)),
        end_port: None,
    }
}

fn pods(labels: &BTreeMap<String, String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(labels.clone()),
            match_expressions: None,
        }),
        ..NetworkPolicyPeer::default()
    }
}

fn any_namespace() -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector::default()),
        ..NetworkPolicyPeer::default()
    }
}

fn selector(labels: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels.clone()),
        match_expressions: None,
    }
}

/// Everything but `cluster_cidrs` of one address family.
fn outside(all: &str, cluster_cidrs: &[Cidr], ipv4: bool) -> NetworkPolicyPeer {
    let except: Vec<String> = cluster_cidrs
        .iter()
        .filter(|cidr| cidr.is_ipv4() == ipv4)
        .map(ToString::to_string)
        .collect();
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: all.to_owned(),
            except: (!except.is_empty()).then_some(except),
        }),
        ..NetworkPolicyPeer::default()
    }
}

/// `<agent>-gate` (Ingress to the gate pods: MCP from the agent pods only, metrics from any
/// namespace) and `<agent>-egress` (Egress of the agent pods: the gate, DNS, the session API
/// when it is in the cluster, and addresses outside the cluster CIDRs; IPv6 only when an IPv6
/// cluster CIDR is given).
pub fn policies(inputs: PolicyInputs<'_>) -> [NetworkPolicy; 2] {
    let gate = NetworkPolicy {
        metadata: inputs.gate_metadata,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(&inputs.gate_pods)),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    from: Some(vec![pods(&inputs.agent_pods)]),
                    ports: Some(vec![tcp(inputs.gate_port)]),
                },
                NetworkPolicyIngressRule {
                    from: Some(vec![any_namespace()]),
                    ports: Some(vec![tcp(inputs.metrics_port)]),
                },
            ]),
            egress: None,
        }),
    };
    let mut outside_cluster = vec![outside("0.0.0.0/0", inputs.cluster_cidrs, true)];
    if inputs.cluster_cidrs.iter().any(|cidr| !cidr.is_ipv4()) {
        outside_cluster.push(outside("::/0", inputs.cluster_cidrs, false));
    }
    let egress = NetworkPolicy {
        metadata: inputs.egress_metadata,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(&inputs.agent_pods)),
            policy_types: Some(vec!["Egress".to_owned()]),
            ingress: None,
            egress: Some(
                [
                    Some(NetworkPolicyEgressRule {
                        to: Some(vec![pods(&inputs.gate_pods)]),
                        ports: Some(vec![tcp(inputs.gate_port)]),
                    }),
                    Some(NetworkPolicyEgressRule {
                        to: Some(vec![any_namespace()]),
                        ports: Some(vec![port_of("UDP", 53), tcp(53)]),
                    }),
                    inputs.session_api,
                    Some(NetworkPolicyEgressRule {
                        to: Some(outside_cluster),
                        ports: None,
                    }),
                ]
                .into_iter()
                .flatten()
                .collect(),
            ),
        }),
    };
    [gate, egress]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(texts: &[&str]) -> Vec<Cidr> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    #[test]
    fn only_service_names_and_cluster_ips_are_in_cluster() {
        let cluster = default_cluster_cidrs();
        for url in [
            "http://fs.tools.svc:3000/mcp",
            "http://fs.tools.svc.cluster.local/mcp",
            "http://FS.TOOLS.SVC.cluster.local./mcp",
            "http://10.96.0.12:8080/mcp",
            "https://192.168.1.5/mcp",
        ] {
            assert!(host_in_cluster(url, &cluster), "{url}");
        }
        for url in [
            "https://mcp.example.com/mcp",
            "http://fs.tools:3000/mcp",
            "http://fs/mcp",
            "http://8.8.8.8/mcp",
            "http://[fd00::1]/mcp",
            "not a url",
        ] {
            assert!(!host_in_cluster(url, &cluster), "{url}");
        }
        assert!(host_in_cluster(
            "http://[fd00::1]/mcp",
            &cidrs(&["fd00::/8"])
        ));
    }

    #[test]
    fn ipv6_egress_is_opened_only_with_an_ipv6_cluster_cidr() {
        let labels = BTreeMap::from([("k".to_owned(), "v".to_owned())]);
        let build = |cluster: &[Cidr]| {
            let [_, egress] = policies(PolicyInputs {
                gate_metadata: ObjectMeta::default(),
                egress_metadata: ObjectMeta::default(),
                agent_pods: labels.clone(),
                gate_pods: labels.clone(),
                gate_port: 8099,
                metrics_port: 9099,
                cluster_cidrs: cluster,
                session_api: None,
            });
            serde_json::to_value(egress).unwrap()["spec"]["egress"][2]["to"].clone()
        };
        assert_eq!(
            build(&default_cluster_cidrs()),
            serde_json::json!([{"ipBlock": {"cidr": "0.0.0.0/0",
                "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]}}])
        );
        assert_eq!(
            build(&cidrs(&["10.0.0.0/8", "fd00::/8"])),
            serde_json::json!([
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}},
                {"ipBlock": {"cidr": "::/0", "except": ["fd00::/8"]}},
            ])
        );
    }

    #[test]
    fn a_service_in_the_cluster_is_reached_by_namespace_and_label_on_its_port() {
        let store = ("app.kubernetes.io/component", "session-store");
        let rule = |url: &str, pods| {
            serde_json::to_value(egress_to_service(url, 8083, pods, &default_cluster_cidrs()))
                .unwrap()
        };
        let in_namespace = |namespace: &str, port: i32| {
            serde_json::json!({
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/component": "session-store"}},
                }],
                "ports": [{"protocol": "TCP", "port": port}],
            })
        };
        for (url, port) in [
            ("http://hitl-sessions.hitl-system.svc:8083", 8083),
            ("http://hitl-sessions.hitl-system.svc.cluster.local", 8083),
            (
                "http://HITL-SESSIONS.hitl-system.svc.cluster.local.:9000",
                9000,
            ),
            ("http://hitl-sessions.hitl-system:8083", 8083),
        ] {
            assert_eq!(
                rule(url, Some(store)),
                in_namespace("hitl-system", port),
                "{url}"
            );
        }
        // A kagent controller: any pod of its namespace, on the API's port.
        assert_eq!(
            rule("http://kagent-controller.kagent:8083", None),
            serde_json::json!({
                "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kagent"}}}],
                "ports": [{"protocol": "TCP", "port": 8083}],
            })
        );
        assert_eq!(
            rule("http://10.96.4.7:8083", Some(store)),
            serde_json::json!({
                "to": [{"ipBlock": {"cidr": "10.96.4.7/32"}}],
                "ports": [{"protocol": "TCP", "port": 8083}],
            })
        );
        assert_eq!(
            serde_json::to_value(egress_to_service(
                "http://[fd00::7]",
                8083,
                None,
                &cidrs(&["fd00::/8"])
            ))
            .unwrap()["to"],
            serde_json::json!([{"ipBlock": {"cidr": "fd00::7/128"}}])
        );
        // Outside the cluster: the rule for outside addresses lets the pods reach it already.
        for url in [
            "https://sessions.example.com",
            "http://8.8.8.8:8083",
            "http://sessions:8083",
        ] {
            assert_eq!(rule(url, Some(store)), serde_json::Value::Null, "{url}");
        }
    }
}
