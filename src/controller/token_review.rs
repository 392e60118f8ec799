//! The one ClusterRoleBinding that lets the gates of ToolGates verify their callers: a shared
//! gate checks each caller's bearer token with a TokenReview, which is cluster-scoped, so its
//! ServiceAccount needs `create` on `tokenreviews` through a ClusterRole. The controller keeps
//! one binding (`--token-review-binding`) of the chart's ClusterRole (`--token-review-role`)
//! whose subjects are exactly the `<name>-gate` ServiceAccounts of the ToolGates it watches,
//! sorted, applied (server-side, as the controller's field manager) only when that set
//! changes. It is cluster-scoped, so no ToolGate owns it; with no ToolGate its subjects are
//! empty.

use std::collections::BTreeSet;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio::sync::Notify;

use super::{CACHE_SYNC_BOUND, Context, RESYNC};
use crate::Result;
use crate::api::ToolGate;
use crate::apiserver::apply_params;
use crate::apiserver::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::render::objects::GateOwner;

/// The ClusterRoleBinding to keep and the ClusterRole it binds (the controller's flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenReviewBinding {
    /// Name of the ClusterRoleBinding.
    pub name: String,
    /// Name of the ClusterRole (create on tokenreviews).
    pub role: String,
}

/// How long the keeper waits after a ToolGate changed before it looks: the changes of a burst
/// (the first list, a namespace deleted) make one write, and the cache has applied them.
const SETTLE: Duration = Duration::from_secs(1);

/// Pause after a failed apply before trying again.
const RETRY: Duration = Duration::from_secs(15);

/// The gate ServiceAccount of every ToolGate in `tool_gates`, sorted by namespace and name.
pub fn subjects(tool_gates: &Store<ToolGate>) -> Vec<Subject> {
    let accounts: BTreeSet<(String, String)> = tool_gates
        .state()
        .iter()
        .map(|tool_gate| {
            let owner = GateOwner::tool_gate(tool_gate);
            (owner.namespace.clone(), owner.gate_name())
        })
        .collect();
    accounts
        .into_iter()
        .map(|(namespace, name)| Subject {
            kind: "ServiceAccount".to_owned(),
            name,
            namespace: Some(namespace),
            api_group: None,
        })
        .collect()
}

impl TokenReviewBinding {
    /// The ClusterRoleBinding with `subjects`.
    pub fn object(&self, subjects: Vec<Subject>) -> ClusterRoleBinding {
        ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned())].into()),
                ..ObjectMeta::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_owned(),
                kind: "ClusterRole".to_owned(),
                name: self.role.clone(),
            },
            subjects: Some(subjects),
        }
    }
}

/// Keeps the binding in step with the ToolGates: once the caches have listed, then after each
/// change of a ToolGate (`changed`, created, changed or deleted) and every [`RESYNC`], until
/// `shutdown` resolves.
pub fn keep(
    binding: TokenReviewBinding,
    ctx: Arc<Context>,
    changed: Arc<Notify>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> {
    let keeping = async move {
        let mut applied = None;
        loop {
            let wait = match ctx.caches.within(CACHE_SYNC_BOUND).await {
                Ok(()) => {
                    match sync(&ctx.client, &binding, &ctx.stores.tool_gates, applied).await {
                        Ok(digest) => {
                            applied = Some(digest);
                            RESYNC
                        }
                        Err(error) => {
                            tracing::warn!(binding = %binding.name, reason = error.reason(), %error, "keeping the ToolGates' TokenReview binding failed; retrying");
                            RETRY
                        }
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "caches not listed yet");
                    RETRY
                }
            };
            tokio::select! {
                () = changed.notified() => tokio::time::sleep(SETTLE).await,
                () = tokio::time::sleep(wait) => {}
            }
        }
    };
    async move {
        tokio::select! {
            () = keeping => {}
            () = shutdown => {}
        }
    }
}

/// Applies the binding with the subjects `tool_gates` call for, unless `applied` (the digest
/// of what was applied last) says it holds them already; on the first call (`applied` None)
/// it is read, and written only when it differs. Returns the digest it holds now.
pub async fn sync(
    client: &Client,
    binding: &TokenReviewBinding,
    tool_gates: &Store<ToolGate>,
    applied: Option<u64>,
) -> Result<u64> {
    let subjects = subjects(tool_gates);
    let digest = digest_of(&binding.role, &subjects);
    if applied == Some(digest) {
        return Ok(digest);
    }
    let api: Api<ClusterRoleBinding> = Api::all(client.clone());
    if applied.is_none()
        && let Some(existing) = api.get_opt(&binding.name).await?
    {
        let held = existing.subjects.clone().unwrap_or_default();
        let ours = existing
            .labels()
            .get(MANAGED_BY_LABEL)
            .is_some_and(|by| by == MANAGED_BY);
        if ours && digest_of(&existing.role_ref.name, &held) == digest {
            return Ok(digest);
        }
    }
    tracing::info!(binding = %binding.name, subjects = subjects.len(), "applying the ToolGates' TokenReview binding");
    api.patch(
        &binding.name,
        &apply_params(),
        &Patch::Apply(binding.object(subjects)),
    )
    .await?;
    Ok(digest)
}

/// Digest of a binding's role and subjects.
fn digest_of(role: &str, subjects: &[Subject]) -> u64 {
    let mut hasher = DefaultHasher::new();
    role.hash(&mut hasher);
    for subject in subjects {
        (&subject.kind, &subject.namespace, &subject.name).hash(&mut hasher);
    }
    hasher.finish()
}
