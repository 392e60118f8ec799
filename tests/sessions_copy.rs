//! `hitl-operator sessions copy`, the binary as an operator runs it: a SQLite store moved into a
//! real Postgres (the test kit's), everything there afterwards, and a second run harmless.

use hitl_operator::sessions::sql::SqlStore;
use hitl_operator::sessions::store::{
    AgentKey, EventQuery, Quotas, SessionStore, TaskRecord, Usage,
};
use hitl_test_kit::postgres::Postgres;
use jiff::Timestamp;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).unwrap()
}

fn copy(from: &str, to: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hitl-operator"))
        .args(["sessions", "copy", "--from", from, "--to", to])
        .env("LOG_FORMAT", "text")
        .output()
        .expect("hitl-operator runs");
    assert!(
        out.status.success(),
        "sessions copy failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn a_sqlite_store_moves_to_postgres_whole_and_a_second_copy_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}/sessions.db", dir.path().display());
    let postgres = Postgres::shared();
    let target = postgres.create_database("sessions_copy");
    let agents = [AgentKey::new("team", "a"), AgentKey::new("other", "b")];
    {
        let from = SqlStore::connect(&sqlite, Quotas::default()).await.unwrap();
        for (n, agent) in agents.iter().enumerate() {
            for user in ["alice", "bob"] {
                let id = format!("ctx-{user}");
                from.create_session(agent, user, Some(&id), Some("a chat"), at(n as i64))
                    .await
                    .unwrap();
                for i in 0..50 {
                    from.append_event(
                        agent,
                        user,
                        &id,
                        &format!("e{i}"),
                        &format!("{{\"n\":{i}}}"),
                        at(100 - i),
                    )
                    .await
                    .unwrap();
                }
            }
            let task = TaskRecord::from_json(format!(
                r#"{{"id":"t-{n}","status":{{"state":"completed"}},"history":[]}}"#
            ))
            .unwrap();
            from.save_task(agent, &task, at(5)).await.unwrap();
        }
    }
    let said = copy(&sqlite, &target);
    assert_eq!(
        said.trim(),
        "copied 2 agents: 4 sessions, 200 events, 2 tasks"
    );
    let said_again = copy(&sqlite, &target);
    assert_eq!(said_again, said);

    let from = SqlStore::connect(&sqlite, Quotas::default()).await.unwrap();
    let to = SqlStore::connect(&target, Quotas::default()).await.unwrap();
    for agent in &agents {
        let usage: Usage = to.usage(agent).await.unwrap();
        assert_eq!(usage, from.usage(agent).await.unwrap(), "{agent}");
        assert_eq!((usage.sessions, usage.events, usage.tasks), (2, 100, 1));
        let (session, events) = to
            .get_session(agent, "alice", "ctx-alice", EventQuery::default())
            .await
            .unwrap();
        let (_, original) = from
            .get_session(agent, "alice", "ctx-alice", EventQuery::default())
            .await
            .unwrap();
        assert_eq!(session.name.as_deref(), Some("a chat"));
        assert_eq!(
            events, original,
            "{agent}: the events, their order and times"
        );
    }
    assert!(to.get_task(&agents[0], "t-0").await.unwrap().is_some());
    assert!(to.get_task(&agents[1], "t-0").await.unwrap().is_none());
}
