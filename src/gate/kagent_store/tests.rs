use super::*;
use serde_json::json;

const AGENT: &str = "team__NS__agent_a";

fn store(limits: Limits) -> KagentStore {
    KagentStore::with_limits(AGENT.into(), limits)
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).unwrap()
}

fn create(store: &KagentStore, user: &str, id: &str, second: i64) -> SessionView {
    store
        .create_session(user, Some(AGENT), Some(id), None, at(second))
        .unwrap()
}

fn append(store: &KagentStore, user: &str, session: &str, id: &str, data: &str, second: i64) {
    store
        .append_event(user, session, AGENT, id, data, at(second))
        .unwrap();
}

fn ids(events: &[EventView]) -> Vec<&str> {
    events.iter().map(|e| e.id.as_str()).collect()
}

fn task(id: &str, state: &str) -> serde_json::Map<String, serde_json::Value> {
    json!({"id": id, "contextId": "ctx", "kind": "task", "status": {"state": state}})
        .as_object()
        .unwrap()
        .clone()
}

#[test]
fn the_agent_id_is_kagents_python_identifier() {
    assert_eq!(agent_id("team", "agent-a"), AGENT);
    assert_eq!(agent_id("my-ns", "x"), "my_ns__NS__x");
    assert_eq!(python_identifier("team/agent-a"), AGENT);
    assert_eq!(python_identifier(AGENT), AGENT);
}

#[test]
fn a_session_is_created_for_the_gates_agent_only() {
    let s = store(LIMITS);
    let created = s
        .create_session("alice", Some(AGENT), Some("s1"), Some("hello"), at(0))
        .unwrap();
    assert_eq!(created.id, "s1");
    assert_eq!(created.user_id, "alice");
    assert_eq!(created.agent_id, AGENT);
    assert_eq!(created.name.as_deref(), Some("hello"));
    // `<namespace>/<name>` names the same agent, as in kagent.
    s.create_session("alice", Some("team/agent-a"), Some("s2"), None, at(1))
        .unwrap();
    for other in ["team__NS__agent_b", "other/agent-a", ""] {
        let err = s
            .create_session("alice", Some(other), Some("s3"), None, at(2))
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::BadRequest(m) if m.starts_with("Agent ref is invalid")),
            "{err:?}"
        );
    }
    assert_eq!(
        s.create_session("alice", None, Some("s3"), None, at(2)),
        Err(StoreError::BadRequest("agent_ref is required".into()))
    );
}

#[test]
fn a_session_without_an_id_gets_a_uuid() {
    let s = store(LIMITS);
    let a = s
        .create_session("u", Some(AGENT), None, None, at(0))
        .unwrap();
    let b = s
        .create_session("u", Some(AGENT), Some(""), None, at(0))
        .unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!(a.id.len(), 36);
    assert_eq!(&a.id[14..15], "4");
}

#[test]
fn a_user_never_sees_another_users_session() {
    let s = store(LIMITS);
    create(&s, "alice", "s1", 0);
    append(&s, "alice", "s1", "e1", "{}", 1);
    assert_eq!(
        s.get_session("bob", "s1", EventQuery::default())
            .unwrap_err(),
        StoreError::NotFound("Session not found".into())
    );
    assert!(s.list_sessions("bob").is_empty());
    assert_eq!(
        s.append_event("bob", "s1", AGENT, "e2", "{}", at(2)),
        Err(StoreError::NotFound("Session not found".into()))
    );
    // Bob's deleting his "s1" leaves Alice's alone; Bob may have an "s1" of his own.
    s.delete_session("bob", "s1");
    create(&s, "bob", "s1", 3);
    let (_, events) = s.get_session("alice", "s1", EventQuery::default()).unwrap();
    assert_eq!(ids(&events), ["e1"]);
    let (_, events) = s.get_session("bob", "s1", EventQuery::default()).unwrap();
    assert!(events.is_empty());
}

#[test]
fn events_come_back_in_the_order_stored_and_a_limit_keeps_the_last() {
    let s = store(LIMITS);
    create(&s, "u", "s", 0);
    for i in 1..=5 {
        append(&s, "u", "s", &format!("e{i}"), &format!("{{\"n\":{i}}}"), i);
    }
    let get = |limit, after| {
        let (_, events) = s
            .get_session("u", "s", EventQuery { limit, after })
            .unwrap();
        ids(&events)
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let all = ["e1", "e2", "e3", "e4", "e5"];
    assert_eq!(get(0, None), all);
    assert_eq!(get(-1, None), all);
    // kagent limits only above 1: 1 reads every event.
    assert_eq!(get(1, None), all);
    assert_eq!(get(2, None), ["e4", "e5"]);
    assert_eq!(get(50, None), all);
    assert_eq!(get(-1, Some(at(3))), ["e4", "e5"]);
    assert_eq!(get(2, Some(at(1))), ["e4", "e5"]);
    let (_, events) = s.get_session("u", "s", EventQuery::default()).unwrap();
    assert_eq!(&*events[0].data, "{\"n\":1}");
    assert_eq!(events[0].session_id, "s");
    assert_eq!(events[0].user_id, "u");
}

#[test]
fn an_event_stored_again_is_replaced_in_place() {
    let s = store(LIMITS);
    create(&s, "u", "s", 0);
    append(&s, "u", "s", "e1", "old", 1);
    append(&s, "u", "s", "e2", "x", 2);
    append(&s, "u", "s", "e1", "new", 3);
    let (session, events) = s.get_session("u", "s", EventQuery::default()).unwrap();
    assert_eq!(ids(&events), ["e1", "e2"]);
    assert_eq!(&*events[0].data, "new");
    assert_eq!(events[0].created_at, at(1));
    assert_eq!(events[0].updated_at, at(3));
    assert_eq!(session.updated_at, at(3));
}

#[test]
fn only_the_gates_agent_writes_events() {
    let s = store(LIMITS);
    create(&s, "u", "s", 0);
    for agent in ["team__NS__agent_b", ""] {
        assert_eq!(
            s.append_event("u", "s", agent, "e", "{}", at(1)),
            Err(StoreError::Forbidden(
                "Session does not belong to this agent".into()
            ))
        );
    }
    s.append_event("u", "s", "team/agent-a", "e", "{}", at(1))
        .unwrap();
}

#[test]
fn creating_a_session_again_keeps_its_events_and_renames_it() {
    let s = store(LIMITS);
    create(&s, "u", "s", 0);
    append(&s, "u", "s", "e1", "{}", 1);
    let again = s
        .create_session("u", Some(AGENT), Some("s"), Some("renamed"), at(2))
        .unwrap();
    assert_eq!(again.created_at, at(0));
    assert_eq!(again.name.as_deref(), Some("renamed"));
    let (_, events) = s.get_session("u", "s", EventQuery::default()).unwrap();
    assert_eq!(ids(&events), ["e1"]);
    assert_eq!(s.list_sessions("u").len(), 1);
}

#[test]
fn sessions_are_listed_oldest_first_and_deleted_with_their_events() {
    let s = store(LIMITS);
    create(&s, "u", "b", 1);
    create(&s, "u", "a", 2);
    create(&s, "u", "c", 0);
    let listed: Vec<String> = s.list_sessions("u").into_iter().map(|s| s.id).collect();
    assert_eq!(listed, ["c", "b", "a"]);
    append(&s, "u", "a", "e1", "{}", 3);
    s.delete_session("u", "a");
    s.delete_session("u", "missing");
    assert!(s.get_session("u", "a", EventQuery::default()).is_err());
    create(&s, "u", "a", 4);
    let (_, events) = s.get_session("u", "a", EventQuery::default()).unwrap();
    assert!(events.is_empty());
}

#[test]
fn a_new_session_past_the_cap_forgets_the_least_recently_written() {
    let s = store(Limits {
        sessions: 2,
        ..LIMITS
    });
    create(&s, "alice", "s1", 0);
    create(&s, "bob", "s2", 1);
    // s1 written after s2: s2 is the least recently written.
    append(&s, "alice", "s1", "e", "{}", 2);
    create(&s, "carol", "s3", 3);
    assert!(s.get_session("bob", "s2", EventQuery::default()).is_err());
    assert!(s.get_session("alice", "s1", EventQuery::default()).is_ok());
    assert!(s.get_session("carol", "s3", EventQuery::default()).is_ok());
    // Creating an existing session again forgets nothing.
    create(&s, "alice", "s1", 4);
    assert!(s.get_session("carol", "s3", EventQuery::default()).is_ok());
}

#[test]
fn a_session_at_its_event_cap_refuses_more() {
    let s = store(Limits {
        events_per_session: 2,
        ..LIMITS
    });
    create(&s, "u", "s", 0);
    append(&s, "u", "s", "e1", "{}", 1);
    append(&s, "u", "s", "e2", "{}", 2);
    let err = s
        .append_event("u", "s", AGENT, "e3", "{}", at(3))
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Full(m) if m.contains("holds 2 events")),
        "{err:?}"
    );
    // Replacing one still works.
    append(&s, "u", "s", "e2", "{\"v\":2}", 4);
}

#[test]
fn bytes_past_the_budget_forget_other_sessions_then_refuse() {
    let budget = 4 * ENTRY_OVERHEAD + 2000;
    let s = store(Limits {
        session_bytes: budget,
        ..LIMITS
    });
    create(&s, "u", "old", 0);
    append(&s, "u", "old", "e", &"x".repeat(1000), 1);
    create(&s, "u", "new", 2);
    // Does not fit beside "old": "old" goes.
    append(&s, "u", "new", "e", &"y".repeat(1200), 3);
    assert!(s.get_session("u", "old", EventQuery::default()).is_err());
    // Cannot fit even alone: refused, and "new" is kept.
    let err = s
        .append_event("u", "new", AGENT, "f", &"z".repeat(budget), at(4))
        .unwrap_err();
    assert!(matches!(err, StoreError::Full(_)), "{err:?}");
    let (_, events) = s.get_session("u", "new", EventQuery::default()).unwrap();
    assert_eq!(ids(&events), ["e"]);
    // Forgetting gives the bytes back.
    s.delete_session("u", "new");
    assert_eq!(s.lock().session_bytes, 0);
}

#[test]
fn ids_and_names_are_bounded() {
    let s = store(LIMITS);
    let long = "x".repeat(MAX_ID_BYTES + 1);
    for (user, id) in [(long.as_str(), "s"), ("u", long.as_str())] {
        assert!(matches!(
            s.create_session(user, Some(AGENT), Some(id), None, at(0)),
            Err(StoreError::BadRequest(_))
        ));
    }
    let name = "n".repeat(MAX_NAME_BYTES + 1);
    assert!(matches!(
        s.create_session("u", Some(AGENT), Some("s"), Some(&name), at(0)),
        Err(StoreError::BadRequest(_))
    ));
    create(&s, "u", "s", 0);
    assert!(matches!(
        s.append_event("u", "s", AGENT, &long, "{}", at(1)),
        Err(StoreError::BadRequest(_))
    ));
    assert!(matches!(
        s.save_task(task(&long, "working")),
        Err(StoreError::BadRequest(_))
    ));
}

#[test]
fn a_task_is_stored_as_sent_and_replaced_by_id() {
    let s = store(LIMITS);
    let sent = task("t1", "working");
    let stored = s.save_task(sent.clone()).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(stored.get()).unwrap(),
        serde_json::Value::Object(sent)
    );
    s.save_task(task("t1", "completed")).unwrap();
    let got = s.get_task("t1").unwrap();
    assert!(got.get().contains("completed"), "{}", got.get());
    s.delete_task("t1");
    s.delete_task("t1");
    assert!(s.get_task("t1").is_none());
    assert_eq!(s.lock().task_bytes, 0);
}

#[test]
fn a_task_without_an_id_gets_one() {
    let s = store(LIMITS);
    let mut t = task("", "submitted");
    let stored = s.save_task(t.clone()).unwrap();
    let id = serde_json::from_str::<serde_json::Value>(stored.get()).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 36);
    assert!(s.get_task(&id).is_some());
    t.insert("id".into(), json!(7));
    assert!(matches!(s.save_task(t), Err(StoreError::BadRequest(_))));
}

#[test]
fn tasks_past_the_cap_forget_the_oldest_finished_then_refuse() {
    let s = store(Limits { tasks: 3, ..LIMITS });
    s.save_task(task("done-1", "completed")).unwrap();
    s.save_task(task("open", "input-required")).unwrap();
    s.save_task(task("done-2", "failed")).unwrap();
    s.save_task(task("t4", "working")).unwrap();
    assert!(s.get_task("done-1").is_none());
    assert!(s.get_task("done-2").is_some());
    s.save_task(task("t5", "submitted")).unwrap();
    assert!(s.get_task("done-2").is_none());
    // Only unfinished tasks left: a new one is refused, an update of one is taken.
    let err = s.save_task(task("t6", "submitted")).unwrap_err();
    assert!(
        matches!(&err, StoreError::Full(m) if m.contains("none of them finished")),
        "{err:?}"
    );
    s.save_task(task("open", "completed")).unwrap();
    s.save_task(task("t6", "submitted")).unwrap();
    assert!(s.get_task("open").is_none());
}

#[test]
fn task_bytes_past_the_budget_forget_finished_tasks() {
    let one = task("a", "completed");
    let size = ENTRY_OVERHEAD + 1 + serde_json::Value::Object(one.clone()).to_string().len();
    let s = store(Limits {
        task_bytes: 2 * size,
        ..LIMITS
    });
    s.save_task(one).unwrap();
    s.save_task(task("b", "working")).unwrap();
    s.save_task(task("c", "working")).unwrap();
    assert!(s.get_task("a").is_none());
    assert!(matches!(
        s.save_task(task("d", "working")),
        Err(StoreError::Full(_))
    ));
}
