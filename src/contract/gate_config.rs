//! `gate.json`: what the approval gate sidecar enforces. Rendered by the controller into the
//! agent's Secret and mounted only into the gate container.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::agent::{ApprovalMode, RuleAction, RuleEdits, ToolServerKind};
use crate::api::approval_request::PolicyKind;
use crate::api::remote_mcp_server::McpProtocol;
use crate::contract::agent_config::McpParams;

/// Address the gate serves MCP on, inside the pod only (Sidecar placement).
pub const GATE_LISTEN: &str = "127.0.0.1:8099";
/// Address the gate serves MCP on in Gateway placement: every interface, for the Service.
pub const GATEWAY_LISTEN: &str = "0.0.0.0:8099";
/// Port of [`GATE_LISTEN`] and [`GATEWAY_LISTEN`].
pub const GATE_PORT: i32 = 8099;
/// Address of the gate's `/healthz` and `/metrics` (reachable by the kubelet and Prometheus).
pub const GATE_METRICS_LISTEN: &str = "0.0.0.0:9099";
/// Port of [`GATE_METRICS_LISTEN`].
pub const GATE_METRICS_PORT: i32 = 9099;
/// Open ApprovalRequests an agent may hold when neither its Agent nor the operator says
/// otherwise (docs/gate.md, "Open-request cap"): a few MB of etcd per agent at most, by what
/// etcd holds for a request with the largest preview (docs/performance.md#current-figures).
pub const DEFAULT_MAX_OPEN_REQUESTS: u32 = 50;

/// The whole gate configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GateConfig {
    /// The agent the gate works for.
    pub agent: AgentIdentity,
    /// Approval settings of the agent.
    pub approval: GateApproval,
    /// Where the gate serves MCP (`host:port`).
    pub listen: String,
    /// Where the gate serves `/healthz` and `/metrics`.
    pub metrics_listen: String,
    /// One entry per tool server of the agent.
    pub servers: Vec<GateServer>,
    /// Set on a shared gate (ToolGate): every call must carry a caller identity the apiserver
    /// verifies; absent on an Agent's gate, whose only caller is the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callers: Option<CallerPolicy>,
}

/// How a shared gate knows, and limits, who calls.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct CallerPolicy {
    /// A caller's bearer token must be valid for one of these audiences (TokenReview's
    /// `spec.audiences`); a token of any other audience is refused.
    pub audiences: Vec<String>,
    /// Only these usernames may call; empty: any (with `groups` empty too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Only members of these groups may call; empty: any (with `users` empty too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Calls (`tools/call`) one caller may make per minute; absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls_per_minute: Option<u32>,
}

/// Identity of the object whose policy the gate enforces: an Agent, or a ToolGate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct AgentIdentity {
    /// `Agent` (when absent) or `ToolGate`.
    #[serde(default, skip_serializing_if = "is_agent")]
    pub kind: PolicyKind,
    /// Namespace of the Agent or ToolGate (and of its ApprovalRequests).
    pub namespace: String,
    /// Name of the Agent or ToolGate.
    pub name: String,
    /// UID of the Agent, for owner references on ApprovalRequests.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// ServiceAccount the pod runs as; `requestedBy` is
    /// `system:serviceaccount:<namespace>:<service_account>`.
    pub service_account: String,
}

impl AgentIdentity {
    /// The username the gate acts as, `system:serviceaccount:<namespace>:<service_account>`:
    /// the `requestedBy` of the requests it creates.
    pub fn requester(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }
}

/// Approval settings as the gate applies them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GateApproval {
    /// Gate or Both (the gate does not run in Runtime mode).
    pub mode: ApprovalMode,
    /// Seconds an ApprovalRequest can be decided before it expires.
    pub timeout_seconds: f64,
    /// Seconds the gate holds a gated call open waiting for the decision.
    pub wait_timeout_seconds: f64,
    /// Seconds finished requests are kept (the controller deletes them after that).
    pub ttl_after_finished_seconds: f64,
    /// Longest lifetime, in seconds after its creation, of an ApprovalGrant the gate honours;
    /// absent: grants are off and every gated call asks a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_max_ttl_seconds: Option<f64>,
    /// Open ApprovalRequests (Pending, or Approved and not yet used) the agent (on a shared
    /// gate: each caller) may hold; at the cap, a call that would create another is refused. Absent in the gate.json of older
    /// controllers: [`DEFAULT_MAX_OPEN_REQUESTS`].
    #[serde(default = "default_max_open_requests")]
    pub max_open_requests: u32,
    // Issue 60, deadlines that escalate.
    /// The Agent's escalation, checked against the timeout; the gate copies it into each
    /// request with absolute instants. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<crate::api::escalation::Escalation>,
}

fn is_agent(kind: &PolicyKind) -> bool {
    *kind == PolicyKind::Agent
}

fn default_max_open_requests() -> u32 {
    DEFAULT_MAX_OPEN_REQUESTS
}

/// One upstream tool server and the policy for its tools.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GateServer {
    /// Namespace of the tool server object.
    pub namespace: String,
    /// Name of the tool server object.
    pub name: String,
    /// Kind of the tool server object.
    pub kind: ToolServerKind,
    /// Transport of the upstream.
    pub protocol: McpProtocol,
    /// Path the gate serves this server on: `/servers/<namespace>/<name>/mcp`.
    pub route: String,
    /// The real upstream URL, headers (credentials included) and timeouts.
    pub params: McpParams,
    /// Tools listed and callable; every other tool is hidden and refused.
    pub tools: Vec<String>,
    /// Tools of this server whose calls need an approved ApprovalRequest.
    #[serde(default)]
    pub require_approval: Vec<String>,
    /// Headers the runtime forwards from its caller (informational for the gate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<String>,
    /// The Agent's approval rules that apply to this server, in the Agent's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<GateRule>,
    /// Whether the server is trusted to assert its tools' MCP annotations (its
    /// RemoteMCPServer's, or an inline ToolGate server's, `trustToolAnnotations`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trust_tool_annotations: bool,
    /// The tool definitions accepted on the tool server object (tool name -> definition
    /// SHA-256). Empty: the gate accepts the definitions it lists first.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub accepted_tools: BTreeMap<String, String>,
}

/// One approval rule as the gate applies it to a server's calls (docs/policies.md).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GateRule {
    /// Name of the rule in the Agent.
    pub name: String,
    /// The tool it is about.
    pub tool: String,
    /// CEL condition; unset: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// What happens to a matching call.
    pub action: RuleAction,
    /// Distinct approvals a matching call needs (the request's `requiredApprovals`).
    pub required_approvals: u32,
    /// What approvers may edit of the calls the rule made wait; unset: anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edits: Option<RuleEdits>,
    /// The escalation of the requests the rule makes, in place of the approval's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<crate::api::escalation::Escalation>,
}

impl GateServer {
    /// The gate route of a tool server.
    pub fn route_for(namespace: &str, name: &str) -> String {
        format!("/servers/{namespace}/{name}/mcp")
    }

    /// Whether calls of `tool` on this server need approval when no rule decides.
    pub fn requires_approval(&self, tool: &str) -> bool {
        self.require_approval.iter().any(|t| t == tool)
    }

    /// Whether `tool` may be listed and called at all.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }

    /// The tools whose calls the gate may hold or refuse although they are offered: those in
    /// `require_approval` and those of rules that can do more than allow, without repeats.
    pub fn restricted_tools(&self) -> Vec<&str> {
        let mut tools: Vec<&str> = self.require_approval.iter().map(String::as_str).collect();
        for rule in self.rules.iter().filter(|r| r.restricts()) {
            if !tools.contains(&rule.tool.as_str()) {
                tools.push(&rule.tool);
            }
        }
        tools
    }
}

impl GateRule {
    /// Whether a call matching the rule can wait for an approval: it requires one, or its
    /// condition may fail to evaluate.
    pub fn may_ask(&self) -> bool {
        self.action == RuleAction::RequireApproval || self.when.is_some()
    }

    /// Whether the rule can hold or refuse a call (anything but an unconditional Allow).
    pub fn restricts(&self) -> bool {
        self.may_ask() || self.action == RuleAction::Deny
    }
}
