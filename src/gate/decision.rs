//! The gate's phase logic, pure: given an ApprovalRequest, the call it must match and the time,
//! forward the call, keep waiting, or refuse it. The gate never relies on the controller to
//! compute phases.

use jiff::Timestamp;

use crate::api::agent::ToolServerKind;
use crate::api::approval_request::{ApprovalRequest, DecisionType, Phase};

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

/// What a request must be about to decide a call: (agent, server, tool, argumentsSha256).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallKey {
    /// Agent name.
    pub agent: String,
    /// Kind of the tool server.
    pub server_kind: ToolServerKind,
    /// Namespace of the tool server.
    pub server_namespace: String,
    /// Name of the tool server.
    pub server_name: String,
    /// Tool name.
    pub tool: String,
    /// SHA-256 hex of the canonical arguments.
    pub sha256: String,
}

impl CallKey {
    /// Whether `req` is about exactly this call.
    pub fn matches(&self, req: &ApprovalRequest) -> bool {
        let s = &req.spec;
        s.agent_ref.name == self.agent
            && s.tool_server.kind == self.server_kind
            && s.tool_server.namespace == self.server_namespace
            && s.tool_server.name == self.server_name
            && s.tool_name == self.tool
            && s.arguments_sha256 == self.sha256
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
    /// The request is inconsistent or not about this call; never trusted.
    Malformed(String),
}

/// Decides a call from its request at `now`. Fails closed: anything unexpected refuses.
pub fn decide(req: &ApprovalRequest, key: &CallKey, now: Timestamp) -> Verdict {
    if !key.matches(req) {
        return Verdict::Refuse(Refusal::Malformed(
            "the ApprovalRequest is not about this call".into(),
        ));
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
        // after expiresAt may have been written after it, and revives nothing.
        Some(_) if now >= expires_at || phase == Some(Phase::Expired) => {
            Verdict::Refuse(Refusal::Expired { expires_at })
        }
        Some(_) => match phase {
            None | Some(Phase::Pending) | Some(Phase::Approved) => Verdict::Forward,
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

/// Whether a call may still be decided through `req` (it is neither finished nor expired), so
/// identical calls share it instead of creating a new one.
pub fn is_live(req: &ApprovalRequest, key: &CallKey, now: Timestamp) -> bool {
    matches!(decide(req, key, now), Verdict::Forward | Verdict::Wait)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::{
        AgentRef, ApprovalRequestSpec, ApprovalRequestStatus, Decision, ToolServerRef,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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
            server_kind: ToolServerKind::RemoteMCPServer,
            server_namespace: "ns".into(),
            server_name: "fs".into(),
            tool: "delete_file".into(),
            sha256: "ab".repeat(32),
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
                agent_ref: AgentRef { name: k.agent },
                tool_server: ToolServerRef {
                    kind: k.server_kind,
                    name: k.server_name,
                    namespace: k.server_namespace,
                },
                tool_name: k.tool,
                arguments_preview: None,
                arguments_sha256: k.sha256,
                arguments_bytes: 2,
                requested_by: "system:serviceaccount:ns:a".into(),
                message: None,
                context: None,
                expires_at: Time(t("2026-11-22T01:00:00Z")),
                decision: decision.map(|(decision_type, by)| Decision {
                    decision_type,
                    reason: Some("because".into()),
                    decided_by: by.into(),
                }),
            },
        );
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
        decide(r, &key(), Fixed(t(when)).now())
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
        assert!(is_live(&r, &key(), t(BEFORE)));
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
        assert!(!is_live(&r, &key(), t(BEFORE)));
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
        other.sha256 = "cd".repeat(32);
        assert!(matches!(
            decide(&approved, &other, t(BEFORE)),
            Verdict::Refuse(Refusal::Malformed(_))
        ));
        let mut other = key();
        other.server_name = "other-server".into();
        assert!(!is_live(&approved, &other, t(BEFORE)));
        let mut other = key();
        other.tool = "read_file".into();
        assert!(!is_live(&approved, &other, t(BEFORE)));
    }
}
