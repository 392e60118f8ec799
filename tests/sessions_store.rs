//! The session store's conformance suite: one set of scenarios, each generic over
//! [`SessionStore`], run against the in-memory store, SQLite (a temporary file) and a real
//! Postgres (Debian's `postgresql`, started by the test kit; without it these tests fail with
//! the command that installs it). Then what only a database shared by processes shows: two
//! independent `SqlStore`s (two pools, as two replicas) on one database appending to one
//! session, creating sessions against a quota, racing for a sweep, migrating a fresh database
//! together; and the data still there after the store is closed and opened again.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hitl_operator::sessions::memory::MemoryStore;
use hitl_operator::sessions::sql::SqlStore;
use hitl_operator::sessions::store::{
    AgentKey, EventQuery, EventView, Limit, Quotas, SessionStore, SessionView, StoreError,
    TaskRecord, Usage, event_bytes, session_bytes, task_bytes,
};
use hitl_test_kit::postgres::Postgres;
use jiff::{SignedDuration, Timestamp};
use sqlx::{Connection, Row};

/// Opens fresh, empty stores of one backend.
trait Backend {
    type Store: SessionStore;
    async fn open(&self, quotas: Quotas) -> Self::Store;
}

struct Memory;

impl Backend for Memory {
    type Store = MemoryStore;
    async fn open(&self, quotas: Quotas) -> MemoryStore {
        MemoryStore::new(quotas)
    }
}

/// A fresh SQLite file for each store, in a directory removed at the end of the test.
struct Sqlite {
    dir: tempfile::TempDir,
    next: AtomicU32,
}

impl Sqlite {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary directory"),
            next: AtomicU32::new(0),
        }
    }

    fn url(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("sqlite://{}/sessions-{n}.db", self.dir.path().display())
    }
}

impl Backend for Sqlite {
    type Store = SqlStore;
    async fn open(&self, quotas: Quotas) -> SqlStore {
        let url = self.url();
        SqlStore::connect(&url, quotas)
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"))
    }
}

/// A fresh database for each store, on the Postgres the tests of this binary share.
struct Pg {
    server: Arc<Postgres>,
}

impl Pg {
    fn new() -> Self {
        Self {
            server: Postgres::shared(),
        }
    }

    fn fresh_database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        self.server.create_database(&format!(
            "sessions_{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }
}

impl Backend for Pg {
    type Store = SqlStore;
    async fn open(&self, quotas: Quotas) -> SqlStore {
        let url = self.fresh_database();
        SqlStore::connect(&url, quotas)
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"))
    }
}

fn agent() -> AgentKey {
    AgentKey::new("team-a", "helper")
}

fn other_agent() -> AgentKey {
    AgentKey::new("team-b", "helper")
}

/// An instant `s` seconds into the tests' day.
fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn all() -> EventQuery {
    EventQuery {
        limit: -1,
        after: None,
    }
}

fn task(id: &str, json: &str) -> TaskRecord {
    TaskRecord {
        id: id.into(),
        finished: false,
        json: json.into(),
    }
}

fn ids(events: &[EventView]) -> Vec<&str> {
    events.iter().map(|e| e.id.as_str()).collect()
}

/// Fails unless `result` is a refusal by `limit` whose message names it.
fn assert_refused<T: Debug>(result: Result<T, StoreError>, limit: Limit) {
    match result {
        Err(StoreError::LimitReached { limit: l, message }) => {
            assert_eq!(l, limit, "refused by the wrong limit: {message}");
            assert!(
                message.contains(limit.as_str()),
                "the refusal does not name {}: {message}",
                limit.as_str()
            );
        }
        other => panic!("expected a refusal by {}, got {other:?}", limit.as_str()),
    }
}

fn assert_bad_request<T: Debug>(result: Result<T, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::BadRequest(_))),
        "expected BadRequest, got {result:?}"
    );
}

fn assert_not_found<T: Debug>(result: Result<T, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::NotFound(_))),
        "expected NotFound, got {result:?}"
    );
}

/// Everything `agent` keeps, as read through the interface.
#[derive(Debug, PartialEq)]
struct Snapshot {
    usage: Usage,
    sessions: Vec<(SessionView, Vec<EventView>, Option<u64>)>,
    tasks: Vec<(String, Option<String>)>,
}

async fn snapshot<S: SessionStore>(store: &S, agent: &AgentKey) -> Snapshot {
    let mut sessions = Vec::new();
    for s in store.all_sessions(agent).await.unwrap() {
        let (view, events) = store
            .get_session(agent, &s.user_id, &s.id, all())
            .await
            .unwrap();
        assert_eq!(view, s, "all_sessions and get_session disagree");
        let size = store.session_size(agent, &s.user_id, &s.id).await.unwrap();
        sessions.push((view, events, size));
    }
    let mut tasks = Vec::new();
    for id in store.task_ids(agent).await.unwrap() {
        let json = store.get_task(agent, &id).await.unwrap();
        tasks.push((id, json));
    }
    Snapshot {
        usage: store.usage(agent).await.unwrap(),
        sessions,
        tasks,
    }
}

/// A session as [`expected_bytes`] counts it: user, id, name, events (id, data).
type Held<'a> = (&'a str, &'a str, Option<&'a str>, &'a [(&'a str, &'a str)]);

/// The bytes `sessions` and `tasks` are counted for, from the store's own helpers.
fn expected_bytes(sessions: &[Held<'_>], tasks: &[TaskRecord]) -> u64 {
    sessions
        .iter()
        .map(|(user, id, name, events)| {
            session_bytes(user, id, *name)
                + events
                    .iter()
                    .map(|(id, data)| event_bytes(id, data))
                    .sum::<u64>()
        })
        .sum::<u64>()
        + tasks.iter().map(task_bytes).sum::<u64>()
}

// ---- The scenarios -------------------------------------------------------------------------

async fn create_get_list_delete<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    let first = s
        .create_session(&a, "alice", Some("s1"), Some("first"), t(1))
        .await
        .unwrap();
    assert_eq!(
        first,
        SessionView {
            id: "s1".into(),
            name: Some("first".into()),
            user_id: "alice".into(),
            created_at: t(1),
            updated_at: t(1),
            deleted_at: (),
            agent_id: "team_a__NS__helper".into(),
        }
    );
    let random = s
        .create_session(&a, "alice", None, None, t(2))
        .await
        .unwrap();
    assert_eq!(random.id.len(), 36, "a new id is a UUID: {}", random.id);
    assert_eq!(random.name, None);
    let early = s
        .create_session(&a, "alice", Some("s0"), None, t(1))
        .await
        .unwrap();

    // Oldest first, then by id.
    let listed = s.list_sessions(&a, "alice").await.unwrap();
    assert_eq!(listed, vec![early.clone(), first.clone(), random.clone()]);
    assert_eq!(s.list_sessions(&a, "bob").await.unwrap(), vec![]);

    let (view, events) = s.get_session(&a, "alice", "s1", all()).await.unwrap();
    assert_eq!(view, first);
    assert!(events.is_empty());
    assert_eq!(
        s.session_size(&a, "alice", "s1").await.unwrap(),
        Some(session_bytes("alice", "s1", Some("first")))
    );
    assert_eq!(
        s.usage(&a).await.unwrap(),
        Usage {
            sessions: 3,
            events: 0,
            tasks: 0,
            bytes: session_bytes("alice", "s1", Some("first"))
                + session_bytes("alice", &random.id, None)
                + session_bytes("alice", "s0", None),
        }
    );

    s.delete_session(&a, "alice", "s1").await.unwrap();
    assert_not_found(s.get_session(&a, "alice", "s1", all()).await);
    assert_eq!(s.session_size(&a, "alice", "s1").await.unwrap(), None);
    // Deleting what is not there is no error.
    s.delete_session(&a, "alice", "s1").await.unwrap();
    assert_eq!(
        s.list_sessions(&a, "alice").await.unwrap(),
        vec![early, random]
    );
    assert_eq!(s.usage(&a).await.unwrap().sessions, 2);
    s.ping().await.unwrap();
}

async fn recreate_keeps_events_and_replaces_name<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    s.create_session(&a, "alice", Some("s1"), Some("a"), t(1))
        .await
        .unwrap();
    s.append_event(&a, "alice", "s1", "e1", r#"{"n":1}"#, t(2))
        .await
        .unwrap();
    s.append_event(&a, "alice", "s1", "e2", r#"{"n":2}"#, t(3))
        .await
        .unwrap();
    let again = s
        .create_session(&a, "alice", Some("s1"), Some("longer"), t(5))
        .await
        .unwrap();
    assert_eq!(again.name.as_deref(), Some("longer"));
    assert_eq!(again.created_at, t(1));
    assert_eq!(again.updated_at, t(5));
    let (view, events) = s.get_session(&a, "alice", "s1", all()).await.unwrap();
    assert_eq!(view, again);
    assert_eq!(ids(&events), ["e1", "e2"]);
    let size = session_bytes("alice", "s1", Some("longer"))
        + event_bytes("e1", r#"{"n":1}"#)
        + event_bytes("e2", r#"{"n":2}"#);
    assert_eq!(s.session_size(&a, "alice", "s1").await.unwrap(), Some(size));
    assert_eq!(
        s.usage(&a).await.unwrap(),
        Usage {
            sessions: 1,
            events: 2,
            tasks: 0,
            bytes: size,
        }
    );
    // Created again without a name: the name is gone.
    let unnamed = s
        .create_session(&a, "alice", Some("s1"), None, t(6))
        .await
        .unwrap();
    assert_eq!(unnamed.name, None);
    assert_eq!(
        s.usage(&a).await.unwrap().bytes,
        size - "longer".len() as u64
    );
    // A new event after that still comes last.
    s.append_event(&a, "alice", "s1", "e0", "{}", t(7))
        .await
        .unwrap();
    let (_, events) = s.get_session(&a, "alice", "s1", all()).await.unwrap();
    assert_eq!(ids(&events), ["e1", "e2", "e0"]);
}

async fn order_is_the_sequence_not_the_clock<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    s.create_session(&a, "alice", Some("s1"), None, t(0))
        .await
        .unwrap();
    // Identical instants, then the clock going backwards; ids in no sorted order.
    let writes = [
        ("z", t(10)),
        ("m", t(10)),
        ("a", t(10)),
        ("k", t(5)),
        ("b", t(1)),
    ];
    for (id, at) in writes {
        let event = s
            .append_event(&a, "alice", "s1", id, &format!(r#"{{"id":"{id}"}}"#), at)
            .await
            .unwrap();
        assert_eq!(
            event,
            EventView {
                id: id.into(),
                session_id: "s1".into(),
                user_id: "alice".into(),
                created_at: at,
                updated_at: at,
                deleted_at: (),
                data: format!(r#"{{"id":"{id}"}}"#),
            }
        );
    }
    let (view, events) = s.get_session(&a, "alice", "s1", all()).await.unwrap();
    assert_eq!(ids(&events), ["z", "m", "a", "k", "b"]);
    assert_eq!(
        view.updated_at,
        t(1),
        "updated_at is the last write's instant"
    );
    // Each event reads back as it was answered.
    for (event, (id, at)) in events.iter().zip(writes) {
        assert_eq!((event.id.as_str(), event.created_at), (id, at));
    }
}

async fn after_and_limit<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    s.create_session(&a, "alice", Some("s1"), None, t(0))
        .await
        .unwrap();
    for n in 1..=5 {
        s.append_event(&a, "alice", "s1", &format!("e{n}"), "{}", t(n))
            .await
            .unwrap();
    }
    // Written last, first stored at an earlier instant.
    s.append_event(&a, "alice", "s1", "e6", "{}", t(2))
        .await
        .unwrap();
    let read = |limit: i64, after: Option<Timestamp>| {
        let s = &s;
        let a = &a;
        async move {
            let (_, events) = s
                .get_session(a, "alice", "s1", EventQuery { limit, after })
                .await
                .unwrap();
            events.into_iter().map(|e| e.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(read(-1, None).await, ["e1", "e2", "e3", "e4", "e5", "e6"]);
    assert_eq!(read(0, None).await, ["e1", "e2", "e3", "e4", "e5", "e6"]);
    assert_eq!(read(2, None).await, ["e5", "e6"]);
    assert_eq!(read(1, None).await, ["e6"]);
    assert_eq!(read(100, None).await, ["e1", "e2", "e3", "e4", "e5", "e6"]);
    // `after` is exclusive and selects by when each event was first stored.
    assert_eq!(read(-1, Some(t(3))).await, ["e4", "e5"]);
    assert_eq!(read(-1, Some(t(1))).await, ["e2", "e3", "e4", "e5", "e6"]);
    assert_eq!(read(2, Some(t(1))).await, ["e5", "e6"]);
    assert_eq!(read(-1, Some(t(5))).await, Vec::<String>::new());
    // Below the microsecond: an instant just after e3's still leaves e3 out.
    let just_after = t(3) + SignedDuration::from_nanos(500);
    assert_eq!(read(-1, Some(just_after)).await, ["e4", "e5"]);
    let just_before = t(3) - SignedDuration::from_nanos(500);
    assert_eq!(read(-1, Some(just_before)).await, ["e3", "e4", "e5"]);
}

async fn an_event_resent_is_stored_once<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    s.create_session(&a, "alice", Some("s1"), None, t(0))
        .await
        .unwrap();
    s.append_event(&a, "alice", "s1", "e1", "a", t(1))
        .await
        .unwrap();
    s.append_event(&a, "alice", "s1", "e2", "b", t(2))
        .await
        .unwrap();
    let replaced = s
        .append_event(&a, "alice", "s1", "e1", "a longer body", t(3))
        .await
        .unwrap();
    assert_eq!(
        replaced.created_at,
        t(1),
        "a replaced event keeps created_at"
    );
    assert_eq!(replaced.updated_at, t(3));
    assert_eq!(replaced.data, "a longer body");
    let (view, events) = s.get_session(&a, "alice", "s1", all()).await.unwrap();
    assert_eq!(
        ids(&events),
        ["e1", "e2"],
        "a replaced event keeps its place"
    );
    assert_eq!(events[0], replaced);
    assert_eq!(view.updated_at, t(3));
    // `after` selects by when it was first stored.
    let (_, since) = s
        .get_session(
            &a,
            "alice",
            "s1",
            EventQuery {
                limit: -1,
                after: Some(t(1)),
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&since), ["e2"]);
    let size = session_bytes("alice", "s1", None)
        + event_bytes("e1", "a longer body")
        + event_bytes("e2", "b");
    assert_eq!(s.session_size(&a, "alice", "s1").await.unwrap(), Some(size));
    assert_eq!(
        s.usage(&a).await.unwrap(),
        Usage {
            sessions: 1,
            events: 2,
            tasks: 0,
            bytes: size,
        }
    );
    // Shrinking it gives the bytes back.
    s.append_event(&a, "alice", "s1", "e1", "", t(4))
        .await
        .unwrap();
    assert_eq!(
        s.usage(&a).await.unwrap().bytes,
        size - "a longer body".len() as u64
    );
}

async fn agents_are_isolated<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let (a, other) = (agent(), other_agent());
    s.create_session(&a, "alice", Some("s1"), Some("mine"), t(1))
        .await
        .unwrap();
    s.append_event(&a, "alice", "s1", "e1", "secret", t(2))
        .await
        .unwrap();
    s.save_task(&a, &task("task-1", r#"{"id":"task-1"}"#), t(3))
        .await
        .unwrap();
    let before = snapshot(&s, &a).await;

    // Another Agent, the same user and ids: nothing of the first is found.
    assert_not_found(s.get_session(&other, "alice", "s1", all()).await);
    assert_not_found(
        s.append_event(&other, "alice", "s1", "e2", "injected", t(4))
            .await,
    );
    assert_eq!(s.list_sessions(&other, "alice").await.unwrap(), vec![]);
    assert_eq!(s.session_size(&other, "alice", "s1").await.unwrap(), None);
    assert_eq!(s.get_task(&other, "task-1").await.unwrap(), None);
    assert_eq!(s.all_sessions(&other).await.unwrap(), vec![]);
    assert_eq!(s.task_ids(&other).await.unwrap(), Vec::<String>::new());
    assert_eq!(s.usage(&other).await.unwrap(), Usage::default());
    s.delete_session(&other, "alice", "s1").await.unwrap();
    s.delete_task(&other, "task-1").await.unwrap();
    assert_eq!(s.agents().await.unwrap(), vec![a.clone()]);
    assert_eq!(snapshot(&s, &a).await, before);

    // Its own session of the same id is its own.
    let theirs = s
        .create_session(&other, "alice", Some("s1"), None, t(5))
        .await
        .unwrap();
    assert_eq!(theirs.agent_id, "team_b__NS__helper");
    let (_, events) = s.get_session(&other, "alice", "s1", all()).await.unwrap();
    assert!(events.is_empty());
    s.save_task(&other, &task("task-1", r#"{"other":true}"#), t(6))
        .await
        .unwrap();
    assert_eq!(snapshot(&s, &a).await, before);
    assert_eq!(
        s.get_task(&other, "task-1").await.unwrap().as_deref(),
        Some(r#"{"other":true}"#)
    );
    assert_eq!(s.agents().await.unwrap(), vec![a.clone(), other.clone()]);
    // Forgetting one leaves the other.
    s.forget_agent(&other).await.unwrap();
    assert_eq!(snapshot(&s, &a).await, before);
}

async fn users_are_partitioned<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    s.create_session(&a, "alice", Some("s1"), None, t(1))
        .await
        .unwrap();
    s.append_event(&a, "alice", "s1", "e1", "alice's", t(2))
        .await
        .unwrap();
    let before = s.get_session(&a, "alice", "s1", all()).await.unwrap();
    assert_not_found(s.get_session(&a, "mallory", "s1", all()).await);
    assert_not_found(
        s.append_event(&a, "mallory", "s1", "e2", "forged", t(3))
            .await,
    );
    s.delete_session(&a, "mallory", "s1").await.unwrap();
    assert_eq!(s.list_sessions(&a, "mallory").await.unwrap(), vec![]);
    // mallory's own s1 is another session.
    s.create_session(&a, "mallory", Some("s1"), None, t(4))
        .await
        .unwrap();
    s.append_event(&a, "mallory", "s1", "e1", "mallory's", t(5))
        .await
        .unwrap();
    assert_eq!(
        s.get_session(&a, "alice", "s1", all()).await.unwrap(),
        before
    );
    let everyone: Vec<(String, String)> = s
        .all_sessions(&a)
        .await
        .unwrap()
        .into_iter()
        .map(|v| (v.user_id, v.id))
        .collect();
    assert_eq!(
        everyone,
        [
            ("alice".to_owned(), "s1".to_owned()),
            ("mallory".to_owned(), "s1".to_owned())
        ]
    );
    s.delete_session(&a, "mallory", "s1").await.unwrap();
    assert_eq!(
        s.get_session(&a, "alice", "s1", all()).await.unwrap(),
        before
    );
}

async fn ids_and_names_are_checked<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    assert_bad_request(
        s.create_session(&a, "alice?user_id=bob", Some("s"), None, t(1))
            .await,
    );
    assert_bad_request(
        s.create_session(&a, "alice", Some("ctx&x"), None, t(1))
            .await,
    );
    assert_bad_request(s.create_session(&a, "alice", Some(""), None, t(1)).await);
    assert_bad_request(s.create_session(&a, "", Some("s"), None, t(1)).await);
    assert_bad_request(
        s.create_session(&a, "alice", Some(&"x".repeat(257)), None, t(1))
            .await,
    );
    assert_bad_request(
        s.create_session(&a, "alice", Some("s"), Some(&"n".repeat(1025)), t(1))
            .await,
    );
    s.create_session(&a, "alice", Some("s"), Some(&"n".repeat(1024)), t(1))
        .await
        .unwrap();
    assert_bad_request(s.append_event(&a, "alice", "s", "e#1", "{}", t(2)).await);
    assert_bad_request(s.save_task(&a, &task("t/1", "{}"), t(2)).await);
    assert_eq!(
        s.usage(&a).await.unwrap(),
        Usage {
            sessions: 1,
            events: 0,
            tasks: 0,
            bytes: session_bytes("alice", "s", Some(&"n".repeat(1024))),
        }
    );
}

async fn tasks_are_kept_per_agent<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    let t1 = task("b-task", r#"{"id":"b-task","status":{"state":"working"}}"#);
    let t2 = TaskRecord {
        finished: true,
        ..task(
            "a-task",
            r#"{"id":"a-task","status":{"state":"completed"}}"#,
        )
    };
    s.save_task(&a, &t1, t(1)).await.unwrap();
    s.save_task(&a, &t2, t(2)).await.unwrap();
    assert_eq!(
        s.get_task(&a, "b-task").await.unwrap(),
        Some(t1.json.clone())
    );
    assert_eq!(s.task_ids(&a).await.unwrap(), ["a-task", "b-task"]);
    let t1_done = TaskRecord {
        finished: true,
        ..task(
            "b-task",
            r#"{"id":"b-task","status":{"state":"completed"},"x":1}"#,
        )
    };
    s.save_task(&a, &t1_done, t(3)).await.unwrap();
    assert_eq!(
        s.get_task(&a, "b-task").await.unwrap(),
        Some(t1_done.json.clone())
    );
    assert_eq!(
        s.usage(&a).await.unwrap(),
        Usage {
            sessions: 0,
            events: 0,
            tasks: 2,
            bytes: task_bytes(&t1_done) + task_bytes(&t2),
        }
    );
    s.delete_task(&a, "b-task").await.unwrap();
    assert_eq!(s.get_task(&a, "b-task").await.unwrap(), None);
    s.delete_task(&a, "b-task").await.unwrap();
    assert_eq!(s.task_ids(&a).await.unwrap(), ["a-task"]);
    assert_eq!(s.usage(&a).await.unwrap().bytes, task_bytes(&t2));
}

/// Alice's session with two events and a task: what the refusals must leave alone.
async fn alices<S: SessionStore>(s: &S, a: &AgentKey) {
    s.create_session(a, "alice", Some("alice-1"), Some("hers"), t(1))
        .await
        .unwrap();
    s.append_event(a, "alice", "alice-1", "e1", "0123456789", t(2))
        .await
        .unwrap();
    s.append_event(a, "alice", "alice-1", "e2", "0123456789", t(3))
        .await
        .unwrap();
    s.save_task(a, &task("alice-task", "{}"), t(4))
        .await
        .unwrap();
}

async fn sessions_per_agent_refuses<B: Backend>(b: &B) {
    let s = b
        .open(Quotas {
            sessions_per_agent: 2,
            ..Quotas::default()
        })
        .await;
    let a = agent();
    alices(&s, &a).await;
    s.create_session(&a, "bob", Some("bob-1"), None, t(5))
        .await
        .unwrap();
    let before = snapshot(&s, &a).await;
    assert_refused(
        s.create_session(&a, "mallory", Some("m-1"), None, t(6))
            .await,
        Limit::SessionsPerAgent,
    );
    assert_refused(
        s.create_session(&a, "mallory", None, None, t(6)).await,
        Limit::SessionsPerAgent,
    );
    assert_eq!(snapshot(&s, &a).await, before, "a refusal writes nothing");
    // Another Agent has its own count.
    s.create_session(&other_agent(), "mallory", Some("m-1"), None, t(6))
        .await
        .unwrap();
    // Creating an existing session again is no new session.
    s.create_session(&a, "alice", Some("alice-1"), Some("hers"), t(7))
        .await
        .unwrap();
    s.delete_session(&a, "bob", "bob-1").await.unwrap();
    s.create_session(&a, "mallory", Some("m-1"), None, t(8))
        .await
        .unwrap();
    assert_eq!(s.usage(&a).await.unwrap().sessions, 2);
}

async fn events_per_session_refuses<B: Backend>(b: &B) {
    let s = b
        .open(Quotas {
            events_per_session: 2,
            ..Quotas::default()
        })
        .await;
    let a = agent();
    alices(&s, &a).await;
    let before = snapshot(&s, &a).await;
    assert_refused(
        s.append_event(&a, "alice", "alice-1", "e3", "{}", t(5))
            .await,
        Limit::EventsPerSession,
    );
    assert_eq!(snapshot(&s, &a).await, before, "a refusal writes nothing");
    // Re-sending an event it holds adds none.
    s.append_event(&a, "alice", "alice-1", "e2", "9876543210", t(6))
        .await
        .unwrap();
    // Each session has its own count.
    s.create_session(&a, "alice", Some("alice-2"), None, t(7))
        .await
        .unwrap();
    for n in 1..=2 {
        s.append_event(&a, "alice", "alice-2", &format!("e{n}"), "{}", t(8))
            .await
            .unwrap();
    }
    assert_eq!(s.usage(&a).await.unwrap().events, 4);
}

async fn bytes_per_session_refuses<B: Backend>(b: &B) {
    let full =
        session_bytes("alice", "alice-1", Some("hers")) + 2 * event_bytes("e1", "0123456789");
    let s = b
        .open(Quotas {
            bytes_per_session: full + 5,
            ..Quotas::default()
        })
        .await;
    let a = agent();
    alices(&s, &a).await;
    let before = snapshot(&s, &a).await;
    assert_refused(
        s.append_event(&a, "alice", "alice-1", "e3", "", t(5)).await,
        Limit::BytesPerSession,
    );
    // Growing an event past it, or the name.
    assert_refused(
        s.append_event(&a, "alice", "alice-1", "e1", "0123456789-123456", t(5))
            .await,
        Limit::BytesPerSession,
    );
    assert_refused(
        s.create_session(&a, "alice", Some("alice-1"), Some("hers, and longer"), t(5))
            .await,
        Limit::BytesPerSession,
    );
    // A new session larger than the limit by itself.
    assert_refused(
        s.create_session(&a, "alice", Some("alice-2"), Some(&"n".repeat(1000)), t(5))
            .await,
        Limit::BytesPerSession,
    );
    assert_eq!(snapshot(&s, &a).await, before, "a refusal writes nothing");
    // Within the limit, and shrinking, are fine.
    s.append_event(&a, "alice", "alice-1", "e1", "0123456789abcde", t(6))
        .await
        .unwrap();
    s.append_event(&a, "alice", "alice-1", "e2", "", t(7))
        .await
        .unwrap();
    assert_eq!(
        s.session_size(&a, "alice", "alice-1").await.unwrap(),
        Some(full + 5 - 10)
    );
}

async fn bytes_per_agent_refuses<B: Backend>(b: &B) {
    let alice_task = task("alice-task", "{}");
    let held = expected_bytes(
        &[(
            "alice",
            "alice-1",
            Some("hers"),
            &[("e1", "0123456789"), ("e2", "0123456789")],
        )],
        std::slice::from_ref(&alice_task),
    );
    let room = session_bytes("mallory", "m-1", None) + 20;
    let s = b
        .open(Quotas {
            bytes_per_agent: held + room,
            ..Quotas::default()
        })
        .await;
    let a = agent();
    alices(&s, &a).await;
    assert_eq!(s.usage(&a).await.unwrap().bytes, held);
    s.create_session(&a, "mallory", Some("m-1"), None, t(5))
        .await
        .unwrap();
    let before = snapshot(&s, &a).await;
    // 20 bytes left: no event (128 counted at least), no task, no new session.
    assert_refused(
        s.append_event(&a, "mallory", "m-1", "e1", "x", t(6)).await,
        Limit::BytesPerAgent,
    );
    assert_refused(
        s.save_task(&a, &task("m-task", "{}"), t(6)).await,
        Limit::BytesPerAgent,
    );
    assert_refused(
        s.create_session(&a, "mallory", Some("m-2"), None, t(6))
            .await,
        Limit::BytesPerAgent,
    );
    assert_refused(
        s.create_session(&a, "mallory", Some("m-1"), Some(&"n".repeat(21)), t(6))
            .await,
        Limit::BytesPerAgent,
    );
    assert_refused(
        s.append_event(&a, "alice", "alice-1", "e1", &"x".repeat(40), t(6))
            .await,
        Limit::BytesPerAgent,
    );
    assert_eq!(snapshot(&s, &a).await, before, "a refusal writes nothing");
    // Another Agent has its own bytes.
    let other = other_agent();
    s.create_session(&other, "mallory", Some("m-1"), None, t(6))
        .await
        .unwrap();
    s.append_event(&other, "mallory", "m-1", "e1", "x", t(6))
        .await
        .unwrap();
    // What is deleted is room again.
    s.delete_task(&a, "alice-task").await.unwrap();
    s.append_event(&a, "mallory", "m-1", "e1", "x", t(7))
        .await
        .unwrap();
}

async fn tasks_per_agent_refuses<B: Backend>(b: &B) {
    let s = b
        .open(Quotas {
            tasks_per_agent: 2,
            ..Quotas::default()
        })
        .await;
    let a = agent();
    alices(&s, &a).await;
    s.save_task(&a, &task("bob-task", "{}"), t(5))
        .await
        .unwrap();
    let before = snapshot(&s, &a).await;
    assert_refused(
        s.save_task(&a, &task("m-task", "{}"), t(6)).await,
        Limit::TasksPerAgent,
    );
    assert_eq!(snapshot(&s, &a).await, before, "a refusal writes nothing");
    assert_eq!(s.get_task(&a, "m-task").await.unwrap(), None);
    // Replacing a task it holds is no new task.
    s.save_task(&a, &task("bob-task", r#"{"again":1}"#), t(7))
        .await
        .unwrap();
    s.save_task(&other_agent(), &task("m-task", "{}"), t(7))
        .await
        .unwrap();
    assert_eq!(s.usage(&a).await.unwrap().tasks, 2);
}

async fn bytes_return_to_zero<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let a = agent();
    alices(&s, &a).await;
    s.create_session(&a, "bob", Some("b"), Some("bob's"), t(5))
        .await
        .unwrap();
    s.append_event(&a, "bob", "b", "e1", "hello", t(6))
        .await
        .unwrap();
    s.append_event(&a, "bob", "b", "e1", "hello again", t(7))
        .await
        .unwrap();
    s.create_session(&a, "bob", Some("b"), None, t(8))
        .await
        .unwrap();
    let bobs_task = task("bob-task", r#"{"x":1}"#);
    s.save_task(&a, &bobs_task, t(9)).await.unwrap();
    let expected = expected_bytes(
        &[
            (
                "alice",
                "alice-1",
                Some("hers"),
                &[("e1", "0123456789"), ("e2", "0123456789")],
            ),
            ("bob", "b", None, &[("e1", "hello again")]),
        ],
        &[task("alice-task", "{}"), bobs_task],
    );
    assert_eq!(
        s.usage(&a).await.unwrap(),
        Usage {
            sessions: 2,
            events: 3,
            tasks: 2,
            bytes: expected,
        }
    );
    s.delete_session(&a, "alice", "alice-1").await.unwrap();
    s.delete_session(&a, "bob", "b").await.unwrap();
    s.delete_task(&a, "alice-task").await.unwrap();
    s.delete_task(&a, "bob-task").await.unwrap();
    assert_eq!(s.usage(&a).await.unwrap(), Usage::default());
    assert_eq!(s.agents().await.unwrap(), vec![]);
    // A session created again after its deletion starts empty.
    s.create_session(&a, "alice", Some("alice-1"), None, t(10))
        .await
        .unwrap();
    let (_, events) = s.get_session(&a, "alice", "alice-1", all()).await.unwrap();
    assert!(events.is_empty(), "a deleted session's events are gone");
}

async fn delete_idle_deletes_what_was_idle<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let (a, other) = (agent(), other_agent());
    // Created early, written late: not idle.
    s.create_session(&a, "alice", Some("busy"), None, t(1))
        .await
        .unwrap();
    s.append_event(&a, "alice", "busy", "e1", "{}", t(9))
        .await
        .unwrap();
    s.create_session(&a, "alice", Some("idle"), None, t(2))
        .await
        .unwrap();
    s.append_event(&a, "alice", "idle", "e1", "{}", t(3))
        .await
        .unwrap();
    s.save_task(&a, &task("old", "{}"), t(2)).await.unwrap();
    s.save_task(&a, &task("new", "{}"), t(8)).await.unwrap();
    s.create_session(&other, "bob", Some("idle"), None, t(4))
        .await
        .unwrap();
    // Written again late: not idle.
    s.save_task(&other, &task("renewed", "{}"), t(1))
        .await
        .unwrap();
    s.save_task(&other, &task("renewed", "{}"), t(8))
        .await
        .unwrap();
    let only_busy = snapshot(&s, &a).await.sessions[0].clone();

    assert_eq!(s.delete_idle(t(6)).await.unwrap(), 3);
    assert_eq!(s.task_ids(&a).await.unwrap(), ["new"]);
    assert_eq!(snapshot(&s, &a).await.sessions, vec![only_busy.clone()]);
    assert_eq!(
        s.usage(&a).await.unwrap(),
        Usage {
            sessions: 1,
            events: 1,
            tasks: 1,
            bytes: session_bytes("alice", "busy", None)
                + event_bytes("e1", "{}")
                + task_bytes(&task("new", "{}")),
        }
    );
    assert_eq!(s.all_sessions(&other).await.unwrap(), vec![]);
    assert_eq!(s.task_ids(&other).await.unwrap(), ["renewed"]);
    assert_eq!(s.delete_idle(t(6)).await.unwrap(), 0);
    // Past everything: nothing left, and no Agent listed.
    assert_eq!(s.delete_idle(t(10)).await.unwrap(), 3);
    assert_eq!(s.usage(&a).await.unwrap(), Usage::default());
    assert_eq!(s.usage(&other).await.unwrap(), Usage::default());
    assert_eq!(s.agents().await.unwrap(), vec![]);
}

async fn forget_agent_deletes_everything_of_it<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let (a, other) = (agent(), other_agent());
    alices(&s, &a).await;
    s.create_session(&a, "bob", Some("b"), None, t(5))
        .await
        .unwrap();
    s.create_session(&other, "alice", Some("alice-1"), None, t(5))
        .await
        .unwrap();
    let others = snapshot(&s, &other).await;
    assert_eq!(s.note_missing(&a, t(6)).await.unwrap(), t(6));
    assert_eq!(s.forget_agent(&a).await.unwrap(), 3);
    assert_eq!(s.usage(&a).await.unwrap(), Usage::default());
    assert_eq!(s.all_sessions(&a).await.unwrap(), vec![]);
    assert_eq!(s.task_ids(&a).await.unwrap(), Vec::<String>::new());
    assert_not_found(s.get_session(&a, "alice", "alice-1", all()).await);
    assert_eq!(s.agents().await.unwrap(), vec![other.clone()]);
    assert_eq!(snapshot(&s, &other).await, others);
    // Its record of being missing went with it: found missing again, the grace starts again.
    assert_eq!(s.note_missing(&a, t(9)).await.unwrap(), t(9));
    assert_eq!(s.forget_agent(&a).await.unwrap(), 0);
    // An Agent of that name starts from nothing.
    s.create_session(&a, "alice", Some("alice-1"), None, t(10))
        .await
        .unwrap();
    assert_eq!(
        s.usage(&a).await.unwrap(),
        Usage {
            sessions: 1,
            events: 0,
            tasks: 0,
            bytes: session_bytes("alice", "alice-1", None),
        }
    );
}

async fn claim_sweep_once_per_period<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    assert!(s.claim_sweep("idle", t(100)).await.unwrap());
    assert!(!s.claim_sweep("idle", t(100)).await.unwrap());
    assert!(
        !s.claim_sweep("idle", t(50)).await.unwrap(),
        "an earlier period than one claimed"
    );
    assert!(s.claim_sweep("agents", t(100)).await.unwrap());
    assert!(s.claim_sweep("idle", t(200)).await.unwrap());
    assert!(!s.claim_sweep("idle", t(200)).await.unwrap());
    assert!(!s.claim_sweep("agents", t(100)).await.unwrap());
}

async fn note_missing_keeps_the_first_instant<B: Backend>(b: &B) {
    let s = b.open(Quotas::default()).await;
    let (a, other) = (agent(), other_agent());
    assert_eq!(s.note_missing(&a, t(5)).await.unwrap(), t(5));
    assert_eq!(s.note_missing(&a, t(9)).await.unwrap(), t(5));
    assert_eq!(s.note_missing(&other, t(9)).await.unwrap(), t(9));
    // A replica whose clock is behind records the earlier instant.
    assert_eq!(s.note_missing(&a, t(3)).await.unwrap(), t(3));
    s.note_present(&a).await.unwrap();
    assert_eq!(s.note_missing(&a, t(20)).await.unwrap(), t(20));
    assert_eq!(s.note_missing(&other, t(21)).await.unwrap(), t(9));
    s.note_present(&a).await.unwrap();
    s.note_present(&a).await.unwrap();
}

macro_rules! conformance {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(&super::Memory).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(&super::Sqlite::new()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(&super::Pg::new()).await;
                }
            )*
        }
    };
}

conformance!(
    create_get_list_delete,
    recreate_keeps_events_and_replaces_name,
    order_is_the_sequence_not_the_clock,
    after_and_limit,
    an_event_resent_is_stored_once,
    agents_are_isolated,
    users_are_partitioned,
    ids_and_names_are_checked,
    tasks_are_kept_per_agent,
    sessions_per_agent_refuses,
    events_per_session_refuses,
    bytes_per_session_refuses,
    bytes_per_agent_refuses,
    tasks_per_agent_refuses,
    bytes_return_to_zero,
    delete_idle_deletes_what_was_idle,
    forget_agent_deletes_everything_of_it,
    claim_sweep_once_per_period,
    note_missing_keeps_the_first_instant,
);

// ---- Durability and concurrency (the SQL stores) -------------------------------------------

/// Writes through one store, closes it, opens the database again: everything is there.
async fn persists_across_reopen(url: &str) {
    let a = agent();
    let store = SqlStore::connect(url, Quotas::default()).await.unwrap();
    alices(&store, &a).await;
    store
        .append_event(&a, "alice", "alice-1", "e1", "replaced", t(5))
        .await
        .unwrap();
    assert!(store.claim_sweep("idle", t(100)).await.unwrap());
    store.note_missing(&other_agent(), t(7)).await.unwrap();
    let before = snapshot(&store, &a).await;
    store.close().await;
    drop(store);

    let store = SqlStore::connect(url, Quotas::default()).await.unwrap();
    assert_eq!(snapshot(&store, &a).await, before);
    assert_eq!(
        ids(&before.sessions[0].1),
        ["e1", "e2"],
        "the events, in order"
    );
    assert!(!store.claim_sweep("idle", t(100)).await.unwrap());
    assert_eq!(
        store.note_missing(&other_agent(), t(9)).await.unwrap(),
        t(7)
    );
    // The sequence goes on where it was.
    store
        .append_event(&a, "alice", "alice-1", "e3", "{}", t(0))
        .await
        .unwrap();
    let (_, events) = store
        .get_session(&a, "alice", "alice-1", all())
        .await
        .unwrap();
    assert_eq!(ids(&events), ["e1", "e2", "e3"]);
}

/// The sequence numbers of a session's events, in order, read from the database itself.
async fn stored_sequence(url: &str, agent: &AgentKey, user: &str, session: &str) -> Vec<i64> {
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    let rows = sqlx::query(
        "SELECT seq FROM hitl_events WHERE agent = $1 AND user_id = $2 AND session_id = $3 \
         ORDER BY seq",
    )
    .bind(agent.key())
    .bind(user)
    .bind(session)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    rows.iter().map(|r| r.get::<i64, _>("seq")).collect()
}

/// Two stores (two pools, as two replicas) on one database, four writers each, 200 appends a
/// store to one session, all at the same instant: every acknowledged event is there once, each
/// writer's in the order it wrote them, and the sequence numbers are 0..400 without a gap.
async fn concurrent_appends(url: &str) {
    const WRITERS: usize = 4;
    const EACH: usize = 50;
    let a = agent();
    let stores = [
        Arc::new(SqlStore::connect(url, Quotas::default()).await.unwrap()),
        Arc::new(SqlStore::connect(url, Quotas::default()).await.unwrap()),
    ];
    stores[0]
        .create_session(&a, "alice", Some("s1"), None, t(0))
        .await
        .unwrap();
    let mut writers = Vec::new();
    for (n, store) in stores.iter().enumerate() {
        for w in 0..WRITERS {
            let (store, a) = (store.clone(), a.clone());
            writers.push(tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for i in 0..EACH {
                    let id = format!("store{n}-writer{w}-{i:03}");
                    store
                        .append_event(&a, "alice", "s1", &id, r#"{"x":1}"#, t(1))
                        .await
                        .unwrap_or_else(|e| panic!("appending {id}: {e}"));
                    acknowledged.push(id);
                }
                acknowledged
            }));
        }
    }
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.push(writer.await.unwrap());
    }
    let total = 2 * WRITERS * EACH;
    for store in &stores {
        let (_, events) = store.get_session(&a, "alice", "s1", all()).await.unwrap();
        assert_eq!(events.len(), total);
        let distinct: HashSet<&str> = ids(&events).into_iter().collect();
        assert_eq!(distinct.len(), total, "an event stored twice");
        for written in &acknowledged {
            let prefix = &written[0][..written[0].len() - 3];
            let read: Vec<&str> = ids(&events)
                .into_iter()
                .filter(|id| id.starts_with(prefix))
                .collect();
            assert_eq!(read, *written, "one writer's events out of its order");
        }
        assert_eq!(
            store.usage(&a).await.unwrap(),
            Usage {
                sessions: 1,
                events: total as u64,
                tasks: 0,
                bytes: session_bytes("alice", "s1", None)
                    + events
                        .iter()
                        .map(|e| event_bytes(&e.id, &e.data))
                        .sum::<u64>(),
            }
        );
    }
    let seq = stored_sequence(url, &a, "alice", "s1").await;
    assert_eq!(seq, (0..total as i64).collect::<Vec<_>>());
}

/// Two stores creating 15 sessions each, at once, under a quota of 10: exactly 10 exist.
async fn concurrent_creation_keeps_the_quota(url: &str) {
    let quotas = Quotas {
        sessions_per_agent: 10,
        ..Quotas::default()
    };
    let a = agent();
    let stores = [
        Arc::new(SqlStore::connect(url, quotas).await.unwrap()),
        Arc::new(SqlStore::connect(url, quotas).await.unwrap()),
    ];
    let mut creators = Vec::new();
    for (n, store) in stores.iter().enumerate() {
        for i in 0..15 {
            let (store, a) = (store.clone(), a.clone());
            creators.push(tokio::spawn(async move {
                store
                    .create_session(
                        &a,
                        &format!("user{i}"),
                        Some(&format!("s{n}-{i}")),
                        None,
                        t(1),
                    )
                    .await
            }));
        }
    }
    let mut created = 0;
    for creator in creators {
        match creator.await.unwrap() {
            Ok(_) => created += 1,
            refused => assert_refused(refused, Limit::SessionsPerAgent),
        }
    }
    assert_eq!(created, 10);
    assert_eq!(stores[1].usage(&a).await.unwrap().sessions, 10);
    assert_eq!(stores[0].all_sessions(&a).await.unwrap().len(), 10);
}

/// Two stores racing to claim each of 20 periods: exactly one wins each.
async fn sweep_claims_race(url: &str) {
    let a = SqlStore::connect(url, Quotas::default()).await.unwrap();
    let b = SqlStore::connect(url, Quotas::default()).await.unwrap();
    for period in 0..20 {
        let (x, y) = tokio::join!(
            a.claim_sweep("idle", t(period * 60)),
            b.claim_sweep("idle", t(period * 60))
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x ^ y, "period {period}: claimed by {x} and {y}");
    }
}

#[tokio::test]
async fn sqlite_persists_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    persists_across_reopen(&format!("sqlite://{}/s.db", dir.path().display())).await;
}

#[tokio::test]
async fn postgres_persists_across_reopen() {
    let pg = Pg::new();
    persists_across_reopen(&pg.fresh_database()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_appends() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_appends(&format!("sqlite://{}/s.db", dir.path().display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_appends() {
    let pg = Pg::new();
    concurrent_appends(&pg.fresh_database()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_creation_keeps_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_creation_keeps_the_quota(&format!("sqlite://{}/s.db", dir.path().display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_creation_keeps_the_quota() {
    let pg = Pg::new();
    concurrent_creation_keeps_the_quota(&pg.fresh_database()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_sweep_claims_race() {
    let dir = tempfile::tempdir().unwrap();
    sweep_claims_race(&format!("sqlite://{}/s.db", dir.path().display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_sweep_claims_race() {
    let pg = Pg::new();
    sweep_claims_race(&pg.fresh_database()).await;
}

/// Two replicas starting together on a fresh database: both migrate (one waits for the
/// other's advisory lock), the schema is applied once, and both serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_migrations() {
    let pg = Pg::new();
    let url = pg.fresh_database();
    let (a, b) = tokio::join!(
        SqlStore::connect(&url, Quotas::default()),
        SqlStore::connect(&url, Quotas::default())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
    let applied: i64 = sqlx::query("SELECT COUNT(*) AS n FROM hitl_sessions_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get("n");
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sessions"))
        .unwrap()
        .count();
    assert_eq!(applied, files as i64);
    a.create_session(&agent(), "alice", Some("s1"), None, t(1))
        .await
        .unwrap();
    let (view, _) = b.get_session(&agent(), "alice", "s1", all()).await.unwrap();
    assert_eq!(view.id, "s1");
}

/// A database that stops answering makes the store answer Unavailable, promptly.
#[tokio::test]
async fn postgres_gone_is_unavailable() {
    let server = Postgres::start();
    let url = server.create_database("gone");
    let store = SqlStore::connect(&url, Quotas::default()).await.unwrap();
    store.ping().await.unwrap();
    drop(server);
    let started = Instant::now();
    let answers = [
        store.ping().await,
        store
            .create_session(&agent(), "alice", Some("s1"), None, t(1))
            .await
            .map(drop),
    ];
    for answer in answers {
        assert!(
            matches!(answer, Err(StoreError::Unavailable(_))),
            "{answer:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

/// A SQLite URL whose directory does not exist says so, naming the file.
#[tokio::test]
async fn sqlite_missing_directory_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/no/such/dir/s.db", dir.path().display());
    match SqlStore::connect(&url, Quotas::default()).await {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("no/such/dir/s.db"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}
