//! `hitl-operator sessions copy --from URL --to URL`: moves a store to another database (such
//! as SQLite to Postgres), with the store scaled to zero. Every session keeps its id, user,
//! name, creation time and its events in order (each with its id and first-stored time);
//! every task is copied as stored. Copying again is harmless: sessions are created again and
//! events stored once by id. One session is held in memory at a time.

use super::store::{AgentKey, EventQuery, SessionStore, StoreError, TaskRecord};

/// What a copy moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Agents.
    pub agents: u64,
    /// Sessions.
    pub sessions: u64,
    /// Events.
    pub events: u64,
    /// Tasks.
    pub tasks: u64,
}

/// Copies everything of `from` into `to`.
pub async fn copy<F: SessionStore, T: SessionStore>(
    from: &F,
    to: &T,
) -> Result<Copied, StoreError> {
    let mut copied = Copied::default();
    for agent in from.agents().await? {
        copy_agent(from, to, &agent, &mut copied).await?;
        copied.agents += 1;
    }
    Ok(copied)
}

async fn copy_agent<F: SessionStore, T: SessionStore>(
    from: &F,
    to: &T,
    agent: &AgentKey,
    copied: &mut Copied,
) -> Result<(), StoreError> {
    for session in from.all_sessions(agent).await? {
        let (_, events) = from
            .get_session(agent, &session.user_id, &session.id, EventQuery::default())
            .await?;
        to.create_session(
            agent,
            &session.user_id,
            Some(&session.id),
            session.name.as_deref(),
            session.created_at,
        )
        .await?;
        for event in &events {
            to.append_event(
                agent,
                &session.user_id,
                &session.id,
                &event.id,
                &event.data,
                event.created_at,
            )
            .await?;
        }
        copied.sessions += 1;
        copied.events += events.len() as u64;
    }
    for id in from.task_ids(agent).await? {
        let Some(json) = from.get_task(agent, &id).await? else {
            continue;
        };
        let task = TaskRecord::from_json(json)
            .map_err(|e| StoreError::BadRequest(format!("task {id} of {agent}: {e}")))?;
        to.save_task(agent, &task, jiff::Timestamp::now()).await?;
        copied.tasks += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use crate::sessions::memory::MemoryStore;
    use crate::sessions::store::Quotas;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[tokio::test]
    async fn a_copy_keeps_ids_users_times_and_order_and_may_run_twice() {
        let from = MemoryStore::new(Quotas::default());
        let a = AgentKey::new("team", "a");
        let b = AgentKey::new("other", "b");
        from.create_session(&a, "alice", Some("s1"), Some("hello"), at(0))
            .await
            .unwrap();
        from.create_session(&b, "bob", Some("s1"), None, at(1))
            .await
            .unwrap();
        // Event times going backwards: the order is the sequence, not the clock.
        for (i, second) in [(1, 9), (2, 5), (3, 7)] {
            from.append_event(
                &a,
                "alice",
                "s1",
                &format!("e{i}"),
                &format!("{{\"n\":{i}}}"),
                at(second),
            )
            .await
            .unwrap();
        }
        let task =
            TaskRecord::from_json(r#"{"id":"t1","status":{"state":"completed"}}"#.into()).unwrap();
        from.save_task(&a, &task, at(3)).await.unwrap();

        let to = MemoryStore::new(Quotas::default());
        let copied = copy(&from, &to).await.unwrap();
        assert_eq!(
            copied,
            Copied {
                agents: 2,
                sessions: 2,
                events: 3,
                tasks: 1
            }
        );
        // Again: nothing is doubled.
        copy(&from, &to).await.unwrap();
        let (session, events) = to
            .get_session(&a, "alice", "s1", EventQuery::default())
            .await
            .unwrap();
        assert_eq!(session.name.as_deref(), Some("hello"));
        assert_eq!(session.created_at, at(0));
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["e1", "e2", "e3"]);
        assert_eq!(events[1].created_at, at(5));
        assert_eq!(to.get_task(&a, "t1").await.unwrap(), Some(task.json));
        assert!(to.get_task(&b, "t1").await.unwrap().is_none());
        assert_eq!(to.usage(&a).await.unwrap(), from.usage(&a).await.unwrap());
    }
}
