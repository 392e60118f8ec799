//! `hitl-operator controller`: one reconciler per kind, each following
//! fetch refs -> validate -> build -> server-side apply -> status, sharing one [`Context`].

pub mod accepted;
pub mod agent;
pub mod approval_request;
pub mod args;
pub mod compact;
pub mod discovery;
pub mod escalation;
pub mod events;
pub mod fan_out;
pub mod freeze;
pub mod health;
pub mod leader;
pub mod malloc;
pub mod metrics;
pub mod model_config;
pub mod notifier;
pub mod owned;
pub mod ref_index;
pub mod remote_mcp_server;
pub mod rendered;
pub mod requests_by_agent;
pub mod run;
pub mod slack;
pub mod token_review;
pub mod tool_gate;
pub mod watches;
pub mod written_statuses;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tracing::Instrument;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, ObjectReference, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};

use crate::api::common::{ValueSource, ValueSourceType};
use crate::api::freeze::{Freezable, Freeze};
use crate::api::{ApprovalNotifier, ModelConfig, RemoteMCPServer, ToolGate};
use crate::egress::destination::{Destinations, RestrictedClient};
use crate::render::RenderOptions;
use crate::render::refs::RefStore;
use crate::{Error, Result};
use compact::{CachedAgent, CachedRequest};
use events::{EVENTS_PER_RECORDER, Events};
use rendered::{Confirmed, Summaries};
use written_statuses::WrittenStatuses;

pub use args::ControllerArgs;
pub use metrics::Metrics;
pub use ref_index::{RefIndex, RefKey};
pub use requests_by_agent::RequestsByAgent;
pub use run::run;

/// The `Reporter` name on Events the controller publishes.
pub const REPORTER: &str = "hitl-operator";

/// Label selector of the objects the controller renders (they are watched and cached).
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=hitl-operator";
/// Label selector of the objects of the rendered kinds that are not ours (their names are
/// watched, so that an apply never runs into one unread).
pub const UNMANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by!=hitl-operator";

/// Source of the current time, injected so reconcilers are deterministic under test.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Caches (reflector stores) the reconcilers read instead of the API server.
#[derive(Clone)]
pub struct Stores {
    /// Every Agent being watched.
    pub agents: Store<CachedAgent>,
    /// Every ApprovalRequest being watched.
    pub approvals: Store<CachedRequest>,
    /// The watched ApprovalRequests by the Agent that made them.
    pub requests_by_agent: RequestsByAgent,
    /// Rendered Deployments.
    pub deployments: Summaries<Deployment>,
    /// Rendered Services.
    pub services: Summaries<Service>,
    /// Rendered Secrets.
    pub secrets: Summaries<Secret>,
    /// Rendered ServiceAccounts.
    pub service_accounts: Summaries<ServiceAccount>,
    /// Rendered Roles.
    pub roles: Summaries<Role>,
    /// Rendered RoleBindings.
    pub role_bindings: Summaries<RoleBinding>,
    /// Rendered NetworkPolicies (Gateway placement).
    pub network_policies: Summaries<NetworkPolicy>,
    /// The watched Namespaces, each cached with its freeze annotation only.
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// Every ApprovalNotifier being watched.
    pub notifiers: Store<ApprovalNotifier>,
    /// Every ModelConfig being watched.
    pub model_configs: Store<ModelConfig>,
    /// Every RemoteMCPServer being watched.
    pub remote_mcp_servers: Store<RemoteMCPServer>,
    /// Every ToolGate being watched.
    pub tool_gates: Store<ToolGate>,
    /// The namespace the watches cover (`--namespace`), or none for every namespace.
    pub scope: Option<String>,
}

impl Stores {
    /// Whether the watches cover `namespace`: then what the caches lack does not exist (once
    /// they listed); outside it they know nothing.
    pub fn cover(&self, namespace: &str) -> bool {
        self.scope.as_deref().is_none_or(|scope| scope == namespace)
    }

    /// The freeze `object` (an Agent or a ToolGate) is under: its own annotation, else its
    /// Namespace's, as the cache of Namespaces holds it.
    pub fn freeze_of<K: Freezable>(&self, object: &K) -> Option<Freeze> {
        let namespace = self
            .namespaces
            .get(&ObjectRef::new(&object.namespace().unwrap_or_default()));
        Freeze::declared(
            object,
            namespace
                .as_deref()
                .and_then(|n| n.metadata.annotations.as_ref()),
        )
    }
}

/// Whether every cache has listed its objects once. Any number of tasks may wait on it at once.
///
/// It is fed by the watch streams themselves ([`CacheSync::track`]), not by
/// `Store::wait_until_ready`: kube-runtime keeps one waker per store and its controllers
/// already wait on their main store, so a second waiter there can leave either one asleep.
#[derive(Clone, Default)]
pub struct CacheSync {
    /// Kinds whose caches have not listed yet.
    unlisted: Arc<tokio::sync::watch::Sender<BTreeSet<String>>>,
}

impl CacheSync {
    /// Counts the cache of `kind` as unlisted until `events` (a reflector's output) delivers
    /// its first `InitDone`; returns `events` unchanged.
    pub fn track<K, S>(&self, kind: &str, events: S) -> impl Stream<Item = S::Item> + use<K, S>
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        let listing = self.listing(kind);
        events.inspect(move |event| {
            if matches!(event, Ok(watcher::Event::InitDone)) {
                listing.listed();
            }
        })
    }

    /// Counts the cache of `kind` as unlisted until the returned [`Listing`] says it listed,
    /// for a cache fed by hand rather than by a reflector ([`track`](Self::track)).
    pub fn listing(&self, kind: &str) -> Listing {
        self.unlisted.send_modify(|unlisted| {
            unlisted.insert(kind.to_string());
        });
        Listing {
            unlisted: self.unlisted.clone(),
            kind: kind.to_string(),
        }
    }

    /// Waits until every tracked cache has listed (forever, if one never does).
    pub async fn synced(&self) {
        let mut unlisted = self.unlisted.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = unlisted.wait_for(BTreeSet::is_empty).await;
    }

    /// Waits at most `bound` for the caches to list; a reconcile must not wait forever.
    pub async fn within(&self, bound: Duration) -> Result<()> {
        tokio::time::timeout(bound, self.synced())
            .await
            .map_err(|_| Error::CachesNotSynced {
                waited: bound.as_secs(),
                unlisted: self
                    .unlisted
                    .borrow()
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// A cache counted by [`CacheSync`] as unlisted until [`Listing::listed`].
pub struct Listing {
    unlisted: Arc<tokio::sync::watch::Sender<BTreeSet<String>>>,
    kind: String,
}

impl Listing {
    /// The cache has listed its objects (again, after a relist: then nothing changes).
    pub fn listed(&self) {
        self.unlisted
            .send_if_modified(|unlisted| unlisted.remove(&self.kind));
    }
}

/// Everything the reconcilers share.
pub struct Context {
    /// Who this controller is (its pod name, else the Events reporter's name): recorded on
    /// the escalation steps it takes.
    pub identity: String,
    /// API client.
    pub client: Client,
    /// Injected clock.
    pub clock: Arc<dyn Clock>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Renderer settings from the command line.
    pub render: RenderOptions,
    /// Publishes Events.
    pub events: Events,
    /// Cached objects.
    pub stores: Stores,
    /// Whether the watches behind `stores` have listed once.
    pub caches: CacheSync,
    /// Agents by the objects they reference.
    pub refs: RefIndex,
    /// ToolGates by the objects they reference.
    pub tool_gate_refs: RefIndex<ToolGate>,
    /// HTTP client for listing MCP servers' tools ([`crate::egress::client`]).
    pub http: reqwest::Client,
    /// HTTP client for notifier messages: refuses loopback, link-local and unspecified
    /// destinations unless [`Context::with_notifier_destinations`] allows them.
    pub notify_http: RestrictedClient,
    /// Consecutive tool-discovery failures by server.
    pub discovery_failures: Backoff,
    /// Consecutive failed reconciles by object.
    pub reconcile_failures: Backoff,
    /// Rendered objects read back as applied although their digests differ.
    pub confirmed: Confirmed,
    /// Agent statuses written that the cache of Agents may not hold yet.
    pub written_statuses: WrittenStatuses,
    /// What the ToolGates' TokenReview binding holds, when the controller keeps one.
    pub token_review: Option<token_review::Bound>,
}

impl Context {
    /// A context publishing Events as `instance` (the pod name). `caches` tracks the watches
    /// that fill `stores` (a default `CacheSync`, for stores filled by hand, tracks none).
    pub fn new(
        client: Client,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        render: RenderOptions,
        stores: Stores,
        caches: CacheSync,
        instance: Option<String>,
    ) -> Self {
        let identity = instance.clone().unwrap_or_else(|| REPORTER.into());
        let events = Events::new(
            client.clone(),
            Reporter {
                controller: REPORTER.into(),
                instance,
            },
            EVENTS_PER_RECORDER,
        );
        Self {
            identity,
            client,
            clock,
            metrics,
            render,
            events,
            caches,
            stores,
            refs: RefIndex::default(),
            tool_gate_refs: RefIndex::default(),
            http: crate::egress::client(),
            notify_http: RestrictedClient::new(Destinations::default()),
            discovery_failures: Backoff::default(),
            reconcile_failures: Backoff::default(),
            confirmed: Confirmed::default(),
            written_statuses: WrittenStatuses::default(),
            token_review: None,
        }
    }

    /// The ToolGates' TokenReview binding is kept, holding what `bound` says: a ToolGate is
    /// `Ready` only once its gate is in it.
    pub fn with_token_review(mut self, bound: token_review::Bound) -> Self {
        self.token_review = Some(bound);
        self
    }

    /// Notifier messages may also go to the addresses `destinations` allows
    /// (`--notifier-allow-cidrs`).
    pub fn with_notifier_destinations(mut self, destinations: Destinations) -> Self {
        self.notify_http = RestrictedClient::new(destinations);
        self
    }
}

/// Largest Event note the API accepts, in bytes.
const MAX_EVENT_NOTE: usize = 1024;

impl Context {
    /// Publishes an Event on each of `targets`. Events are best effort: a failure is logged
    /// and never fails the reconcile.
    pub async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        mut note: String,
        action: &str,
        targets: &[ObjectReference],
    ) {
        if note.len() > MAX_EVENT_NOTE {
            let mut end = MAX_EVENT_NOTE;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        for target in targets {
            match self.events.publish(&event, target).await {
                Ok(()) => {}
                Err(error) if crate::error::is_gone(&error) => {
                    tracing::debug!(
                        reason,
                        "not publishing an Event: its namespace is going away"
                    );
                }
                Err(error) => tracing::warn!(%error, reason, "publishing an Event failed"),
            }
        }
    }
}

/// How often every Agent and every ApprovalRequest is reconciled again: in case a watch event
/// was missed, and for requests due later than that. One timer per kind
/// (`Controller::reconcile_all_on`), not a requeue per object: each requeue held in
/// kube-runtime's scheduler costs memory
/// (docs/performance-history.md#controller-caches-and-memory).
pub const RESYNC: Duration = Duration::from_secs(3600);

/// What to do with an object due again in `wait` (to expire, be notified about or deleted): a
/// requeue when that falls before the next [`RESYNC`], else nothing, for the resync reconciles
/// it again before it is due and requeues it then.
pub fn due_in(wait: Duration) -> Action {
    if wait <= RESYNC {
        Action::requeue(wait)
    } else {
        Action::await_change()
    }
}

/// Longest a reconcile may wait for the caches to list before it fails and is retried.
pub const CACHE_SYNC_BOUND: Duration = Duration::from_secs(30);

/// Longest one reconcile may run: every await in it is bounded by this, so a hung API call or
/// tool server can hold up neither the queue nor shutdown for longer.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs one reconcile of `controller` (bounded by [`RECONCILE_TIMEOUT`]), recording its count,
/// duration and error reason. Logs inside it carry the controller and the object.
pub async fn measured(
    ctx: &Context,
    controller: &'static str,
    object: &impl kube::Resource,
    reconcile: impl Future<Output = Result<Action>>,
) -> Result<Action> {
    let span = tracing::info_span!(
        "reconcile",
        controller,
        namespace = object.meta().namespace.as_deref().unwrap_or_default(),
        name = object.meta().name.as_deref().unwrap_or_default(),
    );
    let started = Instant::now();
    let key = failure_key(controller, object);
    let result = match tokio::time::timeout(RECONCILE_TIMEOUT, reconcile.instrument(span)).await {
        Ok(result) => result,
        Err(_) => Err(Error::ReconcileTimeout {
            waited: RECONCILE_TIMEOUT.as_secs(),
        }),
    };
    ctx.metrics
        .reconciled(controller, started.elapsed(), result.as_ref().err());
    if result.is_ok() {
        ctx.reconcile_failures.succeeded(&key);
    }
    result
}

/// Fetches the Secret or ConfigMap `source` points at (in `namespace`) into `refs`; a missing
/// object is left out, for [`RefStore::value`] to report.
pub async fn fetch_value_source(
    client: &Client,
    source: &ValueSource,
    namespace: &str,
    refs: &mut RefStore,
) -> Result<()> {
    match source.source_type {
        ValueSourceType::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            if let Some(secret) = api.get_opt(&source.name).await? {
                refs.insert_secret(secret);
            }
        }
        ValueSourceType::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            if let Some(config_map) = api.get_opt(&source.name).await? {
                refs.insert_config_map(config_map);
            }
        }
    }
    Ok(())
}

/// Consecutive failures by key, turned into retry delays that double from a base to a cap.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Counts one more failure of `key` and returns the delay before its next try: `base`
    /// after the first failure, doubling with each one after it, at most `cap`.
    pub fn failed(&self, key: &str, base: Duration, cap: Duration) -> Duration {
        let mut failures = self.failures.lock().expect("backoff lock");
        let count = failures.entry(key.to_string()).or_default();
        *count = count.saturating_add(1);
        base.saturating_mul(1 << (*count - 1).min(16)).min(cap)
    }

    /// Forgets the failures of `key` after a success.
    pub fn succeeded(&self, key: &str) {
        self.failures.lock().expect("backoff lock").remove(key);
    }
}

/// First retry delay after a failed reconcile; it doubles up to [`RETRY_CAP`].
pub const RETRY_BASE: Duration = Duration::from_secs(15);
/// Longest retry delay after failed reconciles.
pub const RETRY_CAP: Duration = Duration::from_secs(300);

/// Key of an object in [`Context::reconcile_failures`].
fn failure_key(controller: &str, object: &impl kube::Resource) -> String {
    let meta = object.meta();
    format!(
        "{controller} {}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// Requeue policy after a failed reconcile of `controller`: retry with a doubling delay, logging
/// why. An object deleted meanwhile, or whose namespace is being deleted, is not retried: its
/// deletion (or re-creation) is a watch event of its own.
pub fn retry_after_error(
    controller: &str,
    object: &impl kube::Resource,
    error: &Error,
    ctx: &Context,
) -> Action {
    let meta = object.meta();
    let (namespace, name) = (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    );
    let key = failure_key(controller, object);
    if error.is_gone() {
        ctx.reconcile_failures.succeeded(&key);
        tracing::debug!(controller, namespace, name, %error, "object or namespace going away; not retrying");
        return Action::await_change();
    }
    let delay = ctx.reconcile_failures.failed(&key, RETRY_BASE, RETRY_CAP);
    tracing::warn!(
        controller,
        namespace,
        name,
        reason = error.reason(),
        %error,
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

/// How many objects one controller reconciles at once. Unbounded, a cold start over 1000
/// Agents ran 1000 reconciles side by side, each holding what it fetched and rendered; the
/// apiserver answers no faster for it.
const RECONCILE_CONCURRENCY: u16 = 16;

/// A controller configuration reconciling at most [`RECONCILE_CONCURRENCY`] objects at once.
fn bounded() -> controller::Config {
    controller::Config::default().concurrency(RECONCILE_CONCURRENCY)
}

/// Drains a controller's result stream. Failed reconciles were logged and counted by the error
/// policy, and an object deleted while queued needs nothing; a watch failing (RBAC, a missing
/// CRD, the API unreachable) keeps the caches from syncing, so it is logged as a warning.
async fn drain<K: Resource, E: std::error::Error + 'static>(
    results: impl Stream<Item = Result<(ObjectRef<K>, Action), controller::Error<E, watcher::Error>>>,
) where
    K::DynamicType: Debug + Eq + std::hash::Hash,
{
    results
        .for_each(|result| async move {
            match result {
                Err(error @ controller::Error::QueueError(_)) => {
                    tracing::warn!(%error, "watch failed; retrying with backoff");
                }
                Err(error @ controller::Error::RunnerError(_)) => {
                    tracing::warn!(%error, "controller stopped");
                }
                Ok(_) | Err(_) => {}
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Agent;
    use kube::runtime::reflector;
    use serde_json::json;

    #[test]
    fn only_what_is_due_before_the_next_resync_is_requeued() {
        assert_eq!(
            due_in(Duration::from_secs(5)),
            Action::requeue(Duration::from_secs(5))
        );
        assert_eq!(due_in(RESYNC), Action::requeue(RESYNC));
        assert_eq!(
            due_in(RESYNC + Duration::from_secs(1)),
            Action::await_change()
        );
    }

    type WatchEvent = Result<watcher::Event<Agent>, watcher::Error>;

    /// A hand-fed watch stream, and its feeder.
    fn events() -> (
        futures::channel::mpsc::UnboundedSender<WatchEvent>,
        futures::channel::mpsc::UnboundedReceiver<WatchEvent>,
    ) {
        futures::channel::mpsc::unbounded()
    }

    #[tokio::test]
    async fn every_task_waiting_for_the_caches_is_woken_when_the_last_one_lists() {
        let caches = CacheSync::default();
        let (first_tx, first) = events();
        let (second_tx, second) = events();
        let first = tokio::spawn(caches.track("Agent", first).for_each(|_| async {}));
        let second = tokio::spawn(caches.track("Deployment", second).for_each(|_| async {}));
        // Many reconciles and the readiness probe wait at once, before the caches list.
        let waiters: Vec<_> = (0..16)
            .map(|_| {
                let caches = caches.clone();
                tokio::spawn(async move { caches.within(Duration::from_secs(20)).await })
            })
            .collect();
        first_tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
        first_tx
            .unbounded_send(Ok(watcher::Event::InitDone))
            .unwrap();
        tokio::task::yield_now().await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "one cache is not all"
        );
        second_tx
            .unbounded_send(Ok(watcher::Event::InitDone))
            .unwrap();
        for waiter in waiters {
            waiter
                .await
                .unwrap()
                .expect("every waiter sees the caches synced");
        }
        drop((first_tx, second_tx));
        first.await.unwrap();
        second.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_caches_that_never_list_is_bounded_and_names_them() {
        let caches = CacheSync::default();
        let (_tx, rx) = events();
        let _stream = caches.track("Secret", rx);
        let error = caches.within(Duration::from_secs(30)).await.unwrap_err();
        assert_eq!(error.reason(), "CachesNotSynced");
        assert_eq!(
            error.to_string(),
            "caches not synced after 30s (still listing: Secret); will retry"
        );
    }

    #[test]
    fn backoff_doubles_per_key_up_to_the_cap_and_resets_on_success() {
        let backoff = Backoff::default();
        let (base, cap) = (Duration::from_secs(15), Duration::from_secs(300));
        let delays: Vec<u64> = (0..7)
            .map(|_| backoff.failed("a", base, cap).as_secs())
            .collect();
        assert_eq!(delays, [15, 30, 60, 120, 240, 300, 300]);
        assert_eq!(backoff.failed("b", base, cap), base, "keys are separate");
        backoff.succeeded("a");
        assert_eq!(backoff.failed("a", base, cap), base);
    }

    fn api_error(code: u16, message: &str, cause: Option<&str>) -> Error {
        let causes: Vec<_> = cause.into_iter().map(|c| json!({"reason": c})).collect();
        let status = serde_json::from_value(json!({
            "status": "Failure", "code": code, "message": message, "reason": "Forbidden",
            "details": {"causes": causes},
        }))
        .unwrap();
        Error::Kube(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn deleted_objects_and_terminating_namespaces_are_gone_other_errors_are_not() {
        let terminating = "services \"a\" is forbidden: unable to create new content in \
                           namespace ns because it is being terminated";
        assert!(api_error(404, "agents.kagent.dev \"a\" not found", None).is_gone());
        assert!(api_error(403, terminating, None).is_gone());
        assert!(api_error(403, "forbidden", Some("NamespaceTerminating")).is_gone());
        assert!(!api_error(403, "denied by ValidatingAdmissionPolicy", None).is_gone());
        assert!(!api_error(409, "conflict", None).is_gone());
        assert!(!Error::ReconcileTimeout { waited: 60 }.is_gone());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_that_never_finishes_fails_after_its_bound() {
        // An apiserver that never answers: the reconcile below makes no request anyway.
        let (client, _apiserver) = hitl_test_kit::mock::pair("default");
        let (store, _writer) = reflector::store();
        let stores = Stores {
            agents: store,
            approvals: reflector::store().0,
            requests_by_agent: RequestsByAgent::default(),
            deployments: Summaries::default(),
            services: Summaries::default(),
            secrets: Summaries::default(),
            service_accounts: Summaries::default(),
            roles: Summaries::default(),
            role_bindings: Summaries::default(),
            network_policies: Summaries::default(),
            namespaces: reflector::store().0,
            notifiers: reflector::store().0,
            model_configs: reflector::store().0,
            remote_mcp_servers: reflector::store().0,
            tool_gates: reflector::store().0,
            scope: None,
        };
        let ctx = Context::new(
            client,
            Arc::new(SystemClock),
            Arc::default(),
            RenderOptions::default(),
            stores,
            CacheSync::default(),
            None,
        );
        let started = tokio::time::Instant::now();
        let error = measured(&ctx, "agent", &agent("stuck"), std::future::pending())
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "ReconcileTimeout");
        assert_eq!(started.elapsed(), RECONCILE_TIMEOUT);
        assert!(ctx.metrics.encode().contains("ReconcileTimeout"));
    }

    fn agent(name: &str) -> Agent {
        let spec = crate::api::AgentSpec {
            agent_type: Default::default(),
            description: None,
            declarative: None,
            ..Default::default()
        };
        let mut agent = Agent::new(name, spec);
        agent.metadata.namespace = Some("ns".into());
        agent
    }
}
