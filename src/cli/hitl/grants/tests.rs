//! `--remember` parsing, the grant it gives, and the grants table.

use super::*;
use crate::api::approval_request::{AgentRef, ApprovalRequestSpec, CallContext, ToolServerRef};

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const NOW: &str = "2026-11-24T10:00:00Z";

fn request(session: Option<&str>, required: Option<i32>) -> ApprovalRequest {
    let mut r = ApprovalRequest::new(
        "helper-delete-file-0123456789abcdef-0",
        ApprovalRequestSpec {
            caller: None,
            agent_ref: AgentRef {
                kind: None,
                name: "helper".into(),
            },
            tool_server: ToolServerRef {
                kind: crate::api::agent::ToolServerKind::RemoteMCPServer,
                name: "fs".into(),
                namespace: "tools".into(),
            },
            tool_name: "delete_file".into(),
            arguments_preview: None,
            arguments_sha256: "0".repeat(64),
            arguments_bytes: 2,
            requested_by: "system:serviceaccount:team:helper".into(),
            message: None,
            context: Some(CallContext {
                session_id: session.map(str::to_owned),
                task_id: None,
                call_id: None,
            }),
            rule: None,
            required_approvals: required,
            approvals: Vec::new(),
            expires_at: Time(t("2026-11-24T11:00:00Z")),
            escalation: None,
            grant: None,
            decision: None,
            edit: None,
            edit_approvals: Vec::new(),
            tool_annotations: None,
        },
    );
    r.metadata.namespace = Some("team".into());
    r
}

#[test]
fn remember_parses_session_durations_and_uses() {
    let r: Remember = "session".parse().unwrap();
    assert_eq!(
        r,
        Remember {
            session: true,
            lasts: DEFAULT_REMEMBER,
            max_uses: None
        }
    );
    let r: Remember = "30m, 5-uses".parse().unwrap();
    assert_eq!(
        r,
        Remember {
            session: false,
            lasts: SignedDuration::from_mins(30),
            max_uses: Some(5)
        }
    );
    assert_eq!("1-use".parse::<Remember>().unwrap().max_uses, Some(1));
    for bad in [
        "",
        "forever",
        "0-uses",
        "10001-uses",
        "x-uses",
        "0s",
        "session,soon",
    ] {
        assert!(bad.parse::<Remember>().is_err(), "{bad:?}");
    }
}

#[test]
fn remembering_gives_a_grant_for_the_same_call_target() {
    let remember: Remember = "session,2h,3-uses".parse().unwrap();
    let g = grant_for(
        &request(Some("s-1"), None),
        &remember,
        None,
        "alice",
        t(NOW),
    )
    .unwrap();
    assert_eq!(
        g.metadata.generate_name.as_deref(),
        Some("helper-delete-file-")
    );
    assert_eq!(g.metadata.namespace.as_deref(), Some("team"));
    assert_eq!(g.spec.agent_ref.name, "helper");
    assert_eq!(g.spec.tool_server.name, "fs");
    assert_eq!(g.spec.tool_name.as_deref(), Some("delete_file"));
    assert_eq!(g.spec.session_id.as_deref(), Some("s-1"));
    assert_eq!(g.spec.expires_at.0, t("2026-11-24T12:00:00Z"));
    assert_eq!(g.spec.max_uses, Some(3));
    assert_eq!(g.spec.granted_by, "alice");
    assert!(
        g.spec
            .reason
            .contains("approvalrequest/helper-delete-file-0123456789abcdef-0")
    );
    let plain = grant_for(
        &request(None, None),
        &"1h".parse().unwrap(),
        Some("cleanup"),
        "alice",
        t(NOW),
    )
    .unwrap();
    assert_eq!(plain.spec.session_id, None);
    assert_eq!(plain.spec.reason, "cleanup");
}

#[test]
fn what_cannot_be_remembered_is_said_before_anything_is_written() {
    let session: Remember = "session".parse().unwrap();
    let e = grant_for(&request(None, None), &session, None, "alice", t(NOW)).unwrap_err();
    assert!(e.contains("records no MCP session"), "{e}");
    let e = grant_for(
        &request(Some("s"), Some(2)),
        &"1h".parse().unwrap(),
        None,
        "alice",
        t(NOW),
    )
    .unwrap_err();
    assert!(e.contains("needs 2 approvals"), "{e}");
}

#[test]
fn remembering_a_shared_gates_call_covers_its_caller_on_that_toolgate_only() {
    let mut shared = request(None, None);
    shared.spec.agent_ref.kind = Some(crate::api::approval_request::PolicyKind::ToolGate);
    shared.spec.caller = Some(Box::new(crate::api::approval_request::Caller {
        username: "system:serviceaccount:apps:bot-a".into(),
        uid: Some("u".into()),
        groups: vec!["system:serviceaccounts".into()],
    }));
    let remember: Remember = "1h".parse().unwrap();
    let g = grant_for(&shared, &remember, None, "alice", t(NOW)).unwrap();
    assert_eq!(
        g.spec.caller.as_deref(),
        Some("system:serviceaccount:apps:bot-a")
    );
    assert_eq!(g.spec.agent_ref, shared.spec.agent_ref);
    // An Agent's request gives a grant for every call of the agent, as before.
    let g = grant_for(&request(None, None), &remember, None, "alice", t(NOW)).unwrap();
    assert_eq!((g.spec.caller, g.spec.agent_ref.kind), (None, None));
}

#[test]
fn the_table_shows_uses_state_and_who_granted() {
    let now = t(NOW);
    let mut g = grant_for(
        &request(Some("s-1"), None),
        &"session,2h,3-uses".parse().unwrap(),
        None,
        "alice",
        now,
    )
    .unwrap();
    g.metadata.name = Some("helper-delete-file-x7k2p".into());
    g.status = Some(crate::api::approval_grant::ApprovalGrantStatus {
        uses: Some(3),
        ..Default::default()
    });
    let text = table(std::slice::from_ref(&g), now, false);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{text}");
    for cell in [
        "helper-delete-file-x7k2p",
        "tools/fs",
        "delete_file",
        "s-1",
        "3/3",
        "UsedUp",
        "in 2h",
        "alice",
    ] {
        assert!(lines[1].contains(cell), "{cell} in {text}");
    }
    assert_eq!(state(&g, now), "UsedUp");
    g.spec.revoked = Some(true);
    assert_eq!(state(&g, now), "Revoked");
    g.spec.revoked = None;
    g.status = None;
    assert_eq!(state(&g, now), "Active");
    assert_eq!(state(&g, t("2026-11-24T12:00:00Z")), "Expired");
    assert!(
        covers(&g, now).contains(
            "helper's calls of delete_file on tools/fs in session s-1 run without asking"
        )
    );
}
