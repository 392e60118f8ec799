//! A person's decision on ApprovalRequests, as `kubectl hitl approve|deny`, its inbox and Slack
//! write it: `spec.decision` with a JSON merge patch guarded by the resourceVersion that was
//! checked, and every way that can fail explained. On a request that needs several approvals
//! (`spec.requiredApprovals`), approve appends the caller's entry to `spec.approvals`, and sets
//! the decision in the same write when that completes the quorum.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::api::approval_request::{
    Approval, ApprovalRequest, Decision, DecisionChange, DecisionType, Edit, Phase,
};
use crate::apiserver::field_manager;
use crate::apiserver::guarded::{Guarded, GuardedWrite};
use crate::apiserver::paging::list_all;

/// How often a decision is retried when the request changed between read and write.
const ATTEMPTS: u32 = 3;

/// The decision a person asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Approve or Deny.
    pub decision_type: DecisionType,
    /// Why (required for Deny by the command line).
    pub reason: Option<String>,
    /// The caller's username; becomes `decidedBy`.
    pub user: String,
    /// An edit of the call's arguments to make with the approval (`approve --patch`).
    pub edit: Option<EditAsked>,
}

/// An edit a person asked for with their approval: `spec.edit` once written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EditAsked {
    /// The JSON Patch (RFC 6902) text on the arguments as the preview shows them.
    pub patch: String,
}

/// What happened to one ApprovalRequest.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The decision was written.
    Decided {
        /// Request name.
        name: String,
        /// Approve or Deny.
        decision_type: DecisionType,
    },
    /// The caller's approval was added to a request that needs several.
    Approved {
        /// Request name.
        name: String,
        /// Distinct approvals now given.
        given: u32,
        /// Approvals the request needs; when reached, the decision was written too.
        required: u32,
    },
    /// The caller's edit was written with their approval of the edited call.
    Edited {
        /// Request name.
        name: String,
        /// Distinct approvals of the edited call now given (the caller's).
        given: u32,
        /// Approvals the edited call needs; when reached, the decision was written too.
        required: u32,
    },
    /// The caller already approved this request, which still waits for others.
    AlreadyApproved {
        /// Request name.
        name: String,
        /// Distinct approvals given.
        given: u32,
        /// Approvals the request needs.
        required: u32,
    },
    /// No such request in the namespace.
    NotFound {
        /// Request name.
        name: String,
    },
    /// Someone decided first; decisions are write-once.
    AlreadyDecided {
        /// Request name.
        name: String,
        /// The decision in place.
        decision: Decision,
    },
    /// Not decided before `expiresAt`: a decision now would revive nothing.
    Expired {
        /// Request name.
        name: String,
        /// When it expired.
        expires_at: Timestamp,
    },
    /// Finished without a decision (Cancelled).
    Finished {
        /// Request name.
        name: String,
        /// Its phase.
        phase: Phase,
    },
    /// RBAC or the admission policy refused.
    Forbidden {
        /// Request name.
        name: String,
        /// The agent whose `approve` verb is needed, when known.
        agent: Option<String>,
        /// The apiserver's message.
        message: String,
    },
    /// The apiserver rejected the write for another reason (validation, admission).
    Rejected {
        /// Request name.
        name: String,
        /// The apiserver's message.
        message: String,
    },
}

impl Outcome {
    /// Whether the decision was written.
    pub fn is_success(&self) -> bool {
        matches!(
            self,
            Self::Decided { .. } | Self::Approved { .. } | Self::Edited { .. }
        )
    }

    /// What to tell the user, naming `namespace` and, for RBAC problems, the fix for `user`.
    pub fn describe(&self, namespace: &str, user: &str) -> String {
        match self {
            Self::Decided {
                name,
                decision_type,
            } => {
                let verb = match decision_type {
                    DecisionType::Approve => "approved",
                    DecisionType::Deny => "denied",
                };
                format!("approvalrequest/{name} {verb} (decidedBy {user})")
            }
            Self::Approved {
                name,
                given,
                required,
            } if given < required => format!(
                "approvalrequest/{name} approved ({given}/{required}) by {user}: {} needed",
                more(required - given)
            ),
            Self::Approved {
                name,
                given,
                required,
            } => format!(
                "approvalrequest/{name} approved ({given}/{required}, decidedBy {user}): the call may run"
            ),
            Self::Edited {
                name,
                given,
                required,
            } if given < required => format!(
                "approvalrequest/{name} edited and approved ({given}/{required}) by {user}: \
                 {} of the edited call needed (approvals of the original do not count)",
                more(required - given)
            ),
            Self::Edited {
                name,
                given,
                required,
            } => format!(
                "approvalrequest/{name} edited and approved ({given}/{required}, decidedBy {user}): \
                 the edited call may run, once, if the gate accepts the edit"
            ),
            Self::AlreadyApproved {
                name,
                given,
                required,
            } => format!(
                "error: {user} already approved approvalrequest/{name} ({given}/{required}); \
                 it needs {} from other people (one person counts once)",
                more(required.saturating_sub(*given))
            ),
            Self::NotFound { name } => {
                format!("error: approvalrequest/{name} not found in namespace {namespace}")
            }
            Self::AlreadyDecided { name, decision } => {
                let verb = match decision.decision_type {
                    DecisionType::Approve => "approved",
                    DecisionType::Deny => "denied",
                };
                let reason = decision
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                format!(
                    "error: approvalrequest/{name} was already {verb} by {}{reason} \
                     (decisions cannot be changed)",
                    decision.decided_by
                )
            }
            Self::Expired { name, expires_at } => format!(
                "error: approvalrequest/{name} expired at {expires_at} without a decision; \
                 the tool call will not run (the agent can ask again)"
            ),
            Self::Finished { name, phase } => format!(
                "error: approvalrequest/{name} is {} and can no longer be decided",
                phase.as_str()
            ),
            Self::Forbidden {
                name,
                agent,
                message,
            } => {
                let agent = agent.as_deref().unwrap_or("<agent>");
                let binding = format!("hitl-approver-{}", binding_suffix(user));
                format!(
                    "error: {user} may not decide approvalrequest/{name} in namespace {namespace}: \
                     {message}\n\
                     Deciding needs patch on approvalrequests.kagent.dev and the verb approve on \
                     agents.kagent.dev/{agent} in namespace {namespace}, for example:\n  \
                     kubectl -n {namespace} create rolebinding {binding} --clusterrole=hitl-approver --user={user}\n\
                     (or a clusterrolebinding with --clusterrole=hitl-approver for every namespace)"
                )
            }
            Self::Rejected { name, message } => {
                format!("error: approvalrequest/{name} was not decided: {message}")
            }
        }
    }
}

/// `1 more approval`, `2 more approvals`.
fn more(n: u32) -> String {
    if n == 1 {
        "1 more approval".into()
    } else {
        format!("{n} more approvals")
    }
}

/// A RoleBinding-name-safe form of a username.
fn binding_suffix(user: &str) -> String {
    let s: String = user
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches(|c| c == '-' || c == '.');
    if s.is_empty() {
        "user".to_owned()
    } else {
        s.chars().take(40).collect()
    }
}

/// Decide each named request, in order.
pub async fn decide_names(
    api: &Api<ApprovalRequest>,
    names: &[String],
    request: &Request,
    now: Timestamp,
) -> Result<Vec<Outcome>, kube::Error> {
    let mut outcomes = Vec::with_capacity(names.len());
    for name in names {
        let outcome = match read(api, name).await? {
            Ok(current) => decide(api, current, request, now).await?,
            Err(outcome) => outcome,
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// Decide every request of `agent` in the namespace that is still Pending at `now`.
pub async fn decide_agent(
    api: &Api<ApprovalRequest>,
    agent: &str,
    request: &Request,
    now: Timestamp,
) -> Result<Vec<Outcome>, kube::Error> {
    let pending: Vec<ApprovalRequest> = list_all(api, &ListParams::default())
        .await?
        .into_iter()
        .filter(|r| r.spec.agent_ref.name == agent && r.phase_at(now) == Phase::Pending)
        .collect();
    let mut outcomes = Vec::with_capacity(pending.len());
    for current in pending {
        outcomes.push(decide(api, current, request, now).await?);
    }
    Ok(outcomes)
}

/// Read one request; a missing or unreadable one becomes its [`Outcome`].
async fn read(
    api: &Api<ApprovalRequest>,
    name: &str,
) -> Result<Result<ApprovalRequest, Outcome>, kube::Error> {
    match api.get(name).await {
        Ok(r) => Ok(Ok(r)),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            Ok(Err(Outcome::NotFound { name: name.into() }))
        }
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Err(Outcome::Forbidden {
            name: name.into(),
            agent: None,
            message: s.message,
        })),
        Err(e) => Err(e),
    }
}

/// Why `current` cannot be decided at `now`, if it cannot.
fn refusal(current: &ApprovalRequest, now: Timestamp) -> Option<Outcome> {
    let name = current.name_any();
    if let Some(decision) = &current.spec.decision {
        return Some(Outcome::AlreadyDecided {
            name,
            decision: decision.clone(),
        });
    }
    match current.phase_at(now) {
        Phase::Pending => None,
        Phase::Expired => Some(Outcome::Expired {
            name,
            expires_at: current.spec.expires_at.0,
        }),
        phase => Some(Outcome::Finished { name, phase }),
    }
}

/// The decision `request` makes.
pub fn decision_of(request: &Request) -> Decision {
    Decision {
        decision_type: request.decision_type,
        reason: request.reason.clone(),
        decided_by: request.user.clone(),
    }
}

/// The change carrying out `request` on `current` (written over its resourceVersion), and the
/// outcome once written. A Deny, or an Approve of a request needing one approval, sets
/// `spec.decision` alone. An Approve of a request needing several appends the caller's entry to
/// `spec.approvals` (the whole list: a merge patch replaces lists, and the resourceVersion
/// guard keeps others' entries) and, when that makes `requiredApprovals`, sets the decision
/// too; an approver already listed only records the decision once enough others approved.
pub fn write_for(
    current: &ApprovalRequest,
    request: &Request,
    now: Timestamp,
) -> Result<(DecisionChange, Outcome), Outcome> {
    let name = current.name_any();
    let required = current.required_approvals();
    if let Some(asked) = &request.edit {
        return edit_for(current, request, asked, now);
    }
    if request.decision_type == DecisionType::Approve && current.spec.edit.is_some() {
        return approve_edited(current, request, now);
    }
    if request.decision_type == DecisionType::Deny || required <= 1 {
        let decided = Outcome::Decided {
            name,
            decision_type: request.decision_type,
        };
        let change = DecisionChange {
            decision: Some(decision_of(request)),
            ..DecisionChange::default()
        };
        return Ok((change, decided));
    }
    let approvers = current.approvers();
    let mine = approvers.contains(&request.user.as_str());
    let given = u32::try_from(approvers.len() + usize::from(!mine)).unwrap_or(u32::MAX);
    if mine && given < required {
        return Err(Outcome::AlreadyApproved {
            name,
            given,
            required,
        });
    }
    let approvals = (!mine).then(|| {
        let mut approvals = current.spec.approvals.clone();
        approvals.push(Approval {
            approved_by: request.user.clone(),
            reason: request.reason.clone(),
            at: Some(Time(now)),
        });
        approvals
    });
    let change = DecisionChange {
        decision: (given >= required).then(|| decision_of(request)),
        approvals,
        ..DecisionChange::default()
    };
    let approved = Outcome::Approved {
        name,
        given,
        required,
    };
    Ok((change, approved))
}

/// The write of `asked`, an edit with the caller's approval of the edited call: `spec.edit`,
/// the caller's entry in `spec.editApprovals`, and the decision when that is all the edited call
/// needs. Refused on a request already edited (an edit is written once).
fn edit_for(
    current: &ApprovalRequest,
    request: &Request,
    asked: &EditAsked,
    now: Timestamp,
) -> Result<(DecisionChange, Outcome), Outcome> {
    let name = current.name_any();
    if request.decision_type != DecisionType::Approve {
        return Err(Outcome::Rejected {
            name,
            message: "an edit is made with an approval, not a denial".into(),
        });
    }
    if let Some(edit) = &current.spec.edit {
        return Err(Outcome::Rejected {
            name,
            message: format!(
                "it was already edited by {} (an edit is written once); approve or deny the edited call",
                edit.edited_by
            ),
        });
    }
    let required = current.required_approvals();
    let change = DecisionChange {
        decision: (required <= 1).then(|| decision_of(request)),
        approvals: None,
        edit: Some(Edit {
            patch: asked.patch.clone(),
            edited_by: request.user.clone(),
            reason: request.reason.clone(),
            at: Some(Time(now)),
        }),
        edit_approvals: Some(vec![approval_of(request, now)]),
    };
    Ok((
        change,
        Outcome::Edited {
            name,
            given: 1,
            required,
        },
    ))
}

/// The write of an approval of `current`'s edited call: the caller's entry in
/// `spec.editApprovals` (the quorum starts again on an edit), and the decision once the edited
/// call has the approvals it needs, the caller's among them.
fn approve_edited(
    current: &ApprovalRequest,
    request: &Request,
    now: Timestamp,
) -> Result<(DecisionChange, Outcome), Outcome> {
    let name = current.name_any();
    let required = current.required_approvals();
    let approvers = current.approvers();
    let mine = approvers.contains(&request.user.as_str());
    let given = u32::try_from(approvers.len() + usize::from(!mine)).unwrap_or(u32::MAX);
    if mine && given < required {
        return Err(Outcome::AlreadyApproved {
            name,
            given,
            required,
        });
    }
    let edit_approvals = (!mine).then(|| {
        let mut approvals = current.spec.edit_approvals.clone();
        approvals.push(approval_of(request, now));
        approvals
    });
    let change = DecisionChange {
        decision: (given >= required).then(|| decision_of(request)),
        edit_approvals,
        ..DecisionChange::default()
    };
    Ok((
        change,
        Outcome::Approved {
            name,
            given,
            required,
        },
    ))
}

/// The caller's entry in a list of approvals.
fn approval_of(request: &Request, now: Timestamp) -> Approval {
    Approval {
        approved_by: request.user.clone(),
        reason: request.reason.clone(),
        at: Some(Time(now)),
    }
}

/// Write the decision onto `current` with the one guarded write, judging the request again
/// whenever it changed in between.
async fn decide(
    api: &Api<ApprovalRequest>,
    current: ApprovalRequest,
    request: &Request,
    now: Timestamp,
) -> Result<Outcome, kube::Error> {
    let name = current.name_any();
    let agent = current.spec.agent_ref.name.clone();
    let mut written = None;
    let outcome = GuardedWrite::spec(api, field_manager::KUBECTL_HITL, ATTEMPTS)
        .write(current, |current| {
            if let Some(outcome) = refusal(current, now) {
                return Err(outcome);
            }
            let (change, outcome) = write_for(current, request, now)?;
            written = Some(outcome);
            Ok(change)
        })
        .await;
    match outcome {
        Ok(outcome) => Ok(match outcome.guarded {
            Guarded::Written(_) => written.expect("a written change has its outcome"),
            Guarded::Declined(outcome) => outcome,
            Guarded::Gone => Outcome::NotFound { name },
            Guarded::Contended => Outcome::Rejected {
                name,
                message: format!("it changed {ATTEMPTS} times while being decided; try again"),
            },
        }),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Outcome::Forbidden {
            name,
            agent: Some(agent),
            message: s.message,
        }),
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => Ok(Outcome::Rejected {
            name,
            message: s.message,
        }),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(decision_type: DecisionType, reason: Option<&str>) -> Request {
        Request {
            decision_type,
            reason: reason.map(str::to_owned),
            user: "alice".into(),
            edit: None,
        }
    }

    #[test]
    fn a_decision_sets_only_the_decision() {
        let change = DecisionChange {
            decision: Some(decision_of(&req(DecisionType::Approve, Some("ok")))),
            ..DecisionChange::default()
        };
        assert_eq!(
            serde_json::to_value(change).unwrap(),
            json!({"decision": {"type": "Approve", "decidedBy": "alice", "reason": "ok"}})
        );
        let deny = DecisionChange {
            decision: Some(decision_of(&req(DecisionType::Deny, None))),
            ..DecisionChange::default()
        };
        assert_eq!(
            serde_json::to_value(deny).unwrap(),
            json!({"decision": {"type": "Deny", "decidedBy": "alice"}})
        );
    }

    #[test]
    fn forbidden_names_the_rbac_needed() {
        let text = Outcome::Forbidden {
            name: "r".into(),
            agent: Some("helper".into()),
            message: "denied".into(),
        }
        .describe("team-a", "Alice@Example.com");
        assert!(
            text.contains("agents.kagent.dev/helper in namespace team-a"),
            "{text}"
        );
        assert!(text.contains(
            "kubectl -n team-a create rolebinding hitl-approver-alice-example.com \
             --clusterrole=hitl-approver --user=Alice@Example.com"
        ));
    }

    fn pending(required: Option<i32>) -> ApprovalRequest {
        let mut json = crate::api::approval_request::fixture::request_json();
        if let Some(required) = required {
            json["spec"]["requiredApprovals"] = json!(required);
        }
        serde_json::from_value(json).unwrap()
    }

    fn edit_by(user: &str, patch: &str) -> Request {
        Request {
            decision_type: DecisionType::Approve,
            reason: Some("narrower".into()),
            user: user.into(),
            edit: Some(EditAsked {
                patch: patch.into(),
            }),
        }
    }

    const AT: &str = "2026-11-22T00:10:00Z";

    #[test]
    fn an_edit_is_written_with_the_editors_approval_of_the_edited_call() {
        let now: Timestamp = AT.parse().unwrap();
        let patch = r#"[{"op":"replace","path":"/path","value":"/tmp/b"}]"#;
        let (change, outcome) = write_for(&pending(None), &edit_by("alice", patch), now).unwrap();
        assert_eq!(
            serde_json::to_value(&change).unwrap(),
            json!({
                "decision": {"type": "Approve", "decidedBy": "alice", "reason": "narrower"},
                "edit": {"patch": patch, "editedBy": "alice", "reason": "narrower", "at": AT},
                "editApprovals": [{"approvedBy": "alice", "reason": "narrower", "at": AT}],
            })
        );
        assert!(outcome.is_success());
        // Needing two: the edit and the editor's approval, no decision yet.
        let (change, outcome) =
            write_for(&pending(Some(2)), &edit_by("alice", patch), now).unwrap();
        assert!(change.decision.is_none() && change.edit.is_some());
        assert_eq!(
            outcome,
            Outcome::Edited {
                name: "helper-delete-file-1".into(),
                given: 1,
                required: 2
            }
        );
    }

    #[test]
    fn on_an_edited_request_the_quorum_starts_again() {
        let now: Timestamp = AT.parse().unwrap();
        let mut edited = pending(Some(2));
        // Bob approved the original; Alice edited it.
        edited.spec.approvals = vec![Approval {
            approved_by: "bob".into(),
            reason: None,
            at: None,
        }];
        let (change, _) = write_for(&edited, &edit_by("alice", "[]"), now).unwrap();
        edited.spec.edit = change.edit.map(Box::new);
        edited.spec.edit_approvals = change.edit_approvals.unwrap();
        // Bob's approval of the original does not count: his approval of the edit makes 2/2.
        let bob = Request {
            user: "bob".into(),
            edit: None,
            ..edit_by("bob", "")
        };
        let (change, outcome) = write_for(&edited, &bob, now).unwrap();
        assert_eq!(
            outcome,
            Outcome::Approved {
                name: "helper-delete-file-1".into(),
                given: 2,
                required: 2
            }
        );
        assert_eq!(change.decision.unwrap().decided_by, "bob");
        assert_eq!(change.edit_approvals.unwrap().len(), 2);
        assert!(change.approvals.is_none() && change.edit.is_none());
        // A second edit is refused: an edit is written once.
        let carol = edit_by("carol", "[]");
        assert!(
            matches!(write_for(&edited, &carol, now), Err(Outcome::Rejected { message, .. }) if message.contains("already edited by alice"))
        );
    }

    #[test]
    fn binding_suffixes_are_names() {
        assert_eq!(
            binding_suffix("system:serviceaccount:ns:sa"),
            "system-serviceaccount-ns-sa"
        );
        assert_eq!(binding_suffix("::"), "user");
    }
}
