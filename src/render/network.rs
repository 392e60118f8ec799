//! The network side of Gateway placement: the cluster's internal address ranges, whether a
//! tool server's host is inside the cluster, and the two NetworkPolicies that leave the agent
//! pods no path to in-cluster tool servers except through the gate.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cidr::Cidr;

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
/// namespace) and `<agent>-egress` (Egress of the agent pods: the gate, DNS, and addresses
/// outside the cluster CIDRs; IPv6 only when an IPv6 cluster CIDR is given).
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
            egress: Some(vec![
                NetworkPolicyEgressRule {
                    to: Some(vec![pods(&inputs.gate_pods)]),
                    ports: Some(vec![tcp(inputs.gate_port)]),
                },
                NetworkPolicyEgressRule {
                    to: Some(vec![any_namespace()]),
                    ports: Some(vec![port_of("UDP", 53), tcp(53)]),
                },
                NetworkPolicyEgressRule {
                    to: Some(outside_cluster),
                    ports: None,
                },
            ]),
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
}
