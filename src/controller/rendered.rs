//! What the controller caches of the objects it renders: not the objects, but their name, the
//! Agent controlling them, a digest of the fields it applied ([`crate::kube::applied`]), and
//! the little a reconciler reads beyond that (a Deployment's readiness, whether a Secret holds a
//! usable binding key). A cached Deployment took kilobytes; this takes about a hundred bytes.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Mutex;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::runtime::reflector::{self, ObjectRef};
use kube::{Resource, ResourceExt};

use crate::api::Agent;
use crate::gate::hash::BindingKey;
use crate::kube::Applicable;
use crate::kube::applied::observed_digest;
use crate::render::objects::BINDING_KEY_ITEM;

/// A kind the controller renders, and what its cache keeps of an object beyond the digest.
pub trait RenderedKind: Applicable + Send + Sync + 'static {
    /// What reconcilers read of an object of this kind.
    type Facts: Clone + std::fmt::Debug + Send + Sync + 'static;
    /// The facts of `self`.
    fn facts(&self) -> Self::Facts;
}

/// The cached form of a rendered object of kind `K`.
#[derive(Debug)]
pub struct Rendered<K: RenderedKind> {
    name: Box<str>,
    namespace: Box<str>,
    controller: Option<Controller>,
    applied: Option<u64>,
    facts: K::Facts,
    kind: PhantomData<fn() -> K>,
}

/// The Agent controlling an object: its name (to requeue it) and a digest of its uid.
#[derive(Clone, Debug)]
struct Controller {
    name: Box<str>,
    uid: u64,
}

impl<K: RenderedKind> Clone for Rendered<K> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            controller: self.controller.clone(),
            applied: self.applied,
            facts: self.facts.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: RenderedKind> From<&K> for Rendered<K> {
    fn from(object: &K) -> Self {
        let controller = object
            .owner_references()
            .iter()
            .find(|owner| {
                owner.controller == Some(true)
                    && owner.kind == Agent::kind(&())
                    && owner.api_version == Agent::api_version(&())
            })
            .map(|owner| Controller {
                name: owner.name.as_str().into(),
                uid: uid_digest(&owner.uid),
            });
        Self {
            name: object.name_any().into(),
            namespace: object.namespace().unwrap_or_default().into(),
            controller,
            applied: observed_digest(object, object.meta()),
            facts: object.facts(),
            kind: PhantomData,
        }
    }
}

impl<K: RenderedKind> Rendered<K> {
    /// The object's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Digest of the fields our field manager applied, if it applied any.
    pub fn applied(&self) -> Option<u64> {
        self.applied
    }

    /// What reconcilers read of the object.
    pub fn facts(&self) -> &K::Facts {
        &self.facts
    }

    /// Whether `agent` is the object's controller.
    pub fn controlled_by(&self, agent: &Agent) -> bool {
        match (&self.controller, agent.uid()) {
            (Some(controller), Some(uid)) => controller.uid == uid_digest(&uid),
            _ => false,
        }
    }

    /// The Agent to requeue when the object changes.
    pub fn controller_ref(&self) -> Option<ObjectRef<Agent>> {
        let controller = self.controller.as_ref()?;
        Some(ObjectRef::new(&controller.name).within(&self.namespace))
    }
}

fn uid_digest(uid: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    uid.hash(&mut hasher);
    hasher.finish()
}

impl<K: RenderedKind> reflector::Lookup for Rendered<K> {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.namespace))
    }

    // The store's keys would copy these; nothing looks them up.
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

/// What the Agent status reads of a Deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Readiness {
    /// spec.replicas (1 when unset).
    pub wanted: i32,
    /// metadata.generation.
    pub generation: Option<i64>,
    /// status.observedGeneration.
    pub observed_generation: Option<i64>,
    /// status.updatedReplicas.
    pub updated: i32,
    /// status.availableReplicas.
    pub available: i32,
}

impl RenderedKind for Deployment {
    type Facts = Readiness;

    fn facts(&self) -> Readiness {
        let status = self.status.as_ref();
        Readiness {
            wanted: self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            generation: self.metadata.generation,
            observed_generation: status.and_then(|s| s.observed_generation),
            updated: status.and_then(|s| s.updated_replicas).unwrap_or(0),
            available: status.and_then(|s| s.available_replicas).unwrap_or(0),
        }
    }
}

/// Whether a Secret holds a usable binding key (what the gate signs with).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HoldsBindingKey(pub bool);

impl RenderedKind for Secret {
    type Facts = HoldsBindingKey;

    fn facts(&self) -> HoldsBindingKey {
        HoldsBindingKey(
            self.data
                .as_ref()
                .and_then(|data| data.get(BINDING_KEY_ITEM))
                .is_some_and(|key| BindingKey::from_bytes(&key.0).is_ok()),
        )
    }
}

macro_rules! digest_only {
    ($($kind:ty),*) => {$(
        impl RenderedKind for $kind {
            type Facts = ();
            fn facts(&self) {}
        }
    )*};
}
digest_only!(Service, ServiceAccount, Role, RoleBinding, NetworkPolicy);

/// Pairs of (desired, observed) digests that differ although reading the object showed the
/// desired one applied: the apiserver defaulted a field inside one we set, or canonicalised a
/// value. Remembered so the next reconcile of an unchanged object need not read it again.
#[derive(Default)]
pub struct Confirmed {
    pairs: Mutex<HashSet<(u64, u64)>>,
}

/// More pairs than this are forgotten at once (each costs a read to learn again).
const CONFIRMED_BOUND: usize = 100_000;

impl Confirmed {
    /// Whether an object whose applied fields digest to `observed` holds `desired`.
    pub fn holds(&self, desired: Option<u64>, observed: Option<u64>) -> bool {
        match (desired, observed) {
            (Some(desired), Some(observed)) => {
                desired == observed
                    || self
                        .pairs
                        .lock()
                        .expect("confirmed lock")
                        .contains(&(desired, observed))
            }
            _ => false,
        }
    }

    /// Records that `observed` was read back holding `desired`.
    pub fn record(&self, desired: Option<u64>, observed: Option<u64>) {
        let (Some(desired), Some(observed)) = (desired, observed) else {
            return;
        };
        if desired == observed {
            return;
        }
        let mut pairs = self.pairs.lock().expect("confirmed lock");
        if pairs.len() >= CONFIRMED_BOUND {
            pairs.clear();
        }
        pairs.insert((desired, observed));
    }
}
