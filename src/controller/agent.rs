//! Agent reconciler: fetch the referenced objects, render (validate + build, pure), apply each
//! rendered object that differs from the cached one, and write the status when it changed.
//! A reconcile with nothing to change makes no API writes.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::accepted;
use super::compact::{CachedAgent, CachedRequest, status_digest};
use super::freeze::{announce_freeze, frozen_condition};
use super::owned::{
    apply_and_prune, apply_changed, ensure_binding_key, owned_named, ready_condition,
};
use super::rendered::Readiness;
use super::watches::AgentWatches;
use super::{CACHE_SYNC_BOUND, Context, RefKey, bounded, drain, measured, retry_after_error};
use crate::Result;
use crate::api::agent::{AgentStatus, ToolServerKind};
use crate::api::approval_request::PolicyKind;
use crate::api::{Agent, MCPServer, ModelConfig, RemoteMCPServer};
use crate::apiserver::conditions::{ConditionChange, find};
use crate::apiserver::{apply_status, new_condition};
use crate::render::isolation::Isolation;
use crate::render::objects::GateOwner;
use crate::render::refs::{ObjectKey, RefKind, RefStore, agent_references, missing_refs};
use crate::render::{RenderedAgent, render_agent};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "agent";
/// Condition: whether the Deployments (the agent's, and the gate's in Gateway placement) have
/// all replicas available.
pub const READY: &str = "Ready";
/// Condition: whether the agent can reach its gated tool servers only through the gate.
/// Present only when the gate runs and some tool requires approval.
pub const GATE_ISOLATED: &str = "GateIsolated";
/// Condition: whether every tool in toolNames is offered by its RemoteMCPServer.
pub const TOOLS_AVAILABLE: &str = "ToolsAvailable";

/// The Agent controller on `watches`, until `shutdown` resolves.
pub fn controller(
    watches: AgentWatches,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> {
    let AgentWatches {
        agents,
        rendered_or_namespace,
        remote_mcp_servers,
        model_configs,
        services,
        secrets,
        config_maps,
        tool_agents,
        requests,
        resync,
    } = watches;
    let controller = Controller::for_shared_stream(agents, ctx.stores.agents.clone())
        .with_config(bounded())
        .reconcile_on(rendered_or_namespace)
        .watches_shared_stream(remote_mcp_servers, by_shared_ref(&ctx, "RemoteMCPServer"))
        .watches_shared_stream(model_configs, by_shared_ref(&ctx, "ModelConfig"))
        .watches_stream(services, by_ref(&ctx, "Service"))
        .watches_stream(secrets, by_ref(&ctx, "Secret"))
        .watches_stream(config_maps, by_ref(&ctx, "ConfigMap"))
        .watches_shared_stream(tool_agents, by_shared_ref(&ctx, "Agent"))
        .watches_shared_stream(requests, |request: Arc<CachedRequest>| {
            (request.policy_kind() == PolicyKind::Agent).then(|| {
                ObjectRef::new(request.agent_name())
                    .within(&request.namespace().unwrap_or_default())
            })
        })
        .reconcile_all_on(resync)
        .graceful_shutdown_on(shutdown);
    drain(controller.run(
        reconcile,
        |object, error, ctx| retry_after_error(CONTROLLER, object.as_ref(), error, &ctx),
        ctx,
    ))
}

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

/// Reconciles one Agent.
pub async fn reconcile(agent: Arc<CachedAgent>, ctx: Arc<Context>) -> Result<Action> {
    measured(&ctx, CONTROLLER, agent.as_ref(), async {
        reconcile_inner(&agent.object()?, agent.status_digest(), &ctx).await
    })
    .await
}

/// `agent` as cached, without its status; `status` the digest of its status, if it has one.
async fn reconcile_inner(agent: &Agent, status: Option<u64>, ctx: &Context) -> Result<Action> {
    // Being deleted: the garbage collector removes the owned objects; re-applying them would
    // hold up a foreground deletion.
    if agent.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    ctx.caches.within(CACHE_SYNC_BOUND).await?;
    let namespace = agent.namespace().unwrap_or_default();
    let refs = fetch_refs(agent, ctx).await?;
    let now = ctx.clock.now();
    let generation = agent.meta().generation;
    let name = agent.name_any();
    let pending = ctx.stores.requests_by_agent.pending(&namespace, &name);
    let mut update = StatusUpdate::new(generation, i32::try_from(pending).unwrap_or(i32::MAX));

    let owner = GateOwner::agent(agent);
    let mut failure = None;
    // The Deployments Ready waits for: the rendered ones, else (nothing renders) the agent's.
    let mut deployments = vec![agent.name_any()];
    // Whether they were applied now: one the cache does not hold yet then exists, its rollout
    // not observed yet (the cache catches up with the watch's next event).
    let mut applied_now = false;
    let accepted = match render_agent(agent, &refs, &ctx.render) {
        Ok(rendered) => {
            deployments = rendered
                .objects
                .deployments()
                .iter()
                .map(|d| d.name_any())
                .collect();
            let applied = apply_objects(ctx, agent, &rendered).await.map(|()| {
                applied_now = true;
                update.config_hash = Some(rendered.config_hash.clone());
                update.session_store = Some(rendered.session_api.url().to_string());
                update.set(tools_available(agent, &refs, generation, now));
                match &rendered.isolation {
                    Some(isolation) => update.set(gate_isolated(isolation, generation, now)),
                    None => update.remove(GATE_ISOLATED),
                }
                if rendered.warnings.is_empty() {
                    "rendered and applied".to_string()
                } else {
                    format!(
                        "rendered and applied; warnings: {}",
                        rendered.warnings.join("; ")
                    )
                }
            });
            let (condition, error) = accepted::after_apply(applied, generation, now);
            failure = error;
            condition
        }
        Err(error) => accepted::refused(error, generation, now)?,
    };
    update.set(accepted.clone());
    let deployments: Vec<(String, Option<Readiness>)> = deployments
        .into_iter()
        .map(|name| {
            let cached = owned_named(&ctx.stores.deployments, &owner, &name);
            let readiness = cached
                .map(|cached| *cached.facts())
                .or_else(|| applied_now.then(Readiness::default));
            (name, readiness)
        })
        .collect();
    let deployments: Vec<(&str, Option<&Readiness>)> = deployments
        .iter()
        .map(|(name, cached)| (name.as_str(), cached.as_ref()))
        .collect();
    update.set(ready_condition(&deployments, generation, now));

    let freeze = ctx.stores.freeze_of(agent);
    update
        .conditions
        .push(frozen_condition(freeze.as_ref(), generation, now));

    // Unchanged (the cache kept only the status's digest, and it matches): nothing to write
    // or announce.
    if let Some(current) = current_status(ctx, agent, status, &update).await? {
        let status = update.applied_to(&current);
        if status != current {
            let api: Api<Agent> = Api::namespaced(ctx.client.clone(), &namespace);
            let written = apply_status(&api, agent, &status).await?;
            ctx.written_statuses.record(&written);
        }
        accepted::announce(ctx, agent, &current.conditions, &accepted).await;
        announce_freeze(ctx, agent, &current.conditions, freeze.as_ref()).await;
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(Action::await_change()),
    }
}

/// What a reconcile sets in the Agent's status, kept apart from the status it is applied to:
/// the cache may hold only that status's digest.
struct StatusUpdate {
    generation: Option<i64>,
    pending_approvals: i32,
    /// The rendered configuration's hash; `None` keeps the current one (nothing was applied).
    config_hash: Option<String>,
    /// The applied runtime's session API (its `KAGENT_URL`); `None` keeps the current one
    /// (nothing was applied).
    session_store: Option<String>,
    /// Conditions set or removed, in order.
    conditions: Vec<ConditionChange>,
}

impl StatusUpdate {
    fn new(generation: Option<i64>, pending_approvals: i32) -> Self {
        Self {
            generation,
            pending_approvals,
            config_hash: None,
            session_store: None,
            conditions: Vec::new(),
        }
    }

    fn set(&mut self, condition: Condition) {
        self.conditions.push(ConditionChange::Set(condition));
    }

    fn remove(&mut self, type_: &'static str) {
        self.conditions.push(ConditionChange::Remove(type_));
    }

    /// `current` updated: each condition keeps its transition time unless its status changed.
    fn applied_to(&self, current: &AgentStatus) -> AgentStatus {
        let mut conditions = current.conditions.clone();
        for change in &self.conditions {
            change.apply(&mut conditions);
        }
        AgentStatus {
            observed_generation: self.generation,
            conditions,
            config_hash: self
                .config_hash
                .clone()
                .or_else(|| current.config_hash.clone()),
            pending_approvals: Some(self.pending_approvals),
            session_store: self
                .session_store
                .clone()
                .or_else(|| current.session_store.clone()),
        }
    }
}

/// The status `update` applies to, of which the cache keeps only its `digest`: the one this
/// controller wrote last if the cache does not hold it yet; `None` when `update` would leave
/// it as it is; else the status read from the API server (a read only when something changed,
/// which a write follows); an empty one when the Agent has none yet.
async fn current_status(
    ctx: &Context,
    agent: &Agent,
    digest: Option<u64>,
    update: &StatusUpdate,
) -> Result<Option<AgentStatus>> {
    let written = ctx.written_statuses.newer_than(
        &agent.namespace().unwrap_or_default(),
        &agent.name_any(),
        agent.meta().resource_version.as_deref(),
    );
    if written.is_some() {
        return Ok(written);
    }
    let Some(digest) = digest else {
        return Ok(Some(AgentStatus::default()));
    };
    if status_digest(&update.applied_to(&AgentStatus::default())) == digest {
        return Ok(None);
    }
    let api: Api<Agent> =
        Api::namespaced(ctx.client.clone(), &agent.namespace().unwrap_or_default());
    Ok(Some(
        // The Agent itself, not its status subresource: the chart's role may get agents, and
        // only patch agents/status.
        api.get(&agent.name_any()).await?.status.unwrap_or_default(),
    ))
}

/// Fetches every object the Agent references (iterating: a RemoteMCPServer's own references
/// are known only once it is fetched). Missing objects are left out; the renderer names them.
/// Records the references so that changes to them requeue this Agent.
async fn fetch_refs(agent: &Agent, ctx: &Context) -> Result<RefStore> {
    let mut store = RefStore::default();
    let mut fetched = BTreeSet::new();
    loop {
        let missing: Vec<ObjectKey> = missing_refs(agent, &store, ctx.render.proxy_url.is_some())
            .into_iter()
            .filter(|key| !fetched.contains(key))
            .collect();
        if missing.is_empty() {
            break;
        }
        for key in missing {
            fetch_into(ctx, &key, &mut store).await?;
            fetched.insert(key);
        }
    }
    let keys: Vec<RefKey> = agent_references(agent, &store, ctx.render.proxy_url.is_some())
        .into_iter()
        .map(|key| (key.kind.as_str(), key.namespace, key.name))
        .collect();
    let namespace = agent.namespace().unwrap_or_default();
    ctx.refs
        .set(&ObjectRef::new(&agent.name_any()).within(&namespace), keys);
    Ok(store)
}

/// Fetches the referenced object `key` into `store`, from the caches where the watches hold
/// it (ModelConfigs, RemoteMCPServers), else from the apiserver; a missing one is left out.
pub(super) async fn fetch_into(ctx: &Context, key: &ObjectKey, store: &mut RefStore) -> Result<()> {
    let client = ctx.client.clone();
    let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
    match key.kind {
        // The two every Agent names, read from the caches where the watches cover them.
        RefKind::ModelConfig if ctx.stores.cover(namespace) => {
            let cached = ObjectRef::new(name).within(namespace);
            if let Some(o) = ctx.stores.model_configs.get(&cached) {
                store.insert_model_config(o.as_ref().clone());
            }
        }
        RefKind::RemoteMCPServer if ctx.stores.cover(namespace) => {
            let cached = ObjectRef::new(name).within(namespace);
            if let Some(o) = ctx.stores.remote_mcp_servers.get(&cached) {
                store.insert_remote_mcp_server(o.as_ref().clone());
            }
        }
        RefKind::ModelConfig => {
            if let Some(o) = Api::<ModelConfig>::namespaced(client, namespace)
                .get_opt(name)
                .await?
            {
                store.insert_model_config(o);
            }
        }
        RefKind::RemoteMCPServer => {
            if let Some(o) = Api::<RemoteMCPServer>::namespaced(client, namespace)
                .get_opt(name)
                .await?
            {
                store.insert_remote_mcp_server(o);
            }
        }
        RefKind::Service => {
            if let Some(o) = Api::<Service>::namespaced(client, namespace)
                .get_opt(name)
                .await?
            {
                store.insert_service(o);
            }
        }
        RefKind::Secret => {
            if let Some(o) = Api::<Secret>::namespaced(client, namespace)
                .get_opt(name)
                .await?
            {
                store.insert_secret(o);
            }
        }
        RefKind::ConfigMap => {
            if let Some(o) = Api::<ConfigMap>::namespaced(client, namespace)
                .get_opt(name)
                .await?
            {
                store.insert_config_map(o);
            }
        }
        RefKind::Agent => {
            if let Some(o) = Api::<Agent>::namespaced(client, namespace)
                .get_opt(name)
                .await?
            {
                store.insert_agent(o);
            }
        }
        RefKind::MCPServer => {
            if let Some(o) = Api::<MCPServer>::namespaced(client, namespace)
                .get_opt(name)
                .await?
            {
                store.insert_mcp_server(o);
            }
        }
        RefKind::Namespace => {
            // Namespaces only decide whether a server URL is in the cluster (for the proxy)
            // and allowedNamespaces selectors; without the RBAC to read them (a namespaced
            // install), they are unknown, which proxies less and allows nothing by selector.
            if let Ok(Some(o)) = Api::<Namespace>::all(client).get_opt(name).await {
                store.insert_namespace(o);
            }
        }
    }
    Ok(())
}

/// Applies each rendered object that the cache does not already hold, in dependency order
/// (NetworkPolicies before the pods they confine), and deletes the objects of each kind the
/// Agent controls that are no longer rendered: a ServiceAccount, Role or RoleBinding after a
/// switch to Runtime mode or to an own ServiceAccount, the gate's objects after a switch
/// back to Sidecar placement. The Secret is never pruned. With a gate, its binding key
/// exists before the Deployment that mounts it.
async fn apply_objects(ctx: &Context, agent: &Agent, rendered: &RenderedAgent) -> Result<()> {
    let stores = &ctx.stores;
    let objects = &rendered.objects;
    let owner = GateOwner::agent(agent);
    apply_changed(ctx, &owner, &objects.secret, &stores.secrets).await?;
    if rendered.gate.is_some() {
        ensure_binding_key(ctx, &owner).await?;
    }
    apply_and_prune(
        ctx,
        &owner,
        &objects.service_accounts(),
        &stores.service_accounts,
    )
    .await?;
    let role: Vec<_> = objects.role.iter().collect();
    apply_and_prune(ctx, &owner, &role, &stores.roles).await?;
    let role_binding: Vec<_> = objects.role_binding.iter().collect();
    apply_and_prune(ctx, &owner, &role_binding, &stores.role_bindings).await?;
    apply_and_prune(
        ctx,
        &owner,
        &objects.network_policies(),
        &stores.network_policies,
    )
    .await?;
    apply_and_prune(ctx, &owner, &objects.deployments(), &stores.deployments).await?;
    apply_and_prune(ctx, &owner, &objects.services(), &stores.services).await?;
    Ok(())
}

/// `GateIsolated` from the renderer's verdict.
fn gate_isolated(isolation: &Isolation, generation: Option<i64>, now: Timestamp) -> Condition {
    new_condition(
        GATE_ISOLATED,
        isolation.isolated,
        isolation.reason,
        isolation.message.clone(),
        generation,
        now,
    )
}

/// `ToolsAvailable`: False naming the tools a RemoteMCPServer does not offer (per its last
/// listing); True when every listed server offers every tool in toolNames.
fn tools_available(
    agent: &Agent,
    refs: &RefStore,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let namespace = agent.namespace().unwrap_or_default();
    let mut missing = Vec::new();
    let mut unlisted = Vec::new();
    let servers = agent
        .spec
        .declarative
        .iter()
        .flat_map(|d| &d.tools)
        .filter_map(|t| t.mcp_server.as_ref())
        .filter(|s| s.kind.unwrap_or_default() == ToolServerKind::RemoteMCPServer);
    for server in servers {
        let server_namespace = server.namespace.as_deref().unwrap_or(&namespace);
        let id = format!("{server_namespace}/{}", server.name);
        let listing = refs
            .remote_mcp_server(server_namespace, &server.name)
            .and_then(|s| s.status.as_ref())
            .filter(|s| find(&s.conditions, "Accepted").is_some_and(|c| c.status == "True"));
        let Some(listing) = listing else {
            unlisted.push(id);
            continue;
        };
        let absent: Vec<&str> = server
            .tool_names
            .iter()
            .filter(|name| !listing.discovered_tools.iter().any(|t| &t.name == *name))
            .map(String::as_str)
            .collect();
        if !absent.is_empty() {
            missing.push(format!(
                "RemoteMCPServer {id} does not offer {}",
                absent.join(", ")
            ));
        }
    }
    if !missing.is_empty() {
        return new_condition(
            TOOLS_AVAILABLE,
            false,
            "ToolsMissing",
            missing.join("; "),
            generation,
            now,
        );
    }
    let message = if unlisted.is_empty() {
        "every tool in toolNames is offered".to_string()
    } else {
        format!("tools of {} not listed yet", unlisted.join(", "))
    };
    new_condition(
        TOOLS_AVAILABLE,
        true,
        "ToolsOffered",
        message,
        generation,
        now,
    )
}
