//! What the store deletes by itself, and only this: sessions idle longer than an explicit
//! retention (off unless set), and the data of Agents deleted longer than a grace period ago.
//! Nothing is deleted to make room ([`super::store`]).
//!
//! Each sweep runs once per period across every replica: the replica that claims the period
//! in the database ([`SessionStore::claim_sweep`]) sweeps, the others skip it. An Agent counts
//! as deleted only when the apiserver answers that its namespace has no Agent of that name;
//! when it does not answer, nothing is deleted. The first instant an Agent was found missing is
//! kept in the database, so the grace period survives restarts and moves between replicas; an
//! Agent that comes back (made again under its name) is no longer counted as missing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::metrics::Metrics;
use super::store::{AgentKey, SessionStore, StoreError};
use crate::api::Agent;

/// What retention deletes, and how often it looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Sessions (and tasks) not written for this long are deleted; `None`: never.
    pub idle: Option<SignedDuration>,
    /// The data of an Agent deleted this long ago is deleted.
    pub deleted_agent_grace: SignedDuration,
    /// Time between sweeps.
    pub every: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            idle: None,
            deleted_agent_grace: SignedDuration::from_hours(168),
            every: Duration::from_secs(600),
        }
    }
}

/// The start of the period of length `every` that `now` falls in.
pub fn period_start(now: Timestamp, every: Duration) -> Timestamp {
    let every = i64::try_from(every.as_secs()).unwrap_or(i64::MAX).max(1);
    let second = now.as_second();
    Timestamp::from_second(second - second.rem_euclid(every)).unwrap_or(now)
}

/// Runs the sweeps of one replica.
pub struct Sweeper<S> {
    store: Arc<S>,
    client: Client,
    retention: Retention,
    metrics: Arc<Metrics>,
}

impl<S: SessionStore> Sweeper<S> {
    /// Sweeps `store` as `retention` says, asking `client`'s apiserver which Agents exist.
    pub fn new(store: Arc<S>, client: Client, retention: Retention, metrics: Arc<Metrics>) -> Self {
        Self {
            store,
            client,
            retention,
            metrics,
        }
    }

    /// Sweeps every period until `stop`.
    pub async fn run(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(self.retention.every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if let Err(e) = self.sweep(Timestamp::now()).await {
                tracing::warn!(error = %e, "session store: retention sweep failed; trying again next period");
            }
        }
    }

    /// One period's sweeps, where this replica claims them.
    pub async fn sweep(&self, now: Timestamp) -> Result<(), StoreError> {
        let period = period_start(now, self.retention.every);
        if let Some(idle) = self.retention.idle
            && self.store.claim_sweep("idle", period).await?
        {
            let before = now.checked_sub(idle).unwrap_or(Timestamp::MIN);
            let deleted = self.store.delete_idle(before).await?;
            self.metrics.swept.inc_by(deleted);
            if deleted > 0 {
                tracing::info!(deleted, before = %before, "session store: idle sessions and tasks deleted");
            }
        }
        if self.store.claim_sweep("deleted-agents", period).await? {
            self.sweep_deleted_agents(now).await?;
        }
        Ok(())
    }

    async fn sweep_deleted_agents(&self, now: Timestamp) -> Result<(), StoreError> {
        let mut by_namespace: BTreeMap<String, Vec<AgentKey>> = BTreeMap::new();
        for agent in self.store.agents().await? {
            by_namespace
                .entry(agent.namespace.clone())
                .or_default()
                .push(agent);
        }
        for (namespace, agents) in by_namespace {
            let api: Api<Agent> = Api::namespaced(self.client.clone(), &namespace);
            let existing: BTreeSet<String> = match api.list_metadata(&ListParams::default()).await {
                Ok(list) => list.items.iter().map(|a| a.name_any()).collect(),
                Err(e) => {
                    tracing::warn!(namespace, error = %e, "session store: cannot list Agents; nothing of this namespace is deleted");
                    continue;
                }
            };
            for agent in agents {
                if existing.contains(&agent.name) {
                    self.store.note_present(&agent).await?;
                    continue;
                }
                let since = self.store.note_missing(&agent, now).await?;
                let gone_for = now.duration_since(since);
                if gone_for >= self.retention.deleted_agent_grace {
                    let deleted = self.store.forget_agent(&agent).await?;
                    self.store.note_present(&agent).await?;
                    self.metrics.swept.inc_by(deleted);
                    tracing::info!(agent = %agent, deleted, missing_since = %since,
                        "session store: the data of a deleted Agent was deleted after the grace period");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use hitl_test_kit::mock;
    use serde_json::json;

    use super::*;
    use crate::sessions::memory::MemoryStore;
    use crate::sessions::store::Quotas;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[test]
    fn a_period_starts_at_a_multiple_of_its_length() {
        let every = Duration::from_secs(600);
        assert_eq!(period_start(at(0), every), at(0));
        assert_eq!(period_start(at(599), every), at(0));
        assert_eq!(period_start(at(600), every), at(600));
    }

    fn list(names: &[&str]) -> serde_json::Value {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": {"resourceVersion": "1"},
            "items": names.iter().map(|n| json!({"apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata", "metadata": {"name": n}})).collect::<Vec<_>>()})
    }

    /// Answers one sweep's lists of Agents: `team` holds `team_agents`; `other` answers 500
    /// when `other_fails`, else holds nothing.
    async fn answer_lists(apiserver: &mut mock::ApiMock, team_agents: &[&str], other_fails: bool) {
        for _ in 0..2 {
            let call = apiserver.next().await;
            let path = call.uri.split('?').next().unwrap().to_owned();
            match path.as_str() {
                "/apis/kagent.dev/v1alpha2/namespaces/team/agents" => {
                    call.reply.respond(200, &list(team_agents))
                }
                "/apis/kagent.dev/v1alpha2/namespaces/other/agents" if other_fails => call
                    .reply
                    .respond(500, &json!({"kind": "Status", "code": 500})),
                "/apis/kagent.dev/v1alpha2/namespaces/other/agents" => {
                    call.reply.respond(200, &list(&[]))
                }
                other => panic!("unexpected request {other}"),
            }
        }
    }

    #[tokio::test]
    async fn a_deleted_agents_data_goes_after_the_grace_and_only_when_the_apiserver_says_so() {
        let store = Arc::new(MemoryStore::new(Quotas::default()));
        let (a, b, c) = (
            AgentKey::new("team", "a"),
            AgentKey::new("team", "b"),
            AgentKey::new("other", "c"),
        );
        for agent in [&a, &b, &c] {
            store
                .create_session(agent, "u", Some("s"), None, at(0))
                .await
                .unwrap();
        }
        let (client, mut apiserver) = mock::pair("default");
        let retention = Retention {
            idle: None,
            deleted_agent_grace: SignedDuration::from_hours(1),
            every: Duration::from_secs(600),
        };
        let sweeper = Sweeper::new(
            store.clone(),
            client,
            retention,
            Arc::new(Metrics::default()),
        );
        let sessions = |agent: AgentKey| {
            let store = store.clone();
            async move { store.usage(&agent).await.unwrap().sessions }
        };

        // b and c are gone from the cluster, but the apiserver fails for c's namespace.
        let server = tokio::spawn(async move {
            answer_lists(&mut apiserver, &["a"], true).await;
            apiserver
        });
        sweeper.sweep(at(0)).await.unwrap();
        let mut apiserver = server.await.unwrap();
        // The same period is not swept again.
        sweeper.sweep(at(10)).await.unwrap();
        assert!(apiserver.is_idle());

        // Within the grace: b is kept; c was never found missing.
        let server = tokio::spawn(async move {
            answer_lists(&mut apiserver, &["a"], false).await;
            apiserver
        });
        sweeper.sweep(at(1800)).await.unwrap();
        let mut apiserver = server.await.unwrap();
        assert_eq!(
            (
                sessions(a.clone()).await,
                sessions(b.clone()).await,
                sessions(c.clone()).await
            ),
            (1, 1, 1)
        );

        // An hour after b was first found missing: b goes; c (missing since 1800) stays.
        let server = tokio::spawn(async move {
            answer_lists(&mut apiserver, &["a"], false).await;
            apiserver
        });
        sweeper.sweep(at(3600)).await.unwrap();
        let mut apiserver = server.await.unwrap();
        assert_eq!(
            (
                sessions(a.clone()).await,
                sessions(b.clone()).await,
                sessions(c.clone()).await
            ),
            (1, 0, 1)
        );

        // c is made again before its grace ends: kept, and no longer counted as missing.
        let server = tokio::spawn(async move {
            answer_lists(&mut apiserver, &["a"], false).await;
            for _ in 0..2 {
                let call = apiserver.next().await;
                let names: &[&str] = if call.uri.contains("/namespaces/other/") {
                    &["c"]
                } else {
                    &["a"]
                };
                call.reply.respond(200, &list(names));
            }
            apiserver
        });
        sweeper.sweep(at(4200)).await.unwrap();
        sweeper.sweep(at(7200 + 1800)).await.unwrap();
        server.await.unwrap();
        assert_eq!(sessions(c.clone()).await, 1);
        assert_eq!(store.note_missing(&c, at(9000)).await.unwrap(), at(9000));
    }

    #[tokio::test]
    async fn idle_sessions_go_only_when_a_retention_is_set() {
        let store = Arc::new(MemoryStore::new(Quotas::default()));
        let agent = AgentKey::new("team", "a");
        store
            .create_session(&agent, "u", Some("old"), None, at(0))
            .await
            .unwrap();
        store
            .create_session(&agent, "u", Some("new"), None, at(3000))
            .await
            .unwrap();
        let (client, mut apiserver) = mock::pair("default");
        let retention = Retention {
            idle: Some(SignedDuration::from_hours(1)),
            deleted_agent_grace: SignedDuration::from_hours(1),
            every: Duration::from_secs(600),
        };
        let sweeper = Sweeper::new(
            store.clone(),
            client,
            retention,
            Arc::new(Metrics::default()),
        );
        let server = tokio::spawn(async move {
            let call = apiserver.next().await;
            call.reply.respond(200, &list(&["a"]));
        });
        sweeper.sweep(at(4000)).await.unwrap();
        server.await.unwrap();
        let ids: Vec<String> = store
            .list_sessions(&agent, "u")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(ids, ["new"]);
    }
}
