//! Which Agents (or ToolGates: one index per kind) referenced which objects at their last
//! reconcile, so a change of a RemoteMCPServer, ModelConfig, Service, Secret or ConfigMap
//! requeues exactly those.
//!
//! Every Agent is in it, and most reference the same few objects, so it is kept small: each
//! Agent's name and each referenced object is held once, behind an `Arc` both maps share.
//! Keyed by kube-runtime's `ObjectRef`, which copies the name, namespace, uid and
//! resourceVersion into every key, it took several times as much per Agent
//! (docs/performance-history.md#controller-caches-and-memory).

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use kube::runtime::reflector::{Lookup, ObjectRef, Store};

use super::compact::CachedAgent;

/// `(kind, namespace, name)` of a referenced object.
pub type RefKey = (&'static str, String, String);

/// Referrers of kind `K` (Agents unless told) by the objects they reference, and back.
pub struct RefIndex<K = CachedAgent> {
    inner: Mutex<Inner>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Default for RefIndex<K> {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            kind: PhantomData,
        }
    }
}

#[derive(Default)]
struct Inner {
    /// The Agents referencing each object.
    by_ref: HashMap<Arc<Referenced>, HashSet<Arc<AgentName>>>,
    /// The objects each Agent referenced.
    by_agent: HashMap<Arc<AgentName>, Box<[Arc<Referenced>]>>,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct AgentName {
    namespace: Box<str>,
    name: Box<str>,
}

impl AgentName {
    fn of<K: Lookup<DynamicType = ()>>(agent: &ObjectRef<K>) -> Self {
        Self {
            namespace: agent.namespace.as_deref().unwrap_or_default().into(),
            name: agent.name.as_str().into(),
        }
    }

    fn object_ref<K: Lookup<DynamicType = ()>>(&self) -> ObjectRef<K> {
        ObjectRef::new(&self.name).within(&self.namespace)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Referenced {
    kind: &'static str,
    namespace: Box<str>,
    name: Box<str>,
}

impl Inner {
    fn forget(&mut self, agent: &AgentName) {
        let Some(referenced) = self.by_agent.remove(agent) else {
            return;
        };
        for key in referenced.iter() {
            if let Some(agents) = self.by_ref.get_mut(key) {
                agents.remove(agent);
                if agents.is_empty() {
                    self.by_ref.remove(key);
                }
            }
        }
    }

    /// The index's own `Arc` of `key`, made if no Agent references it yet.
    fn shared(&mut self, key: Referenced) -> Arc<Referenced> {
        match self.by_ref.get_key_value(&key) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(key),
        }
    }
}

impl<K: Lookup<DynamicType = ()> + Clone + 'static> RefIndex<K> {
    /// Records that `agent` now references exactly `refs`.
    pub fn set(&self, agent: &ObjectRef<K>, refs: Vec<RefKey>) {
        let agent = AgentName::of(agent);
        let mut inner = self.inner.lock().expect("ref index lock");
        inner.forget(&agent);
        let agent = Arc::new(agent);
        let referenced: Box<[Arc<Referenced>]> = refs
            .into_iter()
            .map(|(kind, namespace, name)| {
                let key = inner.shared(Referenced {
                    kind,
                    namespace: namespace.into(),
                    name: name.into(),
                });
                inner
                    .by_ref
                    .entry(key.clone())
                    .or_default()
                    .insert(agent.clone());
                key
            })
            .collect();
        inner.by_agent.insert(agent, referenced);
    }

    /// The referrers that referenced `kind namespace/name` and still exist in `agents`; entries
    /// of referrers that are gone are dropped.
    pub fn agents_for(
        &self,
        kind: &'static str,
        namespace: &str,
        name: &str,
        agents: &Store<K>,
    ) -> Vec<ObjectRef<K>> {
        let key = Referenced {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        };
        let mut inner = self.inner.lock().expect("ref index lock");
        let referring: Vec<Arc<AgentName>> = inner
            .by_ref
            .get(&key)
            .map(|agents| agents.iter().cloned().collect())
            .unwrap_or_default();
        let mut live = Vec::with_capacity(referring.len());
        for agent in referring {
            let object_ref = agent.object_ref();
            if agents.get(&object_ref).is_some() {
                live.push(object_ref);
            } else {
                inner.forget(&agent);
            }
        }
        live
    }
}

#[cfg(test)]
mod tests {
    use crate::api::Agent;
    use kube::runtime::{reflector, watcher};

    use super::*;

    fn agent(name: &str) -> Agent {
        let mut agent = Agent::new(name, Default::default());
        agent.metadata.namespace = Some("ns".into());
        agent
    }

    fn secret(name: &str) -> RefKey {
        ("Secret", "ns".to_string(), name.to_string())
    }

    #[test]
    fn maps_references_to_live_agents_and_forgets_the_rest() {
        let (store, mut writer) = reflector::store::<CachedAgent>();
        writer.apply_watcher_event(&watcher::Event::Apply(agent("a").into()));
        let index = RefIndex::<CachedAgent>::default();
        let (a, b) = (
            ObjectRef::from_obj(&CachedAgent::new(agent("a"))),
            ObjectRef::from_obj(&CachedAgent::new(agent("b"))),
        );
        index.set(&a, vec![secret("s1"), secret("s2")]);
        index.set(&b, vec![secret("s1")]);
        let a_ref = ObjectRef::new("a").within("ns");
        assert_eq!(
            index.agents_for("Secret", "ns", "s2", &store),
            vec![a_ref.clone()]
        );
        // b is not in the store (deleted): it is not returned, and forgotten.
        assert_eq!(
            index.agents_for("Secret", "ns", "s1", &store),
            vec![a_ref.clone()]
        );
        assert_eq!(index.inner.lock().unwrap().by_agent.len(), 1);
        // A new reconcile replaces a's references.
        index.set(&a, vec![secret("s3")]);
        assert!(index.agents_for("Secret", "ns", "s1", &store).is_empty());
        assert_eq!(index.agents_for("Secret", "ns", "s3", &store), vec![a_ref]);
        assert!(index.agents_for("ConfigMap", "ns", "s3", &store).is_empty());
        assert!(index.agents_for("Secret", "other", "s3", &store).is_empty());
    }

    #[test]
    fn holds_each_referenced_object_once() {
        let index = RefIndex::<CachedAgent>::default();
        for name in ["a", "b", "c"] {
            let agent = ObjectRef::from_obj(&CachedAgent::new(agent(name)));
            index.set(&agent, vec![secret("shared"), secret(name)]);
        }
        let inner = index.inner.lock().unwrap();
        let shared: Vec<&Arc<Referenced>> = inner
            .by_agent
            .values()
            .map(|referenced| &referenced[0])
            .collect();
        assert!(shared.iter().all(|key| Arc::ptr_eq(key, shared[0])));
        // One in each Agent's list, one as the key of its Agents.
        assert_eq!(Arc::strong_count(shared[0]), 4);
        assert_eq!(inner.by_ref.len(), 4);
    }

    #[test]
    fn dropping_the_last_reference_removes_the_object() {
        let index = RefIndex::<CachedAgent>::default();
        let a = ObjectRef::from_obj(&CachedAgent::new(agent("a")));
        index.set(&a, vec![secret("s1")]);
        index.set(&a, Vec::new());
        let inner = index.inner.lock().unwrap();
        assert!(inner.by_ref.is_empty());
        assert_eq!(inner.by_agent.len(), 1);
    }
}
