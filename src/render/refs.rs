//! The objects an Agent references, and which of them are still needed.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kube::ResourceExt;

use crate::api::agent::ToolServerKind;
use crate::api::common::{FromNamespaces, ValueRef, ValueSource, ValueSourceType};
use crate::api::{Agent, MCPServer, ModelConfig, RemoteMCPServer};
use crate::apiserver::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::contract::mounts::GATE_CONFIG_ITEM;

/// Name of the ModelConfig used when an Agent names none.
pub const DEFAULT_MODEL_CONFIG: &str = "default-model-config";

/// Kinds of objects an Agent can reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefKind {
    /// kagent.dev/v1alpha2 ModelConfig.
    ModelConfig,
    /// kagent.dev/v1alpha2 RemoteMCPServer.
    RemoteMCPServer,
    /// core/v1 Service.
    Service,
    /// core/v1 Secret.
    Secret,
    /// core/v1 ConfigMap.
    ConfigMap,
    /// kagent.dev/v1alpha2 Agent (used as a tool).
    Agent,
    /// kmcp's kagent.dev/v1alpha1 MCPServer.
    MCPServer,
    /// core/v1 Namespace (cluster-scoped: its key has an empty namespace), read for its labels
    /// (`allowedNamespaces` selectors) and its existence (the proxy).
    Namespace,
}

impl RefKind {
    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ModelConfig => "ModelConfig",
            Self::RemoteMCPServer => "RemoteMCPServer",
            Self::Service => "Service",
            Self::Secret => "Secret",
            Self::ConfigMap => "ConfigMap",
            Self::Agent => "Agent",
            Self::MCPServer => "MCPServer",
            Self::Namespace => "Namespace",
        }
    }
}

impl From<ToolServerKind> for RefKind {
    fn from(kind: ToolServerKind) -> Self {
        match kind {
            ToolServerKind::RemoteMCPServer => Self::RemoteMCPServer,
            ToolServerKind::Service => Self::Service,
            ToolServerKind::MCPServer => Self::MCPServer,
        }
    }
}

impl From<ValueSourceType> for RefKind {
    fn from(kind: ValueSourceType) -> Self {
        match kind {
            ValueSourceType::Secret => Self::Secret,
            ValueSourceType::ConfigMap => Self::ConfigMap,
        }
    }
}

/// Identity of a referenced object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Kind of the object.
    pub kind: RefKind,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
}

impl ObjectKey {
    /// The key of `kind` `namespace/name`.
    pub fn new(kind: RefKind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind == RefKind::Namespace {
            write!(f, "Namespace {}", self.name)
        } else {
            write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
        }
    }
}

type ByName<T> = BTreeMap<(String, String), T>;

/// The referenced objects at hand, keyed by namespace and name.
#[derive(Clone, Debug, Default)]
pub struct RefStore {
    model_configs: ByName<ModelConfig>,
    remote_mcp_servers: ByName<RemoteMCPServer>,
    services: ByName<Service>,
    secrets: ByName<Secret>,
    config_maps: ByName<ConfigMap>,
    agents: ByName<Agent>,
    mcp_servers: ByName<MCPServer>,
    namespaces: BTreeMap<String, Namespace>,
}

fn key_of<K: kube::Resource>(object: &K) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

fn lookup<'a, T>(map: &'a ByName<T>, namespace: &str, name: &str) -> Option<&'a T> {
    map.get(&(namespace.to_owned(), name.to_owned()))
}

impl RefStore {
    /// Adds or replaces a ModelConfig.
    pub fn insert_model_config(&mut self, object: ModelConfig) {
        self.model_configs.insert(key_of(&object), object);
    }

    /// Adds or replaces a RemoteMCPServer.
    pub fn insert_remote_mcp_server(&mut self, object: RemoteMCPServer) {
        self.remote_mcp_servers.insert(key_of(&object), object);
    }

    /// Adds or replaces a Service.
    pub fn insert_service(&mut self, object: Service) {
        self.services.insert(key_of(&object), object);
    }

    /// Adds or replaces a Secret.
    pub fn insert_secret(&mut self, object: Secret) {
        self.secrets.insert(key_of(&object), object);
    }

    /// Adds or replaces a ConfigMap.
    pub fn insert_config_map(&mut self, object: ConfigMap) {
        self.config_maps.insert(key_of(&object), object);
    }

    /// Adds or replaces an Agent (one used as a tool).
    pub fn insert_agent(&mut self, object: Agent) {
        self.agents.insert(key_of(&object), object);
    }

    /// Adds or replaces a kmcp MCPServer.
    pub fn insert_mcp_server(&mut self, object: MCPServer) {
        self.mcp_servers.insert(key_of(&object), object);
    }

    /// Adds or replaces a Namespace.
    pub fn insert_namespace(&mut self, object: Namespace) {
        self.namespaces.insert(object.name_any(), object);
    }

    /// The labels of Namespace `name`, if it is at hand.
    pub fn namespace_labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.namespace(name).map(|namespace| namespace.labels())
    }

    /// An Agent by namespace and name.
    pub fn agent(&self, namespace: &str, name: &str) -> Option<&Agent> {
        lookup(&self.agents, namespace, name)
    }

    /// A kmcp MCPServer by namespace and name.
    pub fn mcp_server(&self, namespace: &str, name: &str) -> Option<&MCPServer> {
        lookup(&self.mcp_servers, namespace, name)
    }

    /// A Namespace by name.
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(name)
    }

    /// A ModelConfig by namespace and name.
    pub fn model_config(&self, namespace: &str, name: &str) -> Option<&ModelConfig> {
        lookup(&self.model_configs, namespace, name)
    }

    /// A RemoteMCPServer by namespace and name.
    pub fn remote_mcp_server(&self, namespace: &str, name: &str) -> Option<&RemoteMCPServer> {
        lookup(&self.remote_mcp_servers, namespace, name)
    }

    /// A Service by namespace and name.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        lookup(&self.services, namespace, name)
    }

    /// A Secret by namespace and name.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<&Secret> {
        lookup(&self.secrets, namespace, name)
    }

    /// A ConfigMap by namespace and name.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<&ConfigMap> {
        lookup(&self.config_maps, namespace, name)
    }

    /// Whether the object is present.
    pub fn contains(&self, key: &ObjectKey) -> bool {
        let (ns, name) = (key.namespace.as_str(), key.name.as_str());
        match key.kind {
            RefKind::ModelConfig => self.model_config(ns, name).is_some(),
            RefKind::RemoteMCPServer => self.remote_mcp_server(ns, name).is_some(),
            RefKind::Service => self.service(ns, name).is_some(),
            RefKind::Secret => self.secret(ns, name).is_some(),
            RefKind::ConfigMap => self.config_map(ns, name).is_some(),
            RefKind::Agent => self.agent(ns, name).is_some(),
            RefKind::MCPServer => self.mcp_server(ns, name).is_some(),
            RefKind::Namespace => self.namespace(name).is_some(),
        }
    }
}

fn value_source_key(source: &ValueSource, namespace: &str) -> ObjectKey {
    ObjectKey::new(source.source_type.into(), namespace, &source.name)
}

fn header_keys<'a>(
    headers: &'a [ValueRef],
    namespace: &'a str,
) -> impl Iterator<Item = ObjectKey> + 'a {
    headers
        .iter()
        .filter_map(move |header| header.value_from.as_ref())
        .map(move |source| value_source_key(source, namespace))
}

/// Every object the Agent references directly, plus those referenced by the objects already
/// in `store`: a tool server's headersFrom, a ModelConfig's Bedrock credentials Secret, the
/// Agent's own Namespace when a server in another namespace allows namespaces by selector, the
/// namespace a server URL names (only `proxied`: it decides whether the proxy is used), and,
/// through Agents used as tools, the whole chain of agent tools (to check it for cycles).
/// Sorted and without duplicates.
pub fn agent_references(agent: &Agent, store: &RefStore, proxied: bool) -> Vec<ObjectKey> {
    let namespace = agent.namespace().unwrap_or_default();
    let mut keys = BTreeSet::new();
    let Some(declarative) = &agent.spec.declarative else {
        return Vec::new();
    };
    let model = declarative
        .model_config
        .as_deref()
        .unwrap_or(DEFAULT_MODEL_CONFIG);
    let memory = declarative.memory.as_ref().map(|m| m.model_config.as_str());
    let summarizer = declarative
        .context
        .as_ref()
        .and_then(|c| c.compaction.as_ref())
        .and_then(|c| c.summarizer.as_ref())
        .and_then(|s| s.model_config.as_deref())
        .filter(|name| !name.is_empty());
    for name in std::iter::once(model).chain(memory).chain(summarizer) {
        keys.insert(ObjectKey::new(RefKind::ModelConfig, &namespace, name));
        // Rendering reads which keys a Bedrock credentials Secret holds.
        if let Some(secret) = store
            .model_config(&namespace, name)
            .and_then(|model| model.spec.bedrock_secret())
        {
            keys.insert(ObjectKey::new(RefKind::Secret, &namespace, secret));
        }
    }
    if let Some(source) = &declarative.system_message_from {
        keys.insert(value_source_key(source, &namespace));
    }
    for source in declarative
        .prompt_template
        .iter()
        .flat_map(|t| &t.data_sources)
    {
        keys.insert(ObjectKey::new(RefKind::ConfigMap, &namespace, &source.name));
    }
    for tool in &declarative.tools {
        keys.extend(header_keys(&tool.headers_from, &namespace));
        if let Some(server) = &tool.mcp_server {
            let server_namespace = server.namespace.as_deref().unwrap_or(&namespace);
            let kind = server.kind.unwrap_or_default();
            keys.insert(ObjectKey::new(kind.into(), server_namespace, &server.name));
            if kind == ToolServerKind::RemoteMCPServer
                && let Some(remote) = store.remote_mcp_server(server_namespace, &server.name)
            {
                keys.extend(header_keys(&remote.spec.headers_from, server_namespace));
                if let Some(host_namespace) = url_namespace(&remote.spec.url).filter(|_| proxied) {
                    keys.insert(ObjectKey::new(RefKind::Namespace, "", &host_namespace));
                }
                // A server in another namespace that allows namespaces by label: the Agent's
                // own namespace decides, by its labels.
                let by_selector = remote
                    .spec
                    .allowed_namespaces
                    .as_ref()
                    .is_some_and(|allowed| allowed.from == FromNamespaces::Selector);
                if server_namespace != namespace && by_selector {
                    keys.insert(ObjectKey::new(RefKind::Namespace, "", &namespace));
                }
            }
        }
    }
    agent_tool_chain(agent, store, &mut keys);
    keys.into_iter().collect()
}

/// Adds the Agents reachable through agent tools, and the namespaces they are called from
/// when that crosses namespaces (their labels decide `allowedNamespaces` selectors).
fn agent_tool_chain(agent: &Agent, store: &RefStore, keys: &mut BTreeSet<ObjectKey>) {
    let mut queue = vec![agent.clone()];
    let mut seen = BTreeSet::new();
    while let Some(caller) = queue.pop() {
        let caller_namespace = caller.namespace().unwrap_or_default();
        if !seen.insert((caller_namespace.clone(), caller.name_any())) {
            continue;
        }
        for target in agent_tool_targets(&caller) {
            keys.insert(ObjectKey::new(RefKind::Agent, &target.0, &target.1));
            if target.0 != caller_namespace {
                keys.insert(ObjectKey::new(RefKind::Namespace, "", &caller_namespace));
            }
            if let Some(next) = store.agent(&target.0, &target.1) {
                queue.push(next.clone());
            }
        }
    }
}

/// (namespace, name) of every Agent that `agent` uses as a tool.
pub fn agent_tool_targets(agent: &Agent) -> Vec<(String, String)> {
    let namespace = agent.namespace().unwrap_or_default();
    agent
        .spec
        .declarative
        .iter()
        .flat_map(|d| &d.tools)
        .filter_map(|tool| tool.agent.as_ref())
        .map(|target| {
            (
                target
                    .namespace
                    .clone()
                    .unwrap_or_else(|| namespace.clone()),
                target.name.clone(),
            )
        })
        .collect()
}

/// The namespace a `http://name.namespace[:port]/...` URL names, as kagent reads it: a host of
/// exactly two labels. Whether it is one depends on that Namespace existing.
pub fn url_namespace(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    match host.split('.').collect::<Vec<_>>().as_slice() {
        [_, namespace] => Some((*namespace).to_owned()),
        _ => None,
    }
}

/// The references of `agent` that are not in `store` yet. Fetch them, insert them and call
/// again until it returns nothing: a RemoteMCPServer's own references only appear once the
/// server is in the store. `proxied`: whether the operator has a proxy URL.
pub fn missing_refs(agent: &Agent, store: &RefStore, proxied: bool) -> Vec<ObjectKey> {
    agent_references(agent, store, proxied)
        .into_iter()
        .filter(|key| !store.contains(key))
        .collect()
}

/// Why a value could not be read from a Secret or ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingValue {
    /// The object does not exist.
    Object(ObjectKey),
    /// The object exists but lacks the key (or its value is not UTF-8).
    Key(ObjectKey, String),
    /// The Secret is one the controller renders for a gate ([`gate_secret`]), or the key is
    /// gate.json: never read by reference, which would send it where the referrer says.
    GateSecret(ObjectKey, String, &'static str),
}

impl MissingValue {
    /// The error for a reference held by `object` at `field`.
    pub fn into_error(self, object: &str, field: &str) -> crate::Error {
        let missing = match self {
            Self::Object(key) => key.to_string(),
            Self::Key(key, name) => format!("{key} key {name:?}"),
            Self::GateSecret(key, item, why) => {
                return crate::Error::InvalidSpec {
                    object: object.to_owned(),
                    field: field.to_owned(),
                    message: format!(
                        "Forbidden: key {item:?} of Secret {:?} is an approval gate's ({why}); it may not be read by reference",
                        key.name
                    ),
                };
            }
        };
        crate::Error::RefNotFound {
            object: object.to_owned(),
            field: field.to_owned(),
            missing,
        }
    }
}

/// Why `secret` is one the controller renders for a gate, if it is: its controller is an
/// Agent or a ToolGate (gate.json and config.json, the binding key), it carries our managed-by
/// label, or it is the token Secret of a gate's ServiceAccount (`<name>-gate`). Reading `item`
/// (gate.json) is refused from any Secret.
pub fn gate_secret(secret: &Secret, item: &str) -> Option<&'static str> {
    let group = format!("{}/{}", crate::api::GROUP, crate::api::VERSION);
    let rendered = secret.owner_references().iter().any(|owner| {
        owner.controller == Some(true)
            && owner.api_version == group
            && matches!(owner.kind.as_str(), "Agent" | "ToolGate")
    });
    let labelled = secret
        .labels()
        .get(MANAGED_BY_LABEL)
        .is_some_and(|by| by == MANAGED_BY);
    let gate_token = secret.type_.as_deref() == Some("kubernetes.io/service-account-token")
        && secret
            .annotations()
            .get("kubernetes.io/service-account.name")
            .is_some_and(|account| account.ends_with("-gate"));
    if rendered || labelled {
        Some("rendered by hitl-operator for an Agent or a ToolGate")
    } else if gate_token {
        Some("the token of a gate's ServiceAccount")
    } else if item == GATE_CONFIG_ITEM {
        Some("gate.json holds a gate's configuration and upstream credentials")
    } else {
        None
    }
}

impl RefStore {
    /// Reads the value a [`ValueSource`] points at, in `namespace`.
    pub fn value(&self, source: &ValueSource, namespace: &str) -> Result<String, MissingValue> {
        let key = value_source_key(source, namespace);
        let missing_key = |key: ObjectKey| MissingValue::Key(key, source.key.clone());
        match source.source_type {
            ValueSourceType::Secret => {
                let secret = self
                    .secret(namespace, &source.name)
                    .ok_or_else(|| MissingValue::Object(key.clone()))?;
                if let Some(why) = gate_secret(secret, &source.key) {
                    return Err(MissingValue::GateSecret(key, source.key.clone(), why));
                }
                let from_data = secret
                    .data
                    .as_ref()
                    .and_then(|data| data.get(&source.key))
                    .map(|bytes| String::from_utf8(bytes.0.clone()));
                let from_string_data = secret
                    .string_data
                    .as_ref()
                    .and_then(|data| data.get(&source.key))
                    .cloned();
                match (from_string_data, from_data) {
                    (Some(text), _) | (None, Some(Ok(text))) => Ok(text),
                    _ => Err(missing_key(key)),
                }
            }
            ValueSourceType::ConfigMap => self
                .config_map(namespace, &source.name)
                .ok_or_else(|| MissingValue::Object(key.clone()))?
                .data
                .as_ref()
                .and_then(|data| data.get(&source.key))
                .cloned()
                .ok_or_else(|| missing_key(key)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn memory_models_and_bedrock_credentials_are_references() {
        let agent: Agent = serde_json::from_value(json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"declarative": {"modelConfig": "claude", "memory": {"modelConfig": "emb"}}},
        }))
        .unwrap();
        let mut store = RefStore::default();
        let names = |store: &RefStore| -> Vec<String> {
            agent_references(&agent, store, false)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            names(&store),
            ["ModelConfig ns/claude", "ModelConfig ns/emb"]
        );
        store.insert_model_config(
            serde_json::from_value(json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig",
                "metadata": {"name": "claude", "namespace": "ns"},
                "spec": {"provider": "Bedrock", "model": "c", "apiKeySecret": "aws",
                    "bedrock": {"region": "us-east-1"}},
            }))
            .unwrap(),
        );
        assert_eq!(
            names(&store),
            [
                "ModelConfig ns/claude",
                "ModelConfig ns/emb",
                "Secret ns/aws"
            ]
        );
    }

    /// Issue 54: the Secrets the controller renders for gates are never read by reference.
    #[test]
    fn a_gates_secrets_are_not_read_by_reference() {
        let secret = |meta: serde_json::Value, type_: Option<&str>| -> Secret {
            serde_json::from_value(json!({
                "metadata": meta, "type": type_,
                "data": {"gate.json": "e30=", "key": "a2V5", "token": "dG9r"},
            }))
            .unwrap()
        };
        let source = |name: &str, key: &str| ValueSource {
            source_type: ValueSourceType::Secret,
            name: name.into(),
            key: key.into(),
        };
        let mut store = RefStore::default();
        store.insert_secret(secret(
            json!({"name": "pay-gate", "namespace": "ns", "ownerReferences": [{"apiVersion": "kagent.dev/v1alpha2", "kind": "ToolGate", "name": "pay", "uid": "u", "controller": true}]}),
            None,
        ));
        store.insert_secret(secret(
            json!({"name": "labelled", "namespace": "ns", "labels": {"app.kubernetes.io/managed-by": "hitl-operator"}}),
            None,
        ));
        store.insert_secret(secret(
            json!({"name": "pay-gate-token", "namespace": "ns", "annotations": {"kubernetes.io/service-account.name": "pay-gate"}}),
            Some("kubernetes.io/service-account-token"),
        ));
        store.insert_secret(secret(json!({"name": "mine", "namespace": "ns"}), None));
        for (name, key, why) in [
            (
                "pay-gate",
                "key",
                "rendered by hitl-operator for an Agent or a ToolGate",
            ),
            (
                "labelled",
                "token",
                "rendered by hitl-operator for an Agent or a ToolGate",
            ),
            (
                "pay-gate-token",
                "token",
                "the token of a gate's ServiceAccount",
            ),
            (
                "mine",
                "gate.json",
                "gate.json holds a gate's configuration and upstream credentials",
            ),
        ] {
            let refused = store.value(&source(name, key), "ns").unwrap_err();
            assert_eq!(
                refused
                    .clone()
                    .into_error("ToolGate ns/t", "spec.server.headersFrom[0]")
                    .to_string(),
                format!(
                    "ToolGate ns/t: spec.server.headersFrom[0]: Forbidden: key {key:?} of Secret {name:?} is an approval gate's ({why}); it may not be read by reference"
                ),
            );
        }
        assert_eq!(store.value(&source("mine", "token"), "ns").unwrap(), "tok");
    }
}
