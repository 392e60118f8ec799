//! The Agent statuses this controller wrote that the cache of Agents may not hold yet. The
//! objects an Agent's first reconcile applies trigger the next one, often before the watch of
//! Agents has brought back the status that reconcile wrote; the next one then takes its
//! current status from here, instead of reading the Agent or writing the same status again.
//!
//! Which of two versions of an object is newer is told by comparing their resourceVersions as
//! integers, which the apiserver guarantees from Kubernetes 1.35 (KEP-5504, comparable resource
//! versions); a version that is not one is never taken as newer, and the status is then read.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::api::Agent;
use crate::api::agent::AgentStatus;

/// Statuses written, by namespace and name of their Agent, each with the resourceVersion the
/// write returned; forgotten once the cache holds that version or a later one.
#[derive(Default)]
pub struct WrittenStatuses {
    written: Mutex<HashMap<(String, String), (u64, AgentStatus)>>,
}

/// More entries than this are forgotten at once: an Agent deleted right after a write is
/// never reconciled again to forget its entry, and each forgotten one costs at most a read.
const WRITTEN_BOUND: usize = 10_000;

impl WrittenStatuses {
    /// Records `agent` as a status write returned it.
    pub fn record(&self, agent: &Agent) {
        let Some(version) = version(agent.resource_version().as_deref()) else {
            return;
        };
        let key = (agent.namespace().unwrap_or_default(), agent.name_any());
        let status = agent.status.clone().unwrap_or_default();
        let mut written = self.written.lock().expect("written statuses lock");
        if written.len() >= WRITTEN_BOUND {
            written.clear();
        }
        written.insert(key, (version, status));
    }

    /// The status last written to the Agent `namespace/name`, if the cache holds an older
    /// version of it than that write returned (`cached`); an entry the cache has caught up
    /// with is forgotten.
    pub fn newer_than(
        &self,
        namespace: &str,
        name: &str,
        cached: Option<&str>,
    ) -> Option<AgentStatus> {
        let mut written = self.written.lock().expect("written statuses lock");
        if written.is_empty() {
            return None;
        }
        let key = (namespace.to_string(), name.to_string());
        let (written_version, status) = written.get(&key)?;
        if version(cached).is_some_and(|cached| cached < *written_version) {
            return Some(status.clone());
        }
        written.remove(&key);
        None
    }
}

/// A resourceVersion as the integer it is (KEP-5504): positive, without leading zeros.
fn version(resource_version: Option<&str>) -> Option<u64> {
    let text = resource_version?;
    if text.starts_with('0') {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(version: &str, hash: &str) -> Agent {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"name": "ops", "namespace": "demo", "resourceVersion": version},
            "spec": {"type": "Declarative"},
            "status": {"configHash": hash},
        }))
        .unwrap()
    }

    #[test]
    fn a_write_stands_in_for_the_cache_until_the_cache_holds_it() {
        let written = WrittenStatuses::default();
        written.record(&agent("120", "a"));
        let status = written.newer_than("demo", "ops", Some("99"));
        assert_eq!(
            status.unwrap().config_hash.as_deref(),
            Some("a"),
            "99 < 120, as integers"
        );
        assert!(
            written.newer_than("demo", "ops", None).is_none(),
            "no cached version: read it"
        );
        written.record(&agent("120", "a"));
        assert!(written.newer_than("demo", "other", Some("1")).is_none());
        assert!(
            written.newer_than("demo", "ops", Some("120")).is_none(),
            "caught up"
        );
        assert!(
            written.newer_than("demo", "ops", Some("1")).is_none(),
            "forgotten once caught up"
        );
    }

    #[test]
    fn a_version_that_is_not_an_integer_is_never_newer() {
        let written = WrittenStatuses::default();
        written.record(&agent("abc", "a"));
        assert!(written.newer_than("demo", "ops", Some("1")).is_none());
        written.record(&agent("120", "a"));
        assert!(written.newer_than("demo", "ops", Some("012")).is_none());
    }
}
