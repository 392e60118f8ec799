//! ToolGate reconciler: fetch the server the ToolGate names (from the caches, Secrets of its
//! headers by GET), render (validate + build, pure), apply each rendered object that differs
//! from the cached one, and write the status (with the `Frozen` condition while the ToolGate or
//! its Namespace is frozen, [`super::freeze`]) when it changed. A reconcile with nothing to
//! change makes no API writes. The ClusterRoleBinding of the gates' ServiceAccounts is kept
//! apart ([`super::token_review`]), since it follows the set of ToolGates, not one; `Ready`
//! stays False (`TokenReviewNotBound`) until this ToolGate's gate is in it.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::accepted;
use super::agent::{READY, fetch_into};
use super::freeze::{announce_freeze, frozen_condition};
use super::owned::{apply_changed, ensure_binding_key, owned_named, ready_condition};
use super::token_review::Bound;
use super::watches::ToolGateWatches;
use super::{CACHE_SYNC_BOUND, Context, bounded, drain, measured, retry_after_error};
use crate::Result;
use crate::api::ToolGate;
use crate::api::tool_gate::ToolGateStatus;
use crate::apiserver::conditions::set_condition;
use crate::apiserver::{apply_status, new_condition};
use crate::render::objects::GateOwner;
use crate::render::refs::{ObjectKey, RefStore};
use crate::render::tool_gate::{
    RenderedToolGate, missing_tool_gate_refs, render_tool_gate, tool_gate_references,
};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "toolgate";

/// The ToolGate controller on `watches`, until `shutdown` resolves.
pub fn controller(
    watches: ToolGateWatches,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> {
    let ToolGateWatches {
        tool_gates,
        rendered_or_namespace,
        remote_mcp_servers,
        secrets,
        config_maps,
        resync,
    } = watches;
    let controller = Controller::for_shared_stream(tool_gates, ctx.stores.tool_gates.clone())
        .with_config(bounded())
        .reconcile_on(rendered_or_namespace)
        .watches_shared_stream(remote_mcp_servers, {
            let ctx = ctx.clone();
            move |server: Arc<crate::api::RemoteMCPServer>| {
                naming(&ctx, "RemoteMCPServer", server.as_ref())
            }
        })
        .watches_stream(secrets, {
            let ctx = ctx.clone();
            move |secret| naming(&ctx, "Secret", &secret)
        })
        .watches_stream(config_maps, {
            let ctx = ctx.clone();
            move |config_map| naming(&ctx, "ConfigMap", &config_map)
        })
        .reconcile_all_on(resync)
        .graceful_shutdown_on(shutdown);
    drain(controller.run(
        reconcile,
        |object, error, ctx| retry_after_error(CONTROLLER, object.as_ref(), error, &ctx),
        ctx,
    ))
}

/// The ToolGates that name `object`, of kind `kind`.
fn naming(ctx: &Context, kind: &'static str, object: &impl Resource) -> Vec<ObjectRef<ToolGate>> {
    ctx.tool_gate_refs.agents_for(
        kind,
        &object.namespace().unwrap_or_default(),
        &object.name_any(),
        &ctx.stores.tool_gates,
    )
}

/// Reconciles one ToolGate.
pub async fn reconcile(tool_gate: Arc<ToolGate>, ctx: Arc<Context>) -> Result<Action> {
    measured(&ctx, CONTROLLER, tool_gate.as_ref(), async {
        reconcile_inner(&tool_gate, &ctx).await
    })
    .await
}

async fn reconcile_inner(tool_gate: &ToolGate, ctx: &Context) -> Result<Action> {
    // Being deleted: the garbage collector removes the owned objects.
    if tool_gate.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    ctx.caches.within(CACHE_SYNC_BOUND).await?;
    let refs = fetch_refs(tool_gate, ctx).await?;
    let now = ctx.clock.now();
    let generation = tool_gate.meta().generation;
    let owner = GateOwner::tool_gate(tool_gate);
    let current = tool_gate.status.clone().unwrap_or_default();
    let mut status = ToolGateStatus {
        observed_generation: generation,
        ..current.clone()
    };

    let mut failure = None;
    let accepted = match render_tool_gate(tool_gate, &refs, &ctx.render) {
        Ok(rendered) => {
            let applied = apply_objects(ctx, &owner, &rendered).await.map(|()| {
                status.url = Some(rendered.url);
                status.route = Some(rendered.route);
                status.audiences = rendered.audiences;
                "rendered and applied".to_string()
            });
            let (condition, error) = accepted::after_apply(applied, generation, now);
            failure = error;
            condition
        }
        Err(error) => accepted::refused(error, generation, now)?,
    };
    set_condition(&mut status.conditions, accepted.clone());
    let name = owner.gate_name();
    let cached = owned_named(&ctx.stores.deployments, &owner, &name);
    let readiness = cached.map(|cached| *cached.facts());
    let unbound = ctx
        .token_review
        .as_ref()
        .filter(|bound| !bound.holds(&owner.namespace, &name));
    // Accepted but not yet bound: the keeper is asked to look, and the ToolGate is looked at
    // again until it is.
    let awaiting = unbound.filter(|_| accepted.status == "True");
    if let Some(bound) = awaiting {
        bound.wake();
    }
    let ready = match unbound {
        Some(bound) => not_bound(&owner, bound, generation, now),
        None => ready_condition(&[(name.as_str(), readiness.as_ref())], generation, now),
    };
    set_condition(&mut status.conditions, ready);
    let freeze = ctx.stores.freeze_of(tool_gate);
    frozen_condition(freeze.as_ref(), generation, now).apply(&mut status.conditions);

    if status != current {
        let api: Api<ToolGate> = Api::namespaced(
            ctx.client.clone(),
            &tool_gate.namespace().unwrap_or_default(),
        );
        apply_status(&api, tool_gate, &status).await?;
        accepted::announce(ctx, tool_gate, &current.conditions, &accepted).await;
        announce_freeze(ctx, tool_gate, &current.conditions, freeze.as_ref()).await;
    }
    match failure {
        Some(error) => Err(error),
        None if awaiting.is_some() => Ok(Action::requeue(UNBOUND_RECHECK)),
        None => Ok(Action::await_change()),
    }
}

/// How soon a ToolGate whose gate is not yet in the TokenReview binding is looked at again.
const UNBOUND_RECHECK: Duration = Duration::from_secs(5);

/// `Ready` False while the gate of `owner` is not in the TokenReview binding: every caller
/// would be refused (503), as the gate may not verify tokens.
fn not_bound(
    owner: &GateOwner,
    bound: &Bound,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    new_condition(
        READY,
        false,
        "TokenReviewNotBound",
        format!(
            "ServiceAccount {}/{} is not in ClusterRoleBinding {} yet: the gate cannot verify its callers (it is added once the ToolGate is Accepted and owns that ServiceAccount)",
            owner.namespace,
            owner.gate_name(),
            bound.binding
        ),
        generation,
        now,
    )
}

/// Fetches every object the ToolGate references (its RemoteMCPServer from the cache, then the
/// Secrets and ConfigMaps of its headers). Missing objects are left out; the renderer names
/// them. Records the references so that changes to them requeue this ToolGate.
async fn fetch_refs(tool_gate: &ToolGate, ctx: &Context) -> Result<RefStore> {
    let proxied = ctx.render.proxy_url.is_some();
    let mut store = RefStore::default();
    let mut fetched = BTreeSet::new();
    loop {
        let missing: Vec<ObjectKey> = missing_tool_gate_refs(tool_gate, &store, proxied)
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
    let keys = tool_gate_references(tool_gate, &store, proxied)
        .into_iter()
        .map(|key| (key.kind.as_str(), key.namespace, key.name))
        .collect();
    ctx.tool_gate_refs
        .set(&ObjectRef::from_obj(tool_gate), keys);
    Ok(store)
}

/// Applies each rendered object the cache does not already hold, the binding key before the
/// Deployment that mounts it. A ToolGate renders the same kinds every time: nothing to prune.
async fn apply_objects(
    ctx: &Context,
    owner: &GateOwner,
    rendered: &RenderedToolGate,
) -> Result<()> {
    let stores = &ctx.stores;
    let objects = &rendered.objects;
    apply_changed(ctx, owner, &objects.secret, &stores.secrets).await?;
    ensure_binding_key(ctx, owner).await?;
    apply_changed(
        ctx,
        owner,
        &objects.service_account,
        &stores.service_accounts,
    )
    .await?;
    apply_changed(ctx, owner, &objects.role, &stores.roles).await?;
    apply_changed(ctx, owner, &objects.role_binding, &stores.role_bindings).await?;
    apply_changed(ctx, owner, &objects.deployment, &stores.deployments).await?;
    apply_changed(ctx, owner, &objects.service, &stores.services).await?;
    Ok(())
}
