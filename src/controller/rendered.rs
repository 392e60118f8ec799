//! What the controller caches of the objects it renders: not the objects, but for each its
//! name, the Agent or ToolGate controlling it (its kind, a digest of its uid, and its name only
//! where it is not a prefix of the object's), a digest of the fields it applied ([`crate::apiserver::applied`]), and
//! the little a reconciler reads beyond that (a Deployment's readiness, whether a Secret holds a
//! usable binding key). A cached Deployment took kilobytes; kube-runtime's reflector store of
//! these summaries (its key copies name and namespace again) and a hash map of names per
//! namespace took several times what this store takes, the entries of a namespace sorted by
//! name in one vector and their names in one string ([`names`])
//! (docs/performance-history.md#controller-caches-and-memory).
//!
//! [`Summaries`] is fed by a watch ([`Summaries::apply`]) as a reflector store would be: a
//! relist is buffered until it is complete, then replaces the contents, and what it no longer
//! holds is gone. Each event names the owners (Agents, ToolGates) to requeue.
//!
//! Beside them it knows the names of the objects of the kind that are not ours (without our
//! managed-by label): as entries with no controller and no applied fields, when the watch selects
//! every object of the kind, or as names and nothing else, from a watch of their metadata
//! ([`Summaries::apply_other`]; Secrets, whose data is not read). A name it does not know is
//! free, so the first apply of a new Agent's objects need not read each of them first
//! ([`super::owned::apply_changed`]).

mod names;

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::compact::CachedAgent;
use crate::api::ToolGate;
use crate::api::approval_request::PolicyKind;
use crate::apiserver::Applicable;
use crate::apiserver::applied::observed_digest;
use crate::apiserver::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::contract::binding_key::BindingKey;
use crate::contract::mounts::BINDING_KEY_ITEM;
use crate::render::objects::GateOwner;
use names::Names;

/// A kind the controller renders, and what its cache keeps of an object beyond the digest.
pub trait RenderedKind: Applicable + Send + Sync + 'static {
    /// What reconcilers read of an object of this kind.
    type Facts: Copy + std::fmt::Debug + Send + Sync + 'static;
    /// The facts of `self`.
    fn facts(&self) -> Self::Facts;
}

/// What the cache holds of one rendered object, as a reconciler reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary<F> {
    controller: Option<u64>,
    applied: Option<u64>,
    facts: F,
}

impl<F> Summary<F> {
    /// Digest of the fields our field manager applied, if it applied any.
    pub fn applied(&self) -> Option<u64> {
        self.applied
    }

    /// What reconcilers read of the object.
    pub fn facts(&self) -> &F {
        &self.facts
    }

    /// Whether `owner` is the object's controller.
    pub fn controlled_by(&self, owner: &GateOwner) -> bool {
        match self.controller {
            Some(controller) if !owner.uid.is_empty() => controller == uid_digest(&owner.uid),
            _ => false,
        }
    }
}

/// The cached summaries of the rendered objects of kind `K`, by namespace and name. Clones
/// share the contents.
pub struct Summaries<K: RenderedKind> {
    inner: Arc<RwLock<Inner<K::Facts>>>,
    kind: PhantomData<fn() -> K>,
}

impl<K: RenderedKind> Clone for Summaries<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: RenderedKind> Default for Summaries<K> {
    fn default() -> Self {
        Self {
            inner: Arc::default(),
            kind: PhantomData,
        }
    }
}

struct Inner<F> {
    /// What readers see.
    live: Table<F>,
    /// A relist in progress (from `Init` to `InitDone`).
    relist: Option<Table<F>>,
    /// The names of the objects of the kind that do not carry our managed-by label, from a
    /// watch of their metadata ([`Summaries::apply_other`]).
    others: OtherNames,
}

impl<F> Default for Inner<F> {
    fn default() -> Self {
        Self {
            live: Table::default(),
            relist: None,
            others: OtherNames::default(),
        }
    }
}

/// Names by namespace of the objects of a kind that are not ours, as a watch of their
/// metadata lists them: what an apply must not run into unread.
#[derive(Default)]
struct OtherNames {
    live: HashMap<Box<str>, Names<()>>,
    relist: Option<HashMap<Box<str>, Names<()>>>,
}

impl OtherNames {
    fn apply<K>(&mut self, event: watcher::Event<PartialObjectMeta<K>>) {
        let insert = |table: &mut HashMap<Box<str>, Names<()>>, object: &PartialObjectMeta<K>| {
            let (namespace, name) = namespace_and_name(&object.metadata);
            match table.get_mut(namespace) {
                Some(names) => names.insert(name, ()),
                None => table.entry(namespace.into()).or_default().insert(name, ()),
            }
        };
        match event {
            watcher::Event::Init => self.relist = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                insert(self.relist.get_or_insert_default(), &object);
            }
            watcher::Event::InitDone => {
                let mut listed = self.relist.take().unwrap_or_default();
                listed.values_mut().for_each(Names::shrink_to_fit);
                self.live = listed;
            }
            watcher::Event::Apply(object) => insert(&mut self.live, &object),
            watcher::Event::Delete(object) => {
                let (namespace, name) = namespace_and_name(&object.metadata);
                if let Some(names) = self.live.get_mut(namespace) {
                    names.remove(name);
                    if names.is_empty() {
                        self.live.remove(namespace);
                    }
                }
            }
        }
    }

    fn contains(&self, namespace: &str, name: &str) -> bool {
        self.live
            .get(namespace)
            .is_some_and(|names| names.contains(name))
    }
}

fn namespace_and_name(meta: &ObjectMeta) -> (&str, &str) {
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// Entries by namespace, then name: a namespace's name is held once, not once per object.
type Table<F> = HashMap<Box<str>, Names<Entry<F>>>;

/// One cached object (its namespace and name are the keys).
struct Entry<F> {
    controller: Controller,
    applied: Option<u64>,
    facts: F,
}

/// The Agent or ToolGate controlling an object: its kind and name (to requeue it) and a
/// digest of its uid (to tell whether it controls the object).
enum Controller {
    /// No Agent or ToolGate controls the object.
    None,
    /// A rendered object is named after its owner (`<agent>`, `<agent>-gate`,
    /// `<agent>-binding-key`, `<toolgate>-gate`, …): the owner's name is the first `len` bytes
    /// of the object's.
    Prefix {
        uid: u64,
        len: u16,
        kind: PolicyKind,
    },
    /// An owner the object is not named after.
    Other(Box<(u64, Box<str>, PolicyKind)>),
}

impl Controller {
    fn new(uid: u64, kind: PolicyKind, controller: &str, object: &str) -> Self {
        match u16::try_from(controller.len()) {
            Ok(len) if object.starts_with(controller) => Self::Prefix { uid, len, kind },
            _ => Self::Other(Box::new((uid, controller.into(), kind))),
        }
    }

    /// The digest of the owner's uid.
    fn uid(&self) -> Option<u64> {
        match self {
            Self::None => None,
            Self::Prefix { uid, .. } => Some(*uid),
            Self::Other(other) => Some(other.0),
        }
    }

    /// The owner's kind and name, given the object's.
    fn owner<'a>(&'a self, object: &'a str) -> Option<(PolicyKind, &'a str)> {
        match self {
            Self::None => None,
            Self::Prefix { len, kind, .. } => Some((*kind, &object[..usize::from(*len)])),
            Self::Other(other) => Some((other.2, &other.1)),
        }
    }
}

/// An Agent or a ToolGate to reconcile again: after a change of one of the objects it renders,
/// or of its Namespace (its freeze).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// An Agent.
    Agent(ObjectRef<CachedAgent>),
    /// A ToolGate.
    ToolGate(ObjectRef<ToolGate>),
}

impl Requeue {
    /// The Agent to requeue, if it is one.
    pub fn agent(self) -> Option<ObjectRef<CachedAgent>> {
        match self {
            Self::Agent(agent) => Some(agent),
            Self::ToolGate(_) => None,
        }
    }

    /// The ToolGate to requeue, if it is one.
    pub fn tool_gate(self) -> Option<ObjectRef<ToolGate>> {
        match self {
            Self::ToolGate(tool_gate) => Some(tool_gate),
            Self::Agent(_) => None,
        }
    }
}

impl<F: Copy> Entry<F> {
    fn summary(&self) -> Summary<F> {
        Summary {
            controller: self.controller.uid(),
            applied: self.applied,
            facts: self.facts,
        }
    }

    /// The owner to requeue when the object `namespace/name` changes.
    fn requeue(&self, namespace: &str, name: &str) -> Option<Requeue> {
        let (kind, owner) = self.controller.owner(name)?;
        Some(match kind {
            PolicyKind::Agent => Requeue::Agent(ObjectRef::new(owner).within(namespace)),
            PolicyKind::ToolGate => Requeue::ToolGate(ObjectRef::new(owner).within(namespace)),
        })
    }
}

/// The entry caching `object`, and where: its namespace and name. An object without our
/// managed-by label has no controller here, whatever owns it: kagent's Deployment of the same
/// Agent names that Agent as its controller, and is still not ours.
fn entry_of<K: RenderedKind>(object: &K) -> (&str, &str, Entry<K::Facts>) {
    let meta = object.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    let ours = meta
        .labels
        .as_ref()
        .and_then(|labels| labels.get(MANAGED_BY_LABEL))
        .is_some_and(|value| value == MANAGED_BY);
    let controller = object
        .owner_references()
        .iter()
        .filter(|_| ours)
        .filter(|owner| owner.controller == Some(true))
        .find_map(|owner| {
            let kind = [PolicyKind::Agent, PolicyKind::ToolGate]
                .into_iter()
                .find(|kind| owner.kind == kind.as_str())?;
            let ours =
                owner.api_version == format!("{}/{}", crate::api::GROUP, crate::api::VERSION);
            ours.then(|| Controller::new(uid_digest(&owner.uid), kind, &owner.name, name))
        })
        .unwrap_or(Controller::None);
    let entry = Entry {
        controller,
        applied: observed_digest(object, meta),
        facts: object.facts(),
    };
    (meta.namespace.as_deref().unwrap_or_default(), name, entry)
}

fn uid_digest(uid: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    uid.hash(&mut hasher);
    hasher.finish()
}

/// Inserts `entry` as `namespace/name`; the owner to requeue.
fn insert<F: Copy>(
    table: &mut Table<F>,
    namespace: &str,
    name: &str,
    entry: Entry<F>,
) -> Option<Requeue> {
    let requeue = entry.requeue(namespace, name);
    let names = match table.get_mut(namespace) {
        Some(names) => names,
        None => table.entry(namespace.into()).or_default(),
    };
    names.insert(name, entry);
    requeue
}

impl<K: RenderedKind> Summaries<K> {
    /// A store holding `objects`, as after a list of them.
    pub fn listed(objects: impl IntoIterator<Item = K>) -> Self {
        let summaries = Self::default();
        summaries.apply(watcher::Event::Init);
        for object in objects {
            summaries.apply(watcher::Event::InitApply(object));
        }
        summaries.apply(watcher::Event::InitDone);
        summaries
    }

    /// Applies a watch event, as a reflector store would; returns the owners to requeue: the
    /// controller of an object applied, listed or deleted, and at the end of a relist the
    /// controllers of the objects it no longer holds (deleted while the watch was down).
    pub fn apply(&self, event: watcher::Event<K>) -> Vec<Requeue> {
        let mut inner = self.inner.write().expect("summaries lock");
        match event {
            watcher::Event::Init => {
                inner.relist = Some(Table::default());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                let (namespace, name, entry) = entry_of(&object);
                let relist = inner.relist.get_or_insert_default();
                insert(relist, namespace, name, entry).into_iter().collect()
            }
            watcher::Event::InitDone => {
                let mut listed = inner.relist.take().unwrap_or_default();
                listed.values_mut().for_each(Names::shrink_to_fit);
                let before = std::mem::replace(&mut inner.live, listed);
                let live = &inner.live;
                before
                    .iter()
                    .flat_map(|(namespace, names)| {
                        let now = live.get(namespace);
                        names
                            .iter()
                            .filter(move |(name, _)| !now.is_some_and(|now| now.contains(name)))
                            .filter_map(move |(name, entry)| entry.requeue(namespace, name))
                    })
                    .collect()
            }
            watcher::Event::Apply(object) => {
                let (namespace, name, entry) = entry_of(&object);
                insert(&mut inner.live, namespace, name, entry)
                    .into_iter()
                    .collect()
            }
            watcher::Event::Delete(object) => {
                let (namespace, name, entry) = entry_of(&object);
                if let Some(names) = inner.live.get_mut(namespace) {
                    names.remove(name);
                    if names.is_empty() {
                        inner.live.remove(namespace);
                    }
                }
                entry.requeue(namespace, name).into_iter().collect()
            }
        }
    }

    /// `self` with the names of the objects of the kind that are not ours listed as `names`
    /// (namespace, name), as after a list of them.
    pub fn with_others<'a>(self, names: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self
    where
        K: Default,
    {
        self.apply_other(watcher::Event::Init);
        for (namespace, name) in names {
            let mut object = PartialObjectMeta::<K>::default();
            object.metadata.namespace = Some(namespace.into());
            object.metadata.name = Some(name.into());
            self.apply_other(watcher::Event::InitApply(object));
        }
        self.apply_other(watcher::Event::InitDone);
        self
    }

    /// Applies a watch event of the objects of the kind that are not ours (their metadata).
    pub fn apply_other(&self, event: watcher::Event<PartialObjectMeta<K>>) {
        let mut inner = self.inner.write().expect("summaries lock");
        inner.others.apply(event);
    }

    /// Whether an object `namespace/name` exists as far as the watches know: ours (cached),
    /// or another's (its name is listed). Where the watches cover the namespace and have
    /// listed, an object they do not know of does not exist (or was created so recently that
    /// its watch event has not arrived).
    pub fn knows_of(&self, namespace: &str, name: &str) -> bool {
        let inner = self.inner.read().expect("summaries lock");
        inner
            .live
            .get(namespace)
            .is_some_and(|names| names.contains(name))
            || inner.others.contains(namespace, name)
    }

    /// The cached object `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Summary<K::Facts>> {
        let inner = self.inner.read().expect("summaries lock");
        inner.live.get(namespace)?.get(name).map(Entry::summary)
    }

    /// The names of the cached objects in `owner`'s namespace that `owner` controls, sorted.
    pub fn controlled_by(&self, owner: &GateOwner) -> Vec<String> {
        if owner.uid.is_empty() {
            return Vec::new();
        }
        let uid = uid_digest(&owner.uid);
        let inner = self.inner.read().expect("summaries lock");
        inner
            .live
            .get(owner.namespace.as_str())
            .into_iter()
            .flat_map(Names::iter)
            .filter(|(_, entry)| entry.controller.uid() == Some(uid))
            .map(|(name, _)| name.to_string())
            .collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        let inner = self.inner.read().expect("summaries lock");
        inner.live.values().map(Names::len).sum()
    }

    /// Whether no object is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the Agent status reads of a Deployment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Readiness {
    /// spec.replicas (1 when unset).
    pub wanted: i32,
    /// Whether status.observedGeneration has reached metadata.generation.
    pub observed: bool,
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
            observed: status.and_then(|s| s.observed_generation) >= self.metadata.generation,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Agent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::Resource;

    /// ServiceAccount `namespace/name`, controlled by Agent `agent` (uid `<agent>-uid`) if any.
    fn account(namespace: &str, name: &str, agent: Option<&str>) -> ServiceAccount {
        let mut object = ServiceAccount::default();
        object.metadata.name = Some(name.into());
        object.metadata.namespace = Some(namespace.into());
        object.metadata.labels = Some([(MANAGED_BY_LABEL.into(), MANAGED_BY.into())].into());
        object.metadata.owner_references = agent.map(|agent| {
            vec![OwnerReference {
                api_version: Agent::api_version(&()).into(),
                kind: Agent::kind(&()).into(),
                name: agent.into(),
                uid: format!("{agent}-uid"),
                controller: Some(true),
                ..OwnerReference::default()
            }]
        });
        object
    }

    fn agent(namespace: &str, name: &str) -> GateOwner {
        let mut agent = Agent::new(name, Default::default());
        agent.metadata.namespace = Some(namespace.into());
        agent.metadata.uid = Some(format!("{name}-uid"));
        GateOwner::agent(&agent)
    }

    /// The owners to requeue, `namespace/name` (a ToolGate's `ToolGate namespace/name`).
    fn requeued(owners: Vec<Requeue>) -> Vec<String> {
        let mut owners: Vec<String> = owners
            .into_iter()
            .map(|owner| match owner {
                Requeue::Agent(a) => {
                    format!("{}/{}", a.namespace.as_deref().unwrap_or_default(), a.name)
                }
                Requeue::ToolGate(t) => format!(
                    "ToolGate {}/{}",
                    t.namespace.as_deref().unwrap_or_default(),
                    t.name
                ),
            })
            .collect();
        owners.sort();
        owners
    }

    /// A watch event's object of the other ServiceAccounts: metadata only.
    fn other(namespace: &str, name: &str) -> PartialObjectMeta<ServiceAccount> {
        let mut object = PartialObjectMeta::<ServiceAccount>::default();
        object.metadata.namespace = Some(namespace.into());
        object.metadata.name = Some(name.into());
        object
    }

    #[test]
    fn a_name_is_known_while_ours_or_anothers_exists_and_a_relist_replaces_the_others() {
        let store = Summaries::listed([account("a", "ours", Some("x"))])
            .with_others([("a", "theirs"), ("b", "ours")]);
        assert!(store.knows_of("a", "ours"), "ours, cached");
        assert!(store.knows_of("a", "theirs"), "another's, listed");
        assert!(
            store.knows_of("b", "ours"),
            "the same name elsewhere is another object"
        );
        assert!(!store.knows_of("a", "new"), "no watch lists it: free");

        store.apply_other(watcher::Event::Apply(other("a", "new")));
        assert!(store.knows_of("a", "new"), "made by someone else since");
        store.apply_other(watcher::Event::Delete(other("a", "theirs")));
        assert!(!store.knows_of("a", "theirs"), "deleted (or labelled ours)");

        // A relist is complete only at its end: until then the names listed before stand.
        store.apply_other(watcher::Event::Init);
        store.apply_other(watcher::Event::InitApply(other("c", "late")));
        assert!(store.knows_of("a", "new") && !store.knows_of("c", "late"));
        store.apply_other(watcher::Event::InitDone);
        assert!(store.knows_of("c", "late"));
        assert!(
            !store.knows_of("a", "new") && !store.knows_of("b", "ours"),
            "gone by then"
        );
        assert!(store.knows_of("a", "ours"), "our own are another list");
    }

    #[test]
    fn an_object_without_our_label_is_known_by_name_and_controlled_by_no_one() {
        // kagent's ServiceAccount of the same Agent: its controller reference names that Agent.
        let mut kagents = account("a", "x", Some("x"));
        kagents.metadata.labels = Some([(MANAGED_BY_LABEL.into(), "kagent".into())].into());
        let store = Summaries::default();
        store.apply(watcher::Event::Init);
        assert!(requeued(store.apply(watcher::Event::InitApply(kagents.clone()))).is_empty());
        store.apply(watcher::Event::InitDone);
        assert!(store.knows_of("a", "x"));
        assert!(!store.get("a", "x").unwrap().controlled_by(&agent("a", "x")));
        assert!(
            store.controlled_by(&agent("a", "x")).is_empty(),
            "never pruned"
        );
        assert!(requeued(store.apply(watcher::Event::Apply(kagents))).is_empty());
    }

    #[test]
    fn a_tool_gates_objects_requeue_the_tool_gate_and_are_controlled_by_it() {
        let mut gate_account = account("a", "x-gate", None);
        gate_account.metadata.owner_references = Some(vec![OwnerReference {
            api_version: ToolGate::api_version(&()).into(),
            kind: ToolGate::kind(&()).into(),
            name: "x".into(),
            uid: "x-uid".into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        let cache = Summaries::<ServiceAccount>::default();
        cache.apply(watcher::Event::Init);
        let listed = cache.apply(watcher::Event::InitApply(gate_account.clone()));
        cache.apply(watcher::Event::InitDone);
        assert_eq!(requeued(listed), ["ToolGate a/x"]);
        let owner = GateOwner {
            kind: PolicyKind::ToolGate,
            name: "x".into(),
            namespace: "a".into(),
            uid: "x-uid".into(),
        };
        assert!(cache.get("a", "x-gate").unwrap().controlled_by(&owner));
        assert_eq!(cache.controlled_by(&owner), ["x-gate"]);
        assert!(cache.controlled_by(&agent("a", "y")).is_empty());
        let deleted = cache.apply(watcher::Event::Delete(gate_account));
        assert_eq!(requeued(deleted), ["ToolGate a/x"]);
    }

    #[test]
    fn events_update_the_cache_and_name_the_agent_to_requeue() {
        let cache = Summaries::<ServiceAccount>::default();
        let listed = [
            cache.apply(watcher::Event::Init),
            cache.apply(watcher::Event::InitApply(account("a", "x-gate", Some("x")))),
            cache.apply(watcher::Event::InitApply(account("b", "sa", Some("y")))),
            cache.apply(watcher::Event::InitApply(account("b", "loose", None))),
        ]
        .concat();
        assert_eq!(
            requeued(listed),
            ["a/x", "b/y"],
            "an Agent's name, prefix or not"
        );
        assert!(cache.is_empty(), "a list in progress is not visible");
        assert!(requeued(cache.apply(watcher::Event::InitDone)).is_empty());
        assert_eq!(cache.len(), 3);

        let x = agent("a", "x");
        assert!(cache.get("a", "x-gate").unwrap().controlled_by(&x));
        assert!(!cache.get("b", "sa").unwrap().controlled_by(&x));
        assert!(!cache.get("b", "loose").unwrap().controlled_by(&x));
        assert_eq!(cache.get("a", "sa"), None, "names are per namespace");
        assert_eq!(cache.controlled_by(&x), ["x-gate"]);
        assert_eq!(cache.controlled_by(&agent("b", "y")), ["sa"]);
        assert!(cache.controlled_by(&agent("b", "x")).is_empty());

        let applied = cache.apply(watcher::Event::Apply(account("a", "x", Some("x"))));
        assert_eq!(requeued(applied), ["a/x"]);
        assert_eq!(cache.controlled_by(&x), ["x", "x-gate"]);
        let deleted = cache.apply(watcher::Event::Delete(account("a", "x-gate", Some("x"))));
        assert_eq!(requeued(deleted), ["a/x"]);
        assert_eq!(cache.controlled_by(&x), ["x"]);
        assert!(
            cache
                .apply(watcher::Event::Delete(account("b", "loose", None)))
                .is_empty()
        );
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_relist_replaces_the_cache_when_done_and_requeues_the_agents_of_what_it_dropped() {
        let cache = Summaries::listed([
            account("a", "x", Some("x")),
            account("a", "y", Some("y")),
            account("b", "z", Some("z")),
        ]);
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(account("a", "x", Some("x"))));
        cache.apply(watcher::Event::InitApply(account("c", "w", Some("w"))));
        assert_eq!(
            cache.len(),
            3,
            "readers see the old contents until the relist is done"
        );
        assert!(cache.get("c", "w").is_none());
        let dropped = cache.apply(watcher::Event::InitDone);
        assert_eq!(
            requeued(dropped),
            ["a/y", "b/z"],
            "deleted while the watch was down"
        );
        assert_eq!(cache.len(), 2);
        assert!(cache.get("a", "y").is_none() && cache.get("b", "z").is_none());
        assert!(cache.get("c", "w").is_some());
    }

    #[test]
    fn the_summary_keeps_the_applied_digest_and_the_facts() {
        let mut deployment = Deployment::default();
        deployment.metadata.name = Some("x".into());
        deployment.metadata.namespace = Some("a".into());
        deployment.metadata.generation = Some(3);
        deployment.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
            observed_generation: Some(2),
            available_replicas: Some(1),
            ..Default::default()
        });
        let cache = Summaries::listed([deployment.clone()]);
        let cached = cache.get("a", "x").unwrap();
        assert_eq!(cached.applied(), None, "nothing applied by us");
        assert_eq!(
            *cached.facts(),
            Readiness {
                wanted: 1,
                observed: false,
                updated: 0,
                available: 1
            }
        );
        deployment.status.as_mut().unwrap().observed_generation = Some(3);
        cache.apply(watcher::Event::Apply(
            crate::apiserver::applied::applied_by_us(deployment),
        ));
        let cached = cache.get("a", "x").unwrap();
        assert!(cached.facts().observed);
        assert!(cached.applied().is_some());
    }

    #[test]
    fn an_entry_stays_small() {
        // A ServiceAccount's controller and applied digest; a Deployment's readiness besides.
        assert_eq!(std::mem::size_of::<Entry<()>>(), 32);
        assert_eq!(std::mem::size_of::<Entry<Readiness>>(), 48);
    }
}
