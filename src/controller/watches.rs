//! Every watch of the controller, each made once: the caches (reflector stores) the
//! reconcilers read, and the streams that trigger their reconciles. [`Watches::new`] makes
//! them all and hands each controller its own triggers ([`AgentWatches`],
//! [`ApprovalRequestWatches`], ...), so a change is listed and decoded once however many
//! controllers react to it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use kube::api::Api;
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, reflector::reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use super::compact::{CachedAgent, CachedRequest, Compact};
use super::fan_out::fan_out;
use super::rendered::{RenderedKind, Requeue, Summaries};
use super::{CacheSync, MANAGED_SELECTOR, RESYNC, RequestsByAgent, Stores, UNMANAGED_SELECTOR};
use crate::api::freeze::FREEZE_ANNOTATION;
use crate::api::{
    Agent, ApprovalNotifier, ApprovalRequest, ModelConfig, RemoteMCPServer, ToolGate,
};
use crate::apiserver::backoff::BackoffWhileFailing;
use crate::apiserver::paging::paged;

/// Changes of the metadata of `K` (its name and namespace only), from a metadata-only watch.
pub type MetadataChanges<K> = BoxStream<'static, Result<PartialObjectMeta<K>, watcher::Error>>;

/// Every watch the controllers share, made once by [`Watches::new`]: the caches the
/// reconcilers read, each controller's triggers, and the futures that drive the watches.
pub struct Watches {
    /// The caches, for the [`Context`](super::Context).
    pub stores: Stores,
    /// Whether the caches have listed once.
    pub caches: CacheSync,
    /// What reconciles an Agent.
    pub agent: AgentWatches,
    /// What reconciles an ApprovalRequest.
    pub approval_request: ApprovalRequestWatches,
    /// What reconciles a ModelConfig.
    pub model_config: ModelConfigWatches,
    /// What reconciles a RemoteMCPServer.
    pub remote_mcp_server: RemoteMcpServerWatches,
    /// What reconciles an ApprovalNotifier.
    pub notifier: NotifierWatches,
    /// What reconciles a ToolGate.
    pub tool_gate: ToolGateWatches,
    /// Notified on every change of the ToolGates (created, changed, deleted, listed): the
    /// ClusterRoleBinding of their gates follows the set ([`super::token_review`]).
    pub tool_gates_changed: Arc<Notify>,
    /// Drives the shared watches (Agents, ApprovalRequests, ApprovalNotifiers, ModelConfigs,
    /// RemoteMCPServers, ToolGates), logging their failures; it ends only if one of them ends.
    pub shared: BoxFuture<'static, ()>,
    /// Drives the metadata watches of Services, Secrets and ConfigMaps, and the watches of the
    /// rendered objects (whose changes go to the Agent and the ToolGate controllers).
    pub metadata: BoxFuture<'static, ()>,
}

/// The triggers of the Agent controller.
pub struct AgentWatches {
    /// Agents that changed (the controller's own objects).
    pub agents: ReflectHandle<CachedAgent>,
    /// Agents whose rendered objects, or whose Namespace (its freeze), changed.
    pub rendered_or_namespace: BoxStream<'static, ObjectRef<CachedAgent>>,
    /// RemoteMCPServers that changed, for the Agents naming them.
    pub remote_mcp_servers: ReflectHandle<RemoteMCPServer>,
    /// ModelConfigs that changed, for the Agents naming them.
    pub model_configs: ReflectHandle<ModelConfig>,
    /// Services that changed, for the Agents naming them.
    pub services: MetadataChanges<Service>,
    /// Secrets that changed, for the Agents naming them.
    pub secrets: MetadataChanges<Secret>,
    /// ConfigMaps that changed, for the Agents naming them.
    pub config_maps: MetadataChanges<ConfigMap>,
    /// Agents that changed, for the Agents using them as tools (description, cycles).
    pub tool_agents: ReflectHandle<CachedAgent>,
    /// ApprovalRequests that changed, for the Agents that made them.
    pub requests: ReflectHandle<CachedRequest>,
    /// Every [`RESYNC`].
    pub resync: BoxStream<'static, ()>,
}

/// The triggers of the ApprovalRequest controller.
pub struct ApprovalRequestWatches {
    /// ApprovalRequests that changed (the controller's own objects).
    pub requests: ReflectHandle<CachedRequest>,
    /// ApprovalNotifiers whose spec changed, for the open requests of their namespace.
    pub notifiers: BoxStream<'static, Arc<ApprovalNotifier>>,
    /// Agents that changed, for the requests they made.
    pub agents: ReflectHandle<CachedAgent>,
    /// ToolGates that changed, for the requests made through them.
    pub tool_gates: ReflectHandle<ToolGate>,
    /// Every [`RESYNC`].
    pub resync: BoxStream<'static, ()>,
}

/// The triggers of the ToolGate controller.
pub struct ToolGateWatches {
    /// ToolGates that changed (the controller's own objects).
    pub tool_gates: ReflectHandle<ToolGate>,
    /// ToolGates whose rendered objects, or whose Namespace (its freeze), changed.
    pub rendered_or_namespace: BoxStream<'static, ObjectRef<ToolGate>>,
    /// RemoteMCPServers that changed, for the ToolGates naming them.
    pub remote_mcp_servers: ReflectHandle<RemoteMCPServer>,
    /// Secrets that changed, for the ToolGates naming them (headersFrom).
    pub secrets: MetadataChanges<Secret>,
    /// ConfigMaps that changed, for the ToolGates naming them (headersFrom).
    pub config_maps: MetadataChanges<ConfigMap>,
    /// Every [`RESYNC`].
    pub resync: BoxStream<'static, ()>,
}

/// The triggers of the ModelConfig controller.
pub struct ModelConfigWatches {
    /// ModelConfigs whose spec changed (the controller's own objects).
    pub model_configs: BoxStream<'static, Arc<ModelConfig>>,
    /// Secrets that changed, for the ModelConfigs naming them.
    pub secrets: MetadataChanges<Secret>,
}

/// The triggers of the RemoteMCPServer controller.
pub struct RemoteMcpServerWatches {
    /// RemoteMCPServers whose spec changed (the controller's own objects).
    pub servers: BoxStream<'static, Arc<RemoteMCPServer>>,
    /// Secrets that changed, for the servers naming them.
    pub secrets: MetadataChanges<Secret>,
    /// ConfigMaps that changed, for the servers naming them.
    pub config_maps: MetadataChanges<ConfigMap>,
}

/// The triggers of the ApprovalNotifier controller.
pub struct NotifierWatches {
    /// ApprovalNotifiers that changed (the controller's own objects).
    pub notifiers: ReflectHandle<ApprovalNotifier>,
}

impl Watches {
    /// Makes every watch over `namespace` (every namespace when `None`), the Agents selected by
    /// `agent_selector` (every Agent when `None`). Nothing is listed until they are driven.
    pub fn new(client: &Client, namespace: Option<&str>, agent_selector: Option<&str>) -> Self {
        let caches = CacheSync::default();
        // Agents and ApprovalRequests are each watched once and shared by the controllers; an
        // Agent used as a tool by others requeues them when it changes (description, cycles).
        let agent_config = match agent_selector {
            Some(selector) => paged().labels(selector),
            None => paged(),
        };
        let (agents, [agents_for_agents, agents_for_requests, agents_for_callers], agent_root) =
            shared(
                client,
                namespace,
                &caches,
                agent_config,
                cached_agent,
                |_| (),
            );
        let requests_by_agent = RequestsByAgent::default();
        let (approvals, [requests_for_requests, requests_for_agents], approval_root) = {
            let index = requests_by_agent.clone();
            let observe = move |event: &watcher::Event<CachedRequest>| index.observe(event);
            shared(client, namespace, &caches, paged(), cached_request, observe)
        };

        // The objects the controller renders, and the names of the others of their kinds (so
        // that a new Agent's objects are applied unread: controller::owned).
        let all = Others::InTheWatch;
        let (deployments, deployment_events) = owned::<Deployment>(client, namespace, &caches, all);
        let (services, service_events) = owned::<Service>(client, namespace, &caches, all);
        let (secrets, secret_events) =
            owned::<Secret>(client, namespace, &caches, Others::NamesWatched);
        let (service_accounts, service_account_events) =
            owned::<ServiceAccount>(client, namespace, &caches, all);
        let (roles, role_events) = owned::<Role>(client, namespace, &caches, all);
        let (role_bindings, role_binding_events) =
            owned::<RoleBinding>(client, namespace, &caches, all);
        let (network_policies, network_policy_events) =
            owned::<NetworkPolicy>(client, namespace, &caches, all);
        // ApprovalNotifiers: read by the request reconciler when it delivers; a new or changed
        // notifier requeues the open requests of its namespace.
        let (notifiers, [notifiers_for_notifiers, notifiers_for_requests], notifier_root) =
            shared(client, namespace, &caches, paged(), slimmed, |_| ());
        // ModelConfigs and RemoteMCPServers: every Agent reconcile reads the ones it names from
        // these caches (no GET per reference); their own controllers reconcile them on spec
        // changes, and every change (a server's discovered tools are its status) requeues the
        // Agents naming them, once the cache holds it.
        let (
            model_configs,
            [model_configs_for_agents, model_configs_for_model_configs],
            model_config_root,
        ) = shared(client, namespace, &caches, paged(), slimmed, |_| ());
        let (
            servers,
            [
                servers_for_agents,
                servers_for_servers,
                servers_for_tool_gates,
            ],
            server_root,
        ) = shared(client, namespace, &caches, paged(), slimmed, |_| ());
        // ToolGates: few, read whole by their reconciler, by the request reconciler (a
        // request made through one) and for the ClusterRoleBinding of their gates.
        let tool_gates_changed = Arc::new(Notify::new());
        let (tool_gates, [tool_gates_for_tool_gates, tool_gates_for_requests], tool_gate_root) = {
            let changed = tool_gates_changed.clone();
            let observe = move |event: &watcher::Event<ToolGate>| {
                if !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_)) {
                    changed.notify_one();
                }
            };
            shared(client, namespace, &caches, paged(), slimmed, observe)
        };
        let (namespaces, namespace_events) = namespaces(
            client,
            namespace,
            agents.clone(),
            tool_gates.clone(),
            &caches,
        );
        // The rendered objects' changes, for their owners, and the Namespaces' (their freeze),
        // for the Agents and ToolGates in them.
        let (rendered_watch, [rendered_for_agents, rendered_for_tool_gates]) =
            fan_out(futures::stream::select_all([
                namespace_events.boxed(),
                secret_events.boxed(),
                service_account_events.boxed(),
                role_events.boxed(),
                role_binding_events.boxed(),
                network_policy_events.boxed(),
                deployment_events.boxed(),
                service_events.boxed(),
            ]));
        // Services, Secrets and ConfigMaps an Agent or a tool server names: one metadata watch
        // each, its changes handed to every controller that maps them.
        let (service_watch, [services_changed]) = metadata::<Service, 1>(client, namespace);
        let (
            secret_watch,
            [
                secrets_for_agents,
                secrets_for_model_configs,
                secrets_for_servers,
                secrets_for_tool_gates,
            ],
        ) = metadata::<Secret, 4>(client, namespace);
        let (
            config_map_watch,
            [
                config_maps_for_agents,
                config_maps_for_servers,
                config_maps_for_tool_gates,
            ],
        ) = metadata::<ConfigMap, 3>(client, namespace);

        Self {
            stores: Stores {
                agents,
                approvals,
                requests_by_agent,
                deployments,
                services,
                secrets,
                service_accounts,
                roles,
                role_bindings,
                network_policies,
                namespaces,
                notifiers,
                model_configs,
                remote_mcp_servers: servers,
                tool_gates,
                scope: namespace.map(str::to_string),
            },
            caches,
            agent: AgentWatches {
                agents: agents_for_agents,
                rendered_or_namespace: rendered_for_agents
                    .filter_map(|owner| futures::future::ready(owner.agent()))
                    .boxed(),
                remote_mcp_servers: servers_for_agents,
                model_configs: model_configs_for_agents,
                services: services_changed.boxed(),
                secrets: secrets_for_agents.boxed(),
                config_maps: config_maps_for_agents.boxed(),
                tool_agents: agents_for_callers,
                requests: requests_for_agents,
                resync: every(RESYNC).boxed(),
            },
            approval_request: ApprovalRequestWatches {
                requests: requests_for_requests,
                notifiers: spec_changed(notifiers_for_requests).boxed(),
                agents: agents_for_requests,
                tool_gates: tool_gates_for_requests,
                resync: every(RESYNC).boxed(),
            },
            model_config: ModelConfigWatches {
                model_configs: spec_changed(model_configs_for_model_configs).boxed(),
                secrets: secrets_for_model_configs.boxed(),
            },
            remote_mcp_server: RemoteMcpServerWatches {
                servers: spec_changed(servers_for_servers).boxed(),
                secrets: secrets_for_servers.boxed(),
                config_maps: config_maps_for_servers.boxed(),
            },
            notifier: NotifierWatches {
                notifiers: notifiers_for_notifiers,
            },
            tool_gate: ToolGateWatches {
                tool_gates: tool_gates_for_tool_gates,
                rendered_or_namespace: rendered_for_tool_gates
                    .filter_map(|owner| futures::future::ready(owner.tool_gate()))
                    .boxed(),
                remote_mcp_servers: servers_for_tool_gates,
                secrets: secrets_for_tool_gates.boxed(),
                config_maps: config_maps_for_tool_gates.boxed(),
                resync: every(RESYNC).boxed(),
            },
            tool_gates_changed,
            shared: futures::future::join(
                futures::future::join5(
                    drain_watch(agent_root),
                    drain_watch(approval_root),
                    drain_watch(notifier_root),
                    drain_watch(model_config_root),
                    drain_watch(server_root),
                ),
                drain_watch(tool_gate_root),
            )
            .map(drop)
            .boxed(),
            metadata: futures::future::join4(
                service_watch,
                secret_watch,
                config_map_watch,
                rendered_watch,
            )
            .map(drop)
            .boxed(),
        }
    }
}

/// The namespaced API of `K` in `namespace`, or across every namespace when `None`.
pub(super) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// A namespaced kind the controller watches.
trait Watched:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// What the caches do not keep of an object: its managedFields and the last-applied annotation
/// of `kubectl apply`, which no reconciler reads. managedFields are most of a server-side
/// applied object, and they were the largest share of the controller's heap
/// (docs/performance-history.md#controller-caches-and-memory). (ApprovalRequests are slimmed by
/// [`cached_request`].)
fn slim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// `object` as a cache of its kind keeps it: [`slim`].
fn slimmed<K: Resource>(mut object: K) -> K {
    slim(&mut object);
    object
}

/// What the cache of Agents keeps: what [`slim`] leaves, compacted (of the status only its
/// digest).
fn cached_agent(mut agent: Agent) -> CachedAgent {
    slim(&mut agent);
    Compact::new(agent)
}

/// What the cache of ApprovalRequests keeps, compacted: no argumentsPreview (up to 32 KiB
/// each, read by approvers, never by the controller), no last-applied annotation, and of the
/// managedFields only the time of each write of spec.decision (the decision's time is read
/// there).
fn cached_request(mut request: ApprovalRequest) -> CachedRequest {
    request.spec.arguments_preview = None;
    let times: Vec<_> = request.decision_write_times().collect();
    let meta = request.meta_mut();
    meta.managed_fields = (!times.is_empty()).then(|| {
        times
            .into_iter()
            .map(|time| ManagedFieldsEntry {
                time: Some(Time(time)),
                fields_v1: Some(FieldsV1(serde_json::json!({"f:spec": {"f:decision": {}}}))),
                ..ManagedFieldsEntry::default()
            })
            .collect()
    });
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    Compact::new(request)
}

/// How a cache of a rendered kind learns the names of the objects of the kind that are not
/// ours ([`Summaries::knows_of`]).
#[derive(Clone, Copy)]
enum Others {
    /// Its watch selects every object of the kind, the others kept as a name and no more.
    InTheWatch,
    /// Its watch selects ours only (by label); a second watch, of the others' metadata, lists
    /// their names. For Secrets: the others' data is never read.
    NamesWatched,
}

/// A cached watch of the objects of kind `K` (all of them, or those the controller renders,
/// selected by label, as `others` says), kept as [`Summaries`], and the owners (Agents,
/// ToolGates) to requeue when one of theirs changes or goes away; with `Others::NamesWatched`,
/// a watch of the names of the other objects of the kind, which the same [`Summaries`] keep.
/// The cache counts as listed once it holds its first complete list (of both watches).
fn owned<K>(
    client: &Client,
    namespace: Option<&str>,
    caches: &CacheSync,
    others: Others,
) -> (Summaries<K>, impl Stream<Item = Requeue> + Send + 'static)
where
    K: Watched + RenderedKind + Default,
{
    let summaries = Summaries::default();
    let writer = summaries.clone();
    let listing = caches.listing(&K::kind(&()));
    let config = match others {
        Others::InTheWatch => paged(),
        Others::NamesWatched => paged().labels(MANAGED_SELECTOR),
    };
    let controllers = watcher(api::<K>(client, namespace), config)
        .backoff_while_failing()
        .flat_map(move |event| {
            let agents = match event {
                Ok(event) => {
                    let done = matches!(event, watcher::Event::InitDone);
                    let agents = writer.apply(event);
                    if done {
                        listing.listed();
                    }
                    agents
                }
                Err(error) => {
                    tracing::warn!(%error, "watch failed; retrying with backoff");
                    Vec::new()
                }
            };
            futures::stream::iter(agents)
        });
    let other_names = match others {
        Others::InTheWatch => None,
        Others::NamesWatched => Some(other_names(client, namespace, caches, summaries.clone())),
    };
    let other_names = futures::stream::iter(other_names).flatten();
    (summaries, futures::stream::select(controllers, other_names))
}

/// A watch of the metadata of the objects of kind `K` that are not ours, their names kept in
/// `summaries`; it yields nothing.
fn other_names<K>(
    client: &Client,
    namespace: Option<&str>,
    caches: &CacheSync,
    summaries: Summaries<K>,
) -> impl Stream<Item = Requeue> + Send + 'static
where
    K: Watched + RenderedKind + Default,
{
    let listing = caches.listing(&format!("{} (others)", K::kind(&())));
    watcher(
        api::<PartialObjectMeta<K>>(client, namespace),
        paged().labels(UNMANAGED_SELECTOR),
    )
    .modify(keep_name_only)
    .backoff_while_failing()
    .filter_map(move |event| {
        match event {
            Ok(event) => {
                let done = matches!(event, watcher::Event::InitDone);
                summaries.apply_other(event);
                if done {
                    listing.listed();
                }
            }
            Err(error) => tracing::warn!(%error, "watch failed; retrying with backoff"),
        }
        futures::future::ready(None)
    })
}

/// One watch of every `K` (selected by `config`, each object turned by `cache` into what the
/// cache keeps), cached in a store that `N` readers share: the store, each reader's stream of
/// the objects that changed (handed on once the store holds them), and the watch to drive,
/// counted as unlisted in `caches` until its first list is complete. `observe` sees every
/// event before the store applies it.
#[allow(clippy::type_complexity)]
fn shared<K, C, const N: usize>(
    client: &Client,
    namespace: Option<&str>,
    caches: &CacheSync,
    config: watcher::Config,
    cache: fn(K) -> C,
    observe: impl Fn(&watcher::Event<C>) + Send + 'static,
) -> (
    Store<C>,
    [ReflectHandle<C>; N],
    impl Stream<Item = Result<watcher::Event<C>, watcher::Error>> + Send + 'static,
)
where
    K: Watched,
    C: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store_shared::<C>(SHARED_BUFFER);
    let readers = std::array::from_fn(|_| writer.subscribe().expect("a shared store"));
    let watch = caches.track(
        &K::kind(&()),
        watcher(api::<K>(client, namespace), config)
            .map_ok(move |event| cached(event, cache))
            .inspect_ok(observe)
            .backoff_while_failing()
            .reflect_shared(writer),
    );
    (reader, readers, watch)
}

/// `event` with its object turned by `cache` into what the cache keeps.
fn cached<K, C>(event: watcher::Event<K>, cache: fn(K) -> C) -> watcher::Event<C> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(cache(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(cache(object)),
        watcher::Event::InitApply(object) => watcher::Event::InitApply(cache(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// How many changes a shared cache holds for a reader that has not taken them yet, before
/// the watch waits for it.
const SHARED_BUFFER: usize = 256;

/// The objects of a shared stream whose `metadata.generation` changed (or that are new): a
/// status write passes nothing on.
fn spec_changed<K: Resource + Send + Sync + 'static>(
    objects: impl Stream<Item = Arc<K>> + Send + 'static,
) -> impl Stream<Item = Arc<K>> + Send + 'static {
    let seen = std::sync::Mutex::new(std::collections::HashMap::<String, Option<i64>>::new());
    objects.filter(move |object| {
        let key = object.meta().uid.clone().unwrap_or_default();
        let generation = object.meta().generation;
        let changed =
            seen.lock().expect("not poisoned").insert(key, generation) != Some(generation);
        futures::future::ready(changed)
    })
}

/// Changes of the metadata of `K`, from one watch (nothing cached), handed to `N` trigger
/// streams: Secrets and ConfigMaps are read by several controllers. Each object is
/// reduced to its name and namespace, all the readers map. The future drives the watch; watch
/// failures are logged there and retried with backoff.
fn metadata<K, const N: usize>(
    client: &Client,
    namespace: Option<&str>,
) -> (
    impl Future<Output = ()> + Send + 'static,
    [impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static; N],
)
where
    K: Watched,
{
    let changes = watcher(api::<PartialObjectMeta<K>>(client, namespace), paged())
        .modify(keep_name_only)
        .backoff_while_failing()
        .touched_objects()
        .filter_map(|change| async move {
            change
                .inspect_err(|error| tracing::warn!(%error, "watch failed; retrying with backoff"))
                .ok()
        });
    let (drive, readers) = fan_out(changes);
    (
        drive,
        readers.map(|reader| reader.map(Ok::<_, watcher::Error>)),
    )
}

/// What a metadata trigger passes on: the object's name and namespace.
fn keep_name_only<K>(object: &mut PartialObjectMeta<K>) {
    let meta = &mut object.metadata;
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        ..ObjectMeta::default()
    };
}

/// Yields once every `period`, the first time one period from now.
fn every(period: Duration) -> impl Stream<Item = ()> + Send + 'static {
    let start = tokio::time::Instant::now() + period;
    futures::stream::unfold(
        tokio::time::interval_at(start, period),
        |mut ticks| async move {
            ticks.tick().await;
            Some(((), ticks))
        },
    )
}

/// A cached watch of the Namespaces the controller watches (every one, or only `namespace`),
/// each kept with its name and freeze annotation only, and the Agents and ToolGates to requeue
/// when one changes: a Namespace's freeze reaches their `Frozen` condition, and from there
/// their gates and pending requests.
fn namespaces(
    client: &Client,
    namespace: Option<&str>,
    agents: Store<CachedAgent>,
    tool_gates: Store<ToolGate>,
    caches: &CacheSync,
) -> (
    Store<PartialObjectMeta<Namespace>>,
    impl Stream<Item = Requeue> + Send + 'static,
) {
    let (reader, writer) = reflector::store();
    let config = match namespace {
        Some(namespace) => paged().fields(&format!("metadata.name={namespace}")),
        None => paged(),
    };
    let events = reflector(
        writer,
        watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            config,
        )
        .modify(keep_freeze_only)
        .backoff_while_failing(),
    );
    let there = caches
        .track("Namespace", events)
        .touched_objects()
        .filter_map(|namespace| async move {
            namespace
                .inspect_err(|error| tracing::warn!(%error, "watch failed; retrying with backoff"))
                .ok()
        })
        .flat_map(move |namespace| {
            let name = namespace.name_any();
            let in_it = |meta: &ObjectMeta| meta.namespace.as_deref() == Some(name.as_str());
            let agents = agents
                .state_filter(|a| in_it(a.meta()))
                .into_iter()
                .map(|a| Requeue::Agent(ObjectRef::from_obj(a.as_ref())));
            let tool_gates = tool_gates
                .state_filter(|t| in_it(t.meta()))
                .into_iter()
                .map(|t| Requeue::ToolGate(ObjectRef::from_obj(t.as_ref())));
            futures::stream::iter(agents.chain(tool_gates).collect::<Vec<_>>())
        });
    (reader, there)
}

/// What the cache of Namespaces keeps: the name and the freeze annotation.
fn keep_freeze_only(namespace: &mut PartialObjectMeta<Namespace>) {
    let meta = &mut namespace.metadata;
    let freeze = meta
        .annotations
        .take()
        .and_then(|mut all| all.remove_entry(FREEZE_ANNOTATION));
    *meta = ObjectMeta {
        name: meta.name.take(),
        resource_version: meta.resource_version.take(),
        uid: meta.uid.take(),
        annotations: freeze.map(|entry| BTreeMap::from([entry])),
        ..ObjectMeta::default()
    };
}

/// Drives a shared watch, logging its failures (see [`drain`](super::drain)).
async fn drain_watch<K>(events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>) {
    events
        .for_each(|event| async move {
            if let Err(error) = event {
                tracing::warn!(%error, "watch failed; retrying with backoff");
            }
        })
        .await;
}

#[cfg(test)]
mod owned_watch_tests {
    use super::*;
    use hitl_test_kit::{FakeApi, mock};
    use serde_json::json;

    const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/demo/deployments";

    /// A Deployment `agent-1` controlled by Agent `agent-1`, as the apiserver holds it after our
    /// apply (our managedFields entry owns its image), with image `image`.
    fn deployment(image: &str) -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "agent-1", "namespace": "demo",
                "labels": {"app.kubernetes.io/managed-by": "hitl-operator"},
                "ownerReferences": [{"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                                     "name": "agent-1", "uid": "u1", "controller": true}],
                "managedFields": [{"manager": "hitl-operator", "operation": "Apply",
                    "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"agent\"}": {".": {}, "f:image": {}}}}}}}}],
            },
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "agent", "image": image}]}}},
            "status": {"availableReplicas": 1},
        })
    }

    #[tokio::test]
    async fn a_listed_modified_or_deleted_rendered_object_requeues_its_agent() {
        crate::tls::install_provider();
        let api = FakeApi::start().await;
        api.put(DEPLOYMENTS, deployment("agent:1"));
        let client = api.client();
        let caches = CacheSync::default();
        let (store, controllers) =
            owned::<Deployment>(&client, Some("demo"), &caches, Others::InTheWatch);
        let mut controllers = std::pin::pin!(controllers);
        let agent = Requeue::Agent(ObjectRef::<CachedAgent>::new("agent-1").within("demo"));
        let bound = Duration::from_secs(10);

        assert_eq!(
            tokio::time::timeout(bound, controllers.next())
                .await
                .unwrap(),
            Some(agent.clone()),
            "listed"
        );
        api.put(DEPLOYMENTS, deployment("agent:2"));
        assert_eq!(
            tokio::time::timeout(bound, controllers.next())
                .await
                .unwrap(),
            Some(agent.clone()),
            "modified"
        );
        caches.within(Duration::from_secs(1)).await.unwrap();
        assert_eq!(store.len(), 1);
        let cached = store.get("demo", "agent-1").expect("cached");
        assert_eq!(cached.facts().available, 1, "readiness is kept");
        let listed: Deployment = serde_json::from_value(deployment("agent:1")).unwrap();
        let listed = Summaries::listed([listed]).get("demo", "agent-1").unwrap();
        assert!(
            listed.applied().is_some(),
            "the applied fields are digested"
        );
        assert_ne!(
            cached.applied(),
            listed.applied(),
            "a changed image changes the digest"
        );

        api.delete(DEPLOYMENTS, "agent-1");
        assert_eq!(
            tokio::time::timeout(bound, controllers.next())
                .await
                .unwrap(),
            Some(agent),
            "deleted"
        );
        assert!(store.is_empty(), "a deleted object leaves the cache");
    }

    /// The first request a watch sends: its list, which must ask for a page, not everything.
    async fn first_list_request(
        start: impl FnOnce(Client) -> futures::stream::BoxStream<'static, ()>,
    ) -> String {
        let (client, mut apiserver) = mock::pair("default");
        let mut stream = start(client);
        let polling = tokio::spawn(async move { while stream.next().await.is_some() {} });
        let request = apiserver.next().await;
        polling.abort();
        request.uri
    }

    #[tokio::test]
    async fn the_controllers_watches_list_a_page_at_a_time() {
        async fn first_owned_list<K: Watched + RenderedKind + Default>(others: Others) -> String {
            first_list_request(|client| {
                owned::<K>(&client, Some("team-a"), &CacheSync::default(), others)
                    .1
                    .map(drop)
                    .boxed()
            })
            .await
        }
        assert_eq!(
            first_owned_list::<Deployment>(Others::InTheWatch).await,
            "/apis/apps/v1/namespaces/team-a/deployments?&limit=100"
        );
        assert_eq!(
            first_owned_list::<Secret>(Others::NamesWatched).await,
            "/api/v1/namespaces/team-a/secrets?\
             &labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator&limit=100"
        );
        let other_secrets = first_list_request(|client| {
            other_names::<Secret>(&client, None, &CacheSync::default(), Summaries::default())
                .map(drop)
                .boxed()
        })
        .await;
        assert_eq!(
            other_secrets,
            "/api/v1/secrets?&labelSelector=app.kubernetes.io%2Fmanaged-by%21%3Dhitl-operator&limit=100"
        );
        let specs = first_list_request(|client| {
            shared::<crate::api::ModelConfig, _, 1>(
                &client,
                Some("team-a"),
                &CacheSync::default(),
                paged(),
                slimmed,
                |_| (),
            )
            .2
            .map(drop)
            .boxed()
        })
        .await;
        assert_eq!(
            specs,
            "/apis/kagent.dev/v1alpha2/namespaces/team-a/modelconfigs?&limit=100"
        );
        let names = first_list_request(|client| {
            let (drive, [changes]) = metadata::<Secret, 1>(&client, None);
            futures::stream::select(drive.into_stream(), changes.map(drop)).boxed()
        })
        .await;
        assert_eq!(names, "/api/v1/secrets?&limit=100");
    }
}

#[cfg(test)]
mod namespace_watch_tests {
    use super::*;
    use hitl_test_kit::FakeApi;
    use serde_json::{Value, json};

    /// A listed store of `objects`, each as the cache keeps it (`cache`).
    fn listed<K, C>(objects: Vec<K>, cache: fn(K) -> C) -> Store<C>
    where
        C: reflector::Lookup<DynamicType = ()> + Clone + 'static,
    {
        let (reader, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(cache(object)));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        reader
    }

    fn object<K: DeserializeOwned>(kind: &str, namespace: &str, name: &str, spec: Value) -> K {
        serde_json::from_value(json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_namespaces_freeze_requeues_its_agents_and_tool_gates_only() {
        crate::tls::install_provider();
        let api = FakeApi::start().await;
        let namespace = |annotations: Value| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "demo", "annotations": annotations}})
        };
        api.put("/api/v1/namespaces", namespace(json!({})));
        let agent = |namespace: &str| -> Agent {
            object("Agent", namespace, "ops", json!({"type": "Declarative"}))
        };
        let tool_gate = |namespace: &str| -> ToolGate {
            object(
                "ToolGate",
                namespace,
                "pay",
                json!({"server": {"url": "http://ledger:8080/mcp"}, "toolNames": ["transfer"]}),
            )
        };
        let agents = listed(vec![agent("demo"), agent("other")], cached_agent);
        let tool_gates = listed(vec![tool_gate("demo"), tool_gate("other")], slimmed);
        let caches = CacheSync::default();
        let (store, requeued) =
            namespaces(&api.client(), Some("demo"), agents, tool_gates, &caches);
        let mut requeued = std::pin::pin!(requeued);
        let expected = [
            Requeue::Agent(ObjectRef::new("ops").within("demo")),
            Requeue::ToolGate(ObjectRef::new("pay").within("demo")),
        ];
        let mut next_two = async || {
            let bound = Duration::from_secs(10);
            let mut two = Vec::new();
            for _ in 0..2 {
                two.push(
                    tokio::time::timeout(bound, requeued.next())
                        .await
                        .unwrap()
                        .unwrap(),
                );
            }
            two
        };
        assert_eq!(next_two().await, expected, "listed");
        api.put(
            "/api/v1/namespaces",
            namespace(json!({FREEZE_ANNOTATION: "incident 42", "other": "kept out"})),
        );
        assert_eq!(next_two().await, expected, "frozen");
        let cached = store.get(&ObjectRef::new("demo")).expect("cached");
        assert_eq!(
            cached.metadata.annotations,
            Some(BTreeMap::from([(
                FREEZE_ANNOTATION.to_string(),
                "incident 42".to_string()
            )])),
            "the cache keeps the freeze annotation only"
        );
    }
}
