//! `hitl-operator controller`: one reconciler per kind, each following
//! fetch refs -> validate -> build -> server-side apply -> status, sharing one [`Context`].

pub mod agent;
pub mod approval_request;
pub mod discovery;
pub mod metrics;
pub mod model_config;
pub mod remote_mcp_server;
pub mod run;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::Instrument;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::common::{ValueSource, ValueSourceType};
use crate::api::{Agent, ApprovalRequest};
use crate::render::RenderOptions;
use crate::render::refs::RefStore;
use crate::{Error, Result};

pub use metrics::Metrics;
pub use run::{ControllerArgs, run};

/// The `Reporter` name on Events the controller publishes.
pub const REPORTER: &str = "hitl-operator";

/// Label selector of the objects the controller renders (they are watched and cached).
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=hitl-operator";

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
    pub agents: Store<Agent>,
    /// Every ApprovalRequest being watched.
    pub approvals: Store<ApprovalRequest>,
    /// Rendered Deployments.
    pub deployments: Store<Deployment>,
    /// Rendered Services.
    pub services: Store<Service>,
    /// Rendered Secrets.
    pub secrets: Store<Secret>,
    /// Rendered ServiceAccounts.
    pub service_accounts: Store<ServiceAccount>,
    /// Rendered Roles.
    pub roles: Store<Role>,
    /// Rendered RoleBindings.
    pub role_bindings: Store<RoleBinding>,
}

impl Stores {
    /// Waits until every store has listed its objects once.
    pub async fn ready(&self) {
        // A dropped writer means the controller is shutting down; the reconcile then fails on
        // its API calls, so readiness errors need no handling here.
        let _ = futures::join!(
            self.agents.wait_until_ready(),
            self.approvals.wait_until_ready(),
            self.deployments.wait_until_ready(),
            self.services.wait_until_ready(),
            self.secrets.wait_until_ready(),
            self.service_accounts.wait_until_ready(),
            self.roles.wait_until_ready(),
            self.role_bindings.wait_until_ready(),
        );
    }
}

/// Which Agents referenced which objects at their last reconcile, so a change of a
/// RemoteMCPServer, ModelConfig, Service, Secret or ConfigMap requeues exactly those Agents.
#[derive(Default)]
pub struct RefIndex {
    inner: Mutex<RefIndexInner>,
}

/// `(kind, namespace, name)` of a referenced object.
pub type RefKey = (&'static str, String, String);

#[derive(Default)]
struct RefIndexInner {
    by_ref: HashMap<RefKey, HashSet<ObjectRef<Agent>>>,
    by_agent: HashMap<ObjectRef<Agent>, Vec<RefKey>>,
}

impl RefIndexInner {
    fn forget(&mut self, agent: &ObjectRef<Agent>) {
        for key in self.by_agent.remove(agent).unwrap_or_default() {
            if let Some(agents) = self.by_ref.get_mut(&key) {
                agents.remove(agent);
                if agents.is_empty() {
                    self.by_ref.remove(&key);
                }
            }
        }
    }
}

impl RefIndex {
    /// Records that `agent` now references exactly `refs`.
    pub fn set(&self, agent: ObjectRef<Agent>, refs: Vec<RefKey>) {
        let mut inner = self.inner.lock().expect("ref index lock");
        inner.forget(&agent);
        for key in &refs {
            inner
                .by_ref
                .entry(key.clone())
                .or_default()
                .insert(agent.clone());
        }
        inner.by_agent.insert(agent, refs);
    }

    /// The Agents that referenced `kind namespace/name` and still exist in `agents`; entries of
    /// Agents that are gone are dropped.
    pub fn agents_for(
        &self,
        kind: &'static str,
        namespace: &str,
        name: &str,
        agents: &Store<Agent>,
    ) -> Vec<ObjectRef<Agent>> {
        let mut inner = self.inner.lock().expect("ref index lock");
        let referring: Vec<ObjectRef<Agent>> = inner
            .by_ref
            .get(&(kind, namespace.to_string(), name.to_string()))
            .map(|agents| agents.iter().cloned().collect())
            .unwrap_or_default();
        let (live, gone): (Vec<_>, Vec<_>) = referring
            .into_iter()
            .partition(|agent| agents.get(agent).is_some());
        for agent in &gone {
            inner.forget(agent);
        }
        live
    }
}

/// Everything the reconcilers share.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Injected clock.
    pub clock: Arc<dyn Clock>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Renderer settings from the command line.
    pub render: RenderOptions,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Cached objects.
    pub stores: Stores,
    /// Agents by the objects they reference.
    pub refs: RefIndex,
    /// HTTP client for listing MCP servers' tools.
    pub http: reqwest::Client,
    /// Consecutive tool-discovery failures by server, for backoff.
    pub discovery_failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    /// A context publishing Events as `instance` (the pod name).
    pub fn new(
        client: Client,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        render: RenderOptions,
        stores: Stores,
        instance: Option<String>,
    ) -> Self {
        // reqwest (built without a default provider) panics unless one is installed.
        crate::cli::logging::install_tls_provider();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.into(),
                instance,
            },
        );
        Self {
            client,
            clock,
            metrics,
            render,
            recorder,
            stores,
            refs: RefIndex::default(),
            http: reqwest::Client::new(),
            discovery_failures: Mutex::default(),
        }
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
            if let Err(error) = self.recorder.publish(&event, target).await {
                tracing::warn!(%error, reason, "publishing an Event failed");
            }
        }
    }
}

/// Runs one reconcile of `controller`, recording its count, duration and error reason.
/// Logs inside it carry the controller and the object.
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
    let result = reconcile.instrument(span).await;
    ctx.metrics
        .reconciled(controller, started.elapsed(), result.as_ref().err());
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

/// Requeue policy after a failed reconcile: retry soon, logging why.
pub fn retry_after_error(kind: &str, object: &impl kube::Resource, error: &Error) -> Action {
    let meta = object.meta();
    tracing::warn!(
        kind,
        namespace = meta.namespace.as_deref().unwrap_or_default(),
        name = meta.name.as_deref().unwrap_or_default(),
        reason = error.reason(),
        %error,
        "reconcile failed, retrying in 15s"
    );
    Action::requeue(Duration::from_secs(15))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};

    fn agent(name: &str) -> Agent {
        let spec = crate::api::AgentSpec {
            agent_type: Default::default(),
            description: None,
            declarative: None,
            byo: None,
        };
        let mut agent = Agent::new(name, spec);
        agent.metadata.namespace = Some("ns".into());
        agent
    }

    #[test]
    fn ref_index_maps_references_to_live_agents_and_forgets_the_rest() {
        let (store, mut writer) = reflector::store::<Agent>();
        writer.apply_watcher_event(&watcher::Event::Apply(agent("a")));
        let index = RefIndex::default();
        let secret = |name: &str| ("Secret", "ns".to_string(), name.to_string());
        let (a, b) = (
            ObjectRef::from_obj(&agent("a")),
            ObjectRef::from_obj(&agent("b")),
        );
        index.set(a.clone(), vec![secret("s1"), secret("s2")]);
        index.set(b.clone(), vec![secret("s1")]);
        assert_eq!(
            index.agents_for("Secret", "ns", "s2", &store),
            vec![a.clone()]
        );
        // b is not in the store (deleted): it is not returned, and forgotten.
        assert_eq!(
            index.agents_for("Secret", "ns", "s1", &store),
            vec![a.clone()]
        );
        assert!(!index.inner.lock().unwrap().by_agent.contains_key(&b));
        // A new reconcile replaces a's references.
        index.set(a.clone(), vec![secret("s3")]);
        assert!(index.agents_for("Secret", "ns", "s1", &store).is_empty());
        assert_eq!(index.agents_for("Secret", "ns", "s3", &store), vec![a]);
        assert!(index.agents_for("ConfigMap", "ns", "s3", &store).is_empty());
    }
}
