//! The gate's phase logic, pure: given an ApprovalRequest, the call it must match and the time,
//! forward the call, keep waiting, or refuse it. The gate never relies on the controller to
//! compute phases.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

use crate::api::agent::ToolServerKind;
use crate::api::approval_request::{ApprovalRequest, DecisionType, Phase, PolicyKind};

/// A source of the current time, injected so tests are deterministic.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// What a request must be about to decide a call: (agent or ToolGate, caller, server, tool,
/// binding hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallKey {
    /// Name of the Agent or ToolGate whose gate this is (`spec.agentRef.name`).
    pub agent: String,
    /// Its kind (`spec.agentRef.kind`).
    pub kind: PolicyKind,
    /// The caller's username on a shared gate (`spec.caller.username`); `None` on an Agent's
    /// gate. Identical calls of different callers never share a request.
    pub caller: Option<String>,
    /// Kind of the tool server.
    pub server_kind: ToolServerKind,
    /// Namespace of the tool server.
    pub server_namespace: String,
    /// Name of the tool server.
    pub server_name: String,
    /// Tool name.
    pub tool: String,
    /// Binding hash of the arguments ([`super::hash::digest`]), `spec.argumentsSha256`.
    pub binding: String,
    /// Distinct approvals the gate's policy asks for this call. Not part of what the request
    /// is about ([`Self::matches`]), but a request asking fewer is never trusted ([`decide`]);
    /// one asking more keeps its own count.
    pub required_approvals: u32,
}

impl CallKey {
    /// Whether `req` is about exactly this call.
    pub fn matches(&self, req: &ApprovalRequest) -> bool {
        let s = &req.spec;
        s.agent_ref.name == self.agent
            && s.agent_ref.kind() == self.kind
            && s.caller.as_ref().map(|c| c.username.as_str()) == self.caller.as_deref()
            && s.tool_server.kind == self.server_kind
            && s.tool_server.namespace == self.server_namespace
            && s.tool_server.name == self.server_name
            && s.tool_name == self.tool
            && s.arguments_sha256 == self.binding
    }
}

/// What to do with a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A valid, unexpired, unconsumed approval: consume it, then forward.
    Forward,
    /// No decision yet and not expired.
    Wait,
    /// The call must not run.
    Refuse(Refusal),
}

/// Why a call must not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A person denied it.
    Denied {
        /// Their reason, if given.
        reason: Option<String>,
        /// Who denied.
        decided_by: String,
    },
    /// Not approved before `expiresAt`.
    Expired {
        /// When it expired.
        expires_at: Timestamp,
    },
    /// The approval already let one call through.
    Consumed {
        /// The gate instance that used it.
        by: Option<String>,
    },
    /// Withdrawn (policy changed or agent gone).
    Cancelled {
        /// Why, if known.
        message: Option<String>,
    },
    /// The Agent is frozen, or the gate cannot tell whether it is (why).
    Frozen(String),
    /// The request is inconsistent or not about this call; never trusted.
    Malformed(String),
    /// The request is not this gate's, or its approval was not added after creation by
    /// someone other than the requester (DESIGN.md §4 invariant 9).
    Untrusted(String),
}

/// Decides a call from its request at `now`, for the gate whose identity (its ServiceAccount's
/// username, the `requestedBy` of the requests it creates) is `gate`. Fails closed: anything
/// unexpected refuses.
pub fn decide(req: &ApprovalRequest, key: &CallKey, gate: &str, now: Timestamp) -> Verdict {
    if !key.matches(req) {
        return Verdict::Refuse(Refusal::Malformed(
            "the ApprovalRequest is not about this call".into(),
        ));
    }
    if req.spec.requested_by != gate {
        return Verdict::Refuse(Refusal::Untrusted(format!(
            "it was requested by {}, not by this gate ({gate})",
            req.spec.requested_by
        )));
    }
    if let Some(grant) = &req.spec.grant {
        return Verdict::Refuse(Refusal::Untrusted(format!(
            "it records a call decided by the grant {}; such a request is never reused",
            grant.name
        )));
    }
    let required = req.required_approvals();
    if required < key.required_approvals {
        return Verdict::Refuse(Refusal::Untrusted(format!(
            "it asks for {required} approval(s) (spec.requiredApprovals), but the approval rule asks for {}",
            key.required_approvals
        )));
    }
    let status = req.status.as_ref();
    let phase = status.and_then(|s| s.phase);
    let expires_at = req.spec.expires_at.0;
    if phase == Some(Phase::Cancelled) {
        return Verdict::Refuse(Refusal::Cancelled {
            message: status.and_then(|s| s.message.clone()),
        });
    }
    if phase == Some(Phase::Executed) || status.is_some_and(|s| s.consumed_at.is_some()) {
        return Verdict::Refuse(Refusal::Consumed {
            by: status.and_then(|s| s.consumed_by.clone()),
        });
    }
    match &req.spec.decision {
        Some(d) if d.decided_by.trim().is_empty() => Verdict::Refuse(Refusal::Malformed(
            "the decision does not say who decided".into(),
        )),
        Some(d) if d.decision_type == DecisionType::Deny => Verdict::Refuse(Refusal::Denied {
            reason: d.reason.clone(),
            decided_by: d.decided_by.clone(),
        }),
        // An approval counts only while the request is live: one seen (and consumed) at or
        // after expiresAt may have been written after it, and revives nothing. Both clocks
        // judge: the gate's now, and the apiserver's record of when the decision was written.
        Some(_)
            if now >= expires_at
                || phase == Some(Phase::Expired)
                || req.decision_write_times().any(|t| t >= expires_at) =>
        {
            Verdict::Refuse(Refusal::Expired { expires_at })
        }
        Some(d) => match phase {
            None | Some(Phase::Pending) | Some(Phase::Approved) => {
                match untrusted_approval(req, &d.decided_by) {
                    Some(why) => Verdict::Refuse(Refusal::Untrusted(why)),
                    None => Verdict::Forward,
                }
            }
            Some(p) => Verdict::Refuse(Refusal::Malformed(format!(
                "phase {} contradicts the Approve decision",
                p.as_str()
            ))),
        },
        None if now >= expires_at || phase == Some(Phase::Expired) => {
            Verdict::Refuse(Refusal::Expired { expires_at })
        }
        None => match phase {
            None | Some(Phase::Pending) => Verdict::Wait,
            Some(p) => Verdict::Refuse(Refusal::Malformed(format!(
                "phase {} without a decision",
                p.as_str()
            ))),
        },
    }
}

/// Why an Approve by `decided_by` on `req` does not count, if it does not: only a decision added
/// after creation, by someone other than the requester (or, on a shared gate, the caller),
/// counts (DESIGN.md §4 invariant 9), and on a request that needs several approvals only with
/// that many distinct approvers in `spec.approvals`, the decider among them, none of them the
/// requester or the caller.
/// Creation is told from `managedFields`: the apiserver records who wrote each field, and
/// whoever wrote `spec.argumentsSha256` (immutable, so only at creation) created the request.
/// If that entry also owns `spec.decision` or `spec.approvals`, they came with the request (or
/// from its creator) and are refused; so is a request whose managedFields name no creator.
/// (`decide` has already checked that the requester is the gate itself, and that the request
/// asks for at least the approvals the policy does.)
fn untrusted_approval(req: &ApprovalRequest, decided_by: &str) -> Option<String> {
    if decided_by == req.spec.requested_by {
        return Some(format!(
            "it was approved by its own requester ({decided_by})"
        ));
    }
    if req
        .spec
        .caller
        .as_ref()
        .is_some_and(|c| c.username == decided_by)
    {
        return Some(format!("it was approved by its own caller ({decided_by})"));
    }
    if let Some(why) = short_of_quorum(req, decided_by).or_else(|| untrusted_edit(req)) {
        return Some(why);
    }
    let owns = |entry: &ManagedFieldsEntry, field: &str| {
        entry
            .fields_v1
            .as_ref()
            .and_then(|fields| fields.0.get("f:spec"))
            .and_then(|spec| spec.get(field))
            .is_some()
    };
    let creators: Vec<&ManagedFieldsEntry> = req
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.subresource.as_deref().unwrap_or_default().is_empty())
        .filter(|entry| owns(entry, "f:argumentsSha256"))
        .collect();
    if creators.is_empty() {
        return Some(
            "its managedFields do not show who created it, so the approval may have come with it"
                .into(),
        );
    }
    if creators.iter().any(|entry| {
        ["f:decision", "f:approvals", "f:edit", "f:editApprovals"]
            .iter()
            .any(|field| owns(entry, field))
    }) {
        return Some(
            "the approval was written by whoever created the request, not added by an approver afterwards"
                .into(),
        );
    }
    None
}

/// Why the approvals of `req` do not back an Approve by `decided_by`, if they do not: a request
/// needing more than one approval needs that many entries in `spec.approvals`, each naming a
/// different person other than the requester, the decider among them.
fn short_of_quorum(req: &ApprovalRequest, decided_by: &str) -> Option<String> {
    let required = req.required_approvals();
    if required <= 1 && req.spec.edit.is_none() {
        return None;
    }
    // On an edited request only the approvals of the edited call count.
    let field = if req.spec.edit.is_some() {
        "spec.editApprovals"
    } else {
        "spec.approvals"
    };
    let approvals = req.counted_approvals();
    if approvals.iter().any(|a| a.approved_by.trim().is_empty()) {
        return Some(format!("an entry of {field} does not say who approved"));
    }
    let approvers = req.approvers();
    if approvers.len() != approvals.len() {
        return Some(format!("{field} names the same person more than once"));
    }
    if approvers.contains(&req.spec.requested_by.as_str()) {
        return Some(format!(
            "{field} holds an approval by its own requester ({})",
            req.spec.requested_by
        ));
    }
    if let Some(caller) = &req.spec.caller
        && approvers.contains(&caller.username.as_str())
    {
        return Some(format!(
            "{field} holds an approval by its own caller ({})",
            caller.username
        ));
    }
    if approvers.len() < required as usize {
        return Some(format!(
            "it needs {required} approvals and {field} holds {}",
            approvers.len()
        ));
    }
    if !approvers.contains(&decided_by) {
        return Some(format!(
            "its decider {decided_by} is not among its approvers ({})",
            approvers.join(", ")
        ));
    }
    None
}

/// Why the edit of `req` (`spec.edit`) does not count, if it does not: it was made by the
/// requester or the caller.
fn untrusted_edit(req: &ApprovalRequest) -> Option<String> {
    let edit = req.spec.edit.as_ref()?;
    if edit.edited_by.trim().is_empty() {
        return Some("spec.edit does not say who edited".into());
    }
    if edit.edited_by == req.spec.requested_by {
        return Some(format!(
            "it was edited by its own requester ({})",
            edit.edited_by
        ));
    }
    if req
        .spec
        .caller
        .as_ref()
        .is_some_and(|c| c.username == edit.edited_by)
    {
        return Some(format!(
            "it was edited by its own caller ({})",
            edit.edited_by
        ));
    }
    None
}

/// Whether a call may still be decided through `req` (it is neither finished nor expired), so
/// identical calls share it instead of creating a new one.
pub fn is_live(req: &ApprovalRequest, key: &CallKey, gate: &str, now: Timestamp) -> bool {
    matches!(
        decide(req, key, gate, now),
        Verdict::Forward | Verdict::Wait
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::{
        AgentRef, ApprovalRequestSpec, ApprovalRequestStatus, Decision, ToolServerRef,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, Time};
    use serde_json::json;

    const GATE: &str = "system:serviceaccount:ns:a";

    /// A managedFields entry of `manager` owning `spec` fields.
    fn entry(manager: &str, spec: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": spec}))),
            ..Default::default()
        }
    }

    /// What the apiserver records when the gate creates a request without a decision.
    fn created() -> ManagedFieldsEntry {
        entry(
            "hitl-gate",
            json!({"f:argumentsSha256": {}, "f:requestedBy": {}, "f:toolName": {}}),
        )
    }

    /// What it records when an approver adds the decision afterwards.
    fn decided() -> ManagedFieldsEntry {
        entry(
            "kubectl-hitl",
            json!({"f:decision": {".": {}, "f:type": {}, "f:decidedBy": {}}}),
        )
    }

    struct Fixed(Timestamp);
    impl Clock for Fixed {
        fn now(&self) -> Timestamp {
            self.0
        }
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn key() -> CallKey {
        CallKey {
            agent: "a".into(),
            kind: PolicyKind::Agent,
            caller: None,
            server_kind: ToolServerKind::RemoteMCPServer,
            server_namespace: "ns".into(),
            server_name: "fs".into(),
            tool: "delete_file".into(),
            binding: "ab".repeat(32),
            required_approvals: 1,
        }
    }

    fn req(
        decision: Option<(DecisionType, &str)>,
        status: Option<ApprovalRequestStatus>,
    ) -> ApprovalRequest {
        let k = key();
        let mut r = ApprovalRequest::new(
            "r",
            ApprovalRequestSpec {
                caller: None,
                agent_ref: AgentRef::agent(k.agent),
                tool_server: ToolServerRef {
                    kind: k.server_kind,
                    name: k.server_name,
                    namespace: k.server_namespace,
                },
                tool_name: k.tool,
                arguments_preview: None,
                arguments_sha256: k.binding,
                arguments_bytes: 2,
                requested_by: GATE.into(),
                message: None,
                context: None,
                rule: None,
                required_approvals: None,
                approvals: Vec::new(),
                expires_at: Time(t("2026-11-22T01:00:00Z")),
                escalation: None,
                grant: None,
                decision: decision.map(|(decision_type, by)| Decision {
                    decision_type,
                    reason: Some("because".into()),
                    decided_by: by.into(),
                }),
                edit: None,
                edit_approvals: Vec::new(),
                tool_annotations: None,
            },
        );
        r.metadata.managed_fields = Some(if r.spec.decision.is_some() {
            vec![created(), decided()]
        } else {
            vec![created()]
        });
        r.status = status;
        r
    }

    fn phase(p: Phase) -> Option<ApprovalRequestStatus> {
        Some(ApprovalRequestStatus {
            phase: Some(p),
            ..Default::default()
        })
    }

    const BEFORE: &str = "2026-11-22T00:59:59Z";
    const AT: &str = "2026-11-22T01:00:00Z";

    fn at(r: &ApprovalRequest, when: &str) -> Verdict {
        decide(r, &key(), GATE, Fixed(t(when)).now())
    }

    #[test]
    fn undecided_waits_until_expiry() {
        assert_eq!(at(&req(None, None), BEFORE), Verdict::Wait);
        assert_eq!(at(&req(None, phase(Phase::Pending)), BEFORE), Verdict::Wait);
        assert_eq!(
            at(&req(None, None), AT),
            Verdict::Refuse(Refusal::Expired { expires_at: t(AT) })
        );
    }

    #[test]
    fn approve_before_expiry_forwards() {
        let r = req(Some((DecisionType::Approve, "alice")), None);
        assert_eq!(at(&r, BEFORE), Verdict::Forward);
        let r = req(
            Some((DecisionType::Approve, "alice")),
            phase(Phase::Approved),
        );
        assert_eq!(at(&r, BEFORE), Verdict::Forward);
        assert!(is_live(&r, &key(), GATE, t(BEFORE)));
    }

    #[test]
    fn a_request_decided_by_a_grant_is_never_reused() {
        let mut r = req(None, phase(Phase::Approved));
        r.spec.grant = Some(Box::new(crate::api::approval_request::GrantRef {
            name: "g1".into(),
            granted_by: "alice".into(),
            reason: None,
        }));
        assert!(
            matches!(at(&r, BEFORE), Verdict::Refuse(Refusal::Untrusted(why)) if why.contains("grant g1"))
        );
        assert!(!is_live(&r, &key(), GATE, t(BEFORE)));
    }

    #[test]
    fn approve_seen_at_or_after_expiry_is_expired() {
        let r = req(Some((DecisionType::Approve, "alice")), None);
        assert_eq!(
            at(&r, AT),
            Verdict::Refuse(Refusal::Expired { expires_at: t(AT) })
        );
        let r = req(
            Some((DecisionType::Approve, "alice")),
            phase(Phase::Expired),
        );
        assert_eq!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Expired { expires_at: t(AT) })
        );
        assert!(!is_live(&r, &key(), GATE, t(BEFORE)));
    }

    #[test]
    fn an_approval_the_apiserver_recorded_after_expiry_is_expired_whatever_the_gate_clock() {
        // The gate's clock runs late (it still reads BEFORE), but the apiserver recorded the
        // decision at expiresAt or later: it revives nothing.
        let mut r = req(Some((DecisionType::Approve, "alice")), None);
        let written = |r: &mut ApprovalRequest, when: &str| {
            r.metadata.managed_fields.as_mut().unwrap()[1].time = Some(Time(t(when)));
        };
        written(&mut r, AT);
        assert_eq!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Expired { expires_at: t(AT) })
        );
        assert!(!is_live(&r, &key(), GATE, t(BEFORE)));
        written(&mut r, BEFORE);
        assert_eq!(at(&r, BEFORE), Verdict::Forward);
    }

    #[test]
    fn deny_refuses_with_reason_and_who() {
        let r = req(Some((DecisionType::Deny, "bob")), None);
        assert_eq!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Denied {
                reason: Some("because".into()),
                decided_by: "bob".into()
            })
        );
        // Still denied after expiry: the denial is what happened.
        assert!(matches!(
            at(&r, AT),
            Verdict::Refuse(Refusal::Denied { .. })
        ));
    }

    #[test]
    fn consumed_approval_never_forwards_again() {
        let consumed = Some(ApprovalRequestStatus {
            phase: Some(Phase::Approved),
            consumed_at: Some(Time(t("2026-11-22T00:30:00Z"))),
            consumed_by: Some("gate-0".into()),
            ..Default::default()
        });
        let r = req(Some((DecisionType::Approve, "alice")), consumed);
        assert_eq!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Consumed {
                by: Some("gate-0".into())
            })
        );
        let r = req(
            Some((DecisionType::Approve, "alice")),
            phase(Phase::Executed),
        );
        assert_eq!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Consumed { by: None })
        );
    }

    #[test]
    fn cancelled_refuses() {
        let r = req(
            Some((DecisionType::Approve, "alice")),
            phase(Phase::Cancelled),
        );
        assert_eq!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Cancelled { message: None })
        );
    }

    #[test]
    fn malformed_states_fail_closed() {
        let r = req(Some((DecisionType::Approve, " ")), None);
        assert!(matches!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Malformed(_))
        ));
        let r = req(None, phase(Phase::Approved));
        assert!(matches!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Malformed(_))
        ));
        let r = req(Some((DecisionType::Approve, "alice")), phase(Phase::Denied));
        assert!(matches!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Malformed(_))
        ));
    }

    #[test]
    fn a_request_for_another_call_never_forwards() {
        let approved = req(Some((DecisionType::Approve, "alice")), None);
        let mut other = key();
        other.binding = "cd".repeat(32);
        assert!(matches!(
            decide(&approved, &other, GATE, t(BEFORE)),
            Verdict::Refuse(Refusal::Malformed(_))
        ));
        let mut other = key();
        other.server_name = "other-server".into();
        assert!(!is_live(&approved, &other, GATE, t(BEFORE)));
        let mut other = key();
        other.tool = "read_file".into();
        assert!(!is_live(&approved, &other, GATE, t(BEFORE)));
    }

    fn untrusted(r: &ApprovalRequest) -> String {
        match at(r, BEFORE) {
            Verdict::Refuse(Refusal::Untrusted(why)) => why,
            other => panic!("expected Untrusted, got {other:?}"),
        }
    }

    #[test]
    fn an_approval_that_came_with_the_request_never_forwards() {
        // Created with the decision already set: the creating entry owns spec.decision.
        let mut r = req(Some((DecisionType::Approve, "alice")), None);
        r.metadata.managed_fields = Some(vec![entry(
            "kubectl-create",
            json!({"f:argumentsSha256": {}, "f:decision": {".": {}, "f:type": {}}}),
        )]);
        assert!(untrusted(&r).contains("written by whoever created the request"));
        assert!(!is_live(&r, &key(), GATE, t(BEFORE)));
        // The creator writing the decision later counts as the creator, also with other
        // managers around.
        let mut r = req(Some((DecisionType::Approve, "alice")), None);
        let mut creator = created();
        creator.fields_v1 = Some(FieldsV1(
            json!({"f:spec": {"f:argumentsSha256": {}, "f:decision": {}}}),
        ));
        r.metadata.managed_fields = Some(vec![creator, decided()]);
        assert!(untrusted(&r).contains("written by whoever created the request"));
        // No managedFields, or none naming a creator: nothing shows the decision came later.
        for fields in [None, Some(vec![]), Some(vec![decided()])] {
            let mut r = req(Some((DecisionType::Approve, "alice")), None);
            r.metadata.managed_fields = fields;
            assert!(untrusted(&r).contains("do not show who created it"));
        }
        // A status write does not make its writer the creator.
        let mut r = req(Some((DecisionType::Approve, "alice")), None);
        let mut status = created();
        status.subresource = Some("status".into());
        r.metadata.managed_fields = Some(vec![status, decided()]);
        assert!(untrusted(&r).contains("do not show who created it"));
    }

    #[test]
    fn the_requester_cannot_approve() {
        let r = req(Some((DecisionType::Approve, GATE)), None);
        assert!(untrusted(&r).contains("approved by its own requester"));
        // Denials are honoured from anyone: they only stop a call.
        let r = req(Some((DecisionType::Deny, GATE)), None);
        assert!(matches!(
            at(&r, BEFORE),
            Verdict::Refuse(Refusal::Denied { .. })
        ));
    }

    /// A request needing `required` approvals, approved by `approvers` in that order, with the
    /// final decision `decision`; each write recorded by kubectl-hitl after creation.
    fn quorum(
        required: i32,
        approvers: &[&str],
        decision: Option<(DecisionType, &str)>,
    ) -> ApprovalRequest {
        let mut r = req(decision, None);
        r.spec.required_approvals = Some(required);
        r.spec.approvals = approvers
            .iter()
            .map(|by| crate::api::approval_request::Approval {
                approved_by: (*by).into(),
                reason: None,
                at: None,
            })
            .collect();
        r.metadata.managed_fields = Some(vec![
            created(),
            entry(
                "kubectl-hitl",
                json!({"f:approvals": {}, "f:decision": {".": {}, "f:type": {}}}),
            ),
        ]);
        r
    }

    fn quorum_key(required: u32) -> CallKey {
        CallKey {
            required_approvals: required,
            ..key()
        }
    }

    /// `key` as a shared gate's (ToolGate `a`) for the call of `caller`.
    fn shared_key(caller: &str) -> CallKey {
        CallKey {
            kind: PolicyKind::ToolGate,
            caller: Some(caller.into()),
            ..key()
        }
    }

    /// `r` as a shared gate's request for the call of `caller`.
    fn of_caller(mut r: ApprovalRequest, caller: &str) -> ApprovalRequest {
        r.spec.agent_ref.kind = Some(PolicyKind::ToolGate);
        r.spec.caller = Some(Box::new(crate::api::approval_request::Caller {
            username: caller.into(),
            uid: None,
            groups: vec![],
        }));
        r
    }

    #[test]
    fn a_request_is_about_its_callers_call_of_its_kind_only() {
        let now = t(BEFORE);
        let pending = of_caller(req(None, None), "bot-a");
        assert_eq!(
            decide(&pending, &shared_key("bot-a"), GATE, now),
            Verdict::Wait
        );
        assert!(is_live(&pending, &shared_key("bot-a"), GATE, now));
        // Another caller's identical call, the Agent of the same name, and a request without
        // a caller are other calls.
        for key in [shared_key("bot-b"), key()] {
            assert!(!key.matches(&pending), "{key:?}");
            assert!(!is_live(&pending, &key, GATE, now));
        }
        let no_caller = CallKey {
            caller: None,
            ..shared_key("bot-a")
        };
        assert!(!no_caller.matches(&pending));
        assert!(!shared_key("bot-a").matches(&req(None, None)));
    }

    #[test]
    fn the_caller_cannot_approve_its_own_call() {
        let own = of_caller(req(Some((DecisionType::Approve, "bot-a")), None), "bot-a");
        assert_eq!(
            decide(&own, &shared_key("bot-a"), GATE, t(BEFORE)),
            Verdict::Refuse(Refusal::Untrusted(
                "it was approved by its own caller (bot-a)".into()
            ))
        );
        let other = of_caller(req(Some((DecisionType::Approve, "alice")), None), "bot-a");
        assert_eq!(
            decide(&other, &shared_key("bot-a"), GATE, t(BEFORE)),
            Verdict::Forward
        );
        let quorum = of_caller(
            quorum(
                2,
                &["alice", "bot-a"],
                Some((DecisionType::Approve, "alice")),
            ),
            "bot-a",
        );
        let key = CallKey {
            required_approvals: 2,
            ..shared_key("bot-a")
        };
        assert_eq!(
            decide(&quorum, &key, GATE, t(BEFORE)),
            Verdict::Refuse(Refusal::Untrusted(
                "spec.approvals holds an approval by its own caller (bot-a)".into()
            ))
        );
    }

    #[test]
    fn a_quorum_forwards_only_with_enough_distinct_approvals_the_decider_among_them() {
        let verdict = |r: &ApprovalRequest| decide(r, &quorum_key(2), GATE, t(BEFORE));
        assert_eq!(verdict(&quorum(2, &["alice"], None)), Verdict::Wait);
        assert_eq!(verdict(&quorum(2, &["alice", "bob"], None)), Verdict::Wait);
        let approved = quorum(2, &["alice", "bob"], Some((DecisionType::Approve, "bob")));
        assert_eq!(verdict(&approved), Verdict::Forward);
        let untrusted = |r: &ApprovalRequest| match verdict(r) {
            Verdict::Refuse(Refusal::Untrusted(why)) => why,
            other => panic!("expected Untrusted, got {other:?}"),
        };
        let short = quorum(2, &["alice"], Some((DecisionType::Approve, "alice")));
        assert_eq!(
            untrusted(&short),
            "it needs 2 approvals and spec.approvals holds 1"
        );
        let outsider = quorum(2, &["alice", "bob"], Some((DecisionType::Approve, "carol")));
        assert_eq!(
            untrusted(&outsider),
            "its decider carol is not among its approvers (alice, bob)"
        );
        let twice = quorum(
            2,
            &["alice", "alice"],
            Some((DecisionType::Approve, "alice")),
        );
        assert_eq!(
            untrusted(&twice),
            "spec.approvals names the same person more than once"
        );
        let own = quorum(2, &["alice", GATE], Some((DecisionType::Approve, "alice")));
        assert!(untrusted(&own).contains("approval by its own requester"));
        let nobody = quorum(2, &["alice", " "], Some((DecisionType::Approve, "alice")));
        assert!(untrusted(&nobody).contains("does not say who approved"));
        // A request asking more than the rule keeps its own count.
        let three = quorum(3, &["alice", "bob"], Some((DecisionType::Approve, "bob")));
        assert!(untrusted(&three).contains("needs 3 approvals"));
        // One Deny ends it, whatever the approvals.
        let denied = quorum(2, &["alice"], Some((DecisionType::Deny, "bob")));
        assert!(matches!(
            verdict(&denied),
            Verdict::Refuse(Refusal::Denied { .. })
        ));
    }

    #[test]
    fn a_request_asking_fewer_approvals_than_the_rule_is_never_trusted() {
        // Written before the rule asked for two, or forged: neither waits nor forwards, so the
        // gate asks afresh with the rule's count.
        for decision in [None, Some((DecisionType::Approve, "alice"))] {
            let r = req(decision, None);
            match decide(&r, &quorum_key(2), GATE, t(BEFORE)) {
                Verdict::Refuse(Refusal::Untrusted(why)) => assert_eq!(
                    why,
                    "it asks for 1 approval(s) (spec.requiredApprovals), but the approval rule asks for 2"
                ),
                other => panic!("{other:?}"),
            }
            assert!(!is_live(&r, &quorum_key(2), GATE, t(BEFORE)));
        }
        let approved = quorum(2, &["alice", "bob"], Some((DecisionType::Approve, "bob")));
        assert!(matches!(
            decide(&approved, &quorum_key(3), GATE, t(BEFORE)),
            Verdict::Refuse(Refusal::Untrusted(_))
        ));
    }

    #[test]
    fn approvals_written_by_the_creator_never_count() {
        let mut r = quorum(2, &["alice", "bob"], Some((DecisionType::Approve, "bob")));
        r.metadata.managed_fields = Some(vec![
            entry(
                "hitl-gate",
                json!({"f:argumentsSha256": {}, "f:approvals": {}}),
            ),
            decided(),
        ]);
        match decide(&r, &quorum_key(2), GATE, t(BEFORE)) {
            Verdict::Refuse(Refusal::Untrusted(why)) => {
                assert!(
                    why.contains("written by whoever created the request"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_requests_naming_this_gate_count() {
        for decision in [None, Some((DecisionType::Approve, "alice"))] {
            let mut r = req(decision, None);
            r.spec.requested_by = "system:serviceaccount:ns:other-agent".into();
            assert!(untrusted(&r).contains("requested by system:serviceaccount:ns:other-agent"));
            assert!(!is_live(&r, &key(), GATE, t(BEFORE)));
        }
    }
}
