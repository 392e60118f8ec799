//! The `Agent` kind: a kagent-compatible Declarative agent whose MCP tool calls can require approval.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements,
    SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{
    AllowedNamespaces, DURATION_PATTERN, ValueRef, ValueSource, preserve_unknown_object,
};

/// Maximum number of tool servers an Agent may reference.
pub const MAX_TOOLS: usize = 20;
/// Maximum number of tool names per tool server (for toolNames and requireApproval alike).
pub const MAX_TOOL_NAMES: usize = 50;
/// Maximum length of one tool name.
pub const MAX_TOOL_NAME_LENGTH: usize = 128;
/// Longest `when` expression of an approval rule, in characters (part of its cost bound).
pub const MAX_WHEN_LENGTH: usize = 2048;

/// Desired state of an Agent.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kagent.dev",
    version = "v1alpha2",
    kind = "Agent",
    plural = "agents",
    namespaced,
    status = "AgentStatus",
    cel,
    doc = "An AI agent whose MCP tool calls can require a human approval.",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Accepted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name": "Pending", "type": "integer", "description": "ApprovalRequests waiting for a decision", "jsonPath": ".status.pendingApprovals"}"#,
    printcolumn = r#"{"name": "Frozen", "type": "string", "priority": 1, "description": "Why the Agent's gated tools are stopped (hitl.kagent.dev/freeze)", "jsonPath": ".status.conditions[?(@.type==\"Frozen\")].message"}"#,
    printcolumn = r#"{"name": "Sessions", "type": "string", "priority": 1, "description": "Where the agent runtime keeps its conversations (its KAGENT_URL)", "jsonPath": ".status.sessionStore"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.type != 'Declarative' || has(self.declarative)").message("spec.declarative is required when type is Declarative"))]
// The parts most Agents leave unset are boxed here and in `DeclarativeAgentSpec`: the controller
// caches every Agent, and inline their `None`s took a third of each (docs/controller.md,
// "Memory on the real control plane").
pub struct AgentSpec {
    /// Agent type. Only `Declarative` agents are run by hitl-operator; `BYO` is accepted by the
    /// schema for kagent compatibility and reported as unsupported in the Accepted condition.
    #[serde(rename = "type", default)]
    pub agent_type: AgentType,
    /// What the agent does; becomes the description of the agent configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// The agent definition: instructions, model and tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declarative: Option<DeclarativeAgentSpec>,
    /// A bring-your-own agent (kagent). Not supported by hitl-operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub byo: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    /// Skills fetched into `/skills` of the agent pod before it starts (OCI images, git
    /// repositories).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Box<Skills>>,
    /// Namespaces whose Agents may use this Agent as a tool (default: its own namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<Box<AllowedNamespaces>>,
}

/// Skills of an agent: OCI images and git repositories, each unpacked into `/skills/<name>`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.refs) || has(self.gitRefs)").message("at least one of the fields in [refs gitRefs] must be set"))]
pub struct Skills {
    /// Pull the skill images over plain HTTP or without verifying TLS (development only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
    /// Skill images (OCI references such as `ghcr.io/org/skill:v1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 20), inner(length(min = 1, max = 512)))]
    pub refs: Vec<String>,
    /// Secret with git credentials (`token` for HTTPS, `ssh-privatekey` for SSH), used for
    /// every git reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_auth_secret_ref: Option<LocalObjectReference>,
    /// Git repositories holding skills.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 20))]
    pub git_refs: Vec<GitSkill>,
}

/// One git repository of skills.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSkill {
    /// Repository URL (HTTPS or SSH).
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// Branch, tag or full commit SHA (default `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub r#ref: Option<String>,
    /// Directory of the repository to use as the skill (default: the whole repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// Name of the skill directory under `/skills` (default: the repository name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub name: Option<String>,
}

/// Kind of agent.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum AgentType {
    /// An agent defined by its system message, model and tools.
    #[default]
    Declarative,
    /// A bring-your-own agent image (kagent); refused by hitl-operator.
    #[serde(rename = "BYO")]
    Byo,
}

/// A Declarative agent: instructions, model, tools, deployment and approval settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!(has(self.systemMessage) && has(self.systemMessageFrom))").message("systemMessage and systemMessageFrom are mutually exclusive"))]
pub struct DeclarativeAgentSpec {
    /// Short description of the agent (kagent field); used for the agent card when
    /// spec.description is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// The system prompt (instruction) of the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 262144))]
    pub system_message: Option<String>,
    /// Read the system prompt from a ConfigMap or Secret key instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_message_from: Option<Box<ValueSource>>,
    /// Name of the ModelConfig in the Agent's namespace (default `default-model-config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub model_config: Option<String>,
    /// Stream model responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Long-term memory, with the ModelConfig that embeds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Box<MemorySpec>>,
    /// Treat the system message as a template with `{{include "source/key"}}` and the agent's
    /// variables, reading fragments from these ConfigMaps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_template: Option<PromptTemplate>,
    /// kagent's code execution switch. kagent renders it as `execute_code: false` whatever
    /// its value (its runtime cannot run code blocks yet), and so does hitl-operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute_code_blocks: Option<bool>,
    /// Context management: compaction of the conversation history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Box<ContextConfig>>,
    /// Skills advertised in the agent's A2A card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a_config: Option<A2aConfig>,
    /// Tools of the agent: MCP tool servers and other Agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub tools: Vec<Tool>,
    /// How the agent's pods run.
    // Boxed: most Agents set little or none of it, and inline its `None`s would make up half
    // of every cached Agent (docs/performance-history.md#controller-caches-and-memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<Box<DeclarativeDeploymentSpec>>,
    /// Who asks for approval, and for how long requests live (hitl-operator extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalSettings>,
}

/// One tool provider of an agent: an MCP server or another Agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("!(has(self.mcpServer) && self.type != 'McpServer')").message("type.mcpServer must be nil if the type is not McpServer"),
    validation = kube::core::Rule::new("!(!has(self.mcpServer) && self.type == 'McpServer')").message("type.mcpServer must be specified for McpServer filter.type"),
    validation = kube::core::Rule::new("!(has(self.agent) && self.type != 'Agent')").message("type.agent must be nil if the type is not Agent"),
    validation = kube::core::Rule::new("!(!has(self.agent) && self.type == 'Agent')").message("type.agent must be specified for Agent filter.type")
)]
pub struct Tool {
    /// Provider type: `McpServer` or `Agent`.
    #[serde(rename = "type")]
    pub tool_type: ToolType,
    /// The MCP server and which of its tools the agent uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<McpServerTool>,
    /// Another Agent the agent may call over A2A (it runs its tools behind its own gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentReference>,
    /// Extra HTTP headers sent to this tool server or agent (inline or from
    /// Secrets/ConfigMaps in the Agent's namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub headers_from: Vec<ValueRef>,
}

/// Kind of tool provider.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ToolType {
    /// An MCP server (RemoteMCPServer, MCPServer or annotated Service).
    McpServer,
    /// Another Agent, called over A2A.
    Agent,
}

/// Reference to an Agent used as a tool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentReference {
    /// API group: `kagent.dev` or empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub api_group: Option<String>,
    /// Kind: `Agent` or empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub kind: Option<String>,
    /// Name of the Agent.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Agent (default: the referring Agent's); another namespace must be
    /// allowed by the target's `spec.allowedNamespaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// Prompt template settings: where `{{include "source/key"}}` reads from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptTemplate {
    /// ConfigMaps in the Agent's namespace whose keys the system message can include.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub data_sources: Vec<PromptSource>,
}

/// A ConfigMap whose keys are prompt fragments, included as `alias/key` (or `name/key`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptSource {
    /// Kind of the source: `ConfigMap` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub kind: Option<String>,
    /// API group of the source: empty (core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub api_group: Option<String>,
    /// Name of the ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Short name used in include directives instead of the ConfigMap's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub alias: Option<String>,
}

/// Context management of an agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextConfig {
    /// Compaction of older conversation events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
}

/// Event history compaction (kagent's ADK settings of the same names).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Compaction {
    /// New user invocations that trigger a compaction (default 5).
    #[serde(
        default = "default_compaction_interval",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1), extend("default" = 5))]
    pub compaction_interval: Option<i64>,
    /// Invocations of the previous compacted range repeated in the next (default 2).
    #[serde(
        default = "default_overlap_size",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0), extend("default" = 2))]
    pub overlap_size: Option<i64>,
    /// Summarize compacted events with a model (otherwise they are dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<Summarizer>,
    /// Prompt token count from which a compaction runs after an invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_threshold: Option<i64>,
    /// Most recent events always kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_retention_size: Option<i64>,
}

fn default_compaction_interval() -> Option<i64> {
    Some(5)
}

fn default_overlap_size() -> Option<i64> {
    Some(2)
}

/// The model that summarizes compacted events.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Summarizer {
    /// ModelConfig in the Agent's namespace (default: the agent's own model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub model_config: Option<String>,
    /// Prompt of the summarizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65536))]
    pub prompt_template: Option<String>,
}

/// A2A settings of an agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct A2aConfig {
    /// Skills listed in the agent card.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 64))]
    pub skills: Vec<A2aSkill>,
}

/// One skill of the A2A agent card.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct A2aSkill {
    /// Identifier of the skill.
    #[schemars(length(max = 253))]
    pub id: String,
    /// Name of the skill.
    #[schemars(length(max = 253))]
    pub name: String,
    /// What the skill does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// Tags of the skill.
    #[schemars(length(max = 64), inner(length(max = 253)))]
    pub tags: Vec<String>,
    /// Example prompts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 4096)))]
    pub examples: Vec<String>,
    /// Input MIME types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 253)))]
    pub input_modes: Vec<String>,
    /// Output MIME types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 253)))]
    pub output_modes: Vec<String>,
}

/// Reference to an MCP tool server plus the tools used from it and the ones that need approval.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.requireApproval) || self.requireApproval.all(x, has(self.toolNames) && x in self.toolNames)").message("each requireApproval entry must also appear in toolNames"))]
pub struct McpServerTool {
    /// API group of the tool server: `kagent.dev` (default) for RemoteMCPServer, empty or
    /// `core` for Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub api_group: Option<String>,
    /// Kind of the tool server: `RemoteMCPServer` (default), `MCPServer` or `Service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolServerKind>,
    /// Name of the tool server.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the tool server (default: the Agent's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// Tools of this server the agent may list and call. Others are neither listed nor callable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), inner(length(min = 1, max = 128)), extend("x-kubernetes-list-type" = "set"))]
    pub tool_names: Vec<String>,
    /// Tools of this server whose calls wait for a human decision. Each must appear in toolNames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), inner(length(min = 1, max = 128)), extend("x-kubernetes-list-type" = "set"))]
    pub require_approval: Vec<String>,
    /// Request headers the agent runtime forwards from the A2A caller to this server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 256)), extend("x-kubernetes-list-type" = "set"))]
    pub allowed_headers: Vec<String>,
}

/// Kind of MCP tool server object.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    schemars::JsonSchema,
)]
pub enum ToolServerKind {
    /// A `kagent.dev/v1alpha2` RemoteMCPServer.
    #[default]
    RemoteMCPServer,
    /// A core/v1 Service annotated with `kagent.dev/mcp-service-*`.
    Service,
    /// A kmcp `kagent.dev/v1alpha1` MCPServer (an MCP server kmcp deploys).
    MCPServer,
}

impl ToolServerKind {
    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RemoteMCPServer => "RemoteMCPServer",
            Self::Service => "Service",
            Self::MCPServer => "MCPServer",
        }
    }
}

/// Pod-level settings of the agent's Deployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!(has(self.serviceAccountName) && has(self.serviceAccountConfig))").message("serviceAccountName and serviceAccountConfig are mutually exclusive"))]
pub struct DeclarativeDeploymentSpec {
    /// Registry of the default agent image (kagent's field): replaces the registry of the
    /// operator's `--agent-image`; `image` wins over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub image_registry: Option<String>,
    /// Labels and annotations of the ServiceAccount the operator creates for the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_config: Option<ServiceAccountConfig>,
    /// Number of agent pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: Option<i32>,
    /// Agent runtime image (default: the operator's `--agent-image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image: Option<String>,
    /// Image pull policy of the agent container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Pull secrets for the agent images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Extra environment variables of the agent container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Resources of the agent container (default: requests 100m/384Mi, limits 2/1Gi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra labels of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Node selector of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Use this existing ServiceAccount instead of the one the operator creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub service_account_name: Option<String>,
    /// Extra volumes of the pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// Extra volume mounts of the agent container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Security context of the agent container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Security context of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
}

/// Metadata of the agent's ServiceAccount.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountConfig {
    /// Extra labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations (for example a cloud IAM role).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Image pull policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum PullPolicy {
    /// Always pull.
    Always,
    /// Pull when the image is missing on the node.
    IfNotPresent,
    /// Never pull.
    Never,
}

impl PullPolicy {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

/// Approval settings of an agent (hitl-operator extension of kagent's API).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalSettings {
    /// Who asks: `Gate` (ApprovalRequests decided with kubectl), `Runtime` (kagent's in-chat
    /// confirmation only) or `Both` (two-person rule). Default: the operator's default (Gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ApprovalMode>,
    /// Where the gate runs: `Sidecar` (in the agent's pod) or `Gateway` (a Deployment of its
    /// own, with NetworkPolicies so the agent can reach tool servers only through it). Default:
    /// the operator's default (Sidecar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<GatePlacement>,
    /// How long an ApprovalRequest can be decided before it expires (default 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// How long the gate holds a tool call open waiting for the decision before answering
    /// "pending" (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub wait_timeout: Option<String>,
    /// How long finished ApprovalRequests are kept before deletion (default 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub ttl_after_finished: Option<String>,
    /// Open ApprovalRequests (Pending, or Approved and not yet used) the agent may hold, 1 to
    /// 1000; at the cap, a gated call that would create another is refused, not run. Default:
    /// the operator's (50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_open_requests: Option<i32>,
    /// Rules that refine `requireApproval` by tool, server and a CEL condition on the call's
    /// arguments (docs/policies.md). Enforced by the gate, so not in `Runtime` mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<ApprovalRule>,
    // Issue 60, deadlines that escalate.
    /// Steps after which more people may decide a still-pending request, and whom to tell;
    /// a warning before expiry (docs/approvers.md, "Deadlines that escalate"). Copied into
    /// each ApprovalRequest when it is made. Never approves anything by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Box<super::escalation::Escalation>>,
}

/// One approval rule: what happens to calls of `tool` (on `server`, when set) for which `when`
/// (when set) is true. Deny beats RequireApproval beats Allow; calls no rule matches follow
/// `requireApproval`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRule {
    /// Name of the rule, unique in the list; ApprovalRequests and refusals name it.
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// Name of the tool server, as in the Agent's tools; unset: every server offering `tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub server: Option<String>,
    /// The tool the rule is about; it must be in the server's toolNames.
    #[schemars(length(min = 1, max = 128))]
    pub tool: String,
    /// CEL condition over `args`, `agent`, `namespace`, `server`, `tool` and `session`; unset:
    /// always. One that cannot be evaluated counts as RequireApproval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub when: Option<String>,
    /// What happens to a matching call.
    pub action: RuleAction,
    /// Distinct people who must approve a matching call (RequireApproval only), 1 to 5: the
    /// ApprovalRequest carries it as `requiredApprovals` (docs/policies.md, quorum).
    #[serde(
        default = "default_required_approvals",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 5), extend("default" = 1))]
    pub required_approvals: Option<i32>,
    /// What an approver may change when editing a call this rule made wait (docs/approvers.md,
    /// "Edit, then approve"); unset: any argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edits: Option<RuleEdits>,
    /// Escalation of the requests this rule makes (RequireApproval only), in place of the
    /// Agent's or ToolGate's `approval.escalation` (docs/approvers.md, "Deadlines that
    /// escalate").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Box<super::escalation::Escalation>>,
}

/// How an approval rule narrows or forbids approvers' edits of the calls it made wait.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleEdits {
    /// Whether such calls may be edited at all; default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub allowed: Option<bool>,
    /// JSON pointers (RFC 6901) into the call's arguments: every operation of an edit must
    /// be at one of them or below it (by whole segments: `/a` covers `/a/b`, not `/ab`),
    /// a `move` or `copy` with its `from` too. Unset: any path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 32),
        inner(length(min = 1, max = 256), pattern(r"^/"))
    )]
    pub paths: Option<Vec<String>>,
}

impl RuleEdits {
    /// Whether the rule lets approvers edit at all.
    pub fn allows(&self) -> bool {
        self.allowed.unwrap_or(true)
    }
}

fn default_required_approvals() -> Option<i32> {
    Some(1)
}

/// What an approval rule does to the calls it matches.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub enum RuleAction {
    /// The call waits for a human approval (an ApprovalRequest naming the rule).
    RequireApproval,
    /// The call is refused without asking anyone.
    Deny,
    /// The call is forwarded without approval (unless a Deny or RequireApproval rule matches).
    Allow,
}

impl RuleAction {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequireApproval => "RequireApproval",
            Self::Deny => "Deny",
            Self::Allow => "Allow",
        }
    }
}

/// Who asks for approval of gated tool calls.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    schemars::JsonSchema,
    clap::ValueEnum,
)]
#[value(rename_all = "PascalCase")]
pub enum ApprovalMode {
    /// The gate sidecar enforces approval through ApprovalRequests.
    #[default]
    Gate,
    /// kagent's in-process confirmation only; no gate, no ApprovalRequests.
    Runtime,
    /// Both: the chat user confirms in the runtime and an approver decides at the gate.
    Both,
}

impl ApprovalMode {
    /// Whether the gate sidecar runs and enforces ApprovalRequests.
    pub fn uses_gate(self) -> bool {
        matches!(self, Self::Gate | Self::Both)
    }

    /// Whether the agent runtime's own confirmation is configured.
    pub fn uses_runtime(self) -> bool {
        matches!(self, Self::Runtime | Self::Both)
    }

    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gate => "Gate",
            Self::Runtime => "Runtime",
            Self::Both => "Both",
        }
    }
}

/// Where the approval gate runs.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    schemars::JsonSchema,
    clap::ValueEnum,
)]
#[value(rename_all = "PascalCase")]
pub enum GatePlacement {
    /// A native sidecar in the agent's pod: one network namespace with the agent container.
    #[default]
    Sidecar,
    /// A Deployment and Service `<agent>-gate` of its own; NetworkPolicies let the agent pods
    /// reach it and the world outside the cluster, but no other in-cluster address.
    Gateway,
}

impl GatePlacement {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sidecar => "Sidecar",
            Self::Gateway => "Gateway",
        }
    }
}

/// Observed state of an Agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// The generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted` (Reconciled, ReconcileFailed, InvalidSpec, RefNotFound), `Ready`
    /// (DeploymentReady, DeploymentNotReady), and while the Agent is frozen `Frozen`
    /// (AgentFrozen, NamespaceFrozen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Hash of everything rendered for the agent; the pods carry it as `kagent.dev/config-hash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// Number of this agent's ApprovalRequests waiting for a decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_approvals: Option<i32>,
    /// Where the agent runtime keeps its conversations: the session API it is given as
    /// `KAGENT_URL`, hitl-operator's session store or a kagent controller (`--kagent-url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_store: Option<String>,
}

/// Long-term memory of an agent (kagent's `spec.declarative.memory`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemorySpec {
    /// Name of the ModelConfig, in the Agent's namespace, whose model embeds the memories.
    pub model_config: String,
    /// Days a memory is kept before it may be pruned (the runtime's default, 15, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub ttl_days: Option<i64>,
}
