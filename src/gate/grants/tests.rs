//! What a grant covers: every reason it does not, one at a time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::*;
use crate::api::agent::ToolServerKind;
use crate::api::approval_grant::{ApprovalGrantSpec, ApprovalGrantStatus};
use crate::api::approval_request::{AgentRef, PolicyKind, ToolServerRef};
use crate::condition::CallFacts;
use crate::gate::sessions;

const GATE: &str = "system:serviceaccount:team:agent-a";

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const CREATED: &str = "2026-11-24T10:00:00Z";
const NOW: &str = "2026-11-24T10:30:00Z";

fn max_ttl() -> SignedDuration {
    SignedDuration::from_hours(24)
}

/// A grant by alice of `delete_file` on `tools/fs` to `agent-a`, created at [`CREATED`], for an hour.
fn grant() -> ApprovalGrant {
    ApprovalGrant {
        metadata: ObjectMeta {
            name: Some("g".into()),
            namespace: Some("team".into()),
            creation_timestamp: Some(Time(t(CREATED))),
            resource_version: Some("5".into()),
            ..Default::default()
        },
        spec: ApprovalGrantSpec {
            caller: None,
            agent_ref: AgentRef {
                kind: None,
                name: "agent-a".into(),
            },
            tool_server: ToolServerRef {
                kind: ToolServerKind::RemoteMCPServer,
                name: "fs".into(),
                namespace: "tools".into(),
            },
            tool_name: Some("delete_file".into()),
            when: None,
            session_id: None,
            expires_at: Time(t("2026-11-24T11:00:00Z")),
            max_uses: None,
            reason: "cleanup".into(),
            granted_by: "alice".into(),
            revoked: None,
        },
        status: None,
    }
}

fn key(tool: &str, required_approvals: u32) -> CallKey {
    CallKey {
        agent: "agent-a".into(),
        kind: PolicyKind::Agent,
        caller: None,
        server_kind: ToolServerKind::RemoteMCPServer,
        server_namespace: "tools".into(),
        server_name: "fs".into(),
        tool: tool.into(),
        binding: "0".repeat(64),
        required_approvals,
    }
}

/// Why `grant` does not cover a call of `tool` with `args` in `session` at [`NOW`], through
/// agent-a's gate.
fn why(
    grant: &ApprovalGrant,
    tool: &str,
    args: serde_json::Value,
    session: Option<&str>,
) -> Option<String> {
    why_through(grant, PolicyKind::Agent, None, tool, args, session)
}

/// [`why`] through the gate of `kind` agent-a, for the call of `caller`.
fn why_through(
    grant: &ApprovalGrant,
    kind: PolicyKind,
    caller: Option<&str>,
    tool: &str,
    args: serde_json::Value,
    session: Option<&str>,
) -> Option<String> {
    let facts = Activation::new(&CallFacts {
        args: &args,
        args_bytes: args.to_string().len(),
        agent: "agent-a",
        namespace: "team",
        server: "fs",
        tool,
        session,
        annotations: crate::tool_risk::ToolFacts::unlisted(false),
    });
    let key = CallKey {
        kind,
        caller: caller.map(String::from),
        ..key(tool, 1)
    };
    let call = GrantedCall {
        key: &key,
        session,
        caller,
        facts: &facts,
        gate: GATE,
    };
    why_not_covered(grant, &call, t(NOW), max_ttl())
}

fn covers(grant: &ApprovalGrant) -> bool {
    why(grant, "delete_file", json!({"path": "/tmp/x"}), Some("s1")).is_none()
}

#[test]
fn a_live_grant_covers_its_call() {
    assert_eq!(why(&grant(), "delete_file", json!({}), None), None);
    // Without toolName it covers every tool of the server.
    let mut any_tool = grant();
    any_tool.spec.tool_name = None;
    assert_eq!(why(&any_tool, "write_file", json!({}), None), None);
}

#[test]
fn it_covers_only_its_agent_server_and_tool() {
    assert!(
        why(&grant(), "write_file", json!({}), None)
            .unwrap()
            .contains("another agent")
    );
    for change in [
        |g: &mut ApprovalGrant| g.spec.agent_ref.name = "agent-b".into(),
        |g: &mut ApprovalGrant| g.spec.tool_server.name = "shell".into(),
        |g: &mut ApprovalGrant| g.spec.tool_server.namespace = "other".into(),
        |g: &mut ApprovalGrant| g.spec.tool_server.kind = ToolServerKind::Service,
    ] {
        let mut other = grant();
        change(&mut other);
        assert!(!covers(&other), "{:?}", other.spec);
    }
}

#[test]
fn a_grant_covers_only_the_kind_its_agent_ref_names() {
    // An Agent's grant never covers the ToolGate of the same name, nor the other way round.
    let why = why_through(
        &grant(),
        PolicyKind::ToolGate,
        Some("bot"),
        "delete_file",
        json!({}),
        None,
    );
    assert_eq!(
        why.as_deref(),
        Some("it is for another agent, server or tool")
    );
    let mut shared = grant();
    shared.spec.agent_ref.kind = Some(PolicyKind::ToolGate);
    assert_eq!(
        why_through(
            &shared,
            PolicyKind::ToolGate,
            Some("bot"),
            "delete_file",
            json!({}),
            None
        ),
        None
    );
    assert!(
        why_through(
            &shared,
            PolicyKind::Agent,
            None,
            "delete_file",
            json!({}),
            None
        )
        .is_some()
    );
}

#[test]
fn a_grant_naming_a_caller_covers_that_callers_calls_only() {
    let mut shared = grant();
    shared.spec.agent_ref.kind = Some(PolicyKind::ToolGate);
    shared.spec.caller = Some("system:serviceaccount:team:bot-a".into());
    let through = |g: &ApprovalGrant, caller: Option<&str>| {
        let kind = if caller.is_some() {
            PolicyKind::ToolGate
        } else {
            PolicyKind::Agent
        };
        why_through(g, kind, caller, "delete_file", json!({}), None)
    };
    assert_eq!(
        through(&shared, Some("system:serviceaccount:team:bot-a")),
        None
    );
    assert_eq!(
        through(&shared, Some("system:serviceaccount:team:bot-b")).as_deref(),
        Some("it is for the caller system:serviceaccount:team:bot-a only")
    );
    // Without a caller, it covers every caller of the shared gate.
    shared.spec.caller = None;
    assert_eq!(
        through(&shared, Some("system:serviceaccount:team:bot-b")),
        None
    );
    // On an Agent's gate, whose calls have no caller, a grant naming one covers nothing.
    let mut agents = grant();
    agents.spec.caller = Some("system:serviceaccount:team:bot-a".into());
    assert!(through(&agents, None).unwrap().contains("have no caller"));
    // A caller never grants its own calls.
    shared.spec.granted_by = "system:serviceaccount:team:bot-b".into();
    assert!(through(&shared, Some("system:serviceaccount:team:bot-b")).is_some());
    shared.spec.granted_by = "carol".into();
    assert_eq!(
        through(&shared, Some("carol")).as_deref(),
        Some("it was granted by the caller itself")
    );
}

#[test]
fn a_session_grant_covers_only_the_callers_own_session() {
    let mut shared = grant();
    shared.spec.agent_ref.kind = Some(PolicyKind::ToolGate);
    shared.spec.session_id = Some("caller-session-1".into());
    sessions::ledger().begin("tools", "fs", "caller-session-1", Some("bot-a"));
    let through = |caller: &str| {
        why_through(
            &shared,
            PolicyKind::ToolGate,
            Some(caller),
            "delete_file",
            json!({}),
            Some("caller-session-1"),
        )
    };
    assert_eq!(through("bot-a"), None);
    assert!(
        through("bot-b")
            .unwrap()
            .contains("did not begin at this gate")
    );
}

#[test]
fn a_session_grant_covers_that_session_only() {
    let mut session = grant();
    session.spec.session_id = Some("s1".into());
    sessions::ledger().begin("tools", "fs", "s1", None);
    assert!(covers(&session));
    assert!(
        why(&session, "delete_file", json!({}), Some("s2"))
            .unwrap()
            .contains("session s1")
    );
    assert!(why(&session, "delete_file", json!({}), None).is_some());
}

#[test]
fn a_session_grant_covers_only_a_session_that_began_at_this_gate() {
    // Each test has ids of its own: the ledger is the process's.
    let id = "grants-test-forged-7c1e";
    let mut session = grant();
    session.spec.session_id = Some(id.into());
    let why_not = |g: &ApprovalGrant| why(g, "delete_file", json!({}), Some(id));
    // A client that sends the id of a session the gate never saw begin gets no grant.
    assert_eq!(
        why_not(&session).unwrap(),
        format!("its MCP session {id} did not begin at this gate")
    );
    // Nor one that began on another server, or the server of another namespace.
    sessions::ledger().begin("tools", "shell", id, None);
    sessions::ledger().begin("other", "fs", id, None);
    assert!(
        why_not(&session)
            .unwrap()
            .contains("did not begin at this gate")
    );
    // Begun at this gate on the grant's server: covered, until the client deletes it.
    sessions::ledger().begin("tools", "fs", id, None);
    assert_eq!(why_not(&session), None);
    sessions::ledger().end("tools", "fs", id);
    assert!(
        why_not(&session)
            .unwrap()
            .contains("did not begin at this gate")
    );
    // A grant without a session does not look: any call of it is covered.
    assert_eq!(why_not(&grant()), None);
}

#[test]
fn revoked_deleted_expired_or_used_up_grants_cover_nothing() {
    let mut revoked = grant();
    revoked.spec.revoked = Some(true);
    assert_eq!(
        why(&revoked, "delete_file", json!({}), None).unwrap(),
        "it is revoked"
    );
    let mut not_revoked = grant();
    not_revoked.spec.revoked = Some(false);
    assert!(covers(&not_revoked));

    let mut deleting = grant();
    deleting.metadata.deletion_timestamp = Some(Time(t(NOW)));
    assert!(!covers(&deleting));

    let mut expired = grant();
    expired.spec.expires_at = Time(t(NOW));
    assert!(
        why(&expired, "delete_file", json!({}), None)
            .unwrap()
            .contains("expired")
    );

    let mut used_up = grant();
    used_up.spec.max_uses = Some(2);
    used_up.status = Some(ApprovalGrantStatus {
        uses: Some(1),
        ..Default::default()
    });
    assert!(covers(&used_up));
    used_up.status.as_mut().unwrap().uses = Some(2);
    assert_eq!(
        why(&used_up, "delete_file", json!({}), None).unwrap(),
        "it is used up (2 uses)"
    );
}

#[test]
fn a_grant_living_longer_than_the_maximum_covers_nothing() {
    let mut long = grant();
    long.spec.expires_at = Time(t("2026-11-25T10:00:01Z"));
    assert!(
        why(&long, "delete_file", json!({}), None)
            .unwrap()
            .contains("longest grant lifetime")
    );
    long.spec.expires_at = Time(t("2026-11-25T10:00:00Z"));
    assert!(covers(&long));
    let mut undated = grant();
    undated.metadata.creation_timestamp = None;
    assert!(!covers(&undated));
}

#[test]
fn only_a_person_grants() {
    for by in [
        "",
        " ",
        "system:serviceaccount:team:agent-a",
        "system:serviceaccount:ops:bot",
    ] {
        let mut g = grant();
        g.spec.granted_by = by.into();
        assert!(!covers(&g), "{by:?}");
    }
    let mut by_gate = grant();
    by_gate.spec.granted_by = GATE.into();
    assert!(!covers(&by_gate));
}

#[test]
fn a_grant_stands_for_one_approval() {
    let args = json!({});
    let facts = Activation::new(&CallFacts {
        args: &args,
        args_bytes: 2,
        agent: "agent-a",
        namespace: "team",
        server: "fs",
        tool: "delete_file",
        session: None,
        annotations: crate::tool_risk::ToolFacts::unlisted(false),
    });
    let key = key("delete_file", 2);
    let call = GrantedCall {
        key: &key,
        session: None,
        caller: None,
        facts: &facts,
        gate: GATE,
    };
    let why = why_not_covered(&grant(), &call, t(NOW), max_ttl()).unwrap();
    assert!(why.contains("needs 2 approvals"), "{why}");
}

#[test]
fn its_condition_must_hold_and_an_unevaluable_one_covers_nothing() {
    let mut tmp_only = grant();
    tmp_only.spec.when = Some("args.path.startsWith('/tmp/')".into());
    assert!(covers(&tmp_only));
    assert!(
        why(
            &tmp_only,
            "delete_file",
            json!({"path": "/etc/passwd"}),
            None
        )
        .unwrap()
        .contains("is false")
    );
    // A missing argument or a type mismatch cannot be evaluated: no cover.
    assert!(
        why(&tmp_only, "delete_file", json!({}), None)
            .unwrap()
            .contains("cannot be evaluated")
    );
    assert!(
        why(&tmp_only, "delete_file", json!({"path": 7}), None)
            .unwrap()
            .contains("cannot be evaluated")
    );
    // Neither can an expression that does not compile, or uses an unknown variable.
    for bad in ["args.path.startsWith(", "secret == 1", "args.path"] {
        let mut g = grant();
        g.spec.when = Some(bad.into());
        assert!(!covers(&g), "{bad}");
    }
}

#[test]
fn limited_grants_are_tried_first_then_the_soonest_to_expire() {
    let mut unlimited_soon = grant();
    unlimited_soon.metadata.name = Some("a".into());
    let mut limited_late = grant();
    limited_late.metadata.name = Some("b".into());
    limited_late.spec.max_uses = Some(3);
    limited_late.spec.expires_at = Time(t("2026-11-24T12:00:00Z"));
    let mut limited_soon = limited_late.clone();
    limited_soon.metadata.name = Some("c".into());
    limited_soon.spec.expires_at = Time(t("2026-11-24T10:45:00Z"));
    let mut grants = [unlimited_soon, limited_late, limited_soon];
    grants.sort_by_key(preference);
    let order: Vec<_> = grants
        .iter()
        .map(|g| g.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(order, ["c", "b", "a"]);
}
