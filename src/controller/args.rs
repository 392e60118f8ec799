//! Flags of `hitl-operator controller`, and what is checked and derived from them at start-up.

use std::net::SocketAddr;

use kube::Client;
use kube::api::ListParams;

use super::token_review::TokenReviewBinding;
use super::watches::api;
use crate::api::{Agent, ApprovalMode, GatePlacement};
use crate::cidr::Cidr;
use crate::cli::logging::LogFormat;
use crate::contract::gate_config::DEFAULT_MAX_OPEN_REQUESTS;
use crate::contract::session_store::DEFAULT_SESSION_STORE_URL;
use crate::render::network::default_cluster_cidrs;
use crate::render::proxy::ProxyUrl;
use crate::render::session_api::SessionApiUrl;
use crate::render::skills::DEFAULT_SKILLS_INIT_IMAGE;
use crate::render::{
    DEFAULT_AGENT_IMAGE, DEFAULT_GATE_IMAGE, DEFAULT_GRANT_MAX_TTL, GrantMaxTtl, RenderOptions,
};
use crate::{Error, Result};

/// Flags of `hitl-operator controller` (each with an environment fallback).
#[derive(clap::Args, Clone, Debug)]
pub struct ControllerArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Reconcile only the Agents matching this label selector (default: every Agent), for
    /// example `kagent.dev/controller=hitl-operator` when kagent runs in the same namespaces.
    #[arg(long, env = "AGENT_SELECTOR")]
    pub agent_selector: Option<String>,
    /// Approval mode of Agents that set none.
    #[arg(
        long,
        env = "DEFAULT_APPROVAL_MODE",
        value_enum,
        ignore_case = true,
        default_value = "Gate"
    )]
    pub default_approval_mode: ApprovalMode,
    /// Gate placement of Agents that set none: Sidecar, or Gateway where the cluster's network
    /// plugin enforces NetworkPolicies (docs/placement.md, "The default").
    #[arg(
        long,
        env = "DEFAULT_PLACEMENT",
        value_enum,
        ignore_case = true,
        default_value = "Sidecar"
    )]
    pub default_placement: GatePlacement,
    /// Agent runtime image.
    #[arg(long, env = "AGENT_IMAGE", default_value = DEFAULT_AGENT_IMAGE)]
    pub agent_image: String,
    /// Approval gate sidecar image.
    #[arg(long, env = "GATE_IMAGE", default_value = DEFAULT_GATE_IMAGE)]
    pub gate_image: String,
    /// The cluster's internal address ranges (pod, Service and node CIDRs), comma-separated or
    /// repeated: closed to agent pods in Gateway placement.
    #[arg(
        long,
        env = "CLUSTER_CIDRS",
        value_delimiter = ',',
        default_values_t = default_cluster_cidrs()
    )]
    pub cluster_cidrs: Vec<Cidr>,
    /// kagent's proxy for in-cluster tool servers and agents, such as
    /// `http://proxy.kagent.svc.cluster.local:8080`. Where a gate runs, only the gate's calls
    /// to servers use it; config.json keeps pointing gated servers at the gate.
    #[arg(long, env = "PROXY_URL")]
    pub proxy_url: Option<ProxyUrl>,
    /// hitl-operator's session store (`hitl-operator sessions`), which keeps every Agent's
    /// conversations: the runtime's `KAGENT_URL` unless --kagent-url is set. The default is
    /// the store the chart installs as `helm install hitl charts/hitl-operator -n hitl-system`.
    #[arg(long, env = "SESSION_STORE_URL", default_value = DEFAULT_SESSION_STORE_URL)]
    pub session_store_url: SessionApiUrl,
    /// A kagent controller that serves the agent runtime's sessions and tasks instead of the
    /// session store (its `KAGENT_URL`), such as `http://kagent-controller.kagent:8083`
    /// (docs/kagent.md, "Sessions and tasks").
    #[arg(long, env = "KAGENT_CONTROLLER_URL")]
    pub kagent_url: Option<SessionApiUrl>,
    /// kagent's gRPC controller API (`host:port`), rendered as `KAGENT_GRPC_URL` for the
    /// runtimes that need it (kagent-adk 0.10 and later). Unset: not rendered.
    #[arg(long, env = "KAGENT_CONTROLLER_GRPC_URL")]
    pub kagent_grpc_url: Option<String>,
    /// Image of the init container that fetches an Agent's skills.
    #[arg(long, env = "SKILLS_INIT_IMAGE", default_value = DEFAULT_SKILLS_INIT_IMAGE)]
    pub skills_init_image: String,
    /// Render Agents whose pods can reach the node (privileged, node capabilities, host
    /// namespaces, hostPath) in approval modes Gate and Both, reporting `GateIsolated=False,
    /// AgentReachesNode`, instead of refusing them: the gate can be bypassed
    /// (docs/placement.md, "Node access").
    #[arg(
        long,
        env = "ALLOW_AGENT_NODE_ACCESS",
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub allow_agent_node_access: bool,
    /// Longest lifetime of an ApprovalGrant (`expiresAt` after its creation) the gates
    /// honour, such as 24h; `off` turns grants off: every gated call asks a person.
    #[arg(long, env = "GRANT_MAX_TTL", default_value = DEFAULT_GRANT_MAX_TTL)]
    pub grant_max_ttl: GrantMaxTtl,
    /// Open ApprovalRequests (Pending, or Approved and not yet used) an Agent may hold when
    /// it sets no `spec.declarative.approval.maxOpenRequests`, 1 to 1000.
    #[arg(
        long,
        env = "DEFAULT_MAX_OPEN_REQUESTS",
        default_value_t = DEFAULT_MAX_OPEN_REQUESTS,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub default_max_open_requests: u32,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Log format.
    #[arg(
        long,
        env = "LOG_FORMAT",
        value_enum,
        ignore_case = true,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Run only while holding the Lease, so several replicas are safe.
    #[arg(long, env = "LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "LEASE_NAME", default_value = "hitl-operator")]
    pub lease_name: String,
    /// Namespace of the Lease (default: --namespace, else the kubeconfig's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Serve Slack interactions (the Approve and Deny buttons of Slack notifiers) on this
    /// address, at /slack/interactions (unset: off). docs/approvers.md.
    #[arg(long, env = "SLACK_INTERACTIONS_ADDR", requires_all = ["slack_signing_secret_file", "slack_users_file"])]
    pub slack_interactions_addr: Option<SocketAddr>,
    /// File holding the Slack app's signing secret.
    #[arg(long, env = "SLACK_SIGNING_SECRET_FILE")]
    pub slack_signing_secret_file: Option<std::path::PathBuf>,
    /// File mapping Slack user IDs to the Kubernetes users they act as (YAML:
    /// `U0123ABCD: {user: alice, groups: [approvers]}`).
    #[arg(long, env = "SLACK_USERS_FILE")]
    pub slack_users_file: Option<std::path::PathBuf>,
    /// Replies go only to Slack response URLs that start with this.
    #[arg(
        long,
        env = "SLACK_RESPONSE_URL_PREFIX",
        default_value = "https://hooks.slack.com/"
    )]
    pub slack_response_url_prefix: String,
    /// Loopback, link-local and unspecified addresses notifier messages may go to after all
    /// (CIDRs, comma-separated or repeated; default: none). Anything else is allowed.
    #[arg(long, env = "NOTIFIER_ALLOW_CIDRS", value_delimiter = ',')]
    pub notifier_allow_cidrs: Vec<Cidr>,
    /// The ClusterRoleBinding the controller keeps, binding the ServiceAccount of every
    /// ToolGate's gate to `--token-review-role` (TokenReview, to verify its callers). Unset:
    /// none is kept, and ToolGates' gates can verify no caller unless bound otherwise.
    #[arg(long, env = "TOKEN_REVIEW_BINDING", requires = "token_review_role")]
    pub token_review_binding: Option<String>,
    /// The ClusterRole (create on tokenreviews) that `--token-review-binding` binds.
    #[arg(long, env = "TOKEN_REVIEW_ROLE", requires = "token_review_binding")]
    pub token_review_role: Option<String>,
}

impl ControllerArgs {
    /// Refuses to start with an `--agent-selector` the apiserver cannot parse (one list of at
    /// most one Agent's metadata), rather than watching with it and failing forever.
    pub(super) async fn check_agent_selector(&self, client: &Client) -> Result<()> {
        let Some(selector) = &self.agent_selector else {
            return Ok(());
        };
        let params = ListParams::default().labels(selector).limit(1);
        match api::<Agent>(client, self.namespace.as_deref())
            .list_metadata(&params)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 400 => Err(Error::InvalidSpec {
                object: "hitl-operator controller".into(),
                field: "--agent-selector".into(),
                message: format!("{selector:?}: {}", status.message),
            }),
            Err(error) => Err(error.into()),
        }
    }

    /// The renderer's settings these flags choose.
    /// The ClusterRoleBinding of ToolGates' gates to keep, if one is set.
    pub(super) fn token_review(&self) -> Option<TokenReviewBinding> {
        Some(TokenReviewBinding {
            name: self.token_review_binding.clone()?,
            role: self.token_review_role.clone()?,
        })
    }

    pub(super) fn render_options(&self) -> RenderOptions {
        RenderOptions {
            default_approval_mode: self.default_approval_mode,
            default_placement: self.default_placement,
            agent_image: self.agent_image.clone(),
            gate_image: self.gate_image.clone(),
            cluster_cidrs: self.cluster_cidrs.clone(),
            proxy_url: self.proxy_url.clone(),
            skills_init_image: self.skills_init_image.clone(),
            grant_max_ttl: self.grant_max_ttl.0,
            max_open_requests: self.default_max_open_requests,
            session_store_url: self.session_store_url.clone(),
            kagent_url: self.kagent_url.clone(),
            kagent_grpc_url: self.kagent_grpc_url.clone(),
            allow_agent_node_access: self.allow_agent_node_access,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    #[test]
    fn flags_have_the_documented_defaults_and_spellings() {
        let args = Cli::try_parse_from(["controller"]).unwrap().args;
        assert_eq!(args.default_approval_mode, ApprovalMode::Gate);
        assert_eq!(args.default_placement, GatePlacement::Sidecar);
        assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:8080");
        assert!(args.leader_election);
        assert_eq!(args.lease_name, "hitl-operator");
        assert!(args.gate_image.ends_with(env!("CARGO_PKG_VERSION")));
        assert_eq!(args.cluster_cidrs, default_cluster_cidrs());
        assert!(args.notifier_allow_cidrs.is_empty());
        assert!(!args.allow_agent_node_access);
        assert!(!args.render_options().allow_agent_node_access);
        for allowed in [
            &["--allow-agent-node-access"][..],
            &["--allow-agent-node-access=true"],
        ] {
            let args = Cli::try_parse_from([&["controller"][..], allowed].concat())
                .unwrap()
                .args;
            assert!(args.render_options().allow_agent_node_access, "{allowed:?}");
        }
        let refused = Cli::try_parse_from(["controller", "--allow-agent-node-access=false"])
            .unwrap()
            .args;
        assert!(!refused.render_options().allow_agent_node_access);
        assert_eq!(
            args.session_store_url.to_string(),
            "http://hitl-sessions.hitl-system.svc:8083"
        );
        assert_eq!(args.kagent_url, None);
        let store = Cli::try_parse_from([
            "controller",
            "--session-store-url",
            "http://sessions.hitl.svc.cluster.local:8083/",
        ])
        .unwrap()
        .args
        .session_store_url;
        assert_eq!(
            store.to_string(),
            "http://sessions.hitl.svc.cluster.local:8083"
        );
        assert!(
            Cli::try_parse_from(["controller", "--session-store-url", "http://x:8083/api"])
                .is_err(),
            "an address only: the runtime adds /api/..."
        );
        let args = Cli::try_parse_from([
            "controller",
            "--default-approval-mode",
            "Both",
            "--default-placement",
            "gateway",
            "--leader-election=false",
            "--log-format",
            "json",
            "--namespace",
            "demo",
            "--cluster-cidrs",
            "10.0.0.0/8,fd00::/8",
            "--cluster-cidrs=100.64.0.0/10",
            "--notifier-allow-cidrs",
            "127.0.0.0/8,::1/128",
        ])
        .unwrap()
        .args;
        assert_eq!(
            args.cluster_cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["10.0.0.0/8", "fd00::/8", "100.64.0.0/10"]
        );
        assert_eq!(
            args.notifier_allow_cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["127.0.0.0/8", "::1/128"]
        );
        assert!(
            Cli::try_parse_from(["controller", "--cluster-cidrs", "10.0.0.1/8"]).is_err(),
            "host bits are refused"
        );
        assert!(
            Cli::try_parse_from(["controller", "--notifier-allow-cidrs", "localhost"]).is_err(),
            "only CIDRs"
        );
        assert_eq!(args.default_approval_mode, ApprovalMode::Both);
        assert_eq!(args.default_placement, GatePlacement::Gateway);
        assert!(!args.leader_election);
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.namespace.as_deref(), Some("demo"));
    }
}
