//! Applying the objects an Agent or a ToolGate owns ([`GateOwner`]): each rendered object is
//! applied only when the cached digest of what was applied differs from it, the owner's
//! objects that are no longer rendered are deleted, the binding key is created once, and
//! another owner's object of the same name is left alone and reported.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};

use super::Context;
use super::agent::READY;
use super::rendered::{HoldsBindingKey, Readiness, RenderedKind, Summaries, Summary};
use crate::apiserver::applied::{desired_digest, observed_digest};
use crate::apiserver::field_manager;
use crate::apiserver::ownership::foreign_owner;
use crate::apiserver::{apply, apply_unforced, is_applied, new_condition};
use crate::contract::binding_key::BindingKey;
use crate::render::objects::{GateOwner, binding_key_secret};
use crate::{Error, Result};

/// Creates the binding-key Secret of `owner`'s gate with a random key unless it exists, made
/// by this controller for `owner`, with a usable one. A Secret of that name that `owner` does
/// not control is another owner's and is never used, whatever its labels and key (someone who
/// planted it would know the key). The Secret is immutable: a key of ours that is too short is
/// deleted and created afresh. Never updated otherwise, so a key changes only when its Secret
/// is deleted.
pub async fn ensure_binding_key(ctx: &Context, owner: &GateOwner) -> Result<()> {
    let namespace = owner.namespace.as_str();
    let name = owner.binding_key_secret_name();
    let cached = ctx.stores.secrets.get(namespace, &name);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let usable = match cached {
        Some(secret) if secret.controlled_by(owner) => {
            Some(*secret.facts() == HoldsBindingKey(true))
        }
        // Not ours as cached: read it; the cache may not know yet that we made it.
        Some(_) => match api.get_opt(&name).await? {
            Some(secret) => {
                refuse_foreign(&secret, owner)?;
                Some(secret.facts() == HoldsBindingKey(true))
            }
            None => None,
        },
        None => None,
    };
    match usable {
        Some(true) => return Ok(()),
        Some(false) => {
            tracing::warn!(secret = %name, namespace = %namespace, "binding key unusable; replacing it");
            api.delete(&name, &DeleteParams::default()).await?;
        }
        None => {}
    }
    let key = BindingKey::generate()?;
    let post = PostParams {
        field_manager: Some(field_manager::CONTROLLER.into()),
        ..PostParams::default()
    };
    match api.create(&post, &binding_key_secret(owner, &key)).await {
        // AlreadyExists: ours, created since the cache was filled (the watch event brings it),
        // or someone else's, whose key the gate must never use.
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            refuse_foreign(&api.get(&name).await?, owner)
        }
        created => created.map(|_| ()).map_err(Error::from),
    }
}

/// Applies `desired` unless it is applied: the digest of the fields we applied, as cached,
/// matches it (or matched it when last read back). An object no watch knows of (a new Agent's)
/// is applied unread, without taking over fields: should one of that name exist after all
/// (created since the watches last heard), a field of it set otherwise is a conflict, and the
/// object is read as below. Otherwise the object is read: one the cache does not hold as ours
/// (an object without our managed-by label is held with no owner), or holds as another
/// owner's, that exists and is another controller's or owner's (kagent's, or an Agent's of the
/// same name as a ToolGate's), or no one's (no controller ownerReference, whatever its labels),
/// is left alone, and the error says whose it is; one that holds
/// `desired` already (the apiserver defaulted a field inside one we set) is not written.
pub async fn apply_changed<K: RenderedKind>(
    ctx: &Context,
    owner: &GateOwner,
    desired: &K,
    store: &Summaries<K>,
) -> Result<()> {
    let namespace = desired.namespace().unwrap_or_default();
    let name = desired.name_any();
    let cached = store.get(&namespace, &name);
    let wanted = desired_digest(desired);
    if let Some(cached) = &cached
        && cached.controlled_by(owner)
        && ctx.confirmed.holds(wanted, cached.applied())
    {
        return Ok(());
    }
    if ctx.stores.cover(&namespace) && !store.knows_of(&namespace, &name) {
        match apply_unforced(&ctx.client, desired).await {
            Ok(applied) => {
                ctx.confirmed
                    .record(wanted, observed_digest(&applied, applied.meta()));
                return Ok(());
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => {
                tracing::debug!(
                    kind = %K::kind(&()),
                    name = %name,
                    "an object no watch knew of exists; reading it"
                );
            }
            Err(error) => return Err(error.into()),
        }
    }
    if cached.is_some() {
        tracing::debug!(
            kind = %K::kind(&()),
            name = %desired.name_any(),
            "applied fields differ from the rendered ones; reading the object"
        );
    }
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(existing) = api.get_opt(&name).await? {
        if !cached.is_some_and(|cached| cached.controlled_by(owner)) {
            refuse_foreign(&existing, owner)?;
        }
        if is_applied(desired, Some(&existing)) {
            ctx.confirmed
                .record(wanted, observed_digest(&existing, existing.meta()));
            return Ok(());
        }
    }
    let applied = apply(&ctx.client, desired).await?;
    ctx.confirmed
        .record(wanted, observed_digest(&applied, applied.meta()));
    Ok(())
}

/// An error if `existing` belongs to someone else than this operator and `owner`.
fn refuse_foreign<K: Resource<DynamicType = ()>>(existing: &K, owner: &GateOwner) -> Result<()> {
    match foreign_owner(existing.meta(), &owner.uid) {
        Some(other) => Err(Error::OwnedElsewhere {
            object: format!(
                "{} {}/{}",
                K::kind(&()),
                existing.namespace().unwrap_or_default(),
                existing.name_any()
            ),
            owner: other,
        }),
        None => Ok(()),
    }
}

/// Applies each of `desired` the cache does not already hold, then deletes the cached objects
/// of the kind that `owner` controls and `desired` does not name (in name order).
pub async fn apply_and_prune<K: RenderedKind>(
    ctx: &Context,
    owner: &GateOwner,
    desired: &[&K],
    store: &Summaries<K>,
) -> Result<()> {
    for object in desired {
        apply_changed(ctx, owner, *object, store).await?;
    }
    let mut stale = store.controlled_by(owner);
    stale.retain(|name| !desired.iter().any(|d| d.name_any() == *name));
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    for name in stale {
        match api.delete(&name, &DeleteParams::default()).await {
            // Already gone (the cache lags a delete of an earlier reconcile).
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            result => {
                result?;
            }
        }
    }
    Ok(())
}

/// The cached object `name` (in the owner's namespace), if `owner` controls it.
pub fn owned_named<K: RenderedKind>(
    store: &Summaries<K>,
    owner: &GateOwner,
    name: &str,
) -> Option<Summary<K::Facts>> {
    store
        .get(&owner.namespace, name)
        .filter(|object| object.controlled_by(owner))
}

/// `Ready` from the readiness of each `(name, cached)` Deployment: True when all of them have
/// every replica updated and available; otherwise False, naming the ones that are not.
pub fn ready_condition(
    deployments: &[(&str, Option<&Readiness>)],
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let mut ready = Vec::new();
    let mut not_ready = Vec::new();
    for (name, deployment) in deployments {
        match deployment_readiness(name, *deployment) {
            Ok(message) => ready.push(message),
            Err(message) => not_ready.push(message),
        }
    }
    if not_ready.is_empty() {
        new_condition(
            READY,
            true,
            "DeploymentReady",
            ready.join("; "),
            generation,
            now,
        )
    } else {
        new_condition(
            READY,
            false,
            "DeploymentNotReady",
            not_ready.join("; "),
            generation,
            now,
        )
    }
}

/// Whether one Deployment is ready, and a sentence saying so or why not.
fn deployment_readiness(
    name: &str,
    readiness: Option<&Readiness>,
) -> std::result::Result<String, String> {
    let Some(readiness) = readiness else {
        return Err(format!("Deployment {name} does not exist yet"));
    };
    let Readiness {
        wanted,
        updated,
        available,
        ..
    } = *readiness;
    if !readiness.observed {
        return Err(format!("Deployment {name} rollout not observed yet"));
    }
    let message =
        format!("Deployment {name}: {available}/{wanted} replicas available, {updated} updated");
    if updated >= wanted && available >= wanted {
        Ok(message)
    } else {
        Err(message)
    }
}
