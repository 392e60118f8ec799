//! The Kubernetes objects of an Agent: Secret, ServiceAccount, Role, RoleBinding, Deployment
//! and Service. The approval gate runs as a native sidecar in the agent's pods (Sidecar
//! placement) or as a Deployment and Service of its own behind two NetworkPolicies (Gateway).
//! A gate of its own is built by the same functions for an Agent in Gateway placement and for
//! a ToolGate ([`GateOwner`], [`GatePod`]).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection,
    DownwardAPIVolumeFile, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector,
    PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource, ResourceRequirements, SeccompProfile,
    Secret, SecretVolumeSource, SecurityContext, Service, ServiceAccount,
    ServiceAccountTokenProjection, ServicePort, ServiceSpec, Toleration, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::agent::DeclarativeDeploymentSpec;
use crate::api::approval_request::PolicyKind;
use crate::api::{Agent, ApprovalMode, GatePlacement, ToolGate};
use crate::apiserver::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::contract::gate_config::{GATE_METRICS_PORT, GATE_PORT};
use crate::contract::mounts::{
    AGENT_CARD_ITEM, AGENT_CONFIG_ITEM, BINDING_KEY_DIR, BINDING_KEY_ITEM, BINDING_KEY_PATH,
    CONFIG_DIR, GATE_CONFIG_DIR, GATE_CONFIG_ITEM, GATE_CONFIG_PATH, SERVICE_ACCOUNT_DIR,
};
use crate::render::RenderOptions;
use crate::render::model::RenderedModel;
use crate::render::network::{self, PolicyInputs};
use crate::render::session_api::{SessionApi, token_mount};
use crate::render::skills::SkillsPod;

/// Port of the agent runtime (A2A).
pub const AGENT_PORT: i32 = 8080;
/// Pod template annotation that changes whenever anything rendered changes.
pub const CONFIG_HASH_ANNOTATION: &str = "kagent.dev/config-hash";
/// Label carrying the agent name on everything rendered (and the pod selector).
pub const AGENT_LABEL: &str = "kagent.dev/agent";
/// Label carrying the ToolGate name on everything rendered for it (and its gate pods'
/// selector). Reserved like [`GATE_POD_LABEL`]: an Agent's pods carrying it would be
/// endpoints of the ToolGate's Service, and see its callers' tokens.
pub const TOOL_GATE_LABEL: &str = "kagent.dev/toolgate";
/// Label carrying the agent name on the gate pods of Gateway placement (and their selector);
/// they never carry [`AGENT_LABEL`], so neither the agent's Deployment nor its Service and
/// NetworkPolicy selects them. Reserved: an Agent's `deployment.labels` may not set it.
pub const GATE_POD_LABEL: &str = "kagent.dev/approval-gate";
/// Name of the agent container.
pub const AGENT_CONTAINER: &str = "agent";
/// Name of the approval gate sidecar.
pub const GATE_CONTAINER: &str = "approval-gate";
/// The RBAC verb on an Agent, held only by its gate's Role, that lets an identity record the
/// uses of the Agent's ApprovalGrants (checked by the chart's admission policy).
pub const GATE_VERB: &str = "gate";
/// The gate's volume holding gate.json (the tool servers' URLs and credentials), from the
/// Agent's Secret; only the gate container mounts it.
const GATE_CONFIG_VOLUME: &str = "gate-config";
/// The gate's volume holding the binding key; only the gate container mounts it.
const BINDING_KEY_VOLUME: &str = "binding-key";
/// The gate's volume holding its ServiceAccount token; only the gate container mounts it.
const GATE_TOKEN_VOLUME: &str = "gate-token";
/// Lifetime requested for the gate's projected token (the kubelet refreshes it).
const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
/// Unprivileged user the gate runs as.
const GATE_USER: i64 = 65532;

/// The objects to apply for one Agent, all owned by it.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentObjects {
    /// config.json, agent-card.json and (with a gate) gate.json.
    pub secret: Secret,
    /// The pod identity, unless the Agent names an existing one.
    pub service_account: Option<ServiceAccount>,
    /// What the gate may do with ApprovalRequests (Gate and Both modes).
    pub role: Option<Role>,
    /// Binds [`Self::role`] to the pod's ServiceAccount.
    pub role_binding: Option<RoleBinding>,
    /// The agent pods.
    pub deployment: Deployment,
    /// The agent's A2A endpoint.
    pub service: Service,
    /// The gate's own objects, in Gateway placement.
    pub gateway: Option<GatewayObjects>,
}

/// What Gateway placement adds: the gate as a Deployment and Service `<agent>-gate` with a
/// ServiceAccount of its own, and the NetworkPolicies `<agent>-gate` and `<agent>-egress`.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayObjects {
    /// The gate pods' identity, the only one bound to the ApprovalRequest Role.
    pub service_account: ServiceAccount,
    /// The gate pods.
    pub deployment: Deployment,
    /// The gate's MCP endpoint (ClientIP affinity: an MCP session lives in one gate process).
    pub service: Service,
    /// Ingress to the gate pods and egress of the agent pods.
    pub network_policies: [NetworkPolicy; 2],
}

impl AgentObjects {
    /// The ServiceAccounts: the agent's (unless it names its own) and the gate's.
    pub fn service_accounts(&self) -> Vec<&ServiceAccount> {
        let gate = self.gateway.as_ref().map(|g| &g.service_account);
        self.service_account.iter().chain(gate).collect()
    }

    /// The NetworkPolicies (Gateway placement only).
    pub fn network_policies(&self) -> Vec<&NetworkPolicy> {
        self.gateway
            .iter()
            .flat_map(|g| &g.network_policies)
            .collect()
    }

    /// The Deployments: the agent's, and the gate's.
    pub fn deployments(&self) -> Vec<&Deployment> {
        let gate = self.gateway.as_ref().map(|g| &g.deployment);
        std::iter::once(&self.deployment).chain(gate).collect()
    }

    /// The Services: the agent's, and the gate's.
    pub fn services(&self) -> Vec<&Service> {
        let gate = self.gateway.as_ref().map(|g| &g.service);
        std::iter::once(&self.service).chain(gate).collect()
    }

    /// Every object as JSON, in apply order: dependencies first, and the NetworkPolicies
    /// before the pods they confine.
    pub fn to_values(&self) -> serde_json::Result<Vec<serde_json::Value>> {
        fn push<T: serde::Serialize>(
            values: &mut Vec<serde_json::Value>,
            objects: impl IntoIterator<Item = T>,
        ) -> serde_json::Result<()> {
            for object in objects {
                values.push(serde_json::to_value(object)?);
            }
            Ok(())
        }
        let mut values = vec![serde_json::to_value(&self.secret)?];
        push(&mut values, self.service_accounts())?;
        push(&mut values, &self.role)?;
        push(&mut values, &self.role_binding)?;
        push(&mut values, self.network_policies())?;
        push(&mut values, self.deployments())?;
        push(&mut values, self.services())?;
        Ok(values)
    }
}

/// The object a gate works for, which owns the gate's objects: an Agent, or a ToolGate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateOwner {
    /// Agent or ToolGate.
    pub kind: PolicyKind,
    /// Its name.
    pub name: String,
    /// Its namespace (that of every object it owns).
    pub namespace: String,
    /// Its uid, for the owner references.
    pub uid: String,
}

impl GateOwner {
    /// The Agent `agent`.
    pub fn agent(agent: &Agent) -> Self {
        Self {
            kind: PolicyKind::Agent,
            name: agent.name_any(),
            namespace: agent.namespace().unwrap_or_default(),
            uid: agent.uid().unwrap_or_default(),
        }
    }

    /// The ToolGate `tool_gate`.
    pub fn tool_gate(tool_gate: &ToolGate) -> Self {
        Self {
            kind: PolicyKind::ToolGate,
            name: tool_gate.name_any(),
            namespace: tool_gate.namespace().unwrap_or_default(),
            uid: tool_gate.uid().unwrap_or_default(),
        }
    }

    /// The controller owner reference every owned object carries.
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: format!("{}/{}", crate::api::GROUP, crate::api::VERSION),
            kind: self.kind.as_str().to_owned(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// Name of the gate's own Deployment, Service and ServiceAccount: `<name>-gate`.
    pub fn gate_name(&self) -> String {
        format!("{}-gate", self.name)
    }

    /// The in-cluster base URL of the gate's Service: `http://<name>-gate.<namespace>.svc:8099`.
    pub fn gate_url(&self) -> String {
        format!(
            "http://{}.{}.svc:{GATE_PORT}",
            self.gate_name(),
            self.namespace
        )
    }

    /// The Secret holding gate.json (and, of an Agent, config.json), with `data`.
    pub fn config_secret(&self, data: &BTreeMap<String, Vec<u8>>) -> Secret {
        Secret {
            metadata: self.metadata(self.config_secret_name(), self.labels()),
            type_: Some("Opaque".to_owned()),
            data: Some(
                data.iter()
                    .map(|(key, value)| (key.clone(), ByteString(value.clone())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    /// Name of the Secret holding gate.json: an Agent's own Secret (`<agent>`, beside
    /// config.json), a ToolGate's `<name>-gate`.
    pub fn config_secret_name(&self) -> String {
        match self.kind {
            PolicyKind::Agent => self.name.clone(),
            PolicyKind::ToolGate => self.gate_name(),
        }
    }

    /// Name of the Secret holding the binding key: `<agent>-binding-key`,
    /// `<toolgate>-gate-binding-key`.
    pub fn binding_key_secret_name(&self) -> String {
        format!("{}-binding-key", self.config_secret_name())
    }

    /// Name of the Role and RoleBinding of the gate: `<agent>-approval-gate`, `<toolgate>-gate`.
    pub fn role_name(&self) -> String {
        match self.kind {
            PolicyKind::Agent => format!("{}-approval-gate", self.name),
            PolicyKind::ToolGate => self.gate_name(),
        }
    }

    /// Labels of every object the owner renders (and its binding key): for an Agent its name
    /// under [`AGENT_LABEL`] (the agent pods' selector), for a ToolGate under
    /// [`TOOL_GATE_LABEL`].
    pub fn labels(&self) -> BTreeMap<String, String> {
        let (app, label) = match self.kind {
            PolicyKind::Agent => ("agent", AGENT_LABEL),
            PolicyKind::ToolGate => ("approval-gate", TOOL_GATE_LABEL),
        };
        BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), app.to_owned()),
            ("app.kubernetes.io/instance".to_owned(), self.name.clone()),
            (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
            (label.to_owned(), self.name.clone()),
        ])
    }

    /// Metadata of an owned object `name` with `labels`.
    fn metadata(&self, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![self.owner_reference()]),
            ..ObjectMeta::default()
        }
    }

    /// The volumes the gate container mounts, and no other: gate.json from the owner's
    /// Secret, the binding key and the token. In the agent's pods in Sidecar placement, in the
    /// gate's own otherwise.
    pub fn gate_volumes(&self) -> Vec<Volume> {
        vec![
            secret_items_volume(
                GATE_CONFIG_VOLUME,
                &self.config_secret_name(),
                &[GATE_CONFIG_ITEM],
            ),
            secret_items_volume(
                BINDING_KEY_VOLUME,
                &self.binding_key_secret_name(),
                &[BINDING_KEY_ITEM],
            ),
            gate_token_volume(),
        ]
    }

    /// The gate's Role: what it may do with ApprovalRequests (and, with grants on, with
    /// ApprovalGrants), and on its owner only, read it (a freeze) and the verb [`GATE_VERB`].
    pub fn gate_role(&self, grants: bool) -> Role {
        let rule = |resources: &str, names: Option<Vec<String>>, verbs: &[&str]| PolicyRule {
            api_groups: Some(vec![crate::api::GROUP.to_owned()]),
            resources: Some(vec![resources.to_owned()]),
            resource_names: names,
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        };
        let mut rules = vec![
            rule(
                "approvalrequests",
                None,
                &["create", "get", "list", "watch"],
            ),
            rule("approvalrequests/status", None, &["patch"]),
            // Its own owner only: the gate watches it for a freeze (api::freeze), and the
            // verb `gate` names it the owner's gate, the only writer of the uses of the
            // owner's grants that the admission policy lets through.
            rule(
                self.kind.plural(),
                Some(vec![self.name.clone()]),
                &["get", "list", "watch", GATE_VERB],
            ),
        ];
        if grants {
            // Grants: read them, and record their uses (gate::grants). Never create them.
            rules.extend([
                rule("approvalgrants", None, &["get", "list"]),
                rule("approvalgrants/status", None, &["patch"]),
            ]);
        }
        Role {
            metadata: self.metadata(self.role_name(), self.labels()),
            rules: Some(rules),
        }
    }

    /// Binds [`Self::gate_role`] to the ServiceAccount `service_account` the gate runs as.
    pub fn gate_role_binding(&self, service_account: String) -> RoleBinding {
        RoleBinding {
            metadata: self.metadata(self.role_name(), self.labels()),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_owned(),
                kind: "Role".to_owned(),
                name: self.role_name(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: service_account,
                namespace: Some(self.namespace.clone()),
                api_group: None,
            }]),
        }
    }
}

/// The pods of a gate of its own (an Agent's Gateway, a ToolGate): what differs between
/// owners; [`GatePod::deployment`], [`GatePod::service`] and [`GatePod::service_account`]
/// build the rest alike.
pub struct GatePod<'a> {
    /// Whose gate it is.
    pub owner: &'a GateOwner,
    /// Labels of the Deployment, Service and ServiceAccount.
    pub labels: BTreeMap<String, String>,
    /// Selector of the gate pods (a subset of `pod_labels`).
    pub selector: BTreeMap<String, String>,
    /// Labels of the gate pods.
    pub pod_labels: BTreeMap<String, String>,
    /// Gate image.
    pub image: &'a str,
    /// Value of the config-hash annotation.
    pub config_hash: &'a str,
    /// Number of gate pods.
    pub replicas: i32,
    /// Resources of the gate container (its defaults when `None`).
    pub resources: Option<ResourceRequirements>,
    /// Pull secrets of the pods.
    pub image_pull_secrets: Vec<k8s_openapi::api::core::v1::LocalObjectReference>,
    /// Node selector of the pods.
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the pods.
    pub tolerations: Vec<Toleration>,
    /// Affinity of the pods.
    pub affinity: Option<Affinity>,
}

impl GatePod<'_> {
    /// The gate as a Deployment of its own: the same container as the sidecar, as the pod's
    /// main container, serving MCP on [`GATE_PORT`] for the gate Service.
    pub fn deployment(&self) -> Deployment {
        let owner = self.owner;
        let mut container = gate_container(self.image);
        // restartPolicy is for init containers only; a main container restarts with its pod.
        container.restart_policy = None;
        if let Some(resources) = &self.resources {
            container.resources = Some(resources.clone());
        }
        container.ports.get_or_insert_with(Vec::new).insert(
            0,
            ContainerPort {
                name: Some("mcp".to_owned()),
                container_port: GATE_PORT,
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            },
        );
        Deployment {
            metadata: owner.metadata(owner.gate_name(), self.labels.clone()),
            spec: Some(DeploymentSpec {
                replicas: Some(self.replicas),
                selector: LabelSelector {
                    match_labels: Some(self.selector.clone()),
                    match_expressions: None,
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.pod_labels.clone()),
                        annotations: Some(BTreeMap::from([(
                            CONFIG_HASH_ANNOTATION.to_owned(),
                            self.config_hash.to_owned(),
                        )])),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        service_account_name: Some(owner.gate_name()),
                        automount_service_account_token: Some(false),
                        containers: vec![container],
                        volumes: Some(owner.gate_volumes()),
                        image_pull_secrets: non_empty(self.image_pull_secrets.clone()),
                        node_selector: non_empty_map(self.node_selector.clone()),
                        tolerations: non_empty(self.tolerations.clone()),
                        affinity: self.affinity.clone(),
                        ..PodSpec::default()
                    }),
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        }
    }

    /// The gate's MCP endpoint (ClientIP affinity: an MCP session lives in one gate process).
    pub fn service(&self) -> Service {
        Service {
            metadata: self
                .owner
                .metadata(self.owner.gate_name(), self.labels.clone()),
            spec: Some(ServiceSpec {
                selector: Some(self.selector.clone()),
                ports: Some(vec![ServicePort {
                    name: Some("mcp".to_owned()),
                    port: GATE_PORT,
                    target_port: Some(IntOrString::Int(GATE_PORT)),
                    protocol: Some("TCP".to_owned()),
                    ..ServicePort::default()
                }]),
                session_affinity: Some("ClientIP".to_owned()),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    /// The gate pods' identity, the only one bound to the gate's Role.
    pub fn service_account(&self) -> ServiceAccount {
        ServiceAccount {
            metadata: self
                .owner
                .metadata(self.owner.gate_name(), self.labels.clone()),
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        }
    }
}

/// What [`build`] works from.
pub struct ObjectInputs<'a> {
    /// The Agent.
    pub agent: &'a Agent,
    /// Operator settings (images).
    pub options: &'a RenderOptions,
    /// Effective approval mode.
    pub mode: ApprovalMode,
    /// Where the gate runs (when `mode` uses it).
    pub placement: GatePlacement,
    /// Model environment and volumes.
    pub model: &'a RenderedModel,
    /// What the Agent's skills add to the pod.
    pub skills: Option<&'a SkillsPod>,
    /// Content of the Secret.
    pub secret_data: BTreeMap<String, Vec<u8>>,
    /// Value of the config-hash annotation.
    pub config_hash: &'a str,
    /// Who serves the runtime's sessions and tasks.
    pub session_api: &'a SessionApi,
}

impl ObjectInputs<'_> {
    /// Whether the gate runs, and where.
    fn gate_placement(&self) -> Option<GatePlacement> {
        self.mode.uses_gate().then_some(self.placement)
    }
}

/// Name of the gate's Deployment, Service, ServiceAccount and NetworkPolicy in Gateway
/// placement: `<agent>-gate`.
pub fn gate_name(agent: &Agent) -> String {
    GateOwner::agent(agent).gate_name()
}

/// The ServiceAccount the gate runs as: the agent pods' in Sidecar placement, its own in
/// Gateway placement.
pub fn gate_service_account_name(agent: &Agent, placement: GatePlacement) -> String {
    match placement {
        GatePlacement::Sidecar => service_account_name(agent),
        GatePlacement::Gateway => gate_name(agent),
    }
}

/// The ServiceAccount the agent pods run as.
pub fn service_account_name(agent: &Agent) -> String {
    agent
        .spec
        .declarative
        .as_ref()
        .and_then(|d| d.deployment.as_ref())
        .and_then(|d| d.service_account_name.clone())
        .unwrap_or_else(|| agent.name_any())
}

/// Labels on every rendered object.
pub fn common_labels(agent: &Agent) -> BTreeMap<String, String> {
    GateOwner::agent(agent).labels()
}

fn metadata(agent: &Agent, name: String) -> ObjectMeta {
    GateOwner::agent(agent).metadata(name, common_labels(agent))
}

fn selector_labels(agent: &Agent) -> BTreeMap<String, String> {
    BTreeMap::from([(AGENT_LABEL.to_owned(), agent.name_any())])
}

/// Labels of the gate's own objects (Gateway placement): the Agent's, named `approval-gate`.
fn gate_labels(agent: &Agent) -> BTreeMap<String, String> {
    let mut labels = common_labels(agent);
    labels.insert(
        "app.kubernetes.io/name".to_owned(),
        "approval-gate".to_owned(),
    );
    labels
}

/// Selector of the gate pods (Gateway placement).
fn gate_selector_labels(agent: &Agent) -> BTreeMap<String, String> {
    BTreeMap::from([(GATE_POD_LABEL.to_owned(), agent.name_any())])
}

/// Labels of the gate pods: never [`AGENT_LABEL`].
fn gate_pod_labels(agent: &Agent) -> BTreeMap<String, String> {
    let mut labels = gate_selector_labels(agent);
    labels.extend([
        (
            "app.kubernetes.io/name".to_owned(),
            "approval-gate".to_owned(),
        ),
        ("app.kubernetes.io/instance".to_owned(), agent.name_any()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
    ]);
    labels
}

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_owned(), Quantity(cpu.to_owned())),
        ("memory".to_owned(), Quantity(memory.to_owned())),
    ])
}

/// The apiVersion of every fieldRef, written out although the apiserver defaults it: a
/// fieldRef is owned whole, so a default filled in would make the applied fields differ from
/// the rendered ones, and every controller start would read each Deployment to find it applied.
const FIELD_REF_API_VERSION: &str = "v1";

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                api_version: Some(FIELD_REF_API_VERSION.to_owned()),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn secret_items_volume(name: &str, secret: &str, keys: &[&str]) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items: Some(
                keys.iter()
                    .map(|key| KeyToPath {
                        key: (*key).to_owned(),
                        path: (*key).to_owned(),
                        mode: None,
                    })
                    .collect(),
            ),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The ServiceAccount token, projected into the gate container only: the agent container
/// gets no Kubernetes credentials at all.
fn gate_token_volume() -> Volume {
    Volume {
        name: GATE_TOKEN_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_owned(),
                        expiration_seconds: Some(TOKEN_EXPIRATION_SECONDS),
                        audience: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_owned(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_owned(),
                            path: "ca.crt".to_owned(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_owned(),
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "metadata.namespace".to_owned(),
                                api_version: Some(FIELD_REF_API_VERSION.to_owned()),
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            default_mode: None,
        }),
        ..Volume::default()
    }
}

/// The gate sidecar: a native sidecar (init container with restartPolicy Always) so it is up
/// before the agent starts, locked down to the restricted Pod Security profile.
fn gate_container(image: &str) -> Container {
    let probe = |failure_threshold| Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".to_owned()),
            port: IntOrString::Int(GATE_METRICS_PORT),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(5),
        failure_threshold: Some(failure_threshold),
        ..Probe::default()
    };
    Container {
        name: GATE_CONTAINER.to_owned(),
        image: Some(image.to_owned()),
        args: Some(vec![
            "gate".to_owned(),
            "--config".to_owned(),
            GATE_CONFIG_PATH.to_owned(),
            "--binding-key".to_owned(),
            BINDING_KEY_PATH.to_owned(),
        ]),
        restart_policy: Some("Always".to_owned()),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("gate-metrics".to_owned()),
            container_port: GATE_METRICS_PORT,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        startup_probe: Some(probe(30)),
        liveness_probe: Some(probe(3)),
        readiness_probe: Some(probe(3)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities("10m", "32Mi")),
            limits: Some(quantities("500m", "128Mi")),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(GATE_USER),
            run_as_group: Some(GATE_USER),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                localhost_profile: None,
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            mount(GATE_CONFIG_VOLUME, GATE_CONFIG_DIR),
            mount(BINDING_KEY_VOLUME, BINDING_KEY_DIR),
            mount(GATE_TOKEN_VOLUME, SERVICE_ACCOUNT_DIR),
        ]),
        ..Container::default()
    }
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

fn non_empty_map<V>(map: BTreeMap<String, V>) -> Option<BTreeMap<String, V>> {
    (!map.is_empty()).then_some(map)
}

/// The default agent image, with its registry replaced by `registry` (kagent's imageRegistry).
fn agent_image(default: &str, registry: Option<&str>) -> String {
    match (registry.filter(|r| !r.is_empty()), default.split_once('/')) {
        (Some(registry), Some((_, repository))) => {
            format!("{}/{repository}", registry.trim_end_matches('/'))
        }
        _ => default.to_owned(),
    }
}

/// The Agent's `spec.declarative.deployment`, defaults where unset.
fn deployment_spec(agent: &Agent) -> DeclarativeDeploymentSpec {
    agent
        .spec
        .declarative
        .as_ref()
        .and_then(|d| d.deployment.as_deref().cloned())
        .unwrap_or_default()
}

fn agent_container(inputs: &ObjectInputs<'_>) -> Container {
    let agent = inputs.agent;
    let deployment = deployment_spec(agent);
    let mut env = vec![
        field_env("KAGENT_NAMESPACE", "metadata.namespace"),
        EnvVar {
            name: "KAGENT_NAME".to_owned(),
            value: Some(agent.name_any()),
            ..EnvVar::default()
        },
    ];
    env.extend(
        inputs
            .session_api
            .env(inputs.options.kagent_grpc_url.as_deref()),
    );
    env.extend(inputs.model.env.iter().cloned());
    env.extend(deployment.env);
    let mut volume_mounts = vec![mount("config", CONFIG_DIR), token_mount()];
    volume_mounts.extend(inputs.model.volume_mounts.iter().cloned());
    volume_mounts.extend(deployment.volume_mounts);
    let mut security_context = deployment.security_context;
    if let Some(skills) = inputs.skills {
        env.push(skills.env.clone());
        volume_mounts.push(skills.mount.clone());
        // kagent runs skills in a sandbox that needs a privileged container. Only without a
        // gate: a privileged container can reach the node, and from there gate.json.
        if !inputs.mode.uses_gate() {
            security_context
                .get_or_insert_with(SecurityContext::default)
                .privileged = Some(true);
        }
    }
    Container {
        name: AGENT_CONTAINER.to_owned(),
        image: Some(deployment.image.clone().unwrap_or_else(|| {
            agent_image(
                &inputs.options.agent_image,
                deployment.image_registry.as_deref(),
            )
        })),
        image_pull_policy: deployment
            .image_pull_policy
            .map(|policy| policy.as_str().to_owned()),
        args: Some(
            [
                "--host",
                "0.0.0.0",
                "--port",
                &AGENT_PORT.to_string(),
                "--filepath",
                CONFIG_DIR,
            ]
            .map(str::to_owned)
            .to_vec(),
        ),
        ports: Some(vec![ContainerPort {
            name: Some("http".to_owned()),
            container_port: AGENT_PORT,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        env: Some(env),
        resources: Some(
            deployment
                .resources
                .unwrap_or_else(|| ResourceRequirements {
                    requests: Some(quantities("100m", "384Mi")),
                    limits: Some(quantities("2", "1Gi")),
                    ..ResourceRequirements::default()
                }),
        ),
        // kagent's probe: the runtime serves its agent card once it serves A2A.
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/.well-known/agent-card.json".to_owned()),
                port: IntOrString::String("http".to_owned()),
                ..HTTPGetAction::default()
            }),
            initial_delay_seconds: Some(15),
            timeout_seconds: Some(15),
            period_seconds: Some(15),
            ..Probe::default()
        }),
        security_context,
        volume_mounts: Some(volume_mounts),
        ..Container::default()
    }
}

fn deployment(inputs: &ObjectInputs<'_>) -> Deployment {
    let agent = inputs.agent;
    let name = agent.name_any();
    let spec = deployment_spec(agent);
    let mut pod_labels = spec.labels.clone();
    pod_labels.extend(common_labels(agent));
    let mut pod_annotations = spec.annotations.clone();
    pod_annotations.insert(
        CONFIG_HASH_ANNOTATION.to_owned(),
        inputs.config_hash.to_owned(),
    );
    let mut volumes = vec![secret_items_volume(
        "config",
        &name,
        &[AGENT_CONFIG_ITEM, AGENT_CARD_ITEM],
    )];
    volumes.push(inputs.session_api.token_volume());
    volumes.extend(inputs.model.volumes.iter().cloned());
    let mut init_containers = Vec::new();
    if inputs.gate_placement() == Some(GatePlacement::Sidecar) {
        volumes.extend(GateOwner::agent(agent).gate_volumes());
        init_containers.push(gate_container(&inputs.options.gate_image));
    }
    volumes.extend(spec.volumes.iter().cloned());
    if let Some(skills) = inputs.skills {
        init_containers.push(skills.init_container.clone());
        volumes.extend(skills.volumes.iter().cloned());
    }
    Deployment {
        metadata: metadata(agent, name),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas.unwrap_or(1)),
            selector: LabelSelector {
                match_labels: Some(selector_labels(agent)),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(service_account_name(agent)),
                    automount_service_account_token: Some(false),
                    init_containers: non_empty(init_containers),
                    containers: vec![agent_container(inputs)],
                    volumes: Some(volumes),
                    image_pull_secrets: non_empty(spec.image_pull_secrets.clone()),
                    node_selector: non_empty_map(spec.node_selector.clone()),
                    tolerations: non_empty(spec.tolerations.clone()),
                    affinity: spec.affinity.clone(),
                    security_context: spec.pod_security_context.clone(),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// The Secret holding the binding key (`key`) of `owner`'s gate, which only the gate mounts.
/// The controller creates it once with a random key and keeps it while the owner exists, so
/// every gate replica, and every restart, hashes a call alike.
pub fn binding_key_secret(owner: &GateOwner, key: &[u8]) -> Secret {
    Secret {
        metadata: owner.metadata(owner.binding_key_secret_name(), owner.labels()),
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            BINDING_KEY_ITEM.to_owned(),
            ByteString(key.to_vec()),
        )])),
        immutable: Some(true),
        ..Secret::default()
    }
}

/// The pods of Gateway placement.
fn gate_pod<'a>(inputs: &'a ObjectInputs<'_>, owner: &'a GateOwner) -> GatePod<'a> {
    let agent = inputs.agent;
    let spec = deployment_spec(agent);
    GatePod {
        owner,
        labels: gate_labels(agent),
        selector: gate_selector_labels(agent),
        pod_labels: gate_pod_labels(agent),
        image: &inputs.options.gate_image,
        config_hash: inputs.config_hash,
        replicas: spec.replicas.unwrap_or(1),
        resources: None,
        image_pull_secrets: spec.image_pull_secrets,
        node_selector: spec.node_selector,
        tolerations: spec.tolerations,
        affinity: None,
    }
}

/// The objects of Gateway placement.
fn gateway(inputs: &ObjectInputs<'_>) -> GatewayObjects {
    let agent = inputs.agent;
    let owner = GateOwner::agent(agent);
    let pod = gate_pod(inputs, &owner);
    let network_policies = network::policies(PolicyInputs {
        gate_metadata: owner.metadata(owner.gate_name(), gate_labels(agent)),
        egress_metadata: metadata(agent, format!("{}-egress", agent.name_any())),
        agent_pods: selector_labels(agent),
        gate_pods: gate_selector_labels(agent),
        gate_port: GATE_PORT,
        metrics_port: GATE_METRICS_PORT,
        cluster_cidrs: &inputs.options.cluster_cidrs,
        session_api: inputs.session_api.egress(&inputs.options.cluster_cidrs),
    });
    GatewayObjects {
        service_account: pod.service_account(),
        deployment: pod.deployment(),
        service: pod.service(),
        network_policies,
    }
}

/// Builds every object of an Agent.
pub fn build(inputs: &ObjectInputs<'_>) -> AgentObjects {
    let agent = inputs.agent;
    let name = agent.name_any();
    let secret = GateOwner::agent(agent).config_secret(&inputs.secret_data);
    let custom_service_account = agent
        .spec
        .declarative
        .as_ref()
        .and_then(|d| d.deployment.as_ref())
        .is_some_and(|d| d.service_account_name.is_some());
    let service_account = (!custom_service_account).then(|| {
        let mut meta = metadata(agent, name.clone());
        if let Some(config) = agent
            .spec
            .declarative
            .as_ref()
            .and_then(|d| d.deployment.as_ref())
            .and_then(|d| d.service_account_config.as_ref())
        {
            let mut labels = config.labels.clone();
            labels.extend(meta.labels.take().unwrap_or_default());
            meta.labels = Some(labels);
            meta.annotations = non_empty_map(config.annotations.clone());
        }
        ServiceAccount {
            metadata: meta,
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        }
    });
    let (role, role_binding) = match inputs.gate_placement() {
        Some(placement) => {
            let owner = GateOwner::agent(agent);
            (
                Some(owner.gate_role(inputs.options.grant_max_ttl.is_some())),
                Some(owner.gate_role_binding(gate_service_account_name(agent, placement))),
            )
        }
        None => (None, None),
    };
    let service = Service {
        metadata: metadata(agent, name.clone()),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(agent)),
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                port: AGENT_PORT,
                target_port: Some(IntOrString::Int(AGENT_PORT)),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    AgentObjects {
        secret,
        service_account,
        role,
        role_binding,
        deployment: deployment(inputs),
        service,
        gateway: (inputs.gate_placement() == Some(GatePlacement::Gateway)).then(|| gateway(inputs)),
    }
}
