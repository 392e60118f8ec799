//! Start-up of `hitl-operator controller`: flags, logging, the health and metrics server,
//! leader election on a Lease, the watches, and graceful shutdown.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cli::logging::{self, LogFormat};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use kube::api::{Api, ListParams};
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, reflector::reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use kube_lease_manager::LeaseManagerBuilder;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::compact::{CachedAgent, CachedRequest, Compact};
use super::fan_out::fan_out;
use super::rendered::{RenderedKind, Summaries};
use super::{
    CacheSync, Context, MANAGED_SELECTOR, Metrics, RESYNC, RequestsByAgent, Stores, SystemClock,
    agent, approval_request, model_config, notifier, remote_mcp_server, retry_after_error, slack,
};
use crate::api::common::ValueSourceType;
use crate::api::freeze::FREEZE_ANNOTATION;
use crate::api::{Agent, ApprovalMode, ApprovalNotifier, ApprovalRequest};
use crate::contract::gate_config::DEFAULT_MAX_OPEN_REQUESTS;
use crate::egress::destination::Destinations;
use crate::kube::backoff::BackoffWhileFailing;
use crate::kube::paging::paged;
use crate::render::network::{Cidr, default_cluster_cidrs};
use crate::render::proxy::ProxyUrl;
use crate::render::skills::DEFAULT_SKILLS_INIT_IMAGE;
use crate::render::{
    DEFAULT_AGENT_IMAGE, DEFAULT_GATE_IMAGE, DEFAULT_GRANT_MAX_TTL, GrantMaxTtl, RenderOptions,
};
use crate::{Error, Result};

/// Flags of `hitl-operator controller` (each with an environment fallback).
#[derive(clap::Args, Clone, Debug)]
pub struct ControllerArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Reconcile only the Agents matching this label selector (default: every Agent), for
    /// example `kagent.dev/controller=hitl-operator` when kagent runs in the same namespaces.
    #[arg(long, env = "AGENT_SELECTOR")]
    pub agent_selector: Option<String>,
    /// Approval mode of Agents that set none.
    #[arg(
        long,
        env = "DEFAULT_APPROVAL_MODE",
        value_enum,
        ignore_case = true,
        default_value = "Gate"
    )]
    pub default_approval_mode: ApprovalMode,
    /// Agent runtime image.
    #[arg(long, env = "AGENT_IMAGE", default_value = DEFAULT_AGENT_IMAGE)]
    pub agent_image: String,
    /// Approval gate sidecar image.
    #[arg(long, env = "GATE_IMAGE", default_value = DEFAULT_GATE_IMAGE)]
    pub gate_image: String,
    /// The cluster's internal address ranges (pod, Service and node CIDRs), comma-separated or
    /// repeated: closed to agent pods in Gateway placement.
    #[arg(
        long,
        env = "CLUSTER_CIDRS",
        value_delimiter = ',',
        default_values_t = default_cluster_cidrs()
    )]
    pub cluster_cidrs: Vec<Cidr>,
    /// kagent's proxy for in-cluster tool servers and agents, such as
    /// `http://proxy.kagent.svc.cluster.local:8080`. Where a gate runs, only the gate's calls
    /// to servers use it; config.json keeps pointing gated servers at the gate.
    #[arg(long, env = "PROXY_URL")]
    pub proxy_url: Option<ProxyUrl>,
    /// Image of the init container that fetches an Agent's skills.
    #[arg(long, env = "SKILLS_INIT_IMAGE", default_value = DEFAULT_SKILLS_INIT_IMAGE)]
    pub skills_init_image: String,
    /// Longest lifetime of an ApprovalGrant (`expiresAt` after its creation) the gates
    /// honour, such as 24h; `off` turns grants off: every gated call asks a person.
    #[arg(long, env = "GRANT_MAX_TTL", default_value = DEFAULT_GRANT_MAX_TTL)]
    pub grant_max_ttl: GrantMaxTtl,
    /// Open ApprovalRequests (Pending, or Approved and not yet used) an Agent may hold when
    /// it sets no `spec.declarative.approval.maxOpenRequests`, 1 to 1000.
    #[arg(
        long,
        env = "DEFAULT_MAX_OPEN_REQUESTS",
        default_value_t = DEFAULT_MAX_OPEN_REQUESTS,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub default_max_open_requests: u32,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Log format.
    #[arg(
        long,
        env = "LOG_FORMAT",
        value_enum,
        ignore_case = true,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Run only while holding the Lease, so several replicas are safe.
    #[arg(long, env = "LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "LEASE_NAME", default_value = "hitl-operator")]
    pub lease_name: String,
    /// Namespace of the Lease (default: --namespace, else the kubeconfig's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Serve Slack interactions (the Approve and Deny buttons of Slack notifiers) on this
    /// address, at /slack/interactions (unset: off). docs/approvers.md.
    #[arg(long, env = "SLACK_INTERACTIONS_ADDR", requires_all = ["slack_signing_secret_file", "slack_users_file"])]
    pub slack_interactions_addr: Option<SocketAddr>,
    /// File holding the Slack app's signing secret.
    #[arg(long, env = "SLACK_SIGNING_SECRET_FILE")]
    pub slack_signing_secret_file: Option<std::path::PathBuf>,
    /// File mapping Slack user IDs to the Kubernetes users they act as (YAML:
    /// `U0123ABCD: {user: alice, groups: [approvers]}`).
    #[arg(long, env = "SLACK_USERS_FILE")]
    pub slack_users_file: Option<std::path::PathBuf>,
    /// Replies go only to Slack response URLs that start with this.
    #[arg(
        long,
        env = "SLACK_RESPONSE_URL_PREFIX",
        default_value = "https://hooks.slack.com/"
    )]
    pub slack_response_url_prefix: String,
    /// Loopback, link-local and unspecified addresses notifier messages may go to after all
    /// (CIDRs, comma-separated or repeated; default: none). Anything else is allowed.
    #[arg(long, env = "NOTIFIER_ALLOW_CIDRS", value_delimiter = ',')]
    pub notifier_allow_cidrs: Vec<Cidr>,
}

/// Starts the Slack interactions endpoint when `--slack-interactions-addr` is set: reads the
/// signing secret and the user mapping (a startup error when either is missing or invalid).
async fn serve_slack(args: &ControllerArgs) -> Result<()> {
    let (Some(addr), Some(secret_file), Some(users_file)) = (
        args.slack_interactions_addr,
        &args.slack_signing_secret_file,
        &args.slack_users_file,
    ) else {
        return Ok(());
    };
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })
    };
    let secret = read(secret_file)?;
    let mapping =
        crate::notify::slack::mapping(&read(users_file)?).map_err(|message| Error::Yaml {
            file: users_file.display().to_string(),
            message,
        })?;
    let endpoint = slack::Endpoint {
        verifier: crate::notify::slack::Verifier::new(secret.trim().as_bytes()),
        mapping,
        config: kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?,
        http: crate::egress::client(),
        response_url_prefix: args.slack_response_url_prefix.clone(),
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })?;
    tracing::info!(%addr, users = endpoint.mapping.len(), "serving Slack interactions at {}", slack::PATH);
    let server = axum::serve(listener, slack::router(Arc::new(endpoint)));
    tokio::spawn(async move {
        if let Err(error) = server.await {
            tracing::error!(%error, "Slack interactions server stopped");
        }
    });
    Ok(())
}

/// Refuses to start with an `--agent-selector` the apiserver cannot parse (one list of at most
/// one Agent's metadata), rather than watching with it and failing forever.
async fn check_agent_selector(client: &Client, args: &ControllerArgs) -> Result<()> {
    let Some(selector) = &args.agent_selector else {
        return Ok(());
    };
    let params = ListParams::default().labels(selector).limit(1);
    match api::<Agent>(client, args.namespace.as_deref())
        .list_metadata(&params)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 400 => Err(Error::InvalidSpec {
            object: "hitl-operator controller".into(),
            field: "--agent-selector".into(),
            message: format!("{selector:?}: {}", status.message),
        }),
        Err(error) => Err(error.into()),
    }
}

/// Health of the process, served on `/healthz` and `/readyz`.
#[derive(Default)]
pub struct Health {
    ready: AtomicBool,
}

#[derive(Clone)]
struct ServerState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// The `/healthz`, `/readyz` and `/metrics` routes.
pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(state): State<ServerState>| async move {
                if state.health.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(state): State<ServerState>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    state.metrics.encode(),
                )
                    .into_response()
            }),
        )
        .with_state(ServerState { metrics, health })
}

/// How long in-flight reconciles may finish after a stop before they are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long releasing the Lease may take at shutdown before the process exits anyway.
const RELEASE_BOUND: Duration = Duration::from_secs(2);

/// Resolves when SIGTERM or Ctrl-C arrives.
async fn termination() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Runs the controller until SIGTERM; with leader election, only while holding the Lease.
pub async fn run(args: ControllerArgs) -> Result<()> {
    logging::install_tls_provider();
    logging::init(args.log_format);
    let client = crate::kube::client::nodelay_client().await?;
    check_agent_selector(&client, &args).await?;
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());

    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|source| Error::Bind {
            addr: args.metrics_addr.to_string(),
            source,
        })?;
    tracing::info!(addr = %args.metrics_addr, "serving /healthz, /readyz and /metrics");
    let server = axum::serve(listener, router(metrics.clone(), health.clone()));
    tokio::spawn(async move {
        if let Err(error) = server.await {
            tracing::error!(%error, "metrics server stopped");
        }
    });
    serve_slack(&args).await?;

    // `stop` turns true on SIGTERM or when leadership is lost.
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            termination().await;
            tracing::info!("termination requested, shutting down");
            stop_tx.send_replace(true);
        });
    }

    if !args.leader_election {
        health.ready.store(true, Ordering::Relaxed);
        run_controllers(client, &args, metrics, health, stop_rx).await;
        return Ok(());
    }

    lead(client, &args, metrics, health, stop_tx, stop_rx).await
}

/// Waits for the Lease, runs the controllers while holding it, and releases it once `stop`
/// turns true. Losing the Lease stops the controllers and returns an error.
async fn lead(
    client: Client,
    args: &ControllerArgs,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop_tx: Arc<watch::Sender<bool>>,
    stop_rx: watch::Receiver<bool>,
) -> Result<()> {
    let lease_namespace = args
        .lease_namespace
        .clone()
        .or_else(|| args.namespace.clone())
        .unwrap_or_else(|| client.default_namespace().to_string());
    let identity = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME"));
    let contend = || async {
        let mut builder = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
            .with_namespace(&lease_namespace);
        if let Ok(identity) = &identity {
            builder = builder.with_identity(identity);
        }
        Ok::<_, Error>(builder.build().await?.watch().await)
    };
    let (mut leader, mut lease_task) = contend().await?;
    // A standby replica is healthy and ready; it just does not reconcile.
    health.ready.store(true, Ordering::Relaxed);
    tracing::info!(lease = %args.lease_name, namespace = %lease_namespace, "waiting for leadership");
    let mut waiting_stop = stop_rx.clone();
    let mut released = std::pin::pin!(lease_released(&client, &lease_namespace, &args.lease_name));
    let became_leader = loop {
        let leading = tokio::select! {
            result = leader.wait_for(|leading| *leading) => Some(result.is_ok()),
            _ = waiting_stop.wait_for(|stop| *stop) => Some(false),
            Some(()) = released.next() => None,
        };
        if let Some(leading) = leading {
            break leading;
        }
        // Released: the lease manager would sleep until the expiry it last read, but the Lease
        // is free now, so contend again at once.
        drop(leader);
        let _ = tokio::time::timeout(RELEASE_BOUND, lease_task).await;
        (leader, lease_task) = contend().await?;
    };
    let mut lost = false;
    if became_leader {
        tracing::info!("acquired the Lease, starting controllers");
        let lost_flag = Arc::new(AtomicBool::new(false));
        let watcher_task = {
            let (stop_tx, lost_flag, mut leader) =
                (stop_tx.clone(), lost_flag.clone(), leader.clone());
            tokio::spawn(async move {
                if leader.wait_for(|leading| !*leading).await.is_ok() {
                    tracing::error!("lost the Lease, stopping controllers");
                    lost_flag.store(true, Ordering::Relaxed);
                    stop_tx.send_replace(true);
                }
            })
        };
        run_controllers(client, args, metrics, health, stop_rx).await;
        watcher_task.abort();
        lost = lost_flag.load(Ordering::Relaxed);
    }
    // Closing the channel makes the lease task release the Lease and return.
    drop(leader);
    match tokio::time::timeout(RELEASE_BOUND, lease_task).await {
        Ok(Ok(result)) => drop(result?),
        Ok(Err(error)) => tracing::warn!(%error, "lease task failed"),
        Err(_) => tracing::warn!("releasing the Lease timed out; it expires on its own"),
    }
    if lost {
        // Exit non-zero so the pod restarts as a standby with fresh caches.
        return Err(Error::LeaderElection(
            kube_lease_manager::LeaseManagerError::InconsistentState("lost the Lease".into()),
        ));
    }
    Ok(())
}

/// Yields whenever the Lease `namespace/name` has no holder: its leader released it on
/// shutdown (or it was never taken). Watch failures are retried with backoff.
fn lease_released(
    client: &Client,
    namespace: &str,
    name: &str,
) -> impl Stream<Item = ()> + Send + 'static {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(Api::<Lease>::namespaced(client.clone(), namespace), config)
        .backoff_while_failing()
        .applied_objects()
        .filter_map(|lease| async move {
            let holder = lease.ok()?.spec?.holder_identity;
            holder.is_none_or(|holder| holder.is_empty()).then_some(())
        })
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
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

/// How many objects one controller reconciles at once. Unbounded, a cold start over 1000
/// Agents ran 1000 reconciles side by side, each holding what it fetched and rendered; the
/// apiserver answers no faster for it.
const RECONCILE_CONCURRENCY: u16 = 16;

fn bounded() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(RECONCILE_CONCURRENCY)
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

/// A cached watch of the objects of kind `K` the controller renders (selected by label), kept
/// as [`Summaries`], and the Agents to requeue when one changes or goes away. The cache counts
/// as listed once it holds the first complete list.
fn owned<K>(
    client: &Client,
    namespace: Option<&str>,
    caches: &CacheSync,
) -> (
    Summaries<K>,
    impl Stream<Item = ObjectRef<CachedAgent>> + Send + 'static,
)
where
    K: Watched + RenderedKind,
{
    let summaries = Summaries::default();
    let writer = summaries.clone();
    let listing = caches.listing(&K::kind(&()));
    let config = paged().labels(MANAGED_SELECTOR);
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
    (summaries, controllers)
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
/// each kept with its name and freeze annotation only, and the Agents to requeue when one
/// changes: a Namespace's freeze reaches its Agents' `Frozen` condition, and from there their
/// gates and pending requests.
fn namespaces(
    client: &Client,
    namespace: Option<&str>,
    agents: Store<CachedAgent>,
    caches: &CacheSync,
) -> (
    Store<PartialObjectMeta<Namespace>>,
    impl Stream<Item = ObjectRef<CachedAgent>> + Send + 'static,
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
    let agents_there = caches
        .track("Namespace", events)
        .touched_objects()
        .filter_map(|namespace| async move {
            namespace
                .inspect_err(|error| tracing::warn!(%error, "watch failed; retrying with backoff"))
                .ok()
        })
        .flat_map(move |namespace| {
            let name = namespace.name_any();
            let agents: Vec<ObjectRef<CachedAgent>> = agents
                .state_filter(|a| a.meta().namespace.as_ref() == Some(&name))
                .iter()
                .map(|a| ObjectRef::from_obj(a.as_ref()))
                .collect();
            futures::stream::iter(agents)
        });
    (reader, agents_there)
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

/// Drives a shared watch, logging its failures (see [`drain`]).
async fn drain_watch<K>(events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>) {
    events
        .for_each(|event| async move {
            if let Err(error) = event {
                tracing::warn!(%error, "watch failed; retrying with backoff");
            }
        })
        .await;
}

/// Builds the four controllers and runs them until `stop` turns true.
async fn run_controllers(
    client: Client,
    args: &ControllerArgs,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop: watch::Receiver<bool>,
) {
    let namespace = args.namespace.as_deref();
    let shutdown = || {
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }
    };

    let caches = CacheSync::default();
    // Agents and ApprovalRequests are each watched once and shared by the controllers; an
    // Agent used as a tool by others requeues them when it changes (description, cycles).
    let agent_config = match &args.agent_selector {
        Some(selector) => paged().labels(selector),
        None => paged(),
    };
    let (agents, [agents_for_agents, agents_for_requests, agents_for_callers], agent_root) = shared(
        &client,
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
        shared(
            &client,
            namespace,
            &caches,
            paged(),
            cached_request,
            observe,
        )
    };

    let (deployments, deployment_events) = owned::<Deployment>(&client, namespace, &caches);
    let (services, service_events) = owned::<Service>(&client, namespace, &caches);
    let (secrets, secret_events) = owned::<Secret>(&client, namespace, &caches);
    let (service_accounts, service_account_events) =
        owned::<ServiceAccount>(&client, namespace, &caches);
    let (roles, role_events) = owned::<Role>(&client, namespace, &caches);
    let (role_bindings, role_binding_events) = owned::<RoleBinding>(&client, namespace, &caches);
    let (network_policies, network_policy_events) =
        owned::<NetworkPolicy>(&client, namespace, &caches);
    let (namespaces, namespace_events) = namespaces(&client, namespace, agents.clone(), &caches);
    // ApprovalNotifiers: read by the request reconciler when it delivers; a new or changed
    // notifier requeues the open requests of its namespace.
    let (notifiers, [notifiers_for_notifiers, notifiers_for_requests], notifier_root) =
        shared(&client, namespace, &caches, paged(), slimmed, |_| ());
    // ModelConfigs and RemoteMCPServers: every Agent reconcile reads the ones it names from
    // these caches (no GET per reference); their own controllers reconcile them on spec
    // changes, and every change (a server's discovered tools are its status) requeues the
    // Agents naming them, once the cache holds it.
    let (
        model_configs,
        [model_configs_for_agents, model_configs_for_model_configs],
        model_config_root,
    ) = shared(&client, namespace, &caches, paged(), slimmed, |_| ());
    let (servers, [servers_for_agents, servers_for_servers], server_root) =
        shared(&client, namespace, &caches, paged(), slimmed, |_| ());
    // Services, Secrets and ConfigMaps an Agent or a tool server names: one metadata watch
    // each, its changes handed to every controller that maps them.
    let (service_watch, [services_changed]) = metadata::<Service, 1>(&client, namespace);
    let (
        secret_watch,
        [
            secrets_for_agents,
            secrets_for_model_configs,
            secrets_for_servers,
        ],
    ) = metadata::<Secret, 3>(&client, namespace);
    let (config_map_watch, [config_maps_for_agents, config_maps_for_servers]) =
        metadata::<ConfigMap, 2>(&client, namespace);
    let metadata_watches = tokio::spawn(futures::future::join3(
        service_watch,
        secret_watch,
        config_map_watch,
    ));
    let stores = Stores {
        agents: agents.clone(),
        approvals: approvals.clone(),
        requests_by_agent: requests_by_agent.clone(),
        deployments,
        services,
        secrets,
        service_accounts,
        roles,
        role_bindings,
        network_policies,
        namespaces,
        notifiers: notifiers.clone(),
        model_configs: model_configs.clone(),
        remote_mcp_servers: servers.clone(),
        scope: args.namespace.clone(),
    };
    let render = RenderOptions {
        default_approval_mode: args.default_approval_mode,
        agent_image: args.agent_image.clone(),
        gate_image: args.gate_image.clone(),
        cluster_cidrs: args.cluster_cidrs.clone(),
        proxy_url: args.proxy_url.clone(),
        skills_init_image: args.skills_init_image.clone(),
        grant_max_ttl: args.grant_max_ttl.0,
        max_open_requests: args.default_max_open_requests,
    };
    let instance = std::env::var("POD_NAME").ok();
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            Arc::new(SystemClock),
            metrics,
            render,
            stores,
            caches,
            instance,
        )
        .with_notifier_destinations(Destinations::new(args.notifier_allow_cidrs.clone())),
    );

    /// The Agents that name `object`, of kind `kind`.
    fn naming(
        ctx: &Context,
        kind: &'static str,
        object: &impl Resource,
    ) -> Vec<ObjectRef<CachedAgent>> {
        ctx.refs.agents_for(
            kind,
            &object.namespace().unwrap_or_default(),
            &object.name_any(),
            &ctx.stores.agents,
        )
    }
    /// [`naming`] as the mapper of a watch of `kind`.
    fn by_ref<R: Resource>(
        ctx: &Arc<Context>,
        kind: &'static str,
    ) -> impl Fn(R) -> Vec<ObjectRef<CachedAgent>> + Send + Sync + 'static {
        let ctx = ctx.clone();
        move |object| naming(&ctx, kind, &object)
    }
    /// [`naming`] as the mapper of a shared cache's changes of `kind`.
    fn by_shared_ref<R: Resource>(
        ctx: &Arc<Context>,
        kind: &'static str,
    ) -> impl Fn(Arc<R>) -> Vec<ObjectRef<CachedAgent>> + Send + Sync + 'static {
        let ctx = ctx.clone();
        move |object| naming(&ctx, kind, object.as_ref())
    }
    let agent_controller = {
        Controller::for_shared_stream(agents_for_agents, agents.clone())
            .with_config(bounded())
            .reconcile_on(futures::stream::select_all([
                secret_events.boxed(),
                service_account_events.boxed(),
                role_events.boxed(),
                role_binding_events.boxed(),
                network_policy_events.boxed(),
                deployment_events.boxed(),
                service_events.boxed(),
                namespace_events.boxed(),
            ]))
            .watches_shared_stream(servers_for_agents, by_shared_ref(&ctx, "RemoteMCPServer"))
            .watches_shared_stream(model_configs_for_agents, by_shared_ref(&ctx, "ModelConfig"))
            .watches_stream(services_changed, by_ref(&ctx, "Service"))
            .watches_stream(secrets_for_agents, by_ref(&ctx, "Secret"))
            .watches_stream(config_maps_for_agents, by_ref(&ctx, "ConfigMap"))
            .watches_shared_stream(agents_for_callers, by_shared_ref(&ctx, "Agent"))
            .watches_shared_stream(requests_for_agents, |request: Arc<CachedRequest>| {
                Some(
                    ObjectRef::new(request.agent_name())
                        .within(&request.namespace().unwrap_or_default()),
                )
            })
            .reconcile_all_on(every(RESYNC))
            .graceful_shutdown_on(shutdown())
            .run(
                agent::reconcile,
                |object, error, ctx| {
                    retry_after_error(agent::CONTROLLER, object.as_ref(), error, &ctx)
                },
                ctx.clone(),
            )
    };

    let request_controller = {
        let approvals = approvals.clone();
        let requests_by_agent = requests_by_agent.clone();
        let open_in_namespace = {
            let approvals = approvals.clone();
            move |notifier: Arc<ApprovalNotifier>| {
                let namespace = notifier.namespace();
                approvals
                    .state_filter(|r| r.namespace() == namespace && !r.is_finished())
                    .iter()
                    .map(|r| ObjectRef::from_obj(r.as_ref()))
                    .collect::<Vec<_>>()
            }
        };
        Controller::for_shared_stream(requests_for_requests, approvals.clone())
            .watches_shared_stream(spec_changed(notifiers_for_requests), open_in_namespace)
            .with_config(bounded())
            .watches_shared_stream(agents_for_requests, move |agent: Arc<CachedAgent>| {
                let namespace = agent.namespace().unwrap_or_default();
                requests_by_agent.made_by(&namespace, &agent.name_any())
            })
            .reconcile_all_on(every(RESYNC))
            .graceful_shutdown_on(shutdown())
            .run(
                approval_request::reconcile,
                |object, error, ctx| {
                    retry_after_error(approval_request::CONTROLLER, object.as_ref(), error, &ctx)
                },
                ctx.clone(),
            )
    };

    let model_config_controller = {
        let changes = spec_changed(model_configs_for_model_configs);
        Controller::for_shared_stream(changes, model_configs.clone())
            .watches_stream(
                secrets_for_model_configs,
                move |secret: PartialObjectMeta<Secret>| {
                    model_config::using_secret(
                        &model_configs,
                        &secret.namespace().unwrap_or_default(),
                        &secret.name_any(),
                    )
                },
            )
            .graceful_shutdown_on(shutdown())
            .run(
                model_config::reconcile,
                |object, error, ctx| {
                    retry_after_error(model_config::CONTROLLER, object.as_ref(), error, &ctx)
                },
                ctx.clone(),
            )
    };

    let server_controller = {
        let (for_secrets, for_config_maps) = (servers.clone(), servers.clone());
        Controller::for_shared_stream(spec_changed(servers_for_servers), servers)
            .watches_stream(
                secrets_for_servers,
                move |secret: PartialObjectMeta<Secret>| {
                    remote_mcp_server::using_source(
                        &for_secrets,
                        ValueSourceType::Secret,
                        &secret.namespace().unwrap_or_default(),
                        &secret.name_any(),
                    )
                },
            )
            .watches_stream(
                config_maps_for_servers,
                move |config_map: PartialObjectMeta<ConfigMap>| {
                    remote_mcp_server::using_source(
                        &for_config_maps,
                        ValueSourceType::ConfigMap,
                        &config_map.namespace().unwrap_or_default(),
                        &config_map.name_any(),
                    )
                },
            )
            .graceful_shutdown_on(shutdown())
            .run(
                remote_mcp_server::reconcile,
                |object, error, ctx| {
                    retry_after_error(remote_mcp_server::CONTROLLER, object.as_ref(), error, &ctx)
                },
                ctx.clone(),
            )
    };

    let notifier_controller = Controller::for_shared_stream(notifiers_for_notifiers, notifiers)
        .graceful_shutdown_on(shutdown())
        .run(
            notifier::reconcile,
            |object, error, ctx| {
                retry_after_error(notifier::CONTROLLER, object.as_ref(), error, &ctx)
            },
            ctx.clone(),
        );

    let trimming = tokio::spawn(super::malloc::trim_free_memory());
    ctx.metrics.count_pending_in(Some(requests_by_agent));

    let readiness = {
        let caches = ctx.caches.clone();
        let health = health.clone();
        tokio::spawn(async move {
            health.ready.store(false, Ordering::Relaxed);
            caches.synced().await;
            health.ready.store(true, Ordering::Relaxed);
            tracing::info!("caches synced");
        })
    };

    let controllers = futures::future::join5(
        drain(agent_controller),
        drain(request_controller),
        drain(model_config_controller),
        drain(server_controller),
        drain(notifier_controller),
    );
    // Once stopping, in-flight reconciles get SHUTDOWN_GRACE to finish; whatever is still
    // running then is dropped (each reconcile is idempotent and resumes on the next leader).
    let grace_over = async {
        let _ = stop.clone().wait_for(|stop| *stop).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        _ = controllers => tracing::info!("controllers stopped"),
        _ = futures::future::join5(
            drain_watch(agent_root),
            drain_watch(approval_root),
            drain_watch(notifier_root),
            drain_watch(model_config_root),
            drain_watch(server_root),
        ).fuse() => {
            tracing::error!("a watch stream ended unexpectedly");
        }
        _ = grace_over => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "reconciles still running at shutdown; abandoning them");
        }
    }
    readiness.abort();
    trimming.abort();
    metadata_watches.abort();
    ctx.metrics.count_pending_in(None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use clap::Parser;
    use tower::ServiceExt;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    #[test]
    fn flags_have_the_documented_defaults_and_spellings() {
        let args = Cli::try_parse_from(["controller"]).unwrap().args;
        assert_eq!(args.default_approval_mode, ApprovalMode::Gate);
        assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:8080");
        assert!(args.leader_election);
        assert_eq!(args.lease_name, "hitl-operator");
        assert!(args.gate_image.ends_with(env!("CARGO_PKG_VERSION")));
        assert_eq!(args.cluster_cidrs, default_cluster_cidrs());
        assert!(args.notifier_allow_cidrs.is_empty());
        let args = Cli::try_parse_from([
            "controller",
            "--default-approval-mode",
            "Both",
            "--leader-election=false",
            "--log-format",
            "json",
            "--namespace",
            "demo",
            "--cluster-cidrs",
            "10.0.0.0/8,fd00::/8",
            "--cluster-cidrs=100.64.0.0/10",
            "--notifier-allow-cidrs",
            "127.0.0.0/8,::1/128",
        ])
        .unwrap()
        .args;
        assert_eq!(
            args.cluster_cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["10.0.0.0/8", "fd00::/8", "100.64.0.0/10"]
        );
        assert_eq!(
            args.notifier_allow_cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["127.0.0.0/8", "::1/128"]
        );
        assert!(
            Cli::try_parse_from(["controller", "--cluster-cidrs", "10.0.0.1/8"]).is_err(),
            "host bits are refused"
        );
        assert!(
            Cli::try_parse_from(["controller", "--notifier-allow-cidrs", "localhost"]).is_err(),
            "only CIDRs"
        );
        assert_eq!(args.default_approval_mode, ApprovalMode::Both);
        assert!(!args.leader_election);
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.namespace.as_deref(), Some("demo"));
    }

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let response = router
            .clone()
            .oneshot(http::Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics() {
        let metrics = Arc::new(Metrics::default());
        let health = Arc::new(Health::default());
        let router = router(metrics.clone(), health.clone());
        assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(&router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        health.ready.store(true, Ordering::Relaxed);
        assert_eq!(get(&router, "/readyz").await.0, StatusCode::OK);
        let (status, body) = get(&router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("hitl_approvals_pending 0"), "{body}");
    }
}

#[cfg(test)]
mod wiring_tests {
    use super::*;
    use axum::body::Body;
    use axum::extract::Request;
    use clap::Parser;
    use std::sync::Mutex;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    /// What the stand-in API server saw, the one Lease it holds, and the Agents it lists.
    #[derive(Default)]
    struct Fake {
        seen: Mutex<Vec<String>>,
        lease: Mutex<Option<serde_json::Value>>,
        agents: Vec<serde_json::Value>,
    }

    /// The Lease endpoint: get (404 until created), create, and patches merged into its spec.
    fn lease(fake: &Fake, method: &http::Method, body: &[u8]) -> axum::response::Response {
        let mut lease = fake.lease.lock().unwrap();
        if *method == http::Method::POST {
            *lease = Some(serde_json::from_slice(body).unwrap());
        } else if *method == http::Method::PATCH {
            let patch: serde_json::Value = serde_json::from_slice(body).unwrap();
            let stored = lease.as_mut().expect("lease created before it is patched");
            let spec = stored
                .as_object_mut()
                .unwrap()
                .entry("spec")
                .or_insert_with(|| serde_json::json!({}));
            for (key, value) in patch["spec"].as_object().cloned().unwrap_or_default() {
                if value.is_null() {
                    spec.as_object_mut().unwrap().remove(&key);
                } else {
                    spec[key] = value;
                }
            }
        }
        match lease.clone() {
            Some(mut stored) => {
                stored["metadata"]["resourceVersion"] = "1".into();
                axum::Json(stored).into_response()
            }
            None => (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": "not found",
                })),
            )
                .into_response(),
        }
    }

    /// A stand-in API server: a Lease, empty lists, and watches that stay open without events.
    async fn fake_apiserver(fake: Arc<Fake>) -> SocketAddr {
        let app = Router::new().fallback(move |request: Request| {
            let fake = fake.clone();
            async move {
                let metadata_only = request
                    .headers()
                    .get("accept")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
                let method = request.method().clone();
                let uri = request.uri().to_string();
                fake.seen.lock().unwrap().push(format!(
                    "{}{}",
                    if metadata_only { "metadata " } else { "" },
                    uri.split("&resourceVersion").next().unwrap_or_default()
                ));
                if uri.contains("watch=true") {
                    return Body::from_stream(futures::stream::pending::<
                        Result<bytes::Bytes, std::io::Error>,
                    >())
                    .into_response();
                }
                let lists = method == http::Method::GET && uri.contains('?');
                if uri.starts_with("/apis/coordination.k8s.io/") && !lists {
                    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
                        .await
                        .unwrap();
                    return lease(&fake, &method, &body);
                }
                if !uri.contains('?') {
                    // Reads and writes of single objects never answer: a reconcile that gets
                    // this far stays in flight.
                    return futures::future::pending().await;
                }
                let kind = if metadata_only {
                    "PartialObjectMetadataList"
                } else {
                    "List"
                };
                let items = if uri.contains("/agents?") {
                    fake.agents.clone()
                } else if uri.contains("/leases?") {
                    fake.lease.lock().unwrap().iter().cloned().collect()
                } else {
                    Vec::new()
                };
                axum::Json(serde_json::json!({
                    "apiVersion": "v1", "kind": kind,
                    "metadata": {"resourceVersion": "1"}, "items": items,
                }))
                .into_response()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    fn client_for(addr: SocketAddr) -> Client {
        logging::install_tls_provider();
        Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap()
    }

    /// Polls `condition` (bounded, so a regression fails instead of hanging).
    async fn eventually(what: &str, condition: impl Fn() -> bool) {
        for _ in 0..3000 {
            if condition() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{what} never happened");
    }

    #[tokio::test]
    async fn leader_reconciles_while_holding_the_lease_and_releases_it_on_stop() {
        let fake = Arc::new(Fake::default());
        let client = client_for(fake_apiserver(fake.clone()).await);
        let args = Cli::try_parse_from(["controller", "--namespace", "demo"])
            .unwrap()
            .args;
        let health = Arc::new(Health::default());
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let running = tokio::spawn({
            let (health, stop_tx) = (health.clone(), stop_tx.clone());
            async move { lead(client, &args, Arc::default(), health, stop_tx, stop_rx).await }
        });
        let holder = || {
            fake.lease
                .lock()
                .unwrap()
                .as_ref()
                .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        };
        let listed_agents = || {
            fake.seen
                .lock()
                .unwrap()
                .iter()
                .any(|s| s.starts_with("/apis/kagent.dev/v1alpha2/namespaces/demo/agents?"))
        };
        eventually("taking the Lease in the lease namespace", || {
            holder().is_some()
        })
        .await;
        eventually("starting the controllers", listed_agents).await;
        eventually("readiness", || health.ready.load(Ordering::Relaxed)).await;
        assert!(fake.seen.lock().unwrap().iter().any(|s| {
            s.starts_with("/apis/coordination.k8s.io/v1/namespaces/demo/leases/hitl-operator")
        }),);

        stop_tx.send_replace(true);
        running
            .await
            .unwrap()
            .expect("a requested stop is not an error");
        assert_eq!(holder(), None, "the Lease is released on shutdown");
    }

    #[tokio::test]
    async fn a_stop_during_a_hung_reconcile_exits_promptly_and_releases_the_lease() {
        let fake = Arc::new(Fake {
            agents: vec![serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                "metadata": {"name": "stuck", "namespace": "demo", "uid": "u1",
                             "resourceVersion": "1", "generation": 1},
                "spec": {"type": "Declarative",
                         "declarative": {"systemMessage": "hi", "modelConfig": "model"}},
            })],
            ..Fake::default()
        });
        let client = client_for(fake_apiserver(fake.clone()).await);
        let args = Cli::try_parse_from(["controller", "--namespace", "demo"])
            .unwrap()
            .args;
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let running = tokio::spawn({
            let stop_tx = stop_tx.clone();
            async move {
                lead(
                    client,
                    &args,
                    Arc::default(),
                    Arc::default(),
                    stop_tx,
                    stop_rx,
                )
                .await
            }
        });
        eventually(
            "the Agent's reconcile to hang on writing its status (its ModelConfig is missing)",
            || {
                fake.seen.lock().unwrap().iter().any(|s| {
                    s.starts_with("/apis/kagent.dev/v1alpha2/namespaces/demo/agents/stuck/status")
                })
            },
        )
        .await;

        stop_tx.send_replace(true);
        // SHUTDOWN_GRACE + RELEASE_BOUND is the most a stop may take; 20 s only catches a hang.
        tokio::time::timeout(Duration::from_secs(20), running)
            .await
            .expect("stopping does not wait for the hung reconcile")
            .unwrap()
            .expect("a requested stop is not an error");
        let lease = fake
            .lease
            .lock()
            .unwrap()
            .clone()
            .expect("the Lease was taken");
        assert!(
            lease["spec"]["holderIdentity"].is_null(),
            "the Lease is released on shutdown: {lease}"
        );
    }

    #[tokio::test]
    async fn starts_every_watch_becomes_ready_and_stops_gracefully() {
        let fake = Arc::new(Fake::default());
        let client = client_for(fake_apiserver(fake.clone()).await);
        let args = Cli::try_parse_from(["controller", "--namespace", "demo"])
            .unwrap()
            .args;
        let health = Arc::new(Health::default());
        let (stop_tx, stop_rx) = watch::channel(false);
        let running = tokio::spawn({
            let health = health.clone();
            async move { run_controllers(client, &args, Arc::default(), health, stop_rx).await }
        });
        eventually("readiness", || health.ready.load(Ordering::Relaxed)).await;
        stop_tx.send_replace(true);
        running.await.expect("controllers stop on the stop signal");

        let seen = fake.seen.lock().unwrap().clone();
        let listed = |path: &str| seen.iter().any(|s| s.starts_with(path));
        for path in [
            "/apis/kagent.dev/v1alpha2/namespaces/demo/agents?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/approvalrequests?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/remotemcpservers?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/modelconfigs?",
            "/apis/apps/v1/namespaces/demo/deployments?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator",
            "/api/v1/namespaces/demo/secrets?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/rolebindings?&labelSelector=",
            "/apis/networking.k8s.io/v1/namespaces/demo/networkpolicies?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator",
            "metadata /api/v1/namespaces/demo/secrets?",
            "metadata /api/v1/namespaces/demo/configmaps?",
            "metadata /api/v1/namespaces/demo/services?",
        ] {
            assert!(listed(path), "{path} not requested; saw {seen:#?}");
        }
        // Full Secrets are only ever listed with the managed-by selector.
        assert!(
            seen.iter()
                .filter(|s| s.starts_with("/api/v1/namespaces/demo/secrets?"))
                .all(|s| s.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator")),
            "{seen:#?}"
        );
    }
}

#[cfg(test)]
mod owned_watch_tests {
    use super::*;
    use axum::body::Body;
    use axum::extract::Request;
    use serde_json::json;

    /// A Deployment `agent-1` controlled by Agent `agent-1`, as the apiserver holds it after our
    /// apply (our managedFields entry owns its image), with image `image`.
    fn deployment(image: &str, resource_version: &str) -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "agent-1", "namespace": "demo", "resourceVersion": resource_version,
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

    /// Lists the Deployment, then watches: it is modified (another image), then deleted.
    async fn apiserver() -> SocketAddr {
        let app = Router::new().fallback(|request: Request| async move {
            let uri = request.uri().to_string();
            if !uri.contains("watch=true") {
                return axum::Json(json!({
                    "apiVersion": "v1", "kind": "List",
                    "metadata": {"resourceVersion": "1"}, "items": [deployment("agent:1", "1")],
                }))
                .into_response();
            }
            let events = [
                json!({"type": "MODIFIED", "object": deployment("agent:2", "2")}),
                json!({"type": "DELETED", "object": deployment("agent:2", "3")}),
            ]
            .map(|event| Ok::<_, std::io::Error>(bytes::Bytes::from(format!("{event}\n"))));
            Body::from_stream(futures::stream::iter(events).chain(futures::stream::pending()))
                .into_response()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    #[tokio::test]
    async fn a_listed_modified_or_deleted_rendered_object_requeues_its_agent() {
        logging::install_tls_provider();
        let config = kube::Config::new(format!("http://{}", apiserver().await).parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let caches = CacheSync::default();
        let (store, controllers) = owned::<Deployment>(&client, Some("demo"), &caches);
        let mut controllers = std::pin::pin!(controllers);
        let agent = ObjectRef::<CachedAgent>::new("agent-1").within("demo");
        let bound = Duration::from_secs(10);

        assert_eq!(
            tokio::time::timeout(bound, controllers.next())
                .await
                .unwrap(),
            Some(agent.clone()),
            "listed"
        );
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
        let listed: Deployment = serde_json::from_value(deployment("agent:1", "1")).unwrap();
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
        let (service, mut handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let mut stream = start(Client::new(service, "default"));
        let polling = tokio::spawn(async move { while stream.next().await.is_some() {} });
        let (request, _answer) = handle.next_request().await.expect("a list request");
        polling.abort();
        request.uri().to_string()
    }

    #[tokio::test]
    async fn the_controllers_watches_list_a_page_at_a_time() {
        let rendered = first_list_request(|client| {
            owned::<Deployment>(&client, Some("team-a"), &CacheSync::default())
                .1
                .map(drop)
                .boxed()
        })
        .await;
        assert_eq!(
            rendered,
            "/apis/apps/v1/namespaces/team-a/deployments?\
             &labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator&limit=100"
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
