//! The one ClusterRoleBinding that lets the gates of ToolGates verify their callers: a shared
//! gate checks each caller's bearer token with a TokenReview, which is cluster-scoped, so its
//! ServiceAccount needs `create` on `tokenreviews` through a ClusterRole. The controller keeps
//! one binding (`--token-review-binding`) of the chart's ClusterRole (`--token-review-role`)
//! whose subjects are the `<name>-gate` ServiceAccounts of the ToolGates it watches that are
//! `Accepted` and control their ServiceAccount ([`subjects`]): a refused ToolGate (another
//! owner's ServiceAccount of that name) grants nothing, a deleted one's account leaves at the
//! next sync, and a subject the apiserver would refuse is left out, so that no one ToolGate
//! stops the binding of the others. Sorted, applied (server-side, as the controller's field
//! manager) only when that set changes. It is cluster-scoped, so no ToolGate owns it; with no
//! such ToolGate its subjects are empty. What the binding holds is published ([`Bound`]), so
//! that a ToolGate whose gate may not review tokens yet does not claim `Ready`.

use std::collections::BTreeSet;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;

use super::accepted::ACCEPTED;
use super::rendered::Summaries;
use super::{CACHE_SYNC_BOUND, Context, RESYNC};
use crate::Result;
use crate::api::ToolGate;
use crate::apiserver::apply_params;
use crate::apiserver::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::render::objects::GateOwner;
use crate::validate::{is_dns1123_label, is_dns1123_subdomain};

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

/// ServiceAccounts by namespace and name.
type Accounts = BTreeSet<(String, String)>;

/// What the binding held when last applied or read: the gate ServiceAccounts (namespace,
/// name) that may create TokenReviews. Clones share it; [`Bound::wake`] asks the keeper to
/// look again.
#[derive(Clone, Debug)]
pub struct Bound {
    /// The binding's name, for messages.
    pub binding: String,
    held: Arc<RwLock<Option<Accounts>>>,
    changed: Arc<Notify>,
}

impl Bound {
    /// Nothing known held yet by binding `binding`, whose keeper waits on `changed`.
    pub fn new(binding: String, changed: Arc<Notify>) -> Self {
        Self {
            binding,
            held: Arc::default(),
            changed,
        }
    }

    /// Whether the binding holds ServiceAccount `namespace/name`.
    pub fn holds(&self, namespace: &str, name: &str) -> bool {
        self.held
            .read()
            .expect("bound lock")
            .as_ref()
            .is_some_and(|held| held.contains(&(namespace.to_owned(), name.to_owned())))
    }

    /// Asks the keeper to sync the binding soon (a ToolGate found its gate missing from it).
    pub fn wake(&self) {
        self.changed.notify_one();
    }

    fn record(&self, subjects: &[Subject]) {
        let held = subjects
            .iter()
            .map(|s| (s.namespace.clone().unwrap_or_default(), s.name.clone()))
            .collect();
        *self.held.write().expect("bound lock") = Some(held);
    }
}

/// The gate ServiceAccount of each ToolGate in `tool_gates` that may verify callers, sorted by
/// namespace and name: the ToolGate is `Accepted` (True) and controls its `<name>-gate`
/// ServiceAccount in `accounts`, and the apiserver would take the subject (a namespace that
/// is a DNS-1123 label, a name that is a DNS-1123 subdomain; a name the CRD refuses, made
/// before its rule, is left out rather than fail the whole binding).
pub fn subjects<'a>(
    tool_gates: impl IntoIterator<Item = &'a ToolGate>,
    accounts: &Summaries<ServiceAccount>,
) -> Vec<Subject> {
    let accounts: Accounts = tool_gates
        .into_iter()
        .filter(|tool_gate| accepted(tool_gate))
        .map(GateOwner::tool_gate)
        .filter(|owner| {
            accounts
                .get(&owner.namespace, &owner.gate_name())
                .is_some_and(|account| account.controlled_by(owner))
        })
        .map(|owner| (owner.namespace.clone(), owner.gate_name()))
        .filter(|(namespace, name)| is_dns1123_label(namespace) && is_dns1123_subdomain(name))
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

/// Whether `tool_gate`'s status says `Accepted` True.
fn accepted(tool_gate: &ToolGate) -> bool {
    tool_gate.status.as_ref().is_some_and(|status| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == ACCEPTED && c.status == "True")
    })
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
/// change of a ToolGate (`changed`, created, changed or deleted, or a [`Bound::wake`]) and
/// every [`RESYNC`], until `shutdown` resolves; what it holds is recorded in `bound`.
pub fn keep(
    binding: TokenReviewBinding,
    ctx: Arc<Context>,
    bound: Bound,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> {
    let changed = bound.changed.clone();
    let keeping = async move {
        let mut applied = None;
        loop {
            let wait = match ctx.caches.within(CACHE_SYNC_BOUND).await {
                Ok(()) => {
                    let subjects = subjects(
                        ctx.stores.tool_gates.state().iter().map(AsRef::as_ref),
                        &ctx.stores.service_accounts,
                    );
                    match sync(&ctx.client, &binding, subjects, &bound, applied).await {
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

/// Applies the binding with `subjects` unless `applied` (the digest of what was applied last)
/// says it holds them already; on the first call (`applied` None) it is read, and written only
/// when it differs. Records them in `bound` once held; returns the digest it holds now.
pub async fn sync(
    client: &Client,
    binding: &TokenReviewBinding,
    subjects: Vec<Subject>,
    bound: &Bound,
    applied: Option<u64>,
) -> Result<u64> {
    let digest = digest_of(&binding.role, &subjects);
    if applied == Some(digest) {
        bound.record(&subjects);
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
            bound.record(&subjects);
            return Ok(digest);
        }
    }
    tracing::info!(binding = %binding.name, subjects = subjects.len(), "applying the ToolGates' TokenReview binding");
    api.patch(
        &binding.name,
        &apply_params(),
        &Patch::Apply(binding.object(subjects.clone())),
    )
    .await?;
    bound.record(&subjects);
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool_gate(namespace: &str, name: &str, uid: &str, accepted: Option<&str>) -> ToolGate {
        let conditions: Vec<_> = accepted
            .map(|status| json!({"type": "Accepted", "status": status, "reason": "R", "message": "", "lastTransitionTime": "2026-11-28T00:00:00Z"}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "ToolGate",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"server": {"url": "http://x/mcp"}, "toolNames": ["t"]},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    /// ServiceAccount `namespace/name`, controlled by the ToolGate `owner` (uid) when given.
    fn account(namespace: &str, name: &str, owner: Option<(&str, &str)>) -> ServiceAccount {
        let owners: Vec<_> = owner
            .map(|(tool_gate, uid)| json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "ToolGate", "name": tool_gate, "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "hitl-operator"},
                "ownerReferences": owners},
        }))
        .unwrap()
    }

    fn names(subjects: &[Subject]) -> Vec<String> {
        subjects
            .iter()
            .map(|s| format!("{}/{}", s.namespace.as_deref().unwrap_or_default(), s.name))
            .collect()
    }

    #[test]
    fn only_accepted_tool_gates_that_control_their_account_are_bound() {
        let long = "x".repeat(250);
        let gates = [
            tool_gate("team-b", "pay", "u1", Some("True")),
            tool_gate("team-a", "pay", "u2", Some("True")),
            // Refused: another owner made team-a/ci-gate by hand.
            tool_gate("team-a", "ci", "u3", Some("False")),
            // Not reconciled yet.
            tool_gate("team-a", "new", "u4", None),
            // Accepted, but its account is gone or not its own.
            tool_gate("team-a", "gone", "u5", Some("True")),
            tool_gate("team-a", "stolen", "u6", Some("True")),
            // Made before the CRD bounded names: a subject no apiserver takes.
            tool_gate("team-a", &long, "u7", Some("True")),
        ];
        let accounts = Summaries::listed([
            account("team-b", "pay-gate", Some(("pay", "u1"))),
            account("team-a", "pay-gate", Some(("pay", "u2"))),
            account("team-a", "ci-gate", None),
            account("team-a", "new-gate", Some(("new", "u4"))),
            account("team-a", "stolen-gate", Some(("stolen", "u-other"))),
            account("team-a", &format!("{long}-gate"), Some((&long, "u7"))),
        ]);
        assert_eq!(
            names(&subjects(&gates, &accounts)),
            ["team-a/pay-gate", "team-b/pay-gate"]
        );
        assert!(subjects(&[], &accounts).is_empty());
    }

    #[test]
    fn subject_names_are_what_the_apiserver_takes() {
        assert!(is_dns1123_label("team-a"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(!is_dns1123_label("-a") && !is_dns1123_label("a-") && !is_dns1123_label("A"));
        assert!(is_dns1123_subdomain("a.b-gate"));
        assert!(!is_dns1123_subdomain(&format!("{}-gate", "x".repeat(250))));
        assert!(!is_dns1123_subdomain("a..b"));
    }

    #[test]
    fn bound_says_what_the_binding_holds() {
        let bound = Bound::new("b".into(), Arc::new(Notify::new()));
        assert!(!bound.holds("team-a", "pay-gate"), "nothing known yet");
        let binding = TokenReviewBinding {
            name: "b".into(),
            role: "r".into(),
        };
        let subjects = subjects(
            &[tool_gate("team-a", "pay", "u1", Some("True"))],
            &Summaries::listed([account("team-a", "pay-gate", Some(("pay", "u1")))]),
        );
        bound.record(&binding.object(subjects).subjects.unwrap());
        assert!(bound.holds("team-a", "pay-gate"));
        assert!(!bound.holds("team-b", "pay-gate"));
    }
}
