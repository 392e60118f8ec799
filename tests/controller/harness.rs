//! Fixtures shared by the reconciler tests, which run against the test kit's scripted mock
//! apiserver (`hitl_test_kit::script`).

use std::sync::{Arc, Mutex};

use hitl_operator::api::{Agent, ApprovalRequest};
pub use hitl_operator::apiserver::applied::applied_by_us;
use hitl_operator::controller::compact::{Compact, Compactable};
use hitl_operator::controller::rendered::{RenderedKind, Summaries};
use hitl_operator::controller::{CacheSync, Clock, Context, Metrics, RequestsByAgent, Stores};
use hitl_operator::egress::destination::Destinations;
use hitl_operator::render::RenderOptions;
pub use hitl_test_kit::script::{
    Exchange, Recorded, already_exists, expect, failure, not_found, run_script,
};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};

/// A clock that stays where it is set.
pub struct FixedClock(pub Mutex<Timestamp>);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}

/// The query of the controller's server-side apply: its field manager, taking over fields.
pub const APPLY: &str = "?&force=true&fieldManager=hitl-operator";
/// The apply of an object believed new: without force, so one that exists after all conflicts.
pub const APPLY_NEW: &str = "?&fieldManager=hitl-operator";

/// A create of an object no watch knows of: applied unread, without taking over fields.
pub fn created(path: &str) -> [Exchange; 1] {
    [expect(
        http::Method::PATCH,
        &format!("{path}{APPLY_NEW}"),
        json!({}),
    )]
}

/// The bodies of the writes among `requests`, in order.
pub fn writes(requests: &[Recorded]) -> Vec<&Value> {
    requests
        .iter()
        .filter(|r| r.is_write())
        .map(|r| &r.body)
        .collect()
}

/// `object` as JSON.
pub fn json_of<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap()
}

/// A fixed instant, `seconds` after a base time.
pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

/// `object` as its cache holds it, as a reconciler gets it.
pub fn cached<K: Compactable>(object: K) -> Arc<Compact<K>> {
    Arc::new(Compact::new(object))
}

/// A listed (ready) store holding `objects`.
pub fn store_of<K>(objects: Vec<K>) -> Store<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    reader
}

/// A listed store of the cached summaries of rendered `objects`, each as the apiserver holds it
/// after our server-side apply of exactly the object (managedFields name all its fields ours),
/// with the names of the `others` of its kind: (kind, namespace, name).
pub fn rendered_store_of<K: RenderedKind + Default>(
    objects: Vec<K>,
    others: &[(&str, &str, &str)],
) -> Summaries<K> {
    let kind = K::kind(&());
    Summaries::listed(objects.into_iter().map(applied_by_us)).with_others(
        others
            .iter()
            .filter(|(of, _, _)| *of == kind)
            .map(|(_, namespace, name)| (*namespace, *name)),
    )
}

/// Cached objects for a test: everything empty unless set.
#[derive(Default)]
pub struct Cache {
    pub agents: Vec<Agent>,
    pub approvals: Vec<ApprovalRequest>,
    pub deployments: Vec<k8s_openapi::api::apps::v1::Deployment>,
    pub services: Vec<k8s_openapi::api::core::v1::Service>,
    pub secrets: Vec<k8s_openapi::api::core::v1::Secret>,
    pub service_accounts: Vec<k8s_openapi::api::core::v1::ServiceAccount>,
    pub roles: Vec<k8s_openapi::api::rbac::v1::Role>,
    pub role_bindings: Vec<k8s_openapi::api::rbac::v1::RoleBinding>,
    pub network_policies: Vec<k8s_openapi::api::networking::v1::NetworkPolicy>,
    pub namespaces: Vec<kube::api::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>,
    pub notifiers: Vec<hitl_operator::api::ApprovalNotifier>,
    pub model_configs: Vec<hitl_operator::api::ModelConfig>,
    pub remote_mcp_servers: Vec<hitl_operator::api::RemoteMCPServer>,
    pub tool_gates: Vec<hitl_operator::api::ToolGate>,
    /// The namespace the watches cover (`--namespace`); none: every namespace.
    pub scope: Option<String>,
    /// Where notifier messages may go besides the default (`--notifier-allow-cidrs`).
    pub notifier_destinations: Destinations,
    /// Objects of the rendered kinds that are not ours, as the watches of their names list
    /// them: (kind, namespace, name).
    pub others: Vec<(&'static str, &'static str, &'static str)>,
    /// The operator's render settings (the controller's flags).
    pub render: RenderOptions,
}

impl Cache {
    /// The context reconcilers get, with the clock at `now`.
    pub fn context(self, client: Client, now: Timestamp) -> Arc<Context> {
        let approvals: Vec<_> = self.approvals.into_iter().map(Compact::new).collect();
        let stores = Stores {
            agents: store_of(self.agents.into_iter().map(Compact::new).collect()),
            requests_by_agent: RequestsByAgent::listed(&approvals),
            approvals: store_of(approvals),
            deployments: rendered_store_of(self.deployments, &self.others),
            services: rendered_store_of(self.services, &self.others),
            secrets: rendered_store_of(self.secrets, &self.others),
            service_accounts: rendered_store_of(self.service_accounts, &self.others),
            roles: rendered_store_of(self.roles, &self.others),
            role_bindings: rendered_store_of(self.role_bindings, &self.others),
            network_policies: rendered_store_of(self.network_policies, &self.others),
            namespaces: store_of(self.namespaces),
            notifiers: store_of(self.notifiers),
            model_configs: store_of(self.model_configs),
            remote_mcp_servers: store_of(self.remote_mcp_servers),
            tool_gates: store_of(self.tool_gates),
            scope: self.scope,
        };
        Arc::new(
            Context::new(
                client,
                Arc::new(FixedClock(Mutex::new(now))),
                Arc::new(Metrics::default()),
                self.render,
                stores,
                CacheSync::default(),
                Some("test".into()),
            )
            .with_notifier_destinations(self.notifier_destinations),
        )
    }
}

/// The answer to an Event POST.
pub fn event_created() -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"}, "eventTime": null})
}

/// Parses YAML into a typed object.
pub fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_saphyr::from_str(text).expect("fixture YAML")
}

/// `(type, status, reason)` of each condition in a status body.
pub fn conditions(body: &Value) -> Vec<(String, String, String)> {
    body["status"]["conditions"]
        .as_array()
        .map(|conditions| {
            conditions
                .iter()
                .map(|c| {
                    (
                        c["type"].as_str().unwrap_or_default().to_string(),
                        c["status"].as_str().unwrap_or_default().to_string(),
                        c["reason"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The message of condition `type_` in a status body.
pub fn condition_message(body: &Value, type_: &str) -> String {
    body["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}
