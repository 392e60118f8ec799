//! The `RemoteMCPServer` kind: an MCP tool server reachable over HTTP.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{AcceptedToolDefinition, AllowedNamespaces, DURATION_PATTERN, ValueRef};

/// Desired state of a RemoteMCPServer.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kagent.dev",
    version = "v1alpha2",
    kind = "RemoteMCPServer",
    plural = "remotemcpservers",
    shortname = "rmcps",
    namespaced,
    status = "RemoteMCPServerStatus",
    cel,
    doc = "An MCP tool server reachable over Streamable HTTP or SSE.",
    printcolumn = r#"{"name": "Protocol", "type": "string", "jsonPath": ".spec.protocol"}"#,
    printcolumn = r#"{"name": "URL", "type": "string", "jsonPath": ".spec.url"}"#,
    printcolumn = r#"{"name": "Accepted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RemoteMCPServerSpec {
    /// What the server offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// Endpoint of the server, for example `http://tools.default:8084/mcp`.
    #[schemars(length(min = 1, max = 2048), pattern(r"^https?://"))]
    pub url: String,
    /// Transport: `STREAMABLE_HTTP` (default) or `SSE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<McpProtocol>,
    /// HTTP headers sent to the server (inline or from Secrets/ConfigMaps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub headers_from: Vec<ValueRef>,
    /// Timeout of HTTP requests to the server, such as `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// Timeout for reading SSE events from the server, such as `5m0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub sse_read_timeout: Option<String>,
    /// Close the MCP session when the client disconnects (Streamable HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate_on_close: Option<bool>,
    /// Namespaces whose Agents may use this server (unset: only its own namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<AllowedNamespaces>,
    /// Whether the server is trusted to assert its tools' MCP annotations (`readOnlyHint`,
    /// `destructiveHint`, ...). Unset: not trusted; its hints are shown to approvers and can
    /// make a rule ask or deny, never allow (docs/policies.md, "Tool annotations"). An
    /// extension of this project; kagent ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_tool_annotations: Option<bool>,
    /// The tool definitions a person accepted (`kubectl hitl accept-tools`). Unset: each gate
    /// accepts the definitions it lists first, until it restarts. Set: a tool listed with
    /// another definition, or not in the list, needs approval for every call until accepted
    /// here (docs/policies.md, "Changed tool definitions"). An extension of this project.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub accepted_tool_definitions: Vec<AcceptedToolDefinition>,
}

/// MCP transport.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
pub enum McpProtocol {
    /// Streamable HTTP (MCP 2025-03-26 and later).
    #[default]
    #[serde(rename = "STREAMABLE_HTTP")]
    StreamableHttp,
    /// The legacy HTTP+SSE transport.
    #[serde(rename = "SSE")]
    Sse,
}

impl McpProtocol {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StreamableHttp => "STREAMABLE_HTTP",
            Self::Sse => "SSE",
        }
    }
}

/// Observed state of a RemoteMCPServer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoteMCPServerStatus {
    /// The generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`: whether the server answered `tools/list`; `ToolDefinitionsAccepted`:
    /// whether every tool it listed has the definition `spec.acceptedToolDefinitions` accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Tools the server offered the last time the controller listed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub discovered_tools: Vec<DiscoveredTool>,
}

/// A tool offered by an MCP server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredTool {
    /// Tool name.
    pub name: String,
    /// Tool description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// SHA-256 (lowercase hex) of the RFC 8785 canonical JSON of the tool's definition as
    /// listed (name, description, input schema, annotations): what
    /// `spec.acceptedToolDefinitions` accepts. An extension of this project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_sha256: Option<String>,
}
