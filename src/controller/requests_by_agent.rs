//! The ApprovalRequests each Agent (or ToolGate) made, kept up to date from the request watch, so that an
//! Agent reconcile (counting `pendingApprovals`) and a changed Agent (requeueing its requests)
//! look up that Agent's requests instead of passing over every cached one. Those passes made
//! a cold start quadratic, a large share of its CPU at 10 000 Agents
//! (docs/performance-history.md#controller-caches-and-memory). It also keeps the number of
//! requests waiting in all, which `hitl_approvals_pending` reports without a pass at each scrape.
//!
//! It follows the watch as the reflector's store does: events are taken in before the store
//! applies them (so a reconcile that a request's change triggers reads a count at least as
//! new), and a (re)list builds a new index that replaces the old one when the list is complete.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::compact::CachedRequest;
use crate::api::approval_request::PolicyKind;

/// ApprovalRequests by the Agent or ToolGate that made them (`spec.agentRef`, in the request's
/// namespace). Clones share one index.
#[derive(Clone, Default)]
pub struct RequestsByAgent(Arc<Mutex<State>>);

#[derive(Default)]
struct State {
    current: Index,
    /// The index a (re)list is building, between `Init` and `InitDone`.
    relisting: Option<Index>,
}

/// Every request as `namespace/agent/request` (`namespace/ToolGate:name/request` for a
/// ToolGate's), with whether it waits for a decision, in one ordered map: an Agent's requests
/// are the range its `namespace/agent/` prefix starts (Kubernetes names hold no `/`, `:` or
/// capital letters). One allocation per request (`cargo test --bench controller`
/// prints its size); a map per namespace of each Agent's requests, tried first, held more
/// (docs/performance-history.md#controller-caches-and-memory).
#[derive(Default)]
struct Index {
    requests: BTreeMap<Box<str>, bool>,
    /// How many entries of `requests` wait for a decision.
    waiting: usize,
}

impl Index {
    fn apply(&mut self, request: &CachedRequest) {
        let Some(key) = key(request) else {
            return;
        };
        let waits_for_decision = request.waits_for_decision();
        let waited = match self.requests.get_mut(key.as_str()) {
            Some(waits) => std::mem::replace(waits, waits_for_decision),
            None => {
                self.requests.insert(key.into(), waits_for_decision);
                false
            }
        };
        self.count(waited, waits_for_decision);
    }

    fn delete(&mut self, request: &CachedRequest) {
        if let Some(waited) = key(request).and_then(|key| self.requests.remove(key.as_str())) {
            self.count(waited, false);
        }
    }

    /// Keeps `waiting` as a request went from waiting (or not) to waiting (or not).
    fn count(&mut self, waited: bool, waits: bool) {
        match (waited, waits) {
            (false, true) => self.waiting += 1,
            (true, false) => self.waiting -= 1,
            _ => {}
        }
    }

    /// The requests of `kind` `namespace/agent`: each one's name, and whether it waits.
    fn of<'a>(
        &'a self,
        namespace: &str,
        kind: PolicyKind,
        agent: &str,
    ) -> impl Iterator<Item = (&'a str, bool)> + use<'a> {
        let prefix = format!("{}/", owner_key(namespace, kind, agent));
        self.requests
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .map_while(move |(key, waits)| Some((key.strip_prefix(prefix.as_str())?, *waits)))
    }
}

/// `namespace/agent/request` of a request.
fn key(request: &CachedRequest) -> Option<String> {
    let meta = request.meta();
    let (namespace, name) = (meta.namespace.as_deref()?, meta.name.as_deref()?);
    let owner = owner_key(namespace, request.policy_kind(), request.agent_name());
    Some(format!("{owner}/{name}"))
}

/// `namespace/agent`, or `namespace/ToolGate:name`: a ToolGate's requests never count as an
/// Agent's of the same name.
fn owner_key(namespace: &str, kind: PolicyKind, name: &str) -> String {
    match kind {
        PolicyKind::Agent => format!("{namespace}/{name}"),
        PolicyKind::ToolGate => format!("{namespace}/{}:{name}", kind.as_str()),
    }
}

impl RequestsByAgent {
    /// An index of `requests`, as after a complete list of them.
    pub fn listed<'a>(requests: impl IntoIterator<Item = &'a CachedRequest>) -> Self {
        let mut current = Index::default();
        for request in requests {
            current.apply(request);
        }
        Self(Arc::new(Mutex::new(State {
            current,
            relisting: None,
        })))
    }

    /// Takes in one event of the request watch.
    pub fn observe(&self, event: &watcher::Event<CachedRequest>) {
        let mut state = self.lock();
        match event {
            watcher::Event::Apply(request) => state.current.apply(request),
            watcher::Event::Delete(request) => state.current.delete(request),
            watcher::Event::Init => state.relisting = Some(Index::default()),
            watcher::Event::InitApply(request) => {
                if let Some(relisting) = &mut state.relisting {
                    relisting.apply(request);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = state.relisting.take() {
                    state.current = listed;
                }
            }
        }
    }

    /// How many of the requests Agent `namespace/agent` made still wait for a decision.
    pub fn pending(&self, namespace: &str, agent: &str) -> usize {
        let state = self.lock();
        state
            .current
            .of(namespace, PolicyKind::Agent, agent)
            .filter(|(_, waits)| *waits)
            .count()
    }

    /// How many requests, of every Agent, wait for a decision.
    pub fn waiting(&self) -> usize {
        self.lock().current.waiting
    }

    /// The requests the `kind` (Agent or ToolGate) `namespace/agent` made.
    pub fn made_by(
        &self,
        namespace: &str,
        kind: PolicyKind,
        agent: &str,
    ) -> Vec<ObjectRef<CachedRequest>> {
        let state = self.lock();
        state
            .current
            .of(namespace, kind, agent)
            .map(|(name, _)| ObjectRef::new(name).within(namespace))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned one still holds a whole index.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApprovalRequest;
    use crate::api::approval_request::fixture::request_json;
    use crate::api::approval_request::{ApprovalRequestStatus, Phase};

    fn request(namespace: &str, name: &str, agent: &str, phase: Option<Phase>) -> CachedRequest {
        let mut json = request_json();
        json["metadata"]["name"] = name.into();
        json["metadata"]["namespace"] = namespace.into();
        json["spec"]["agentRef"]["name"] = agent.into();
        let mut request: ApprovalRequest = serde_json::from_value(json).unwrap();
        request.status = phase.map(|phase| ApprovalRequestStatus {
            phase: Some(phase),
            ..ApprovalRequestStatus::default()
        });
        CachedRequest::new(request)
    }

    fn names(refs: Vec<ObjectRef<CachedRequest>>) -> Vec<String> {
        refs.into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect()
    }

    #[test]
    fn counts_the_requests_of_each_agent_that_wait_for_a_decision() {
        let index = RequestsByAgent::listed(&[
            request("ns", "r1", "a", None),
            request("ns", "r2", "a", Some(Phase::Pending)),
            request("ns", "r3", "a", Some(Phase::Approved)),
            request("ns", "r4", "b", Some(Phase::Pending)),
            request("other", "r5", "a", Some(Phase::Pending)),
            request("ns", "r6", "ab", Some(Phase::Pending)),
            request("ns", "r7", "a-b", Some(Phase::Pending)),
        ]);
        assert_eq!(index.pending("ns", "a"), 2);
        assert_eq!(index.pending("ns", "b"), 1);
        assert_eq!(index.pending("other", "a"), 1);
        assert_eq!(index.pending("ns", "nobody"), 0);
        assert_eq!(index.pending("nowhere", "a"), 0);
        assert_eq!(
            names(index.made_by("ns", PolicyKind::Agent, "a")),
            ["ns/r1", "ns/r2", "ns/r3"]
        );
        assert_eq!(
            names(index.made_by("other", PolicyKind::Agent, "a")),
            ["other/r5"]
        );
        assert_eq!(
            names(index.made_by("ns", PolicyKind::Agent, "ab")),
            ["ns/r6"]
        );
        assert_eq!(
            names(index.made_by("ns", PolicyKind::Agent, "a-b")),
            ["ns/r7"]
        );
        assert!(index.made_by("ns", PolicyKind::Agent, "nobody").is_empty());
        assert_eq!(index.waiting(), 6);
    }

    #[test]
    fn a_tool_gates_requests_are_not_those_of_an_agent_of_the_same_name() {
        let mut through_gate = request("ns", "r2", "a", Some(Phase::Pending));
        let mut object = through_gate.object().unwrap();
        object.spec.agent_ref.kind = Some(PolicyKind::ToolGate);
        through_gate = CachedRequest::new(object);
        let index = RequestsByAgent::listed(&[
            request("ns", "r1", "a", Some(Phase::Pending)),
            through_gate,
        ]);
        assert_eq!(index.pending("ns", "a"), 1);
        assert_eq!(
            names(index.made_by("ns", PolicyKind::Agent, "a")),
            ["ns/r1"]
        );
        assert_eq!(
            names(index.made_by("ns", PolicyKind::ToolGate, "a")),
            ["ns/r2"]
        );
        assert_eq!(index.waiting(), 2, "the gauge counts both");
    }

    #[test]
    fn follows_changes_and_deletions() {
        let index = RequestsByAgent::listed(&[request("ns", "r1", "a", None)]);
        index.observe(&watcher::Event::Apply(request("ns", "r0", "a", None)));
        assert_eq!(index.pending("ns", "a"), 2);
        // The same state again counts once.
        index.observe(&watcher::Event::Apply(request("ns", "r0", "a", None)));
        assert_eq!((index.pending("ns", "a"), index.waiting()), (2, 2));
        index.observe(&watcher::Event::Apply(request(
            "ns",
            "r1",
            "a",
            Some(Phase::Denied),
        )));
        assert_eq!((index.pending("ns", "a"), index.waiting()), (1, 1));
        assert_eq!(
            names(index.made_by("ns", PolicyKind::Agent, "a")),
            ["ns/r0", "ns/r1"]
        );
        index.observe(&watcher::Event::Delete(request("ns", "r0", "a", None)));
        assert_eq!(index.pending("ns", "a"), 0);
        assert_eq!(
            names(index.made_by("ns", PolicyKind::Agent, "a")),
            ["ns/r1"]
        );
        index.observe(&watcher::Event::Delete(request("ns", "r1", "a", None)));
        assert!(index.made_by("ns", PolicyKind::Agent, "a").is_empty());
        assert!(
            index.lock().current.requests.is_empty(),
            "deleted entries are removed"
        );
        assert_eq!(index.waiting(), 0);
        // A deletion of what was never seen changes nothing.
        index.observe(&watcher::Event::Delete(request("ns", "r9", "a", None)));
        assert!(index.lock().current.requests.is_empty());
        assert_eq!(index.waiting(), 0);
    }

    #[test]
    fn a_relist_replaces_the_index_once_complete() {
        let index = RequestsByAgent::listed(&[
            request("ns", "gone", "a", None),
            request("ns", "kept", "a", None),
        ]);
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(request("ns", "kept", "a", None)));
        // Until the list is complete, the last complete one answers.
        assert_eq!((index.pending("ns", "a"), index.waiting()), (2, 2));
        index.observe(&watcher::Event::InitDone);
        assert_eq!(index.waiting(), 1);
        // A request deleted while the watch was down is gone.
        assert_eq!(
            names(index.made_by("ns", PolicyKind::Agent, "a")),
            ["ns/kept"]
        );
        // A relist that starts over drops what the abandoned one had taken in.
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(request("ns", "x", "b", None)));
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitDone);
        assert!(index.made_by("ns", PolicyKind::Agent, "b").is_empty());
        assert!(index.made_by("ns", PolicyKind::Agent, "a").is_empty());
        assert_eq!(index.waiting(), 0);
    }
}
