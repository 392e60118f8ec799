//! The Kubernetes objects of an Agent: Secret, ServiceAccount, Role, RoleBinding, Deployment
//! and Service. The approval gate runs as a native sidecar in the agent's pods (Sidecar
//! placement) or as a Deployment and Service of its own behind two NetworkPolicies (Gateway).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection,
    DownwardAPIVolumeFile, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector,
    PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource, ResourceRequirements, SeccompProfile,
    Secret, SecretVolumeSource, SecurityContext, Service, ServiceAccount,
    ServiceAccountTokenProjection, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::api::agent::DeclarativeDeploymentSpec;
use crate::api::{Agent, ApprovalMode, GatePlacement};
use crate::apiserver::ownership::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::contract::gate_config::{GATE_METRICS_PORT, GATE_PORT};
use crate::contract::mounts::{
    AGENT_CARD_ITEM, AGENT_CONFIG_ITEM, BINDING_KEY_DIR, BINDING_KEY_ITEM, BINDING_KEY_PATH,
    CONFIG_DIR, GATE_CONFIG_DIR, GATE_CONFIG_ITEM, GATE_CONFIG_PATH, SERVICE_ACCOUNT_DIR,
};
use crate::render::RenderOptions;
use crate::render::model::RenderedModel;
use crate::render::network::{self, PolicyInputs};
use crate::render::skills::SkillsPod;

/// Port of the agent runtime (A2A).
pub const AGENT_PORT: i32 = 8080;
/// Pod template annotation that changes whenever anything rendered changes.
pub const CONFIG_HASH_ANNOTATION: &str = "kagent.dev/config-hash";
/// Label carrying the agent name on everything rendered (and the pod selector).
pub const AGENT_LABEL: &str = "kagent.dev/agent";
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
    format!("{}-gate", agent.name_any())
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
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "agent".to_owned()),
        ("app.kubernetes.io/instance".to_owned(), agent.name_any()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (AGENT_LABEL.to_owned(), agent.name_any()),
    ])
}

fn owner_reference(agent: &Agent) -> OwnerReference {
    OwnerReference {
        api_version: Agent::api_version(&()).into_owned(),
        kind: Agent::kind(&()).into_owned(),
        name: agent.name_any(),
        uid: agent.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn metadata(agent: &Agent, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: agent.namespace(),
        labels: Some(common_labels(agent)),
        owner_references: Some(vec![owner_reference(agent)]),
        ..ObjectMeta::default()
    }
}

fn selector_labels(agent: &Agent) -> BTreeMap<String, String> {
    BTreeMap::from([(AGENT_LABEL.to_owned(), agent.name_any())])
}

/// Labels of the gate's own objects (Gateway placement): the Agent's, named `approval-gate`.
fn gate_metadata(agent: &Agent) -> ObjectMeta {
    let mut meta = metadata(agent, gate_name(agent));
    if let Some(labels) = meta.labels.as_mut() {
        labels.insert(
            "app.kubernetes.io/name".to_owned(),
            "approval-gate".to_owned(),
        );
    }
    meta
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

/// The volumes the gate container mounts, and no other: gate.json from the Agent's Secret, the
/// binding key and the token. In the agent's pods in Sidecar placement, in the gate's own in
/// Gateway placement.
pub fn gate_volumes(agent: &Agent) -> Vec<Volume> {
    vec![
        secret_items_volume(GATE_CONFIG_VOLUME, &agent.name_any(), &[GATE_CONFIG_ITEM]),
        secret_items_volume(
            BINDING_KEY_VOLUME,
            &binding_key_secret_name(agent),
            &[BINDING_KEY_ITEM],
        ),
        gate_token_volume(),
    ]
}

/// The gate sidecar: a native sidecar (init container with restartPolicy Always) so it is up
/// before the agent starts, locked down to the restricted Pod Security profile.
fn gate_container(inputs: &ObjectInputs<'_>) -> Container {
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
        image: Some(inputs.options.gate_image.clone()),
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
    env.extend(inputs.model.env.iter().cloned());
    env.extend(deployment.env);
    let mut volume_mounts = vec![mount("config", CONFIG_DIR)];
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
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(AGENT_PORT),
                host: None,
            }),
            period_seconds: Some(10),
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
    volumes.extend(inputs.model.volumes.iter().cloned());
    let mut init_containers = Vec::new();
    if inputs.gate_placement() == Some(GatePlacement::Sidecar) {
        volumes.extend(gate_volumes(agent));
        init_containers.push(gate_container(inputs));
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

/// Name of the Secret holding the Agent's binding key.
pub fn binding_key_secret_name(agent: &Agent) -> String {
    format!("{}-binding-key", agent.name_any())
}

/// The Secret holding the Agent's binding key (`key`), which only the gate mounts. The
/// controller creates it once with a random key and keeps it while the Agent exists, so every
/// gate replica, and every restart, hashes a call alike.
pub fn binding_key_secret(agent: &Agent, key: &[u8]) -> Secret {
    Secret {
        metadata: metadata(agent, binding_key_secret_name(agent)),
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            BINDING_KEY_ITEM.to_owned(),
            ByteString(key.to_vec()),
        )])),
        immutable: Some(true),
        ..Secret::default()
    }
}

/// The gate as a Deployment of its own: the same container as the sidecar, as the pod's main
/// container, serving MCP on [`GATE_PORT`] for the gate Service.
fn gate_deployment(inputs: &ObjectInputs<'_>) -> Deployment {
    let agent = inputs.agent;
    let spec = deployment_spec(agent);
    let mut container = gate_container(inputs);
    // restartPolicy is for init containers only; a main container restarts with its pod.
    container.restart_policy = None;
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
        metadata: gate_metadata(agent),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas.unwrap_or(1)),
            selector: LabelSelector {
                match_labels: Some(gate_selector_labels(agent)),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(gate_pod_labels(agent)),
                    annotations: Some(BTreeMap::from([(
                        CONFIG_HASH_ANNOTATION.to_owned(),
                        inputs.config_hash.to_owned(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(gate_name(agent)),
                    automount_service_account_token: Some(false),
                    containers: vec![container],
                    volumes: Some(gate_volumes(agent)),
                    image_pull_secrets: non_empty(spec.image_pull_secrets),
                    node_selector: non_empty_map(spec.node_selector),
                    tolerations: non_empty(spec.tolerations),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// The objects of Gateway placement.
fn gateway(inputs: &ObjectInputs<'_>) -> GatewayObjects {
    let agent = inputs.agent;
    let service = Service {
        metadata: gate_metadata(agent),
        spec: Some(ServiceSpec {
            selector: Some(gate_selector_labels(agent)),
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
    };
    let network_policies = network::policies(PolicyInputs {
        gate_metadata: gate_metadata(agent),
        egress_metadata: metadata(agent, format!("{}-egress", agent.name_any())),
        agent_pods: selector_labels(agent),
        gate_pods: gate_selector_labels(agent),
        gate_port: GATE_PORT,
        metrics_port: GATE_METRICS_PORT,
        cluster_cidrs: &inputs.options.cluster_cidrs,
    });
    GatewayObjects {
        service_account: ServiceAccount {
            metadata: gate_metadata(agent),
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        },
        deployment: gate_deployment(inputs),
        service,
        network_policies,
    }
}

/// Builds every object of an Agent.
pub fn build(inputs: &ObjectInputs<'_>) -> AgentObjects {
    let agent = inputs.agent;
    let name = agent.name_any();
    let secret = Secret {
        metadata: metadata(agent, name.clone()),
        type_: Some("Opaque".to_owned()),
        data: Some(
            inputs
                .secret_data
                .iter()
                .map(|(key, value)| (key.clone(), ByteString(value.clone())))
                .collect(),
        ),
        ..Secret::default()
    };
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
    let (role, role_binding) = if let Some(placement) = inputs.gate_placement() {
        let role = Role {
            metadata: metadata(agent, format!("{name}-approval-gate")),
            rules: Some(vec![
                PolicyRule {
                    api_groups: Some(vec![crate::api::GROUP.to_owned()]),
                    resources: Some(vec!["approvalrequests".to_owned()]),
                    verbs: ["create", "get", "list", "watch"]
                        .map(str::to_owned)
                        .to_vec(),
                    ..PolicyRule::default()
                },
                PolicyRule {
                    api_groups: Some(vec![crate::api::GROUP.to_owned()]),
                    resources: Some(vec!["approvalrequests/status".to_owned()]),
                    verbs: vec!["patch".to_owned()],
                    ..PolicyRule::default()
                },
                // Its own Agent only: the gate watches it for a freeze (api::freeze), and the
                // verb `gate` names it the Agent's gate, the only writer of the uses of the
                // Agent's grants that the admission policy lets through.
                PolicyRule {
                    api_groups: Some(vec![crate::api::GROUP.to_owned()]),
                    resources: Some(vec!["agents".to_owned()]),
                    resource_names: Some(vec![agent.name_any()]),
                    verbs: ["get", "list", "watch", GATE_VERB]
                        .map(str::to_owned)
                        .to_vec(),
                    ..PolicyRule::default()
                },
            ]),
        };
        let mut role = role;
        if inputs.options.grant_max_ttl.is_some() {
            // Grants: read them, and record their uses (gate::grants). Never create them.
            role.rules.get_or_insert_default().extend([
                PolicyRule {
                    api_groups: Some(vec![crate::api::GROUP.to_owned()]),
                    resources: Some(vec!["approvalgrants".to_owned()]),
                    verbs: ["get", "list"].map(str::to_owned).to_vec(),
                    ..PolicyRule::default()
                },
                PolicyRule {
                    api_groups: Some(vec![crate::api::GROUP.to_owned()]),
                    resources: Some(vec!["approvalgrants/status".to_owned()]),
                    verbs: vec!["patch".to_owned()],
                    ..PolicyRule::default()
                },
            ]);
        }
        let binding = RoleBinding {
            metadata: metadata(agent, format!("{name}-approval-gate")),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_owned(),
                kind: "Role".to_owned(),
                name: format!("{name}-approval-gate"),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: gate_service_account_name(agent, placement),
                namespace: agent.namespace(),
                api_group: None,
            }]),
        };
        (Some(role), Some(binding))
    } else {
        (None, None)
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
