//! `kubectl hitl get NAME`: a describe-like view of one request.

use std::borrow::Cow;
use std::fmt::Write as _;

use jiff::Timestamp;
use kube::ResourceExt;

use super::table::{expires, short_duration};
use crate::api::ApprovalRequest;
use crate::api::approval_request::DecisionType;
use crate::gate::redact;
use crate::tool_risk;
use crate::visible::visible;

/// Human-readable description of `r` at `now`, starting with a warning line when the preview
/// hides redacted values, and one when the request holds characters that are invisible or
/// reorder text (written out as `\u{…}`).
pub fn describe(r: &ApprovalRequest, now: Timestamp) -> String {
    let text = described(r, now);
    match visible(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(shown) => format!(
            "WARNING: this request holds invisible or direction-changing characters, written \
             out below as \\u{{…}}; the tool receives them as they are\n{shown}"
        ),
    }
}

fn described(r: &ApprovalRequest, now: Timestamp) -> String {
    let spec = &r.spec;
    let mut s = String::new();
    if let Some(note) = spec.arguments_preview.as_deref().and_then(redact::notice) {
        let _ = writeln!(s, "WARNING: {note}");
    }
    let mut field = |label: &str, value: &str| {
        let _ = writeln!(s, "{:<14}{value}", format!("{label}:"));
    };
    field("Name", &r.name_any());
    field("Namespace", r.namespace().as_deref().unwrap_or(""));
    let kind = spec.agent_ref.kind().as_str();
    field(kind, &spec.agent_ref.name);
    if let Some(caller) = &spec.caller {
        let mut who = caller.username.clone();
        if let Some(uid) = &caller.uid {
            who.push_str(&format!(" (uid {uid})"));
        }
        if !caller.groups.is_empty() {
            who.push_str(&format!(", groups {}", caller.groups.join(", ")));
        }
        field("Called by", &who);
    }
    field(
        "Tool",
        &format!(
            "{} on {} {}/{}",
            spec.tool_name,
            spec.tool_server.kind.as_str(),
            spec.tool_server.namespace,
            spec.tool_server.name
        ),
    );
    if let Some(annotations) = spec.tool_annotations.as_deref() {
        field("Risk", &tool_risk::summary(annotations));
    }
    if let Some(rule) = &spec.rule {
        field(
            "Rule",
            &format!("{rule} (an approval rule of the {kind} asked)"),
        );
    }
    field("Phase", r.phase_at(now).as_str());
    field("Requested by", &spec.requested_by);
    if let Some(created) = &r.metadata.creation_timestamp {
        field(
            "Created",
            &format!(
                "{} ({} ago)",
                created.0,
                short_duration(now.duration_since(created.0))
            ),
        );
    }
    field(
        "Expires",
        &format!(
            "{} ({})",
            spec.expires_at.0,
            expires(spec.expires_at.0, now)
        ),
    );
    if let Some(message) = &spec.message {
        field("Message", message);
    }
    field(
        "Arguments",
        &format!(
            "{} bytes, sha256 {}",
            spec.arguments_bytes, spec.arguments_sha256
        ),
    );
    if let Some(preview) = &spec.arguments_preview {
        let pretty = serde_json::to_string_pretty(preview).expect("a JSON map serializes");
        for line in pretty.lines() {
            let _ = writeln!(s, "  {line}");
        }
    }
    let mut field = |label: &str, value: &str| {
        let _ = writeln!(s, "{:<14}{value}", format!("{label}:"));
    };
    match (&spec.decision, &spec.grant) {
        (_, Some(g)) => {
            let reason = g
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            field(
                "Decision",
                &format!(
                    "Approve by approvalgrant/{}, granted by {}{reason}",
                    g.name, g.granted_by
                ),
            );
        }
        (Some(d), None) => {
            let verb = match d.decision_type {
                DecisionType::Approve => "Approve",
                DecisionType::Deny => "Deny",
            };
            let reason = d
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            field("Decision", &format!("{verb} by {}{reason}", d.decided_by));
        }
        (None, None) => field("Decision", "<none>"),
    }
    if r.required_approvals() > 1 {
        let mut approvals = format!(
            "{} (needs {} distinct approvers)",
            r.approvals_summary(),
            r.required_approvals()
        );
        for a in &spec.approvals {
            let at =
                a.at.as_ref()
                    .map(|t| format!(" at {}", t.0))
                    .unwrap_or_default();
            let reason = a
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            let _ = write!(approvals, "\n  {}{at}{reason}", a.approved_by);
        }
        field("Approvals", &approvals);
    }
    if let Some(edit) = &spec.edit {
        let reason = edit
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let at = edit
            .at
            .as_ref()
            .map(|t| format!(" at {}", t.0))
            .unwrap_or_default();
        field("Edited by", &format!("{}{at}{reason}", edit.edited_by));
        field("Edit", &edit.patch);
        let mut approvals = format!(
            "{} of the edited call (approvals of the original do not count)",
            r.approvals_summary()
        );
        for a in &spec.edit_approvals {
            let _ = write!(approvals, "\n  {}", a.approved_by);
        }
        field("Edit approvals", &approvals);
        if let Some(sha) = r
            .status
            .as_ref()
            .and_then(|s| s.edited_arguments_sha256.as_deref())
        {
            field("Ran edited", &format!("argumentsSha256 {sha}"));
        }
    }
    if let Some(escalation) = spec.escalation.as_deref() {
        let status = r.status.as_ref();
        let tier = status.and_then(|s| s.tier).unwrap_or(0);
        let mut text = format!("tier {tier} of {}", escalation.steps.len());
        if let Some(next) = escalation
            .next_at(u32::from(tier))
            .filter(|_| r.phase_at(now) == crate::api::Phase::Pending)
        {
            let _ = write!(text, "; next step at {next} ({})", expires(next, now));
        }
        if let Some(warn) = &escalation.warn_at {
            let _ = write!(text, "; expiry warning at {}", warn.0);
        }
        for step in &escalation.steps {
            let mut who: Vec<String> = step.approvers.users.clone();
            who.extend(step.approvers.groups.iter().map(|g| format!("group {g}")));
            let notifier = step
                .notifier
                .as_deref()
                .map(|n| format!(", tells approvalnotifier/{n}"))
                .unwrap_or_default();
            let taken = status
                .and_then(|s| s.escalations.iter().find(|e| e.tier == step.tier))
                .map(|e| format!(" — taken at {} by {}", e.at.0, e.by))
                .unwrap_or_default();
            let _ = write!(
                text,
                "\n  tier {} at {}: {} may decide{notifier}{taken}",
                step.tier,
                step.at.0,
                if who.is_empty() {
                    "nobody more".to_owned()
                } else {
                    who.join(", ")
                }
            );
        }
        field("Escalation", &text);
    }
    if let Some(status) = &r.status {
        if let Some(at) = &status.decided_at {
            field("Decided at", &at.0.to_string());
        }
        if let Some(at) = &status.consumed_at {
            let by = status.consumed_by.as_deref().unwrap_or("<unknown>");
            field("Executed", &format!("{} by {by}", at.0));
        }
        if let Some(message) = &status.message {
            field("Status", message);
        }
        for c in &status.conditions {
            field(
                "Condition",
                &format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message),
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::fixture::request_json;
    use crate::api::approval_request::{Caller, PolicyKind};

    #[test]
    fn a_shared_gates_request_names_the_toolgate_and_who_called() {
        let now: Timestamp = "2026-11-22T00:05:00Z".parse().unwrap();
        let mut r: ApprovalRequest = serde_json::from_value(request_json()).unwrap();
        let agents = describe(&r, now);
        assert!(agents.contains("\nAgent:        helper\n"), "{agents}");
        assert!(!agents.contains("Called by"), "{agents}");
        r.spec.agent_ref.kind = Some(PolicyKind::ToolGate);
        r.spec.caller = Some(Box::new(Caller {
            username: "system:serviceaccount:apps:bot-a".into(),
            uid: Some("u-1".into()),
            groups: vec!["system:serviceaccounts".into(), "apps".into()],
        }));
        let shared = describe(&r, now);
        assert!(shared.contains("\nToolGate:     helper\n"), "{shared}");
        assert!(
            shared.contains(
                "\nCalled by:    system:serviceaccount:apps:bot-a (uid u-1), groups system:serviceaccounts, apps\n"
            ),
            "{shared}"
        );
    }
}
