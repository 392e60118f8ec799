//! Agents and ApprovalRequests as the controller's caches hold them: the metadata kube-runtime
//! keys and filters by as fields, everything else as the object's JSON, compressed, decoded when
//! a reconciler reads the object, and an index of what is read of every cached object without
//! decoding it (of an Agent, a digest that stands in for its status).
//!
//! Decoded, most of a cached Agent or ApprovalRequest was the room every `None` field of the
//! generated structs takes and a heap block per string, list and map (a single label is a
//! `BTreeMap` node); at 10 000 of each, two thirds of the controller's heap
//! (docs/performance-history.md#controller-caches-and-memory). As JSON, the part beyond the
//! metadata's scalars is a few hundred bytes.
//!
//! The uid and resourceVersion stay in the JSON: kube-runtime's store copies those of `meta()`
//! into the key of every object, where nothing reads them (two strings more per object, twice).
//!
//! The JSON is compressed with LZ4 against a dictionary per kind: the JSON of a typical object
//! (`compact/*.json`), which holds the kind's keys and common values, so that those cost a few
//! bytes in every object instead of their length; what stays is what differs between objects
//! (names, uids, digests, times): about half the bytes over the objects of the memory benchmark,
//! for little CPU per watched change, and decompressing costs less than decoding the JSON that
//! follows (docs/performance-history.md#controller-caches-and-memory).

use std::borrow::Cow;
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::Resource;
use lz4_flex::block::{compress_prepend_size_with_dict, decompress_size_prepended_with_dict};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::api::agent::AgentStatus;
use crate::api::approval_request::{Phase, PolicyKind};
use crate::api::{Agent, ApprovalRequest};

/// A kind whose objects are cached as [`Compact`].
pub trait Compactable:
    Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug + Send + Sync + 'static
{
    /// What is read of every cached object, kept decoded.
    type Index: Clone + Debug + Send + Sync + 'static;

    /// The JSON of a typical object of the kind, as serde writes it, that every cached object
    /// is compressed against. Names no one's data: only the kind's keys and common values.
    const DICTIONARY: &'static str;

    /// The index of `self`, and `self` without what the index stands in for.
    fn take_index(&mut self) -> Self::Index;
}

/// Of an Agent, the cache keeps no status but its digest ([`status_digest`]): the Agent
/// reconciler compares the status it computes with that digest and reads the status only when
/// they differ. The conditions' messages were a large part of every cached Agent
/// (docs/performance-history.md#controller-caches-and-memory).
impl Compactable for Agent {
    type Index = Option<u64>;
    const DICTIONARY: &'static str = include_str!("compact/agent.json");

    fn take_index(&mut self) -> Self::Index {
        self.status.take().map(|status| status_digest(&status))
    }
}

/// Digest of what a status says, transition times left out and conditions in any order: equal
/// digests mean a write would change nothing but those times.
pub fn status_digest(status: &AgentStatus) -> u64 {
    let mut conditions: Vec<&Condition> = status.conditions.iter().collect();
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    let mut hasher = DefaultHasher::new();
    (
        status.observed_generation,
        &status.config_hash,
        status.pending_approvals,
        &status.session_store,
    )
        .hash(&mut hasher);
    for c in conditions {
        (
            &c.type_,
            &c.status,
            &c.reason,
            &c.message,
            c.observed_generation,
        )
            .hash(&mut hasher);
    }
    hasher.finish()
}

/// What is read of every cached ApprovalRequest: the Agent or ToolGate that made it and its
/// phase (the index of requests by Agent, which also counts them for the pending gauge).
#[derive(Clone, Debug)]
pub struct RequestIndex {
    agent: Box<str>,
    kind: PolicyKind,
    phase: Option<Phase>,
}

impl Compactable for ApprovalRequest {
    type Index = RequestIndex;
    const DICTIONARY: &'static str = include_str!("compact/approval_request.json");

    fn take_index(&mut self) -> Self::Index {
        RequestIndex {
            agent: self.spec.agent_ref.name.as_str().into(),
            kind: self.spec.agent_ref.kind(),
            phase: self.status.as_ref().and_then(|status| status.phase),
        }
    }
}

/// An object of kind `K` as a cache holds it. Build one with [`Compact::new`] (or by
/// deserializing `K`); read the object with [`Compact::object`].
#[derive(Clone, Debug)]
pub struct Compact<K: Compactable> {
    /// Name, namespace, generation, creation and deletion timestamps.
    metadata: ObjectMeta,
    /// The JSON of the object without those, compressed against [`Compactable::DICTIONARY`],
    /// its length first.
    compressed: Box<[u8]>,
    /// What is read of it without decoding ([`Compactable::take_index`]).
    index: K::Index,
}

/// A cached Agent.
pub type CachedAgent = Compact<Agent>;
/// A cached ApprovalRequest.
pub type CachedRequest = Compact<ApprovalRequest>;

impl<K: Compactable> Compact<K> {
    /// `object`, compacted.
    pub fn new(mut object: K) -> Self {
        let index = object.take_index();
        let meta = object.meta_mut();
        let metadata = ObjectMeta {
            name: meta.name.take(),
            namespace: meta.namespace.take(),
            generation: meta.generation.take(),
            creation_timestamp: meta.creation_timestamp.take(),
            deletion_timestamp: meta.deletion_timestamp.take(),
            ..ObjectMeta::default()
        };
        // serde_json fails only on maps with keys other than strings and on Serialize impls
        // that fail; the kinds cached this way have neither.
        let json = serde_json::to_vec(&object).expect("a Kubernetes object serializes");
        let compressed = compress_prepend_size_with_dict(&json, K::DICTIONARY.as_bytes());
        Self {
            metadata,
            compressed: compressed.into_boxed_slice(),
            index,
        }
    }

    /// The object, decoded, without what the index stands in for (an Agent's status).
    pub fn object(&self) -> Result<K, serde_json::Error> {
        let json = self.json().map_err(serde::de::Error::custom)?;
        let mut object: K = serde_json::from_slice(&json)?;
        let meta = object.meta_mut();
        meta.name.clone_from(&self.metadata.name);
        meta.namespace.clone_from(&self.metadata.namespace);
        meta.generation = self.metadata.generation;
        meta.creation_timestamp
            .clone_from(&self.metadata.creation_timestamp);
        meta.deletion_timestamp
            .clone_from(&self.metadata.deletion_timestamp);
        Ok(object)
    }

    /// The JSON the object is cached as.
    fn json(&self) -> Result<Vec<u8>, lz4_flex::block::DecompressError> {
        decompress_size_prepended_with_dict(&self.compressed, K::DICTIONARY.as_bytes())
    }
}

impl CachedAgent {
    /// The digest of the Agent's status ([`status_digest`]), if it has one.
    pub fn status_digest(&self) -> Option<u64> {
        self.index
    }
}

impl CachedRequest {
    /// The name of the Agent or ToolGate that made it (`spec.agentRef.name`).
    pub fn agent_name(&self) -> &str {
        &self.index.agent
    }

    /// Whether an Agent or a ToolGate made it (`spec.agentRef.kind`).
    pub fn policy_kind(&self) -> PolicyKind {
        self.index.kind
    }

    /// Whether the recorded status still waits for a decision (no phase yet, or Pending).
    pub fn waits_for_decision(&self) -> bool {
        matches!(self.index.phase, None | Some(Phase::Pending))
    }

    /// Whether the recorded phase is final.
    pub fn is_finished(&self) -> bool {
        self.index.phase.is_some_and(Phase::is_terminal)
    }
}

impl<K: Compactable> From<K> for Compact<K> {
    fn from(object: K) -> Self {
        Self::new(object)
    }
}

impl<'de, K: Compactable> Deserialize<'de> for Compact<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(deserializer).map(Self::new)
    }
}

impl<K: Compactable> Resource for Compact<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::ApprovalRequestStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn json(object: &impl Serialize) -> serde_json::Value {
        serde_json::to_value(object).unwrap()
    }

    fn request() -> ApprovalRequest {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kagent.dev/v1alpha2",
            "kind": "ApprovalRequest",
            "metadata": {
                "name": "delete-file-1", "namespace": "team-a", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2026-11-26T10:00:00Z",
                "deletionTimestamp": "2026-11-26T11:00:00Z",
                "labels": {"kagent.dev/agent": "ops", "kagent.dev/tool": "delete_file"},
                "finalizers": ["kagent.dev/x"],
                "ownerReferences": [{"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                    "name": "ops", "uid": "a-1", "controller": true}],
            },
            "spec": {
                "agentRef": {"name": "ops"},
                "toolServer": {"kind": "RemoteMCPServer", "name": "tools", "namespace": "team-a"},
                "toolName": "delete_file",
                "argumentsSha256": "0".repeat(64),
                "argumentsBytes": 2,
                "argumentsPreview": {"path": "/tmp/x"},
                "requestedBy": "system:serviceaccount:team-a:ops",
                "expiresAt": "2026-11-26T10:05:00Z",
                "decision": {"type": "Approve", "decidedBy": "alice"},
            },
            "status": {"phase": "Approved", "decidedAt": "2026-11-26T10:01:00Z"},
        }))
        .unwrap()
    }

    #[test]
    fn an_object_reads_back_as_it_was_cached() {
        let request = request();
        let cached = Compact::new(request.clone());
        assert_eq!(json(&cached.object().unwrap()), json(&request));
        assert_eq!(cached.meta().name.as_deref(), Some("delete-file-1"));
        assert_eq!(cached.meta().generation, Some(3));
        // The rest is not kept twice, and the uid and resourceVersion are not keys of the
        // store (kube-runtime copies those of `meta()` into every key).
        let meta = cached.meta();
        assert!(meta.labels.is_none() && meta.owner_references.is_none());
        assert!(meta.uid.is_none() && meta.resource_version.is_none());
        let rest = String::from_utf8(cached.json().unwrap()).unwrap();
        assert!(!rest.contains("delete-file-1") && rest.contains("\"42\""));
    }

    /// A dictionary is the text serde writes for an object of its kind: its keys are the
    /// kind's, in the order every object is written.
    fn assert_is_an_object_of_its_kind<K: Compactable>() {
        let object: K = serde_json::from_str(K::DICTIONARY).unwrap();
        assert_eq!(
            serde_json::to_string(&object).unwrap(),
            K::DICTIONARY.trim_end()
        );
    }

    #[test]
    fn each_dictionary_is_an_object_of_its_kind() {
        assert_is_an_object_of_its_kind::<Agent>();
        assert_is_an_object_of_its_kind::<ApprovalRequest>();
    }

    #[test]
    fn a_cached_request_takes_under_half_of_its_json() {
        // Random parts as in a real request: uids and the arguments' digest. The cache never
        // holds the arguments' preview (`watches::cached_request`).
        let mut request = request();
        request.spec.arguments_preview = None;
        request.metadata.uid = Some("9e1374ce-43cd-461e-b35d-76590b8ea984".into());
        request.spec.arguments_sha256 =
            "5f0c2b9c8e1d4a7b3c6f9e2d1a8b7c4e3f6a9d2c5b8e1f4a7d0c3b6e9f2a5d8c".into();
        let text = serde_json::to_string(&request).unwrap();
        let cached = Compact::new(request);
        assert!(
            cached.compressed.len() * 2 < text.len(),
            "{} bytes cached of {} in JSON",
            cached.compressed.len(),
            text.len()
        );
    }

    #[test]
    fn an_object_unlike_the_dictionary_reads_back_too() {
        // Values the dictionary knows nothing of (a long name, non-ASCII text, numbers, null)
        // read back exactly.
        let mut request = request();
        request.spec.tool_name = "x".repeat(300);
        request.spec.arguments_preview = Some(Box::new(
            serde_json::json!({"ü": "\u{1F600}", "n": [1, 2.5, null]})
                .as_object()
                .unwrap()
                .clone(),
        ));
        let cached = Compact::new(request.clone());
        assert_eq!(json(&cached.object().unwrap()), json(&request));
    }

    #[test]
    fn deserializing_caches_what_the_object_holds() {
        let text = serde_json::to_string(&request()).unwrap();
        let cached: CachedRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(json(&cached.object().unwrap()), json(&request()));
    }

    #[test]
    fn the_request_index_answers_without_decoding() {
        let mut request = request();
        let approved = Compact::new(request.clone());
        assert_eq!(approved.agent_name(), "ops");
        assert!(!approved.waits_for_decision() && !approved.is_finished());

        request.status = None;
        assert!(Compact::new(request.clone()).waits_for_decision());
        for (phase, waits, finished) in [
            (Phase::Pending, true, false),
            (Phase::Executed, false, true),
            (Phase::Denied, false, true),
        ] {
            request.status = Some(ApprovalRequestStatus {
                phase: Some(phase),
                decided_at: Some(Time("2026-11-26T10:01:00Z".parse().unwrap())),
                ..ApprovalRequestStatus::default()
            });
            let cached = Compact::new(request.clone());
            assert_eq!(
                (cached.waits_for_decision(), cached.is_finished()),
                (waits, finished),
                "{phase:?}"
            );
        }
    }

    #[test]
    fn every_example_agent_reads_back_as_it_was_cached() {
        let documents = crate::manifest::load(&["examples".into()], true).unwrap();
        let mut agents = 0;
        for document in documents.into_iter().filter(|d| d.kind() == "Agent") {
            let agent: Agent = serde_json::from_value(document.value).unwrap();
            assert_eq!(
                json(&Compact::new(agent.clone()).object().unwrap()),
                json(&agent),
                "{}",
                document.file
            );
            agents += 1;
        }
        assert!(agents >= 3, "{agents} example Agents");
    }
}
