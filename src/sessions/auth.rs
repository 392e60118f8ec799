//! Which Agent a request comes from, proved by the token kagent's runtime sends: the pod's
//! projected ServiceAccount token of the store's own audience ([`SESSION_STORE_AUDIENCE`]).
//!
//! 1. The apiserver verifies the token for that audience (TokenReview). A token of another
//!    audience (the apiserver's own, kagent's) is refused.
//! 2. A projected token is bound to its pod: the review names the pod and its UID
//!    (`authentication.kubernetes.io/pod-name`, `pod-uid`). A token bound to no pod is refused:
//!    a ServiceAccount alone never names an Agent (two Agents may share one).
//! 3. The pod (its UID matched, so a pod deleted and made again under its name is another
//!    pod), run by the token's ServiceAccount, labelled ours, is controlled by a ReplicaSet,
//!    that by a Deployment, and that by an Agent (`kagent.dev`, controller ownerReferences,
//!    each UID matched): that Agent is the request's.
//!
//! Verified tokens are cached by their SHA-256 until they expire, and at most
//! [`MAX_TRUSTED_FOR`]: a deleted pod's token stops working within that time. A token the
//! store cannot verify (the apiserver unreachable, slow, failing) is refused with 503, never
//! let through.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use super::http::{Authenticate, Refused};
use super::store::AgentKey;
use crate::apiserver::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
pub use crate::contract::session_store::SESSION_STORE_AUDIENCE;
use crate::gate::callers::cache::jwt_expiry;
use crate::render::objects::AGENT_LABEL;

/// How long the store waits for the apiserver (each of the review and the reads of the pod's
/// owners) before refusing the request with 503.
pub const APISERVER_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a verified token is trusted without asking the apiserver again.
pub const MAX_TRUSTED_FOR: SignedDuration = SignedDuration::from_secs(300);

/// Most tokens the cache holds; past it, expired ones are dropped, then all.
pub const MAX_CACHED_TOKENS: usize = 10_000;

/// The claim of a bound token naming its pod.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The claim of a bound token naming its pod's UID.
const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// Verifies tokens with the apiserver and finds their Agent; caches what it verified.
pub struct PodTokens {
    client: Client,
    audience: String,
    cache: Mutex<HashMap<[u8; 32], (AgentKey, Timestamp)>>,
}

impl PodTokens {
    /// Verifies tokens of `audience` with `client`'s apiserver.
    pub fn new(client: Client, audience: impl Into<String>) -> Self {
        Self {
            client,
            audience: audience.into(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, key: &[u8; 32], now: Timestamp) -> Option<AgentKey> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .filter(|(_, until)| *until > now)
            .map(|(agent, _)| agent.clone())
    }

    fn remember(&self, key: [u8; 32], agent: AgentKey, until: Timestamp, now: Timestamp) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED_TOKENS {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= MAX_CACHED_TOKENS {
                cache.clear();
            }
        }
        cache.insert(key, (agent, until));
    }

    /// The review's pod (namespace from the ServiceAccount, name, UID) and ServiceAccount.
    async fn review(&self, token: &str) -> Result<BoundPod, Refused> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = tokio::time::timeout(
            APISERVER_TIMEOUT,
            api.create(&PostParams::default(), &review),
        )
        .await
        .map_err(|_| {
            Refused::Unverified(format!(
                "the apiserver did not answer the TokenReview within {}s",
                APISERVER_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| Refused::Unverified(format!("TokenReview failed: {e}")))?;
        bound_pod(&answer, &self.audience)
    }

    async fn get<K>(&self, namespace: &str, name: &str) -> Result<Option<K>, Refused>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        tokio::time::timeout(APISERVER_TIMEOUT, api.get_opt(name))
            .await
            .map_err(|_| {
                Refused::Unverified(format!(
                    "the apiserver did not answer within {}s",
                    APISERVER_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| Refused::Unverified(format!("reading {namespace}/{name}: {e}")))
    }

    /// The Agent that controls `pod`, through its ReplicaSet and Deployment.
    async fn agent_of_pod(&self, bound: &BoundPod) -> Result<AgentKey, Refused> {
        let ns = &bound.namespace;
        let pod: Pod = self.get(ns, &bound.pod).await?.ok_or_else(|| {
            Refused::Unauthenticated(format!("the token's pod {ns}/{} is gone", bound.pod))
        })?;
        let agent_name = check_pod(&pod, bound)?;
        let rs_ref = controller_of(&pod.metadata, "apps", "ReplicaSet")
            .ok_or_else(|| not_an_agent(bound, "it is not controlled by a ReplicaSet"))?;
        let rs: ReplicaSet = self
            .get(ns, &rs_ref.name)
            .await?
            .filter(|rs: &ReplicaSet| rs.metadata.uid.as_deref() == Some(&rs_ref.uid))
            .ok_or_else(|| not_an_agent(bound, "its ReplicaSet is gone"))?;
        let deploy_ref = controller_of(&rs.metadata, "apps", "Deployment")
            .ok_or_else(|| not_an_agent(bound, "its ReplicaSet has no Deployment"))?;
        let deployment: Deployment = self
            .get(ns, &deploy_ref.name)
            .await?
            .filter(|d: &Deployment| d.metadata.uid.as_deref() == Some(&deploy_ref.uid))
            .ok_or_else(|| not_an_agent(bound, "its Deployment is gone"))?;
        let agent_ref = controller_of(&deployment.metadata, "kagent.dev", "Agent")
            .ok_or_else(|| not_an_agent(bound, "its Deployment is not controlled by an Agent"))?;
        if agent_ref.name != agent_name {
            return Err(not_an_agent(
                bound,
                &format!(
                    "its label {AGENT_LABEL}={agent_name} and its Deployment's Agent {} differ",
                    agent_ref.name
                ),
            ));
        }
        Ok(AgentKey::new(ns.clone(), agent_ref.name.clone()))
    }
}

impl Authenticate for PodTokens {
    async fn agent_of(&self, token: &str) -> Result<AgentKey, Refused> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Timestamp::now();
        if let Some(agent) = self.cached(&key, now) {
            return Ok(agent);
        }
        let bound = self.review(token).await?;
        let agent = self.agent_of_pod(&bound).await?;
        let bound_until = now.checked_add(MAX_TRUSTED_FOR).unwrap_or(Timestamp::MAX);
        let until = jwt_expiry(token).map_or(bound_until, |exp| exp.min(bound_until));
        self.remember(key, agent.clone(), until, now);
        Ok(agent)
    }
}

/// What a verified token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundPod {
    /// The ServiceAccount's (and so the pod's) namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub service_account: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's UID.
    pub pod_uid: String,
}

/// The pod a TokenReview's answer names, or why the token proves none.
pub fn bound_pod(review: &TokenReview, audience: &str) -> Result<BoundPod, Refused> {
    let status = review.status.as_ref();
    if !status.and_then(|s| s.authenticated).unwrap_or(false) {
        let why = status
            .and_then(|s| s.error.clone())
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "not authenticated".into());
        return Err(Refused::Unauthenticated(format!(
            "the apiserver does not accept the token for audience {audience}: {why}"
        )));
    }
    let status = status.expect("authenticated implies a status");
    if !status
        .audiences
        .as_ref()
        .is_some_and(|a| a.iter().any(|x| x == audience))
    {
        return Err(Refused::Unauthenticated(format!(
            "the token is not for audience {audience}"
        )));
    }
    let user = status.user.as_ref();
    let username = user.and_then(|u| u.username.as_deref()).unwrap_or_default();
    let Some((namespace, service_account)) = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    else {
        return Err(Refused::Unauthenticated(format!(
            "{username:?} is not a ServiceAccount: the session store takes an agent pod's projected token"
        )));
    };
    let extra = |key: &str| {
        user.and_then(|u| u.extra.as_ref())
            .and_then(|e| e.get(key))
            .and_then(|v| match v.as_slice() {
                [one] if !one.is_empty() => Some(one.clone()),
                _ => None,
            })
    };
    let (Some(pod), Some(pod_uid)) = (extra(POD_NAME_EXTRA), extra(POD_UID_EXTRA)) else {
        return Err(Refused::Unauthenticated(format!(
            "the token of {username} is bound to no pod: the session store takes the projected token of an Agent's pod, never a ServiceAccount's alone"
        )));
    };
    Ok(BoundPod {
        namespace: namespace.to_owned(),
        service_account: service_account.to_owned(),
        pod,
        pod_uid,
    })
}

fn not_an_agent(bound: &BoundPod, why: &str) -> Refused {
    Refused::Unauthenticated(format!(
        "the token's pod {}/{} is not an Agent's pod run by hitl-operator: {why}",
        bound.namespace, bound.pod
    ))
}

/// Checks that `pod` is the token's (UID, ServiceAccount) and labelled as an Agent's pod of
/// ours; returns its Agent label.
pub fn check_pod(pod: &Pod, bound: &BoundPod) -> Result<String, Refused> {
    if pod.metadata.uid.as_deref() != Some(&bound.pod_uid) {
        return Err(Refused::Unauthenticated(format!(
            "the token's pod {}/{} is gone (a pod of that name with another UID exists)",
            bound.namespace, bound.pod
        )));
    }
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .unwrap_or("default");
    if account != bound.service_account {
        return Err(not_an_agent(
            bound,
            &format!(
                "it runs as ServiceAccount {account}, the token is {}'s",
                bound.service_account
            ),
        ));
    }
    let labels = pod.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    if label(MANAGED_BY_LABEL) != Some(MANAGED_BY) {
        return Err(not_an_agent(
            bound,
            &format!("it is not labelled {MANAGED_BY_LABEL}={MANAGED_BY}"),
        ));
    }
    label(AGENT_LABEL)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| not_an_agent(bound, &format!("it has no {AGENT_LABEL} label")))
}

/// The controller ownerReference of `meta` when it is a `kind` of API group `group`.
pub fn controller_of<'a>(
    meta: &'a ObjectMeta,
    group: &str,
    kind: &str,
) -> Option<&'a OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .filter(|r| r.kind == kind && r.api_version.split_once('/').map_or("", |(g, _)| g) == group)
}

#[cfg(test)]
mod tests;
