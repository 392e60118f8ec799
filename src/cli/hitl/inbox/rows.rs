//! What the inbox page shows of each ApprovalRequest: a flat row, computed at one instant, with
//! every string as `kubectl hitl get` shows it (hidden characters written out).

use jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use crate::api::ApprovalRequest;
use crate::api::approval_request::{DecisionType, Phase};
use crate::gate::redact;
use crate::tool_risk;
use crate::visible::visible;

/// How many finished requests the page lists below the pending ones (the most recent).
pub const RECENT: usize = 50;

/// Where a request stands, as the page tells the states apart.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for a decision.
    Pending,
    /// Approved; the agent's call has not run yet.
    Approved,
    /// Approved and run once.
    Executed,
    /// Denied.
    Denied,
    /// Not decided in time.
    Expired,
    /// Withdrawn (policy changed, agent gone or frozen).
    Cancelled,
}

impl From<Phase> for State {
    fn from(phase: Phase) -> Self {
        match phase {
            Phase::Pending => Self::Pending,
            Phase::Approved => Self::Approved,
            Phase::Executed => Self::Executed,
            Phase::Denied => Self::Denied,
            Phase::Expired => Self::Expired,
            Phase::Cancelled => Self::Cancelled,
        }
    }
}

/// One request as the page shows it.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Namespace of the request.
    pub namespace: String,
    /// Name of the request.
    pub name: String,
    /// The agent that asked (`ToolGate/<name>` for a shared gate's request).
    pub agent: String,
    /// Who called, through a shared gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The tool server (`kind namespace/name`).
    pub server: String,
    /// The tool.
    pub tool: String,
    /// The redacted arguments preview, pretty-printed JSON.
    pub arguments: String,
    /// The preview as it is (hidden characters not written out), pretty-printed JSON: what
    /// "Edit & approve" starts from, on a pending request with a preview.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub editable: Option<String>,
    /// The approver's edit of the call, `edited by NAME: PATCH`, on an edited request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit: Option<String>,
    /// What redaction hid, when it hid something.
    pub redaction: Option<String>,
    /// The state at the instant of the snapshot.
    pub state: State,
    /// Approvals given of those needed, `1/2`.
    pub approvals: String,
    /// When the gate asked (RFC 3339).
    pub created: Option<String>,
    /// After this no decision counts (RFC 3339).
    pub expires_at: String,
    /// Who decided, and how, when someone did.
    pub decided_by: Option<String>,
    /// The decision's reason.
    pub reason: Option<String>,
    /// The tool's risk badges, as the request records its annotations (empty: none recorded).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub risk: Vec<String>,
    /// The escalation tier reached (0 before the first step), on a request that escalates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// When the next escalation step comes (RFC 3339), on a pending request with one to come.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_tier_at: Option<String>,
}

fn shown(text: &str) -> String {
    visible(text).into_owned()
}

/// The row of `request` at `now`.
pub fn row(request: &ApprovalRequest, now: Timestamp) -> Row {
    let spec = &request.spec;
    let arguments = spec.arguments_preview.as_ref().map_or_else(
        || "(no preview)".to_owned(),
        |preview| serde_json::to_string_pretty(preview).expect("a JSON map serializes"),
    );
    let decided_by = spec.decision.as_ref().map(|d| {
        let verb = match d.decision_type {
            DecisionType::Approve if spec.edit.is_some() => "approved with edits",
            DecisionType::Approve => "approved",
            DecisionType::Deny => "denied",
        };
        format!("{verb} by {}", shown(&d.decided_by))
    });
    let state: State = request.phase_at(now).into();
    let editable = spec
        .arguments_preview
        .as_ref()
        .filter(|_| state == State::Pending && spec.edit.is_none())
        .map(|preview| serde_json::to_string_pretty(preview).expect("a JSON map serializes"));
    let edit = spec
        .edit
        .as_ref()
        .map(|e| shown(&format!("edited by {}: {}", e.edited_by, e.patch)));
    Row {
        namespace: request.namespace().unwrap_or_default(),
        name: request.name_any(),
        agent: shown(&spec.agent_ref.label()),
        caller: spec.caller.as_ref().map(|c| shown(&c.username)),
        server: format!(
            "{} {}/{}",
            spec.tool_server.kind.as_str(),
            spec.tool_server.namespace,
            spec.tool_server.name
        ),
        tool: shown(&spec.tool_name),
        arguments: shown(&arguments),
        editable,
        edit,
        redaction: spec.arguments_preview.as_deref().and_then(redact::notice),
        state,
        approvals: request.approvals_summary(),
        created: request
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        expires_at: spec.expires_at.0.to_string(),
        decided_by,
        reason: spec
            .decision
            .as_ref()
            .and_then(|d| d.reason.as_deref())
            .map(shown),
        risk: tool_risk::badges(spec.tool_annotations.as_deref()),
        tier: spec.escalation.as_ref().map(|_| request.tier()),
        next_tier_at: spec
            .escalation
            .as_deref()
            .filter(|_| request.phase_at(now) == Phase::Pending)
            .and_then(|e| e.next_at(request.tier()))
            .map(|at| at.to_string()),
    }
}

/// The rows of `requests` at `now`: every pending one, soonest expiry first, then the
/// [`RECENT`] most recently created of the others.
pub fn snapshot<'a>(
    requests: impl IntoIterator<Item = &'a ApprovalRequest>,
    now: Timestamp,
) -> Vec<Row> {
    let (mut pending, mut others): (Vec<Row>, Vec<Row>) = requests
        .into_iter()
        .map(|r| row(r, now))
        .partition(|r| r.state == State::Pending);
    pending.sort_by(|a, b| a.expires_at.cmp(&b.expires_at).then(a.name.cmp(&b.name)));
    others.sort_by(|a, b| b.created.cmp(&a.created).then(a.name.cmp(&b.name)));
    others.truncate(RECENT);
    pending.extend(others);
    pending
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::fixture::request_json;
    use serde_json::json;

    fn request(
        name: &str,
        created: &str,
        expires: &str,
        decision: Option<&str>,
    ) -> ApprovalRequest {
        let mut r = request_json();
        r["metadata"]["name"] = json!(name);
        r["metadata"]["creationTimestamp"] = json!(created);
        r["spec"]["argumentsPreview"] =
            json!({"path": "/data/\u{202e}txt.exe", "token": "[REDACTED]"});
        r["spec"]["argumentsBytes"] = json!(40);
        r["spec"]["expiresAt"] = json!(expires);
        if let Some(kind) = decision {
            r["spec"]["decision"] = json!({"type": kind, "decidedBy": "alice", "reason": "ok"});
        }
        serde_json::from_value(r).unwrap()
    }

    #[test]
    fn a_row_shows_what_get_shows() {
        let now: Timestamp = "2026-11-22T00:10:00Z".parse().unwrap();
        let r = row(
            &request("r1", "2026-11-22T00:00:00Z", "2026-11-22T01:00:00Z", None),
            now,
        );
        assert_eq!(r.state, State::Pending);
        assert_eq!(r.server, "RemoteMCPServer team-a/fs");
        assert_eq!(r.approvals, "0/1");
        assert!(r.arguments.contains("\\u{202e}"), "{}", r.arguments);
        assert!(!r.arguments.contains('\u{202e}'));
        assert!(
            r.arguments.contains("\n  \"path\""),
            "pretty: {}",
            r.arguments
        );
        assert!(r.redaction.is_some(), "the redacted token is told");
        let editable = r.editable.as_deref().unwrap();
        assert!(
            editable.contains('\u{202e}'),
            "the preview as it is: {editable}"
        );
        assert_eq!(r.edit, None);
        assert_eq!(r.decided_by, None);
        assert_eq!((r.agent.as_str(), r.caller.as_deref()), ("helper", None));
    }

    #[test]
    fn a_shared_gates_row_names_the_toolgate_and_the_caller() {
        let mut request = request("r1", "2026-11-22T00:00:00Z", "2026-11-22T01:00:00Z", None);
        request.spec.agent_ref.kind = Some(crate::api::approval_request::PolicyKind::ToolGate);
        request.spec.caller = Some(Box::new(crate::api::approval_request::Caller {
            username: "system:serviceaccount:apps:bot\u{202e}".into(),
            uid: None,
            groups: vec![],
        }));
        let r = row(&request, "2026-11-22T00:10:00Z".parse().unwrap());
        assert_eq!(r.agent, "ToolGate/helper");
        assert_eq!(
            r.caller.as_deref(),
            Some("system:serviceaccount:apps:bot\\u{202e}")
        );
    }

    #[test]
    fn an_escalating_row_carries_its_tier_and_the_next_step() {
        let now: Timestamp = "2026-11-22T00:10:00Z".parse().unwrap();
        let plain = request("r1", "2026-11-22T00:00:00Z", "2026-11-22T01:00:00Z", None);
        assert_eq!(
            (row(&plain, now).tier, row(&plain, now).next_tier_at),
            (None, None)
        );
        let mut r = serde_json::to_value(&plain).unwrap();
        r["spec"]["escalation"] = json!({"steps": [
            {"tier": 1, "at": "2026-11-22T00:05:00Z", "approvers": {"groups": ["oncall"]}},
            {"tier": 2, "at": "2026-11-22T00:30:00Z", "approvers": {"users": ["boss"]}},
        ]});
        r["status"] = json!({"phase": "Pending", "tier": 1});
        let escalating: ApprovalRequest = serde_json::from_value(r).unwrap();
        let shown = row(&escalating, now);
        assert_eq!(shown.tier, Some(1));
        assert_eq!(shown.next_tier_at.as_deref(), Some("2026-11-22T00:30:00Z"));
        let json = serde_json::to_value(&shown).unwrap();
        assert_eq!(json["nextTierAt"], "2026-11-22T00:30:00Z", "{json}");
        let after: Timestamp = "2026-11-22T02:00:00Z".parse().unwrap();
        assert_eq!(
            row(&escalating, after).next_tier_at,
            None,
            "expired: no next step"
        );
    }

    #[test]
    fn states_follow_the_phase_at_the_instant() {
        let now: Timestamp = "2026-11-22T00:10:00Z".parse().unwrap();
        let late = request("r", "2026-11-22T00:00:00Z", "2026-11-22T00:05:00Z", None);
        assert_eq!(row(&late, now).state, State::Expired);
        let denied = request(
            "r",
            "2026-11-22T00:00:00Z",
            "2026-11-22T01:00:00Z",
            Some("Deny"),
        );
        let r = row(&denied, now);
        assert_eq!(r.state, State::Denied);
        assert_eq!(r.decided_by.as_deref(), Some("denied by alice"));
        assert_eq!(r.reason.as_deref(), Some("ok"));
        assert_eq!(r.editable, None, "only a pending request is edited");
    }

    #[test]
    fn an_edited_request_says_so_and_shows_the_edit() {
        let now: Timestamp = "2026-11-22T00:10:00Z".parse().unwrap();
        let approved = request(
            "r",
            "2026-11-22T00:00:00Z",
            "2026-11-22T01:00:00Z",
            Some("Approve"),
        );
        let mut r = serde_json::to_value(&approved).unwrap();
        r["spec"]["edit"] = json!({
            "patch": "[{\"op\":\"replace\",\"path\":\"/path\",\"value\":\"/data/b\u{202e}\"}]",
            "editedBy": "alice",
        });
        r["spec"]["editApprovals"] = json!([{"approvedBy": "alice"}]);
        let edited: ApprovalRequest = serde_json::from_value(r).unwrap();
        let shown = row(&edited, now);
        assert_eq!(
            shown.decided_by.as_deref(),
            Some("approved with edits by alice")
        );
        assert_eq!(
            shown.edit.as_deref(),
            Some(r#"edited by alice: [{"op":"replace","path":"/path","value":"/data/b\u{202e}"}]"#)
        );
        assert_eq!(shown.editable, None);
    }

    #[test]
    fn pending_first_by_expiry_then_recent_others() {
        let now: Timestamp = "2026-11-22T00:10:00Z".parse().unwrap();
        let mut requests = vec![
            request(
                "later",
                "2026-11-22T00:01:00Z",
                "2026-11-22T02:00:00Z",
                None,
            ),
            request(
                "sooner",
                "2026-11-22T00:02:00Z",
                "2026-11-22T01:00:00Z",
                None,
            ),
        ];
        for i in 0..RECENT + 5 {
            requests.push(request(
                &format!("done-{i:03}"),
                &format!("2026-11-21T{:02}:{:02}:00Z", i / 60, i % 60),
                "2026-11-22T01:00:00Z",
                Some("Deny"),
            ));
        }
        let rows = snapshot(&requests, now);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names[..3], ["sooner", "later", "done-054"]);
        assert_eq!(rows.len(), 2 + RECENT, "finished requests are capped");
    }
}
