//! What a message says. Only what the ApprovalRequest itself carries: the redacted preview,
//! the binding hash and size, agent, tool server, tool, expiry, the decision, and the exact
//! `kubectl hitl` commands — never the full arguments or any header (the request never holds
//! them). Text from the request is shown as `kubectl hitl get` shows it (invisible and
//! direction-changing characters written out), and Slack's markup characters are escaped, so
//! arguments cannot mention `@channel` or forge a link.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::plan::Event;
use crate::api::approval_request::{DecisionType, PolicyKind};
use crate::api::{ApprovalRequest, Phase};
use crate::tool_risk;
use crate::visible::visible;

/// Content type of a [`cloud_event`].
pub const CLOUD_EVENT_CONTENT_TYPE: &str = "application/cloudevents+json";

/// The CloudEvents `type` of `event`.
fn event_type(event: Event) -> &'static str {
    match event {
        Event::Created => "dev.kagent.approvalrequest.created",
        Event::Reminder(_) => "dev.kagent.approvalrequest.reminder",
        Event::Decided => "dev.kagent.approvalrequest.decided",
        Event::Expired => "dev.kagent.approvalrequest.expired",
        Event::Expiring => "dev.kagent.approvalrequest.expiring",
        Event::Escalated(_) => "dev.kagent.approvalrequest.escalated",
    }
}

/// `kubectl hitl approve|deny` for the request.
fn commands(request: &ApprovalRequest) -> (String, String) {
    let (name, namespace) = (request.name_any(), request.namespace().unwrap_or_default());
    (
        format!("kubectl hitl approve {name} -n {namespace}"),
        format!("kubectl hitl deny {name} -n {namespace} --reason \"...\""),
    )
}

/// The facts every message carries, as JSON.
fn facts(request: &ApprovalRequest, event: Event, phase: Phase) -> Value {
    let spec = &request.spec;
    let (approve, deny) = commands(request);
    let mut data = json!({
        "namespace": request.namespace(),
        "name": request.name_any(),
        "event": event.key(),
        "phase": phase.as_str(),
        "agent": spec.agent_ref.name,
        "toolServer": {
            "kind": spec.tool_server.kind.as_str(),
            "namespace": spec.tool_server.namespace,
            "name": spec.tool_server.name,
        },
        "tool": spec.tool_name,
        "argumentsPreview": spec.arguments_preview,
        "argumentsSha256": spec.arguments_sha256,
        "argumentsBytes": spec.arguments_bytes,
        "expiresAt": spec.expires_at.0.to_string(),
        "approvals": request.approvals_summary(),
    });
    if let Some(tier) = request.status.as_ref().and_then(|s| s.tier) {
        data["tier"] = json!(tier);
    }
    if let Some(decision) = &spec.decision {
        data["decision"] = json!({
            "type": decision.decision_type,
            "decidedBy": decision.decided_by,
            "reason": decision.reason,
        });
    }
    if let Some(grant) = &spec.grant {
        data["grant"] = json!(grant);
    }
    // A shared gate's request: the ToolGate (not an Agent) asked, for this caller's call.
    if spec.agent_ref.kind() != PolicyKind::Agent {
        data["agentKind"] = json!(spec.agent_ref.kind().as_str());
    }
    if let Some(caller) = &spec.caller {
        data["caller"] = json!(caller.username);
    }
    if let Some(annotations) = &spec.tool_annotations {
        data["toolAnnotations"] = json!(annotations);
    }
    if phase == Phase::Pending {
        data["approve"] = json!(approve);
        data["deny"] = json!(deny);
    }
    data
}

/// A CloudEvents 1.0 structured-mode event. Its `id` is the same for every attempt at one
/// message, so a receiver can drop a duplicate.
pub fn cloud_event(request: &ApprovalRequest, event: Event, phase: Phase, now: Timestamp) -> Value {
    let namespace = request.namespace().unwrap_or_default();
    let name = request.name_any();
    let identity = request
        .uid()
        .unwrap_or_else(|| format!("{namespace}/{name}"));
    json!({
        "specversion": "1.0",
        "id": format!("{identity}/{}", event.key()),
        "source": format!("/apis/kagent.dev/v1alpha2/namespaces/{namespace}/approvalrequests/{name}"),
        "type": event_type(event),
        "subject": name,
        "time": now.to_string(),
        "datacontenttype": "application/json",
        "data": facts(request, event, phase),
    })
}

/// Text for Slack's `mrkdwn`: hidden characters written out, `&`, `<` and `>` escaped (no
/// mentions or links from a request), backticks replaced so nothing leaves a code block.
fn slack_text(text: &str) -> String {
    visible(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "\u{2cb}")
}

/// A Slack incoming-webhook message: a `text` fallback and `blocks`; with `buttons`, Approve
/// and Deny buttons (each asking for a confirmation) while the request is pending.
pub fn slack(request: &ApprovalRequest, event: Event, phase: Phase, buttons: bool) -> Value {
    let spec = &request.spec;
    let namespace = request.namespace().unwrap_or_default();
    let of = match spec.agent_ref.kind() {
        PolicyKind::Agent => "agent",
        PolicyKind::ToolGate => "ToolGate",
    };
    let called_by = spec
        .caller
        .as_ref()
        .map(|c| format!(", called by *{}*", slack_text(&c.username)))
        .unwrap_or_default();
    let what = format!(
        "`{}` of {of} *{}* in {}{called_by}",
        slack_text(&spec.tool_name),
        slack_text(&spec.agent_ref.name),
        slack_text(&namespace)
    );
    let headline = match event {
        Event::Created => format!("Approval needed: {what}"),
        Event::Reminder(n) => format!("Reminder {n}: still waiting for a decision: {what}"),
        Event::Decided => match &spec.decision {
            Some(d) => {
                let verb = match d.decision_type {
                    DecisionType::Approve => "Approved",
                    DecisionType::Deny => "Denied",
                };
                let reason = d
                    .reason
                    .as_deref()
                    .map(|r| format!(": {}", slack_text(r)))
                    .unwrap_or_default();
                format!("{verb} by {}{reason}: {what}", slack_text(&d.decided_by))
            }
            None => match &spec.grant {
                Some(g) => format!(
                    "Approved by the grant {} of {}: {what}",
                    slack_text(&g.name),
                    slack_text(&g.granted_by)
                ),
                None => format!("Decided: {what}"),
            },
        },
        Event::Expired => format!("Expired without a decision: {what}"),
        Event::Expiring => format!(
            "Expires at {} without a decision (nothing is approved on expiry): {what}",
            spec.expires_at.0
        ),
        Event::Escalated(n) => {
            format!("Escalated to tier {n}, still waiting for a decision: {what}")
        }
    };
    let preview = spec
        .arguments_preview
        .as_ref()
        .map(|p| serde_json::to_string_pretty(p).expect("a JSON map serializes"))
        .unwrap_or_else(|| "(no preview)".into());
    let mut details = format!(
        "Request `{}` · server {} {}/{} · {} bytes · sha256 {}… · expires {}",
        slack_text(&request.name_any()),
        spec.tool_server.kind.as_str(),
        slack_text(&spec.tool_server.namespace),
        slack_text(&spec.tool_server.name),
        spec.arguments_bytes,
        &spec.arguments_sha256[..spec.arguments_sha256.len().min(16)],
        spec.expires_at.0,
    );
    if let Some(annotations) = spec.tool_annotations.as_deref() {
        details.push_str(&format!(
            "\nTool risk: {}",
            slack_text(&tool_risk::summary(annotations))
        ));
    }
    if let (Phase::Pending, Some(escalation)) = (phase, spec.escalation.as_deref()) {
        let tier = request.tier();
        details.push_str(&format!(
            "\nEscalation: tier {tier} of {}",
            escalation.steps.len()
        ));
        if let Some(next) = escalation.next_at(tier) {
            details.push_str(&format!(", tier {} at {next}", tier + 1));
        }
    }
    if phase == Phase::Pending {
        let (approve, deny) = commands(request);
        details.push_str(&format!(
            "\n`{}`\n`{}`",
            slack_text(&approve),
            slack_text(&deny)
        ));
    }
    let mut blocks = vec![
        json!({"type": "section", "text": {"type": "mrkdwn", "text": headline}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("```{}```", slack_text(&preview))}}),
        json!({"type": "context", "elements": [{"type": "mrkdwn", "text": details}]}),
    ];
    if buttons && phase == Phase::Pending {
        let value = format!("{namespace}/{}", request.name_any());
        let button = |text: &str, action: &str, style: &str, verb: &str| {
            json!({
                "type": "button", "text": {"type": "plain_text", "text": text},
                "action_id": action, "value": value, "style": style,
                "confirm": {
                    "title": {"type": "plain_text", "text": format!("{text} {}?", visible(&spec.tool_name))},
                    "text": {"type": "mrkdwn", "text": format!("{verb} request `{}` as your Kubernetes user.", slack_text(&request.name_any()))},
                    "confirm": {"type": "plain_text", "text": text},
                    "deny": {"type": "plain_text", "text": "Cancel"},
                },
            })
        };
        blocks.push(json!({"type": "actions", "elements": [
            button("Approve", super::slack::APPROVE, "primary", "The call runs once when you approve"),
            button("Deny", super::slack::DENY, "danger", "The call does not run when you deny"),
        ]}));
    }
    json!({"text": headline, "blocks": blocks})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::fixture::request_json;

    fn request(decision: Option<Value>) -> ApprovalRequest {
        let mut r = request_json();
        r["metadata"]["uid"] = json!("u-1");
        let spec = &mut r["spec"];
        spec["argumentsPreview"] =
            json!({"path": "/data/<!channel> ```x``` \u{202e}", "token": "[REDACTED]"});
        spec["argumentsSha256"] = json!("ab".repeat(32));
        spec["argumentsBytes"] = json!(77);
        spec["message"] = json!("Run 'delete_file' with arguments {...}?");
        if let Some(d) = decision {
            r["spec"]["decision"] = d;
        }
        serde_json::from_value(r).unwrap()
    }

    #[test]
    fn a_cloud_event_carries_the_request_facts_and_a_stable_id() {
        let now: Timestamp = "2026-11-22T00:00:05Z".parse().unwrap();
        let r = request(None);
        let e = cloud_event(&r, Event::Created, Phase::Pending, now);
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(e["type"], "dev.kagent.approvalrequest.created");
        assert_eq!(e["id"], "u-1/created");
        assert_eq!(
            e["source"],
            "/apis/kagent.dev/v1alpha2/namespaces/team-a/approvalrequests/helper-delete-file-1"
        );
        assert_eq!(e["data"]["argumentsPreview"]["token"], "[REDACTED]");
        assert_eq!(e["data"]["argumentsBytes"], 77);
        assert_eq!(
            e["data"]["approve"],
            "kubectl hitl approve helper-delete-file-1 -n team-a"
        );
        let later = cloud_event(
            &r,
            Event::Created,
            Phase::Pending,
            "2026-11-22T00:09:00Z".parse().unwrap(),
        );
        assert_eq!(
            later["id"], e["id"],
            "every attempt at one message has one id"
        );
        let keys: Vec<&String> = e["data"].as_object().unwrap().keys().collect();
        assert!(
            !keys.iter().any(|k| *k == "message" || *k == "requestedBy"),
            "{keys:?}"
        );
    }

    #[test]
    fn a_call_run_on_a_grant_is_told_with_the_grant_and_who_gave_it() {
        let mut r = request(None);
        r.spec.grant = Some(Box::new(crate::api::approval_request::GrantRef {
            name: "tmp-cleanup".into(),
            granted_by: "alice".into(),
            reason: Some("scratch".into()),
        }));
        let e = cloud_event(&r, Event::Decided, Phase::Executed, Timestamp::UNIX_EPOCH);
        assert_eq!(
            e["data"]["grant"],
            json!({"name": "tmp-cleanup", "grantedBy": "alice", "reason": "scratch"})
        );
        assert!(e["data"].get("approve").is_none());
        let s = slack(&r, Event::Decided, Phase::Executed, true);
        assert_eq!(
            s["text"],
            "Approved by the grant tmp-cleanup of alice: `delete_file` of agent *helper* in team-a"
        );
    }

    #[test]
    fn a_shared_gates_request_says_who_called() {
        let mut r = request(None);
        r.spec.agent_ref = crate::api::approval_request::AgentRef {
            name: "fs-gate".into(),
            kind: Some(PolicyKind::ToolGate),
        };
        r.spec.caller = Some(Box::new(crate::api::approval_request::Caller {
            username: "system:serviceaccount:apps:bot-<a>".into(),
            uid: None,
            groups: vec![],
        }));
        let e = cloud_event(&r, Event::Created, Phase::Pending, Timestamp::UNIX_EPOCH);
        assert_eq!(e["data"]["agent"], "fs-gate");
        assert_eq!(e["data"]["agentKind"], "ToolGate");
        assert_eq!(e["data"]["caller"], "system:serviceaccount:apps:bot-<a>");
        let s = slack(&r, Event::Created, Phase::Pending, false);
        assert_eq!(
            s["text"],
            "Approval needed: `delete_file` of ToolGate *fs-gate* in team-a, called by *system:serviceaccount:apps:bot-&lt;a&gt;*"
        );
        // An Agent's request says nothing of either.
        let e = cloud_event(
            &request(None),
            Event::Created,
            Phase::Pending,
            Timestamp::UNIX_EPOCH,
        );
        assert!(e["data"].get("agentKind").is_none() && e["data"].get("caller").is_none());
    }

    #[test]
    fn a_decided_message_names_who_and_why_and_offers_no_command() {
        let r = request(Some(
            json!({"type": "Deny", "decidedBy": "alice", "reason": "wrong <file>"}),
        ));
        let e = cloud_event(&r, Event::Decided, Phase::Denied, Timestamp::UNIX_EPOCH);
        assert_eq!(e["data"]["decision"]["decidedBy"], "alice");
        assert!(e["data"].get("approve").is_none());
        let s = slack(&r, Event::Decided, Phase::Denied, true);
        assert_eq!(
            s["blocks"].as_array().unwrap().len(),
            3,
            "no buttons once decided"
        );
        assert_eq!(
            s["text"],
            "Denied by alice: wrong &lt;file&gt;: `delete_file` of agent *helper* in team-a"
        );
    }

    #[test]
    fn a_pending_escalating_message_says_its_tier_and_the_next() {
        let mut r = serde_json::to_value(request(None)).unwrap();
        r["spec"]["escalation"] = json!({"steps": [
            {"tier": 1, "at": "2026-11-22T00:05:00Z", "approvers": {"groups": ["oncall"]}},
            {"tier": 2, "at": "2026-11-22T00:30:00Z", "approvers": {"users": ["boss"]}},
        ]});
        r["status"] = json!({"phase": "Pending", "tier": 1});
        let r: ApprovalRequest = serde_json::from_value(r).unwrap();
        let context = |phase| slack(&r, Event::Escalated(1), phase, false)["blocks"][2].to_string();
        assert!(
            context(Phase::Pending)
                .contains("Escalation: tier 1 of 2, tier 2 at 2026-11-22T00:30:00Z"),
            "{}",
            context(Phase::Pending)
        );
        assert!(!context(Phase::Expired).contains("Escalation"));
    }

    #[test]
    fn slack_text_cannot_mention_link_or_leave_its_code_block() {
        let s = slack(&request(None), Event::Created, Phase::Pending, false);
        assert_eq!(
            s["blocks"].as_array().unwrap().len(),
            3,
            "no buttons unless asked for"
        );
        let body = s.to_string();
        assert!(!body.contains("<!channel>"), "{body}");
        assert!(body.contains("&lt;!channel&gt;"));
        let code = s["blocks"][1]["text"]["text"].as_str().unwrap();
        assert_eq!(
            code.matches("```").count(),
            2,
            "only the block's own fences: {code}"
        );
        assert!(
            code.contains("\\u{202e}"),
            "hidden characters written out: {code}"
        );
        let details = s["blocks"][2]["elements"][0]["text"].as_str().unwrap();
        assert!(
            details.contains("`kubectl hitl approve helper-delete-file-1 -n team-a`"),
            "{details}"
        );
    }
}
