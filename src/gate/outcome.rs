//! The texts a caller (the LLM) gets when a call is not forwarded, one per outcome, and the
//! metric outcome of each resolution.

use super::approval::Resolution;
use super::decision::Refusal;
use super::metrics::Outcome;
use crate::api::approval_request::DecisionType;

/// Prefix of every refusal: the caller must not think the tool ran.
const NOT_EXECUTED: &str = "NOT executed";

/// Prefix of a call that reached its server without a whole answer coming back: it may have run.
const OUTCOME_UNKNOWN: &str = "Outcome UNKNOWN";

/// Text for a tool that is not in the server's `toolNames`.
pub fn unknown_tool(tool: &str) -> String {
    format!("{NOT_EXECUTED}: tool '{tool}' is not available on this server.")
}

/// Text for a call a Deny rule of the Agent refuses: nobody can approve it.
pub fn denied_by_rule(tool: &str, rule: &str) -> String {
    format!(
        "{NOT_EXECUTED}: tool '{tool}' is denied for these arguments by approval rule '{rule}' of this agent. No approval can be asked for this call."
    )
}

/// Text for a call of a gated tool refused because the Agent is frozen (`why`: the freeze, or
/// why the gate cannot tell), before any request was asked.
pub fn frozen(tool: &str, why: &str) -> String {
    format!(
        "{NOT_EXECUTED}: tool '{tool}' needs approval and this agent's gated tools are stopped: {why}. No approval can be asked while the freeze lasts; when it is lifted, make the call again (nothing refused now runs by itself)."
    )
}

/// Text for a call that needs approval while its agent (on a shared gate: its `caller`) holds
/// `open` open ApprovalRequests in `namespace`, at its cap `cap`: no request was created, so
/// nobody can approve this call yet.
pub fn open_request_cap(
    tool: &str,
    namespace: &str,
    open: usize,
    cap: u32,
    caller: Option<&str>,
) -> String {
    let holder = match caller {
        Some(caller) => format!("the caller {caller} (on this shared gate)"),
        None => "this agent".into(),
    };
    format!(
        "{NOT_EXECUTED}: tool '{tool}' needs a human approval, but {holder} already has {open} open approval requests in namespace {namespace} \
         (Pending, or Approved and not yet used) and may have at most {cap} (approval.maxOpenRequests), so no approval request was created for this call. \
         A call already approved runs when you make it again, which frees its place; an approver can decide the others (kubectl hitl list -n {namespace}), \
         or they expire by themselves. Then make this call again. Repeating a call that is already pending is never refused: it reuses its request."
    )
}

/// Text for a retry of a gated call (with `requestState` or `inputResponses`) that continues no
/// approved call (`why`, from [`super::continuation::check`]).
pub fn continuation_refused(tool: &str, why: &str) -> String {
    format!(
        "{NOT_EXECUTED}: tool '{tool}' was called again with the server's requestState or input responses, but {why}. \
         Only the next round of an approved call may go on without a new approval, once. Make the call again from its first round (without requestState and inputResponses) to ask for approval."
    )
}

/// Text for an error of the gate, the apiserver or the upstream.
pub fn error(tool: &str, why: &str) -> String {
    format!(
        "{NOT_EXECUTED}: the approval gate could not run tool '{tool}': {why}. The call was not forwarded."
    )
}

/// Text for an approved call whose upstream failed after the approval was consumed.
pub fn upstream_failed_after_approval(tool: &str, request: &str, why: &str) -> String {
    format!(
        "{NOT_EXECUTED}: tool '{tool}' was approved (ApprovalRequest {request}) but the upstream server failed: {why}. The approval is used up; retry the call to ask for a new one."
    )
}

/// Text for a call sent to its server that gave no whole answer (`why`: what happened), so it
/// may or may not have run; `approval` names the ApprovalRequest it used up, if it was gated.
pub fn upstream_lost(tool: &str, approval: Option<&str>, why: &str) -> String {
    let sent = match approval {
        Some(request) => format!("was approved (ApprovalRequest {request}) and sent to its server"),
        None => "was sent to its server".to_string(),
    };
    let retry = if approval.is_some() {
        " The approval is used up; calling it again asks for a new one."
    } else {
        ""
    };
    format!(
        "{OUTCOME_UNKNOWN}: tool '{tool}' {sent}, but {why}. It may or may not have run: check its effects before calling it again.{retry}"
    )
}

/// The text and metric outcome of a resolution that does not forward (`None` for Approved and
/// Granted).
pub fn refusal_text(
    tool: &str,
    namespace: &str,
    resolution: &Resolution,
) -> Option<(String, Outcome)> {
    match resolution {
        Resolution::Approved { .. } | Resolution::Granted { .. } | Resolution::Edited { .. } => {
            None
        }
        Resolution::Pending { name, previous } => {
            let before = previous
                .as_deref()
                .and_then(|p| Some((p.metadata.name.as_deref()?, p.spec.decision.as_ref()?)))
                .filter(|(_, d)| d.decision_type == DecisionType::Deny)
                .map(|(n, d)| {
                    format!(
                        " An earlier identical call (ApprovalRequest {n}) was denied by {}{}.",
                        d.decided_by,
                        d.reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            Some((
                format!(
                    "{NOT_EXECUTED} yet: tool '{tool}' needs a human approval. Pending: ApprovalRequest {name} in namespace {namespace}. \
                     To approve: kubectl hitl approve {name} -n {namespace} \
                     (or: kubectl patch approvalrequest {name} -n {namespace} --type merge -p '{{\"spec\":{{\"decision\":{{\"type\":\"Approve\",\"decidedBy\":\"<your username>\"}}}}}}'). \
                     Then retry the same call with the same arguments: it will run once.{before}"
                ),
                Outcome::pending,
            ))
        }
        Resolution::Refused { name, refusal } => Some(match refusal {
            Refusal::Denied { reason, decided_by } => (
                format!(
                    "{NOT_EXECUTED}: tool '{tool}' was denied by {decided_by} (ApprovalRequest {name}). Reason: {}",
                    reason.as_deref().unwrap_or("none given")
                ),
                Outcome::denied,
            ),
            Refusal::Expired { expires_at } => (
                format!(
                    "{NOT_EXECUTED}: the approval request for tool '{tool}' (ApprovalRequest {name}) expired at {expires_at}: nobody decided in time. It was not denied, and nothing is approved on expiry. Retry the call to ask again."
                ),
                Outcome::expired,
            ),
            Refusal::Consumed { by } => (
                format!(
                    "{NOT_EXECUTED}: the approval of ApprovalRequest {name} was already used by another identical call{}. Retry the call to ask for a new approval.",
                    by.as_deref()
                        .map(|b| format!(" (by {b})"))
                        .unwrap_or_default()
                ),
                Outcome::refused,
            ),
            Refusal::Cancelled { message } => (
                format!(
                    "{NOT_EXECUTED}: ApprovalRequest {name} for tool '{tool}' was cancelled{}.",
                    message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ),
                Outcome::refused,
            ),
            Refusal::Frozen(why) => (
                format!(
                    "{NOT_EXECUTED}: tool '{tool}' was not forwarded (ApprovalRequest {name}): {why}. Its gated tools are stopped while the freeze lasts; when it is lifted, make the call again (nothing refused now runs by itself)."
                ),
                Outcome::frozen,
            ),
            Refusal::Malformed(why) => (
                error(
                    tool,
                    &format!("ApprovalRequest {name} cannot be trusted: {why}"),
                ),
                Outcome::error,
            ),
            Refusal::Untrusted(why) => (
                format!(
                    "{NOT_EXECUTED}: tool '{tool}' was not forwarded because the gate does not accept ApprovalRequest {name}: {why}. Only a decision added by an approver after the gate created the request counts. Retry the call to ask for a new approval."
                ),
                Outcome::error,
            ),
        }),
    }
}

/// The text for a call approved with an edit the gate refused (`why` names the path and the
/// reason): neither the original nor the edited call ran.
pub fn edit_refused(tool: &str, name: &str, edited_by: &str, why: &str) -> String {
    format!(
        "{NOT_EXECUTED}: the approver's edit of tool '{tool}' (by {edited_by}, ApprovalRequest {name}) was refused: {why}. \
         Neither the original nor the edited call ran. Do not retry the original call unchanged; ask the approver."
    )
}

/// The note added to the result of a call that ran with an approver's edit: which argument
/// paths `edited_by` changed (never their values), so the agent does not retry the original.
pub fn edited_note(tool: &str, name: &str, edited_by: &str, paths: &[String]) -> String {
    let paths = if paths.is_empty() {
        "none".to_owned()
    } else {
        paths.join(", ")
    };
    format!(
        "Note from the approval gate: tool '{tool}' ran with arguments edited by the approver {edited_by} \
         (ApprovalRequest {name}); changed: {paths}. The call ran once as edited; do not retry the original arguments."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn text(r: Resolution) -> (String, Outcome) {
        refusal_text("delete_file", "team", &r).unwrap()
    }

    #[test]
    fn every_outcome_has_a_distinct_not_executed_text() {
        let name = || "a-delete-file-0123456789abcdef-0".to_string();
        let cases = [
            text(Resolution::Pending {
                name: name(),
                previous: None,
            }),
            text(Resolution::Refused {
                name: name(),
                refusal: Refusal::Denied {
                    reason: Some("too risky".into()),
                    decided_by: "alice".into(),
                },
            }),
            text(Resolution::Refused {
                name: name(),
                refusal: Refusal::Expired {
                    expires_at: "2026-11-22T01:00:00Z".parse().unwrap(),
                },
            }),
            text(Resolution::Refused {
                name: name(),
                refusal: Refusal::Consumed {
                    by: Some("pod-1".into()),
                },
            }),
            text(Resolution::Refused {
                name: name(),
                refusal: Refusal::Cancelled { message: None },
            }),
            text(Resolution::Refused {
                name: name(),
                refusal: Refusal::Frozen("Agent a is frozen".into()),
            }),
            text(Resolution::Refused {
                name: name(),
                refusal: Refusal::Malformed("bad".into()),
            }),
            text(Resolution::Refused {
                name: name(),
                refusal: Refusal::Untrusted("bad".into()),
            }),
        ];
        let outcomes: Vec<Outcome> = cases.iter().map(|c| c.1).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::pending,
                Outcome::denied,
                Outcome::expired,
                Outcome::refused,
                Outcome::refused,
                Outcome::frozen,
                Outcome::error,
                Outcome::error
            ]
        );
        let texts: HashSet<&str> = cases.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(texts.len(), cases.len());
        assert!(cases.iter().all(|c| c.0.starts_with(NOT_EXECUTED)));
        assert!(
            cases[0]
                .0
                .contains("kubectl hitl approve a-delete-file-0123456789abcdef-0 -n team")
        );
        assert!(cases[0].0.contains(
            "kubectl patch approvalrequest a-delete-file-0123456789abcdef-0 -n team --type merge"
        ));
        assert!(cases[1].0.contains("denied by alice") && cases[1].0.contains("too risky"));
        assert!(cases[2].0.contains("expired at 2026-11-22T01:00:00Z"));
        // Expiry is not a denial (issue 60): the model is told nobody decided in time.
        assert!(cases[2].0.contains("nobody decided in time"));
        assert!(cases[2].0.contains("not denied"));
        assert!(!cases[2].0.contains("was denied"));
        assert!(refusal_text("t", "n", &Resolution::Approved { name: name() }).is_none());
        assert!(error("t", "boom").starts_with(NOT_EXECUTED));
        assert!(unknown_tool("t").starts_with(NOT_EXECUTED));
        assert!(frozen("t", "Agent a is frozen").starts_with(NOT_EXECUTED));
    }

    #[test]
    fn the_cap_text_says_how_many_are_open_the_cap_and_what_to_do() {
        let text = open_request_cap("delete_file", "team", 50, 50, None);
        assert!(text.starts_with(NOT_EXECUTED), "{text}");
        for part in [
            "tool 'delete_file' needs a human approval",
            "already has 50 open approval requests in namespace team",
            "may have at most 50 (approval.maxOpenRequests)",
            "no approval request was created",
            "kubectl hitl list -n team",
            "expire by themselves",
            "Repeating a call that is already pending is never refused",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(!text.contains("  "), "{text}");
    }

    #[test]
    fn a_call_that_may_have_run_never_says_not_executed() {
        let ungated = upstream_lost("t", None, "upstream s did not answer within 5s");
        let gated = upstream_lost("t", Some("r"), "upstream s did not answer within 5s");
        for text in [&ungated, &gated] {
            assert!(text.starts_with(OUTCOME_UNKNOWN) && !text.contains(NOT_EXECUTED));
            assert!(text.contains("may or may not have run"));
        }
        assert!(gated.contains("ApprovalRequest r") && gated.contains("used up"));
        assert!(!ungated.contains("approv"));
    }
}
