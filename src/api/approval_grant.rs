//! The `ApprovalGrant` kind: a person's standing approval of one agent's calls to a tool server
//! (or one of its tools), for a while, optionally for one MCP session, a number of uses, or
//! calls whose arguments match a condition. The gate lets a call the grant covers run without
//! waiting, and records it as an ApprovalRequest decided by the grant (docs/policies.md).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::approval_request::{AgentRef, ToolServerRef};

/// A standing approval: calls it covers run without a person deciding each one. Created by an
/// approver (admission: the verb `approve` on the agent, `grantedBy` is the creator, not a
/// ServiceAccount, `expiresAt` within the operator's maximum); immutable except `revoked`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kagent.dev",
    version = "v1alpha2",
    kind = "ApprovalGrant",
    plural = "approvalgrants",
    shortname = "apg",
    namespaced,
    status = "ApprovalGrantStatus",
    cel,
    doc = "A person's standing approval of an agent's calls to a tool server's tools, until it expires, is used up or is revoked.",
    printcolumn = r#"{"name": "Agent", "type": "string", "jsonPath": ".spec.agentRef.name"}"#,
    printcolumn = r#"{"name": "Server", "type": "string", "jsonPath": ".spec.toolServer.name"}"#,
    printcolumn = r#"{"name": "Tool", "type": "string", "description": "The tool covered (absent: every gated tool of the server)", "jsonPath": ".spec.toolName"}"#,
    printcolumn = r#"{"name": "Session", "type": "string", "priority": 1, "jsonPath": ".spec.sessionId"}"#,
    printcolumn = r#"{"name": "Caller", "type": "string", "priority": 1, "description": "The only caller covered, on a shared gate (absent: every caller)", "jsonPath": ".spec.caller"}"#,
    printcolumn = r#"{"name": "Uses", "type": "integer", "jsonPath": ".status.uses"}"#,
    printcolumn = r#"{"name": "Max-Uses", "type": "integer", "jsonPath": ".spec.maxUses"}"#,
    printcolumn = r#"{"name": "Granted-By", "type": "string", "jsonPath": ".spec.grantedBy"}"#,
    printcolumn = r#"{"name": "Revoked", "type": "boolean", "jsonPath": ".spec.revoked"}"#,
    printcolumn = r#"{"name": "Expires", "type": "date", "jsonPath": ".spec.expiresAt"}"#,
    validation = kube::core::Rule::new("!has(self.spec.maxUses) || !has(self.status) || !has(self.status.uses) || self.status.uses <= self.spec.maxUses").message("status.uses cannot exceed spec.maxUses"),
    // On the root, which every update has old and new: a transition rule on `status` itself is
    // skipped by a write that removes or replaces the status (docs/policies.md).
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.uses) || (has(self.status) && has(self.status.uses) && self.status.uses >= oldSelf.status.uses)").field_path(".status.uses").message("status.uses never decreases"),
    validation = kube::core::Rule::new("!has(oldSelf.status) || (has(self.status) && has(self.status.uses) && (!has(oldSelf.status.uses) || self.status.uses > oldSelf.status.uses)) || (has(self.status) && has(self.status.lastUsedAt) == has(oldSelf.status.lastUsedAt) && (!has(oldSelf.status.lastUsedAt) || self.status.lastUsedAt == oldSelf.status.lastUsedAt) && has(self.status.lastUsedBy) == has(oldSelf.status.lastUsedBy) && (!has(oldSelf.status.lastUsedBy) || self.status.lastUsedBy == oldSelf.status.lastUsedBy))").field_path(".status").message("status.lastUsedAt and status.lastUsedBy change only with a new use (status.uses rising)"),
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.lastUsedAt) || (has(self.status) && has(self.status.lastUsedAt) && self.status.lastUsedAt >= oldSelf.status.lastUsedAt)").field_path(".status.lastUsedAt").message("status.lastUsedAt never goes back")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("self.agentRef == oldSelf.agentRef && self.toolServer == oldSelf.toolServer && self.expiresAt == oldSelf.expiresAt && self.grantedBy == oldSelf.grantedBy && self.reason == oldSelf.reason").message("a grant is immutable: only spec.revoked can be set"),
    validation = kube::core::Rule::new("has(self.toolName) == has(oldSelf.toolName) && (!has(self.toolName) || self.toolName == oldSelf.toolName) && has(self.when) == has(oldSelf.when) && (!has(self.when) || self.when == oldSelf.when)").message("a grant is immutable: only spec.revoked can be set"),
    validation = kube::core::Rule::new("has(self.sessionId) == has(oldSelf.sessionId) && (!has(self.sessionId) || self.sessionId == oldSelf.sessionId) && has(self.maxUses) == has(oldSelf.maxUses) && (!has(self.maxUses) || self.maxUses == oldSelf.maxUses)").message("a grant is immutable: only spec.revoked can be set"),
    validation = kube::core::Rule::new("has(self.caller) == has(oldSelf.caller) && (!has(self.caller) || self.caller == oldSelf.caller)").message("a grant is immutable: only spec.revoked can be set"),
    validation = kube::core::Rule::new("!has(oldSelf.revoked) || !oldSelf.revoked || (has(self.revoked) && self.revoked)").message("a revoked grant stays revoked")
)]
pub struct ApprovalGrantSpec {
    /// The agent whose calls the grant covers (same namespace).
    pub agent_ref: AgentRef,
    /// The tool server the calls go to.
    pub tool_server: ToolServerRef,
    /// The tool covered; absent: every tool of the server that needs approval by
    /// `requireApproval` or by a rule asking for one approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub tool_name: Option<String>,
    /// CEL over the call (`args`, `agent`, `namespace`, `server`, `tool`, `session`), as in an
    /// approval rule's `when` (at most 2048 characters): the grant covers only calls for which
    /// it is true. An expression
    /// that does not compile or cannot be evaluated covers nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub when: Option<String>,
    /// Only calls of this MCP session ("remember for this session").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub session_id: Option<String>,
    /// Only calls of this caller (a username, such as
    /// `system:serviceaccount:<namespace>:<name>`), on a shared gate (ToolGate); unset: every
    /// caller. On an Agent's gate, where there is no caller, a grant naming one covers nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub caller: Option<String>,
    /// The grant covers nothing from this instant. Required; admission and the gate hold it to
    /// the operator's maximum lifetime after creation.
    pub expires_at: Time,
    /// How many calls it covers at most; absent: any number until it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_uses: Option<i32>,
    /// Why the grant was given; copied into the requests it decides.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,
    /// Username of the person granting; admission checks it is the creator.
    #[schemars(length(min = 1, max = 512))]
    pub granted_by: String,
    /// Set to true to revoke the grant at once; it cannot be unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<bool>,
}

/// What the grant has been used for. Written by the agent's gate only, guarded by the
/// resourceVersion it read, so `maxUses` is never exceeded.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
/// Its guarantees (uses never decrease, a use is recorded whole) are rules on the grant's root.
pub struct ApprovalGrantStatus {
    /// Calls the grant let through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub uses: Option<i32>,
    /// When the last call was let through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<Time>,
    /// The ApprovalRequest recording the last call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub last_used_by: Option<String>,
}

/// The one change a person makes to a grant: `spec.revoked`, written through
/// [`crate::apiserver::guarded`].
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Revocation {
    /// Always true: a revocation cannot be undone.
    pub revoked: bool,
}

impl ApprovalGrant {
    /// Calls the grant let through so far.
    pub fn uses(&self) -> u32 {
        self.status
            .as_ref()
            .and_then(|s| s.uses)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    }

    /// Whether `spec.revoked` is set.
    pub fn is_revoked(&self) -> bool {
        self.spec.revoked == Some(true)
    }
}
