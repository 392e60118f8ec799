//! The `ApprovalRequest` kind: one gated tool call waiting for, or carrying, a human decision.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::{CustomResource, KubeSchema, Resource};
use serde::{Deserialize, Serialize};

use super::agent::ToolServerKind;
use super::common::preserve_unknown_object;
use super::escalation::{EscalationRecord, RequestEscalation};

/// Label naming the agent that asked.
pub const LABEL_AGENT: &str = "kagent.dev/agent";
/// Label naming the tool.
pub const LABEL_TOOL: &str = "kagent.dev/tool";
/// Label holding the first 16 hex digits of argumentsSha256.
pub const LABEL_ARGS_HASH: &str = "kagent.dev/args-hash";
/// Label naming the ApprovalGrant that decided the call, on requests decided by one.
pub const LABEL_GRANT: &str = "kagent.dev/grant";
/// Label holding the first 16 hex digits of the SHA-256 of `spec.caller.username`, on
/// requests of a shared gate ([`caller_label`]): usernames do not fit label values.
pub const LABEL_CALLER_HASH: &str = "kagent.dev/caller-hash";
/// Largest serialized argumentsPreview, in bytes.
pub const MAX_PREVIEW_BYTES: usize = 32 * 1024;
/// Most approvals a request can need or hold (`requiredApprovals`, `approvals`).
pub const MAX_APPROVALS: u32 = 16;

/// A tool call that waits for a human decision. Created by the approval gate; a person writes
/// only `spec.decision`, and `spec.approvals` when the call needs more than one approval.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kagent.dev",
    version = "v1alpha2",
    kind = "ApprovalRequest",
    plural = "approvalrequests",
    shortname = "apr",
    namespaced,
    status = "ApprovalRequestStatus",
    cel,
    doc = "A gated MCP tool call waiting for, or carrying, a human decision.",
    printcolumn = r#"{"name": "Agent", "type": "string", "jsonPath": ".spec.agentRef.name"}"#,
    printcolumn = r#"{"name": "Tool", "type": "string", "jsonPath": ".spec.toolName"}"#,
    printcolumn = r#"{"name": "Caller", "type": "string", "priority": 1, "description": "Who made the call, through a shared gate (ToolGate)", "jsonPath": ".spec.caller.username"}"#,
    printcolumn = r#"{"name": "Rule", "type": "string", "priority": 1, "description": "The Agent's approval rule that asked", "jsonPath": ".spec.rule"}"#,
    printcolumn = r#"{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}"#,
    printcolumn = r#"{"name": "Decided-By", "type": "string", "jsonPath": ".spec.decision.decidedBy"}"#,
    printcolumn = r#"{"name": "Grant", "type": "string", "priority": 1, "description": "The ApprovalGrant that decided the call instead of a person", "jsonPath": ".spec.grant.name"}"#,
    printcolumn = r#"{"name": "Required", "type": "integer", "priority": 1, "description": "Distinct approvals the call needs (absent: 1)", "jsonPath": ".spec.requiredApprovals"}"#,
    printcolumn = r#"{"name": "Approved-By", "type": "string", "priority": 1, "description": "Who approved so far, on a request needing more than one approval", "jsonPath": ".spec.approvals[*].approvedBy"}"#,
    printcolumn = r#"{"name": "Expires", "type": "date", "jsonPath": ".spec.expiresAt"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    validation = kube::core::Rule::new("!has(self.status) || !has(self.status.phase) || !(self.status.phase in ['Approved', 'Executed']) || has(self.spec.grant) || (has(self.spec.decision) && self.spec.decision.type == 'Approve')").message("phase Approved or Executed requires spec.decision.type Approve or spec.grant"),
    validation = kube::core::Rule::new("!has(self.status) || !has(self.status.consumedAt) || has(self.spec.grant) || (has(self.spec.decision) && self.spec.decision.type == 'Approve')").message("status.consumedAt may only be set on an approved request"),
    // The status guarantees sit on the root, which every update has old and new: a transition
    // rule on `status` itself is skipped by a write that removes or replaces the status
    // (docs/policies.md, "What the CRDs guarantee").
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.consumedAt) || (has(self.status) && has(self.status.consumedAt) && self.status.consumedAt == oldSelf.status.consumedAt)").field_path(".status.consumedAt").message("status.consumedAt is write-once: a consumed approval never becomes consumable again"),
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.consumedBy) || (has(self.status) && has(self.status.consumedBy) && self.status.consumedBy == oldSelf.status.consumedBy)").field_path(".status.consumedBy").message("status.consumedBy is write-once"),
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.phase) || !(oldSelf.status.phase in ['Denied', 'Expired', 'Executed', 'Cancelled']) || (has(self.status) && has(self.status.phase) && self.status.phase == oldSelf.status.phase)").field_path(".status.phase").message("a finished request's phase cannot change"),
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.decidedAt) || (has(self.status) && has(self.status.decidedAt) && self.status.decidedAt == oldSelf.status.decidedAt)").field_path(".status.decidedAt").message("status.decidedAt is write-once"),
    validation = kube::core::Rule::new("!has(self.status) || !has(self.status.decidedAt) || has(self.spec.decision) || has(self.spec.grant)").field_path(".status.decidedAt").message("status.decidedAt may only be set on a decided request"),
    // Edit, then approve (docs/approvers.md): the edited call's binding hash is written once,
    // with the consumption, and only on an edited request.
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.editedArgumentsSha256) || (has(self.status) && has(self.status.editedArgumentsSha256) && self.status.editedArgumentsSha256 == oldSelf.status.editedArgumentsSha256)").field_path(".status.editedArgumentsSha256").message("status.editedArgumentsSha256 is write-once: the edited call it binds never changes"),
    validation = kube::core::Rule::new("!has(self.status) || !has(self.status.editedArgumentsSha256) || (has(self.spec.edit) && has(self.status.consumedAt))").field_path(".status.editedArgumentsSha256").message("status.editedArgumentsSha256 may only be set on an edited request, with status.consumedAt"),
    // Issue 60, deadlines that escalate.
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.tier) || (has(self.status) && has(self.status.tier) && self.status.tier >= oldSelf.status.tier)").field_path(".status.tier").message("status.tier never decreases: an escalation step taken stays taken"),
    validation = kube::core::Rule::new("!has(self.status) || !has(self.status.tier) || self.status.tier == 0 || (has(self.spec.escalation) && has(self.spec.escalation.steps) && self.status.tier <= size(self.spec.escalation.steps))").field_path(".status.tier").message("status.tier cannot pass the last step of spec.escalation"),
    validation = kube::core::Rule::new("!has(oldSelf.status) || !has(oldSelf.status.escalations) || (has(self.status) && has(self.status.escalations) && oldSelf.status.escalations.all(o, o in self.status.escalations))").field_path(".status.escalations").message("status.escalations is append-only: a step's record cannot be changed or removed")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("self.agentRef == oldSelf.agentRef && self.toolServer == oldSelf.toolServer && self.toolName == oldSelf.toolName && self.argumentsSha256 == oldSelf.argumentsSha256 && self.argumentsBytes == oldSelf.argumentsBytes && self.requestedBy == oldSelf.requestedBy && self.expiresAt == oldSelf.expiresAt").message("spec is immutable except spec.decision and spec.approvals"),
    validation = kube::core::Rule::new("has(self.message) == has(oldSelf.message) && (!has(self.message) || self.message == oldSelf.message)").message("spec is immutable except spec.decision and spec.approvals"),
    validation = kube::core::Rule::new("has(self.context) == has(oldSelf.context) && (!has(self.context) || self.context == oldSelf.context)").message("spec is immutable except spec.decision and spec.approvals"),
    validation = kube::core::Rule::new("has(self.argumentsPreview) == has(oldSelf.argumentsPreview)").message("spec is immutable except spec.decision and spec.approvals"),
    validation = kube::core::Rule::new("has(self.rule) == has(oldSelf.rule) && (!has(self.rule) || self.rule == oldSelf.rule)").message("spec is immutable except spec.decision and spec.approvals"),
    validation = kube::core::Rule::new("has(self.caller) == has(oldSelf.caller) && (!has(self.caller) || self.caller == oldSelf.caller)").message("spec is immutable except spec.decision and spec.approvals"),
    validation = kube::core::Rule::new("has(self.grant) == has(oldSelf.grant) && (!has(self.grant) || self.grant == oldSelf.grant)").message("spec is immutable except spec.decision and spec.approvals"),
    validation = kube::core::Rule::new("!has(self.grant) || (!has(self.decision) && !has(self.approvals) && !has(self.requiredApprovals))").field_path(".grant").message("a request decided by a grant (spec.grant) takes no decision, approvals or requiredApprovals"),
    validation = kube::core::Rule::new("has(self.requiredApprovals) == has(oldSelf.requiredApprovals) && (!has(self.requiredApprovals) || self.requiredApprovals == oldSelf.requiredApprovals)").message("spec is immutable except spec.decision and spec.approvals"),
    validation = kube::core::Rule::new("!has(oldSelf.decision) || (has(self.decision) && self.decision == oldSelf.decision)").message("spec.decision is write-once: it cannot be changed or removed once set"),
    validation = kube::core::Rule::new("!has(oldSelf.approvals) || (has(self.approvals) && oldSelf.approvals.all(o, self.approvals.exists(n, n == o)))").message("spec.approvals is append-only: an approval cannot be changed or removed"),
    validation = kube::core::Rule::new("!has(oldSelf.decision) || (has(self.approvals) == has(oldSelf.approvals) && (!has(self.approvals) || size(self.approvals) == size(oldSelf.approvals)))").message("spec.approvals cannot change once spec.decision is set"),
    validation = kube::core::Rule::new("!has(self.decision) || self.decision.type != 'Approve' || has(self.edit) || !has(self.requiredApprovals) || self.requiredApprovals <= 1 || (has(self.approvals) && size(self.approvals) >= self.requiredApprovals && self.approvals.exists(a, a.approvedBy == self.decision.decidedBy))").field_path(".decision").message("an Approve decision on a request with spec.requiredApprovals above 1 needs that many entries in spec.approvals, one of them by spec.decision.decidedBy"),
    // Runs on create too (optionalOldSelf): oldSelf is then optional.none() in kube-apiserver.
    // `oldSelf != null` is always true there; it is for kube-cel (offline validation), which
    // binds oldSelf to null on create and to the plain old value on update.
    validation = kube::core::Rule::new("!has(self.decision) || (oldSelf != null && oldSelf != optional.none())").optional_old_self(true).field_path(".decision").message("spec.decision cannot be set when the request is created: only an approver adds it later"),
    validation = kube::core::Rule::new("!has(self.approvals) || (oldSelf != null && oldSelf != optional.none())").optional_old_self(true).field_path(".approvals").message("spec.approvals cannot be set when the request is created: only approvers add them later"),
    // Edit, then approve (docs/approvers.md): spec.edit is written once by a person, never at
    // creation, never on a decided or grant-decided request; the approvals that count for the
    // edited call are spec.editApprovals, given after the edit (the quorum starts again).
    validation = kube::core::Rule::new("!has(self.edit) || (oldSelf != null && oldSelf != optional.none())").optional_old_self(true).field_path(".edit").message("spec.edit cannot be set when the request is created: only an editor adds it later"),
    validation = kube::core::Rule::new("!has(self.editApprovals) || (oldSelf != null && oldSelf != optional.none())").optional_old_self(true).field_path(".editApprovals").message("spec.editApprovals cannot be set when the request is created: only approvers add them later"),
    validation = kube::core::Rule::new("!has(oldSelf.edit) || (has(self.edit) && self.edit == oldSelf.edit)").field_path(".edit").message("spec.edit is write-once: it cannot be changed or removed once set"),
    validation = kube::core::Rule::new("!has(oldSelf.decision) || has(self.edit) == has(oldSelf.edit)").field_path(".edit").message("spec.edit cannot be added once spec.decision is set"),
    validation = kube::core::Rule::new("!has(self.editApprovals) || has(self.edit)").field_path(".editApprovals").message("spec.editApprovals needs spec.edit: they approve the edited call"),
    validation = kube::core::Rule::new("!has(self.grant) || (!has(self.edit) && !has(self.editApprovals))").field_path(".edit").message("a request decided by a grant (spec.grant) takes no edit"),
    validation = kube::core::Rule::new("!has(oldSelf.editApprovals) || (has(self.editApprovals) && oldSelf.editApprovals.all(o, self.editApprovals.exists(n, n == o)))").field_path(".editApprovals").message("spec.editApprovals is append-only: an approval cannot be changed or removed"),
    validation = kube::core::Rule::new("!has(oldSelf.decision) || (has(self.editApprovals) == has(oldSelf.editApprovals) && (!has(self.editApprovals) || size(self.editApprovals) == size(oldSelf.editApprovals)))").field_path(".editApprovals").message("spec.editApprovals cannot change once spec.decision is set"),
    validation = kube::core::Rule::new("!has(self.edit) || !has(self.decision) || self.decision.type != 'Approve' || (has(self.editApprovals) && size(self.editApprovals) >= (has(self.requiredApprovals) ? self.requiredApprovals : 1) && self.editApprovals.exists(a, a.approvedBy == self.decision.decidedBy))").field_path(".decision").message("an Approve decision on an edited request (spec.edit) needs spec.requiredApprovals (at least 1) entries in spec.editApprovals, one of them by spec.decision.decidedBy: approvals of the original call do not count for the edited one"),
    // Issue 60, deadlines that escalate.
    validation = kube::core::Rule::new("has(self.escalation) == has(oldSelf.escalation) && (!has(self.escalation) || self.escalation == oldSelf.escalation)").message("spec is immutable except spec.decision and spec.approvals"),
    // Tool risk (issue 60): the tool's annotations as the gate saw them, set at creation.
    validation = kube::core::Rule::new("has(self.toolAnnotations) == has(oldSelf.toolAnnotations) && (!has(self.toolAnnotations) || self.toolAnnotations == oldSelf.toolAnnotations)").message("spec is immutable except spec.decision and spec.approvals")
)]
// `argumentsPreview` and `grant` are boxed: the controller caches every request without its
// preview, and most requests have no grant (docs/controller.md, "Memory on the real control
// plane").
pub struct ApprovalRequestSpec {
    /// The agent whose tool call this is (same namespace).
    pub agent_ref: AgentRef,
    /// The tool server the call is for.
    pub tool_server: ToolServerRef,
    /// The tool being called.
    #[schemars(length(min = 1, max = 128))]
    pub tool_name: String,
    /// The call's arguments with secrets redacted, at most 32 KiB. Only a preview: the gate
    /// binds the decision to argumentsSha256, never to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("spec is immutable except spec.decision and spec.approvals"))]
    pub arguments_preview: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    /// Binding hash of the full arguments: HMAC-SHA256 (hex) of their RFC 8785 canonical JSON,
    /// keyed with the Agent's binding key, which only its gate holds.
    #[schemars(length(min = 64, max = 64), pattern(r"^[0-9a-f]{64}$"))]
    pub arguments_sha256: String,
    /// Size in bytes of the canonical JSON of the full arguments.
    #[schemars(range(min = 0))]
    pub arguments_bytes: i64,
    /// Username of the identity that created the request (the agent's ServiceAccount, or a
    /// shared gate's).
    #[schemars(length(min = 1, max = 512))]
    pub requested_by: String,
    /// Who made the call, on requests of a shared gate (ToolGate): the caller's verified
    /// identity. Set at creation, immutable; the caller can never decide the request.
    // Boxed: most requests have none, and the controller caches every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Box<Caller>>,
    /// Human-readable question shown to approvers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub message: Option<String>,
    /// Where the call came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<CallContext>,
    /// The approval rule of the Agent that asked for this approval; unset when the tool's
    /// `requireApproval` entry asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub rule: Option<String>,
    /// Distinct approvals the call needs, from the approval rule that asked; absent means 1.
    /// Set by the gate at creation and immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub required_approvals: Option<i32>,
    /// The approvals given so far, one per person (keyed by `approvedBy`): append-only, and
    /// only while there is no decision. An Approve decision on a request that needs more than
    /// one approval counts only with `requiredApprovals` of them, one by its `decidedBy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["approvedBy"]))]
    pub approvals: Vec<Approval>,
    /// After this instant no decision counts: the request is Expired and the call never runs.
    pub expires_at: Time,
    /// The ApprovalGrant that decided the call instead of a person: set by the gate when it
    /// creates the request, immutable; such a request takes no `decision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<Box<GrantRef>>,
    /// The decision: the only field a person writes. Write-once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    // Edit, then approve (issue 60): the edit and the approvals of the edited call.
    /// An approver's edit of the call's arguments: the call runs with them edited, or not at
    /// all. Written once, after creation, before the decision; never on a grant-decided request.
    // Boxed: most requests have none, and the controller caches every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<Box<Edit>>,
    /// The approvals of the edited call, one per person, given after `edit`: on an edited
    /// request only these count (approvals of the original call do not). Append-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["approvedBy"]))]
    pub edit_approvals: Vec<Approval>,
    // Issue 60, deadlines that escalate.
    /// The Agent's escalation at the request's creation, with absolute instants: set by the
    /// gate, immutable. Its approvers may decide from their tier on (admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Box<RequestEscalation>>,
    // --- Tool risk (issue 60) ---
    /// The called tool's MCP annotations as its server listed them through the gate, and
    /// whether that server is trusted to assert them. Unset when the gate saw no tool list
    /// naming the tool: the MCP defaults hold then (docs/policies.md, "Tool annotations").
    /// Set at creation, immutable.
    // Boxed: the controller caches every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_annotations: Option<Box<ToolAnnotations>>,
}

/// A tool's MCP annotations (`tools/list`), as asserted by its server, on a request.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// The tool's human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub title: Option<String>,
    /// The server says the tool does not modify its environment (MCP default: false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The server says the tool may destroy or overwrite (MCP default: true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// The server says repeating the call has no further effect (MCP default: false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The server says the tool reaches an open world of entities (MCP default: true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
    /// Whether the tool server is trusted to assert these hints (its RemoteMCPServer's or
    /// ToolGate's `trustToolAnnotations`). Untrusted hints are shown, and can make a rule ask
    /// for approval or deny, never allow.
    pub trusted: bool,
    /// SHA-256 (hex) of the RFC 8785 canonical JSON of the tool's definition as listed:
    /// `{name, description, inputSchema, annotations}`.
    #[schemars(length(min = 64, max = 64), pattern(r"^[0-9a-f]{64}$"))]
    pub definition_sha256: String,
    /// Set when the definition listed is not the one accepted: the call waits for an approval
    /// whatever the rules say (docs/policies.md, "Changed tool definitions").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_change: Option<DefinitionChange>,
}

/// How a tool's definition as listed differs from the one accepted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefinitionChange {
    /// The digest accepted (the tool server's `acceptedToolDefinitions`, or the first one the
    /// gate listed); unset when the tool was never accepted while others were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 64, max = 64), pattern(r"^[0-9a-f]{64}$"))]
    pub accepted_sha256: Option<String>,
    /// The parts of the definition that changed (`description`, `inputSchema`, `annotations`),
    /// when the gate listed the accepted definition itself; empty when it did not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3), inner(length(max = 16)))]
    pub changed: Vec<String>,
}

impl ApprovalRequest {
    /// When the decision was recorded: `status.decidedAt`, else the time of the managedFields
    /// entry that owns `spec.decision` (decisions are write-once). `None` without a decision or
    /// when neither is known.
    pub fn decision_recorded_at(&self) -> Option<Timestamp> {
        self.spec.decision.as_ref()?;
        if let Some(Time(at)) = self.status.as_ref().and_then(|s| s.decided_at.clone()) {
            return Some(at);
        }
        self.decision_write_times().min()
    }

    /// When the apiserver, by its own clock, recorded writes of `spec.decision`: the `time` of
    /// each managedFields entry (not of a subresource) that owns it.
    pub fn decision_write_times(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.meta()
            .managed_fields
            .iter()
            .flatten()
            .filter(|entry| {
                entry
                    .fields_v1
                    .as_ref()
                    .and_then(|fields| fields.0.get("f:spec"))
                    .and_then(|spec| spec.get("f:decision"))
                    .is_some()
            })
            .filter_map(|entry| entry.time.as_ref().map(|t| t.0))
    }

    /// Distinct approvals the call needs: `spec.requiredApprovals`, 1 when absent.
    pub fn required_approvals(&self) -> u32 {
        self.spec
            .required_approvals
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1)
            .max(1)
    }

    /// How many people approved so far: the distinct approvers in `spec.approvals`, or 1 for
    /// an Approve decision on a request that has none.
    pub fn approvals_given(&self) -> u32 {
        let listed = self.approvers().len();
        let decided = self
            .spec
            .decision
            .as_ref()
            .is_some_and(|d| d.decision_type == DecisionType::Approve);
        u32::try_from(listed)
            .unwrap_or(u32::MAX)
            .max(u32::from(decided))
    }

    /// The approvals that count: `spec.editApprovals` on an edited request (approvals of the
    /// original call do not count for the edited one), else `spec.approvals`.
    pub fn counted_approvals(&self) -> &[Approval] {
        if self.spec.edit.is_some() {
            &self.spec.edit_approvals
        } else {
            &self.spec.approvals
        }
    }

    /// The distinct usernames in the approvals that count ([`Self::counted_approvals`]), in
    /// order.
    pub fn approvers(&self) -> Vec<&str> {
        let counted = self.counted_approvals();
        let mut seen = Vec::with_capacity(counted.len());
        for approval in counted {
            if !seen.contains(&approval.approved_by.as_str()) {
                seen.push(approval.approved_by.as_str());
            }
        }
        seen
    }

    /// The escalation tier reached (`status.tier`), 0 before the first step or without one.
    pub fn tier(&self) -> u32 {
        self.status
            .as_ref()
            .and_then(|s| s.tier)
            .map_or(0, u32::from)
    }

    /// `1/2`: approvals given of those required.
    pub fn approvals_summary(&self) -> String {
        format!("{}/{}", self.approvals_given(), self.required_approvals())
    }

    /// Whether an Approve decision by `decided_by` is backed by enough approvals: always for an
    /// unedited request that needs one; otherwise `requiredApprovals` distinct approvers,
    /// `decided_by` among them (on an edited request, in `spec.editApprovals`).
    pub fn quorum_met(&self, decided_by: &str) -> bool {
        let required = self.required_approvals();
        if required <= 1 && self.spec.edit.is_none() {
            return true;
        }
        let approvers = self.approvers();
        u32::try_from(approvers.len()).unwrap_or(u32::MAX) >= required
            && approvers.contains(&decided_by)
    }

    /// The phase implied by spec, status and the clock, whoever looks (controller, plugin):
    /// a finished status phase stands; a consumed approval is Executed; a decision counts only
    /// if recorded before `expiresAt` (when its time is unknown, `now` stands in), otherwise
    /// the request is Expired; without a decision it is Pending until `expiresAt`, and so is
    /// one whose Approve decision lacks the approvals it needs ([`Self::quorum_met`]). A request
    /// decided by a grant is Approved until it is consumed or expires.
    pub fn phase_at(&self, now: Timestamp) -> Phase {
        let status = self.status.as_ref();
        if let Some(phase) = status.and_then(|s| s.phase).filter(|p| p.is_terminal()) {
            return phase;
        }
        if status.is_some_and(|s| s.consumed_at.is_some()) {
            return Phase::Executed;
        }
        let expires_at = self.spec.expires_at.0;
        if self.spec.grant.is_some() {
            return if now < expires_at {
                Phase::Approved
            } else {
                Phase::Expired
            };
        }
        match &self.spec.decision {
            Some(decision) if self.decision_recorded_at().unwrap_or(now) < expires_at => {
                match decision.decision_type {
                    DecisionType::Approve if self.quorum_met(&decision.decided_by) => {
                        Phase::Approved
                    }
                    DecisionType::Approve if now < expires_at => Phase::Pending,
                    DecisionType::Approve => Phase::Expired,
                    DecisionType::Deny => Phase::Denied,
                }
            }
            None if now < expires_at => Phase::Pending,
            _ => Phase::Expired,
        }
    }
}

/// Reference to the object, in the same namespace, whose approval policy made a request or
/// a grant applies to: an Agent (its sidecar or Gateway gate), or a ToolGate (a shared gate
/// in front of one tool server).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
pub struct AgentRef {
    /// Name of the Agent or ToolGate.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// `Agent` (when unset) or `ToolGate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<PolicyKind>,
}

impl AgentRef {
    /// A reference to the Agent `name`.
    pub fn agent(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: None,
        }
    }

    /// The kind referred to: `Agent` when unset.
    pub fn kind(&self) -> PolicyKind {
        self.kind.unwrap_or_default()
    }

    /// How people are shown it: an Agent by its name (as always), a ToolGate as
    /// `ToolGate/<name>`.
    pub fn label(&self) -> String {
        match self.kind() {
            PolicyKind::Agent => self.name.clone(),
            PolicyKind::ToolGate => format!("ToolGate/{}", self.name),
        }
    }
}

/// The kinds whose approval policy a gate enforces.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
pub enum PolicyKind {
    /// An Agent: the gate runs as its sidecar or its Gateway.
    #[default]
    Agent,
    /// A ToolGate: one shared gate in front of a tool server, for every caller.
    ToolGate,
}

impl PolicyKind {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "Agent",
            Self::ToolGate => "ToolGate",
        }
    }

    /// The resource (plural) RBAC's `approve` verb is checked on.
    pub fn plural(self) -> &'static str {
        match self {
            Self::Agent => "agents",
            Self::ToolGate => "toolgates",
        }
    }
}

/// The Kubernetes identity that made a call through a shared gate (ToolGate), as the
/// apiserver's TokenReview reported it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
pub struct Caller {
    /// Username, such as `system:serviceaccount:<namespace>:<name>`.
    #[schemars(length(min = 1, max = 512))]
    pub username: String,
    /// UID of the identity, when the apiserver gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub uid: Option<String>,
    /// Groups of the identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub groups: Vec<String>,
}

/// The value of [`LABEL_CALLER_HASH`] for the caller `username`: the first 16 hex digits of
/// its SHA-256.
pub fn caller_label(username: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(username.as_bytes())[..8])
}

/// Identity of the tool server a call goes to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
pub struct ToolServerRef {
    /// `RemoteMCPServer` or `Service`.
    pub kind: ToolServerKind,
    /// Name of the tool server.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the tool server.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}

/// Identifiers of the conversation a call belongs to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallContext {
    /// MCP session id between the agent and the gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub session_id: Option<String>,
    /// Agent task id, when the runtime sends one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub task_id: Option<String>,
    /// JSON-RPC id of the tools/call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub call_id: Option<String>,
}

/// The grant that decided a request, as the gate found it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantRef {
    /// Name of the ApprovalGrant (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its `spec.grantedBy`: the person whose standing approval let the call run.
    #[schemars(length(min = 1, max = 512))]
    pub granted_by: String,
    /// Its `spec.reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
}

/// A person's decision on a request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `Approve` or `Deny`.
    #[serde(rename = "type")]
    pub decision_type: DecisionType,
    /// Why; shown to the agent on Deny.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// Username of the person deciding; admission checks it equals the requesting user.
    #[schemars(length(min = 1, max = 512))]
    pub decided_by: String,
}

/// What a person writes to a request's spec through [`crate::apiserver::guarded`]: the decision,
/// the approvals (the whole list, as a merge patch replaces lists), or both.
#[derive(Serialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DecisionChange {
    /// The decision, when this write makes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Every approval, the writer's added, when this write adds one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Vec<Approval>>,
    /// The edit, when this write makes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit: Option<Edit>,
    /// Every approval of the edited call, the writer's added, when this write adds one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit_approvals: Option<Vec<Approval>>,
}

/// One person's approval of a request that needs more than one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// Username of the approver; admission checks it equals the requesting user.
    #[schemars(length(min = 1, max = 512))]
    pub approved_by: String,
    /// Why, if said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// When, by the approver's clock (informative: managedFields hold the apiserver's record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Time>,
}

/// Largest `spec.edit.patch`, in bytes.
pub const MAX_EDIT_PATCH_BYTES: usize = 32 * 1024;

/// An approver's edit of a call's arguments (docs/approvers.md, "Edit, then approve").
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Edit {
    /// A JSON Patch (RFC 6902), as JSON text, on the call's arguments as the preview shows
    /// them. Text, not a JSON value: the apiserver would turn large integers into doubles.
    #[schemars(length(min = 2, max = 32768))]
    pub patch: String,
    /// Username of the editor; admission checks it equals the requesting user and that they
    /// hold the RBAC verb `edit` on the Agent or ToolGate.
    #[schemars(length(min = 1, max = 512))]
    pub edited_by: String,
    /// Why, if said; shown to other approvers and in the audit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// When, by the editor's clock (informative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Time>,
}

/// Kind of decision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum DecisionType {
    /// Let the call run once.
    Approve,
    /// Do not run the call.
    Deny,
}

/// Lifecycle phase of an ApprovalRequest.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub enum Phase {
    /// Waiting for a decision.
    Pending,
    /// Approved, not yet executed.
    Approved,
    /// Denied; the call does not run.
    Denied,
    /// Not decided before expiresAt; the call does not run.
    Expired,
    /// Approved and consumed: the call was forwarded once.
    Executed,
    /// Withdrawn because the policy changed or the agent is gone.
    Cancelled,
}

impl Phase {
    /// Whether no further transition is possible.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Denied | Self::Expired | Self::Executed | Self::Cancelled
        )
    }

    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Approved => "Approved",
            Self::Denied => "Denied",
            Self::Expired => "Expired",
            Self::Executed => "Executed",
            Self::Cancelled => "Cancelled",
        }
    }
}

/// Observed state of an ApprovalRequest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
/// Its guarantees (write-once, final, only growing) are rules on the ApprovalRequest's root.
pub struct ApprovalRequestStatus {
    /// Where the request is in its lifecycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// When the controller or gate first saw the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Time>,
    /// When the gate let the approved call through. Write-once: an approval runs one call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumed_at: Option<Time>,
    /// Which gate instance consumed the approval (pod name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub consumed_by: Option<String>,
    /// Conditions of the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Human-readable state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub message: Option<String>,
    /// Messages about this request sent by ApprovalNotifiers, one per notifier and event: what
    /// was attempted and delivered, so nothing is sent twice after a restart or a leader
    /// change. Written by the controller only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["notifier", "event"]))]
    pub notifications: Vec<NotificationRecord>,
    /// On an edited request (`spec.edit`), the binding hash of the arguments the gate ran:
    /// the edited call's, next to `spec.argumentsSha256` (the original's). Written once, by the
    /// gate, in the same write as `consumedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 64, max = 64), pattern(r"^[0-9a-f]{64}$"))]
    pub edited_arguments_sha256: Option<String>,
    // Issue 60, deadlines that escalate.
    /// The escalation tier reached (`spec.escalation`), absent before the first step: never
    /// decreases. Written by the leading controller only, one step per guarded write.
    // Small types: the controller caches every request with its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 8))]
    pub tier: Option<u8>,
    /// The steps taken, one per tier: append-only.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["tier"]))]
    pub escalations: Box<[EscalationRecord]>,
}

/// The delivery of one message about a request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationRecord {
    /// The ApprovalNotifier (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub notifier: String,
    /// `created`, `reminder-N`, `decided` or `expired`.
    #[schemars(length(min = 1, max = 32))]
    pub event: String,
    /// Attempts started, each recorded before it is sent.
    pub attempts: i32,
    /// When the last attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_at: Option<Time>,
    /// When the channel accepted the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<Time>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub last_error: Option<String>,
}

/// A request for unit tests to start from.
#[cfg(test)]
pub mod fixture {
    use serde_json::{Value, json};

    /// The JSON of a pending request of agent `helper` in `team-a` to run `delete_file` on
    /// RemoteMCPServer `team-a/fs`, created at 2026-11-22T00:00:00Z for an hour; tests change
    /// what they look at.
    pub fn request_json() -> Value {
        json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalRequest",
            "metadata": {"name": "helper-delete-file-1", "namespace": "team-a",
                         "creationTimestamp": "2026-11-22T00:00:00Z"},
            "spec": {
                "agentRef": {"name": "helper"},
                "toolServer": {"kind": "RemoteMCPServer", "name": "fs", "namespace": "team-a"},
                "toolName": "delete_file", "argumentsSha256": "a".repeat(64), "argumentsBytes": 2,
                "requestedBy": "system:serviceaccount:team-a:helper",
                "expiresAt": "2026-11-22T01:00:00Z"
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn request(
        decision: Option<DecisionType>,
        status: Option<ApprovalRequestStatus>,
    ) -> ApprovalRequest {
        let mut r = ApprovalRequest::new(
            "r",
            ApprovalRequestSpec {
                caller: None,
                agent_ref: AgentRef::agent("a"),
                tool_server: ToolServerRef::default(),
                tool_name: "t".into(),
                arguments_preview: None,
                arguments_sha256: "0".repeat(64),
                arguments_bytes: 2,
                requested_by: "sa".into(),
                message: None,
                context: None,
                rule: None,
                required_approvals: None,
                approvals: Vec::new(),
                expires_at: Time(ts("2026-11-22T01:00:00Z")),
                grant: None,
                decision: decision.map(|decision_type| Decision {
                    decision_type,
                    reason: None,
                    decided_by: "alice".into(),
                }),
                edit: None,
                edit_approvals: Vec::new(),
                escalation: None,
                tool_annotations: None,
            },
        );
        r.status = status;
        r
    }

    const BEFORE: &str = "2026-11-22T00:59:59Z";
    const AT: &str = "2026-11-22T01:00:00Z";

    #[test]
    fn undecided_is_pending_until_expiry() {
        assert_eq!(request(None, None).phase_at(ts(BEFORE)), Phase::Pending);
        assert_eq!(request(None, None).phase_at(ts(AT)), Phase::Expired);
        // A stale status from the controller does not hide the expiry.
        let stale = ApprovalRequestStatus {
            phase: Some(Phase::Pending),
            ..Default::default()
        };
        assert_eq!(request(None, Some(stale)).phase_at(ts(AT)), Phase::Expired);
    }

    #[test]
    fn decisions() {
        // A decision whose recording time is unknown counts from when it is seen.
        assert_eq!(
            request(Some(DecisionType::Deny), None).phase_at(ts(BEFORE)),
            Phase::Denied
        );
        assert_eq!(
            request(Some(DecisionType::Deny), None).phase_at(ts(AT)),
            Phase::Expired
        );
        let approve = request(Some(DecisionType::Approve), None);
        assert_eq!(approve.phase_at(ts(BEFORE)), Phase::Approved);
        assert_eq!(approve.phase_at(ts(AT)), Phase::Expired);
        let in_time = ApprovalRequestStatus {
            decided_at: Some(Time(ts(BEFORE))),
            ..Default::default()
        };
        assert_eq!(
            request(Some(DecisionType::Approve), Some(in_time)).phase_at(ts(AT)),
            Phase::Approved
        );
        let late = ApprovalRequestStatus {
            decided_at: Some(Time(ts(AT))),
            ..Default::default()
        };
        assert_eq!(
            request(Some(DecisionType::Approve), Some(late)).phase_at(ts(BEFORE)),
            Phase::Expired
        );
    }

    fn quorum(
        required: i32,
        approvers: &[&str],
        decision: Option<(DecisionType, &str)>,
    ) -> ApprovalRequest {
        let mut r = request(None, None);
        r.spec.required_approvals = Some(required);
        r.spec.approvals = approvers
            .iter()
            .map(|by| Approval {
                approved_by: (*by).into(),
                reason: None,
                at: None,
            })
            .collect();
        r.spec.decision = decision.map(|(decision_type, by)| Decision {
            decision_type,
            reason: None,
            decided_by: by.into(),
        });
        r
    }

    #[test]
    fn a_quorum_request_is_pending_until_its_approvals_and_decision_are_in() {
        let one = quorum(2, &["alice"], None);
        assert_eq!(one.phase_at(ts(BEFORE)), Phase::Pending);
        assert_eq!(one.approvals_summary(), "1/2");
        assert!(!one.quorum_met("alice"));
        // Enough approvals but no decision yet: still pending (the decision is final).
        let both = quorum(2, &["alice", "bob"], None);
        assert_eq!(both.phase_at(ts(BEFORE)), Phase::Pending);
        let approved = quorum(2, &["alice", "bob"], Some((DecisionType::Approve, "bob")));
        assert_eq!(approved.phase_at(ts(BEFORE)), Phase::Approved);
        assert_eq!(approved.approvals_summary(), "2/2");
        // An Approve without the quorum, or by someone who did not approve, counts for
        // nothing: pending until it expires.
        for short in [
            quorum(2, &["alice"], Some((DecisionType::Approve, "alice"))),
            quorum(2, &["alice", "bob"], Some((DecisionType::Approve, "carol"))),
            quorum(
                2,
                &["alice", "alice"],
                Some((DecisionType::Approve, "alice")),
            ),
        ] {
            assert_eq!(
                short.phase_at(ts(BEFORE)),
                Phase::Pending,
                "{:?}",
                short.spec
            );
            assert_eq!(short.phase_at(ts(AT)), Phase::Expired);
        }
        // One Deny ends it, whatever the approvals.
        let denied = quorum(3, &["alice"], Some((DecisionType::Deny, "bob")));
        assert_eq!(denied.phase_at(ts(BEFORE)), Phase::Denied);
        assert_eq!(denied.approvals_summary(), "1/3");
    }

    #[test]
    fn without_required_approvals_one_approve_is_enough() {
        let r = request(Some(DecisionType::Approve), None);
        assert_eq!(r.required_approvals(), 1);
        assert_eq!(r.approvals_summary(), "1/1");
        assert!(r.quorum_met("anyone"));
        assert_eq!(request(None, None).approvals_summary(), "0/1");
    }

    #[test]
    fn a_request_decided_by_a_grant_is_approved_until_consumed_or_expired() {
        let mut granted = request(None, None);
        granted.spec.grant = Some(Box::new(GrantRef {
            name: "g".into(),
            granted_by: "alice".into(),
            reason: None,
        }));
        assert_eq!(granted.phase_at(ts(BEFORE)), Phase::Approved);
        assert_eq!(granted.phase_at(ts(AT)), Phase::Expired);
        granted.status = Some(ApprovalRequestStatus {
            consumed_at: Some(Time(ts(BEFORE))),
            ..Default::default()
        });
        assert_eq!(granted.phase_at(ts(AT)), Phase::Executed);
    }

    #[test]
    fn consumption_and_terminal_status_win() {
        let consumed = ApprovalRequestStatus {
            consumed_at: Some(Time(ts(BEFORE))),
            ..Default::default()
        };
        assert_eq!(
            request(Some(DecisionType::Approve), Some(consumed)).phase_at(ts(AT)),
            Phase::Executed
        );
        let cancelled = ApprovalRequestStatus {
            phase: Some(Phase::Cancelled),
            ..Default::default()
        };
        assert_eq!(
            request(None, Some(cancelled)).phase_at(ts(BEFORE)),
            Phase::Cancelled
        );
    }
}
