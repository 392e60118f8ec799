//! The gate's view of its Agent's (or ToolGate's) freeze ([`crate::api::freeze`]): one watch of
//! that object (the rendered Role lets the gate's ServiceAccount get, list and watch it only),
//! held in memory, so checking costs no request.
//!
//! Fail closed: until the watch has shown the object, while it fails, and after it is
//! deleted, the state is unknown, and a gated call is refused as if frozen.

use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::api::approval_request::PolicyKind;
use crate::api::freeze::{Freezable, Freeze};
use crate::api::{Agent, ToolGate};
use crate::apiserver::backoff::BackoffWhileFailing;

/// What the gate knows of its Agent's freeze.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FreezeState {
    /// Not known (why): the watch has not shown the Agent yet, fails, or the Agent is gone.
    Unknown(String),
    /// Frozen: the freeze, described.
    Frozen(String),
    /// Not frozen.
    Clear,
}

/// A shared, always current view of the Agent's freeze.
#[derive(Clone, Debug)]
pub struct FreezeWatch {
    state: watch::Receiver<FreezeState>,
}

impl FreezeWatch {
    /// A view fed by `state`'s sender (the watch task, or a test).
    pub fn new(state: watch::Receiver<FreezeState>) -> Self {
        Self { state }
    }

    /// A view that never changes (a gate whose freeze is decided elsewhere, a test).
    pub fn fixed(state: FreezeState) -> Self {
        Self::new(watch::channel(state).1)
    }

    /// Watches the Agent or ToolGate (`kind`) `name` in `namespace` for as long as the runtime
    /// runs.
    pub fn spawn(client: kube::Client, kind: PolicyKind, namespace: &str, name: &str) -> Self {
        match kind {
            PolicyKind::Agent => Self::spawn_for::<Agent>(client, namespace, name),
            PolicyKind::ToolGate => Self::spawn_for::<ToolGate>(client, namespace, name),
        }
    }

    fn spawn_for<K>(client: kube::Client, namespace: &str, name: &str) -> Self
    where
        K: Freezable<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + 'static,
    {
        let subject = format!("{} {namespace}/{name}", K::KIND.as_str());
        let (tx, rx) = watch::channel(FreezeState::Unknown(format!(
            "{subject} has not been read yet"
        )));
        let api: Api<K> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let events = watcher(api, config).backoff_while_failing();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut listed = false;
            while let Some(event) = events.next().await {
                let next = match event {
                    Ok(watcher::Event::Init) => {
                        listed = false;
                        continue;
                    }
                    Ok(watcher::Event::InitApply(object) | watcher::Event::Apply(object)) => {
                        listed = true;
                        state_of(&object)
                    }
                    Ok(watcher::Event::InitDone) if listed => continue,
                    Ok(watcher::Event::InitDone) => {
                        FreezeState::Unknown(format!("{subject} does not exist"))
                    }
                    Ok(watcher::Event::Delete(_)) => {
                        FreezeState::Unknown(format!("{subject} was deleted"))
                    }
                    Err(error) => FreezeState::Unknown(format!("cannot watch {subject}: {error}")),
                };
                tx.send_if_modified(|state| {
                    if *state == next {
                        return false;
                    }
                    match &next {
                        FreezeState::Frozen(freeze) => {
                            tracing::warn!(%freeze, "agent frozen: refusing gated calls")
                        }
                        FreezeState::Clear => tracing::info!("agent not frozen"),
                        FreezeState::Unknown(why) => {
                            tracing::warn!(%why, "freeze unknown: refusing gated calls")
                        }
                    }
                    *state = next;
                    true
                });
            }
        });
        Self::new(rx)
    }

    /// Why a gated call must not run now, if it must not: the Agent is frozen or its state
    /// unknown. Waits at most `bound` for an unknown state to become known.
    pub async fn refusal(&self, bound: Duration) -> Option<String> {
        let mut state = self.state.clone();
        let known = tokio::time::timeout(
            bound,
            state.wait_for(|s| !matches!(s, FreezeState::Unknown(_))),
        )
        .await;
        if let Ok(Err(_)) = known {
            return Some("the gate no longer watches its Agent".into());
        }
        let current = self.state.borrow().clone();
        match current {
            FreezeState::Clear => None,
            FreezeState::Frozen(freeze) => Some(freeze),
            FreezeState::Unknown(why) => Some(format!("cannot tell whether it is frozen: {why}")),
        }
    }

    /// Resolves with the freeze once the Agent is frozen (at once if it is); never otherwise.
    pub async fn frozen(&self) -> String {
        let mut state = self.state.clone();
        loop {
            if let FreezeState::Frozen(freeze) = &*state.borrow_and_update() {
                return freeze.clone();
            }
            if state.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// The state `object` (the gate's Agent or ToolGate) shows the gate.
pub fn state_of<K: Freezable>(object: &K) -> FreezeState {
    match Freeze::seen_by_gate(object) {
        Some(freeze) => FreezeState::Frozen(freeze),
        None => FreezeState::Clear,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn an_unknown_state_is_waited_for_then_refused() {
        let (tx, rx) = watch::channel(FreezeState::Unknown("not read yet".into()));
        let freeze = FreezeWatch::new(rx);
        let started = tokio::time::Instant::now();
        let why = freeze.refusal(BOUND).await.unwrap();
        assert_eq!(started.elapsed(), BOUND);
        assert_eq!(why, "cannot tell whether it is frozen: not read yet");

        let later = tokio::spawn({
            let freeze = freeze.clone();
            async move { freeze.refusal(BOUND).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        tx.send(FreezeState::Clear).unwrap();
        assert_eq!(later.await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_frozen_agent_is_refused_at_once_and_wakes_a_waiting_call() {
        let (tx, rx) = watch::channel(FreezeState::Clear);
        let freeze = FreezeWatch::new(rx);
        let waiting = tokio::spawn({
            let freeze = freeze.clone();
            async move { freeze.frozen().await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiting.is_finished());
        tx.send(FreezeState::Frozen("Agent a is frozen".into()))
            .unwrap();
        assert_eq!(waiting.await.unwrap(), "Agent a is frozen");
        let started = tokio::time::Instant::now();
        assert_eq!(
            freeze.refusal(BOUND).await.as_deref(),
            Some("Agent a is frozen")
        );
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_view_whose_watch_ended_refuses_and_never_reports_a_freeze() {
        let freeze = FreezeWatch::fixed(FreezeState::Unknown("gone".into()));
        assert!(freeze.refusal(BOUND).await.is_some());
        let clear = FreezeWatch::fixed(FreezeState::Clear);
        assert_eq!(clear.refusal(BOUND).await, None);
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), clear.frozen())
                .await
                .is_err()
        );
    }
}
