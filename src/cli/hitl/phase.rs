//! The phase a request is in, computed from spec, status and the clock, so that `kubectl hitl`
//! shows the same answer whether or not the controller has caught up.

use jiff::Timestamp;

use crate::api::approval_request::{ApprovalRequest, DecisionType, Phase};

/// The effective phase of `request` at `now`.
///
/// A terminal status phase wins; then consumption (Executed); then a Deny decision (Denied); an
/// Approve decision counts (Approved) only if it was recorded before `expiresAt` — the recording
/// time is `status.decidedAt` when the controller has written it, else `now`; with no decision a
/// request is Pending until `expiresAt` and Expired from then on.
pub fn effective_phase(request: &ApprovalRequest, now: Timestamp) -> Phase {
    let status = request.status.as_ref();
    if let Some(phase) = status.and_then(|s| s.phase).filter(|p| p.is_terminal()) {
        return phase;
    }
    if status.is_some_and(|s| s.consumed_at.is_some()) {
        return Phase::Executed;
    }
    let expires_at = request.spec.expires_at.0;
    match request.spec.decision.as_ref().map(|d| d.decision_type) {
        Some(DecisionType::Deny) => Phase::Denied,
        Some(DecisionType::Approve) => {
            let decided_at = status
                .and_then(|s| s.decided_at.as_ref())
                .map_or(now, |t| t.0);
            if decided_at < expires_at {
                Phase::Approved
            } else {
                Phase::Expired
            }
        }
        None if now < expires_at => Phase::Pending,
        None => Phase::Expired,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::approval_request::{
        AgentRef, ApprovalRequestSpec, ApprovalRequestStatus, Decision, ToolServerRef,
    };

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
                agent_ref: AgentRef { name: "a".into() },
                tool_server: ToolServerRef::default(),
                tool_name: "t".into(),
                arguments_preview: None,
                arguments_sha256: "0".repeat(64),
                arguments_bytes: 2,
                requested_by: "sa".into(),
                message: None,
                context: None,
                expires_at: Time(ts("2026-11-22T01:00:00Z")),
                decision: decision.map(|decision_type| Decision {
                    decision_type,
                    reason: None,
                    decided_by: "alice".into(),
                }),
            },
        );
        r.status = status;
        r
    }

    const BEFORE: &str = "2026-11-22T00:59:59Z";
    const AT: &str = "2026-11-22T01:00:00Z";

    #[test]
    fn undecided_is_pending_until_expiry() {
        assert_eq!(
            effective_phase(&request(None, None), ts(BEFORE)),
            Phase::Pending
        );
        assert_eq!(
            effective_phase(&request(None, None), ts(AT)),
            Phase::Expired
        );
        // A stale status from the controller does not hide the expiry.
        let stale = ApprovalRequestStatus {
            phase: Some(Phase::Pending),
            ..Default::default()
        };
        assert_eq!(
            effective_phase(&request(None, Some(stale)), ts(AT)),
            Phase::Expired
        );
    }

    #[test]
    fn decisions() {
        assert_eq!(
            effective_phase(&request(Some(DecisionType::Deny), None), ts(AT)),
            Phase::Denied
        );
        let approve = request(Some(DecisionType::Approve), None);
        assert_eq!(effective_phase(&approve, ts(BEFORE)), Phase::Approved);
        assert_eq!(effective_phase(&approve, ts(AT)), Phase::Expired);
        let in_time = ApprovalRequestStatus {
            decided_at: Some(Time(ts(BEFORE))),
            ..Default::default()
        };
        assert_eq!(
            effective_phase(&request(Some(DecisionType::Approve), Some(in_time)), ts(AT)),
            Phase::Approved
        );
        let late = ApprovalRequestStatus {
            decided_at: Some(Time(ts(AT))),
            ..Default::default()
        };
        assert_eq!(
            effective_phase(
                &request(Some(DecisionType::Approve), Some(late)),
                ts(BEFORE)
            ),
            Phase::Expired
        );
    }

    #[test]
    fn consumption_and_terminal_status_win() {
        let consumed = ApprovalRequestStatus {
            consumed_at: Some(Time(ts(BEFORE))),
            ..Default::default()
        };
        assert_eq!(
            effective_phase(
                &request(Some(DecisionType::Approve), Some(consumed)),
                ts(AT)
            ),
            Phase::Executed
        );
        let cancelled = ApprovalRequestStatus {
            phase: Some(Phase::Cancelled),
            ..Default::default()
        };
        assert_eq!(
            effective_phase(&request(None, Some(cancelled)), ts(BEFORE)),
            Phase::Cancelled
        );
    }
}
