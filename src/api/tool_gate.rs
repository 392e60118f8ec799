//! The `ToolGate` kind: one shared approval gate in front of one MCP tool server, for every
//! client in the cluster (agents of any framework, IDE clients), which call the gate's URL
//! instead of the server's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::agent::ApprovalRule;
use super::common::{AcceptedToolDefinition, DURATION_PATTERN, ValueRef};
use super::remote_mcp_server::McpProtocol;

/// A policy on one MCP tool server, enforced by a shared gate: which tools are offered, which
/// need a person's approval, and who may call.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kagent.dev",
    version = "v1alpha2",
    kind = "ToolGate",
    plural = "toolgates",
    shortname = "tg",
    namespaced,
    status = "ToolGateStatus",
    cel,
    doc = "A shared approval gate in front of one MCP tool server, for every client in the cluster.",
    printcolumn = r#"{"name": "Server", "type": "string", "description": "The RemoteMCPServer, or the inline URL, behind the gate", "jsonPath": ".spec.server.remoteMCPServer"}"#,
    printcolumn = r#"{"name": "URL", "type": "string", "description": "The MCP URL of the server through the gate", "jsonPath": ".status.route"}"#,
    printcolumn = r#"{"name": "Accepted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Frozen", "type": "string", "priority": 1, "description": "Why the ToolGate's gated tools are stopped (hitl.kagent.dev/freeze)", "jsonPath": ".status.conditions[?(@.type==\"Frozen\")].message"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    // On the root, where the ToolGate's own name is known: the server of an inline url is
    // named after the ToolGate.
    // The gate's objects are named `<name>-gate` (a Service among them: a DNS-1035 label of
    // at most 63 characters) and labelled with the name: a longer or dotted name could make
    // none of them, and must not reach the controller (issue 54).
    validation = kube::core::Rule::new("size(self.metadata.name) <= 58 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("a ToolGate's name must be at most 58 characters of lower-case letters, digits and '-', starting with a letter and ending with a letter or digit: its gate's Service, Deployment and ServiceAccount are named <name>-gate"),
    validation = kube::core::Rule::new("!has(self.spec.approval) || !has(self.spec.approval.rules) || self.spec.approval.rules.all(r, !has(r.server) || r.server == (has(self.spec.server.remoteMCPServer) ? self.spec.server.remoteMCPServer : self.metadata.name))").field_path(".spec.approval.rules").message("a rule's server must be unset or name the ToolGate's server: spec.server.remoteMCPServer, or the ToolGate's own name when the server is an inline url")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.requireApproval) || self.requireApproval.all(x, x in self.toolNames)").message("each requireApproval entry must also appear in toolNames"))]
pub struct ToolGateSpec {
    /// The MCP server behind the gate: a RemoteMCPServer of this namespace, or an inline url.
    pub server: ToolGateServer,
    /// Tools listed and callable through the gate; every other tool of the server is hidden
    /// and refused.
    #[schemars(length(min = 1, max = 256), inner(length(min = 1, max = 128)), extend("x-kubernetes-list-type" = "set"))]
    pub tool_names: Vec<String>,
    /// Tools whose calls run only after a person approves their ApprovalRequest; each must be
    /// in `toolNames`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 128)), extend("x-kubernetes-list-type" = "set"))]
    pub require_approval: Vec<String>,
    /// How approvals work: timeouts, the cap on open requests, rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ToolGateApproval>,
    /// Who may call through the gate, and how often.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callers: Option<ToolGateCallers>,
    /// Settings of the gate's Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<ToolGateDeployment>,
}

/// The MCP server behind a ToolGate: exactly one of `remoteMCPServer` and `url`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("has(self.remoteMCPServer) != has(self.url)").message("exactly one of remoteMCPServer and url must be set"),
    validation = kube::core::Rule::new("has(self.url) || !(has(self.protocol) || has(self.headersFrom) || has(self.timeout) || has(self.sseReadTimeout))").message("protocol, headersFrom, timeout and sseReadTimeout go with an inline url only: a RemoteMCPServer brings its own"),
    validation = kube::core::Rule::new("has(self.url) || !has(self.trustToolAnnotations)").message("trustToolAnnotations goes with an inline url only: a RemoteMCPServer says itself whether its annotations are trusted"),
    validation = kube::core::Rule::new("has(self.url) || !has(self.acceptedToolDefinitions)").message("acceptedToolDefinitions goes with an inline url only: a RemoteMCPServer's accepted definitions are on it")
)]
pub struct ToolGateServer {
    /// Name of a RemoteMCPServer in the ToolGate's namespace; its url, protocol, headersFrom
    /// and timeouts are used.
    #[serde(
        default,
        rename = "remoteMCPServer",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 253))]
    pub remote_mcp_server: Option<String>,
    /// Endpoint of the server, for example `http://tools.default:8084/mcp`, when no
    /// RemoteMCPServer describes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), pattern(r"^https?://"))]
    pub url: Option<String>,
    /// Transport of an inline url: `STREAMABLE_HTTP` (default) or `SSE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<McpProtocol>,
    /// HTTP headers the gate sends to an inline url (inline or from Secrets/ConfigMaps of the
    /// ToolGate's namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub headers_from: Vec<ValueRef>,
    /// Timeout of HTTP requests to an inline url, such as `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// Timeout for reading SSE events from an inline url, such as `5m0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub sse_read_timeout: Option<String>,
    /// Whether an inline url's server is trusted to assert its tools' MCP annotations. Unset:
    /// not trusted (docs/policies.md, "Tool annotations").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_tool_annotations: Option<bool>,
    /// The tool definitions a person accepted for an inline url (a RemoteMCPServer's are on
    /// it): as a RemoteMCPServer's `acceptedToolDefinitions` (docs/policies.md, "Changed tool
    /// definitions").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub accepted_tool_definitions: Vec<AcceptedToolDefinition>,
}

/// Approval settings of a ToolGate: those of an Agent's `approval`, without mode and placement
/// (a ToolGate's gate always asks, and always runs on its own).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolGateApproval {
    /// How long an ApprovalRequest can be decided before it expires (default 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// How long the gate holds a tool call open waiting for the decision before answering
    /// "pending" (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub wait_timeout: Option<String>,
    /// How long finished ApprovalRequests are kept before deletion (default 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub ttl_after_finished: Option<String>,
    /// Open ApprovalRequests (Pending, or Approved and not yet used) each caller may hold, 1 to
    /// 1000; at the cap, a gated call that would create another is refused, not run. Default:
    /// the operator's (50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_open_requests: Option<i32>,
    /// Rules that refine `requireApproval` by tool and a CEL condition on the call's arguments
    /// (docs/policies.md); a rule's `server`, when set, names the ToolGate's server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<ApprovalRule>,
    /// Steps after which more people may decide a still-pending request, and whom to tell;
    /// a warning before expiry: as an Agent's `approval.escalation` (docs/approvers.md,
    /// "Deadlines that escalate"). Copied into each ApprovalRequest when it is made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Box<super::escalation::Escalation>>,
}

/// Who may call through a ToolGate's gate. Every caller presents a Kubernetes bearer token,
/// which the gate verifies with a TokenReview for one of `audiences`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolGateCallers {
    /// Audiences a caller's token must be valid for (default
    /// `toolgate.kagent.dev/<namespace>/<name>`: a token requested for this gate only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)), extend("x-kubernetes-list-type" = "set"))]
    pub audiences: Vec<String>,
    /// Only these usernames may call (such as `system:serviceaccount:team-a:agent`); unset,
    /// with `groups` unset too: anyone with a valid token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 512)), extend("x-kubernetes-list-type" = "set"))]
    pub users: Vec<String>,
    /// Only members of these groups may call (such as `system:serviceaccounts:team-a`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 512)), extend("x-kubernetes-list-type" = "set"))]
    pub groups: Vec<String>,
    /// Tool calls one caller may make per minute; unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_calls_per_minute: Option<i32>,
}

/// Pod-level settings of a ToolGate's gate Deployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolGateDeployment {
    /// Number of gate pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: Option<i32>,
    /// Resources of the gate container (default: requests 10m/32Mi, limits 500m/128Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node selector of the gate pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the gate pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity of the gate pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
}

/// Observed state of a ToolGate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolGateStatus {
    /// The generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted` (Reconciled, ReconcileFailed, InvalidSpec, RefNotFound, OwnedElsewhere),
    /// `Ready` (DeploymentReady, DeploymentNotReady), and while the ToolGate is frozen `Frozen`
    /// (ToolGateFrozen, NamespaceFrozen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The gate's in-cluster base URL, `http://<name>-gate.<namespace>.svc:8099`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The MCP URL clients use instead of the server's: the gate's route for the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The audiences a caller's token must be valid for (the default filled in).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
}

impl ToolGate {
    /// The name of the server behind the gate: the RemoteMCPServer's, or for an inline url
    /// the ToolGate's own (the gate's route and the ApprovalRequests name it so).
    pub fn server_name(&self) -> String {
        self.spec
            .server
            .remote_mcp_server
            .clone()
            .unwrap_or_else(|| kube::ResourceExt::name_any(self))
    }
}
