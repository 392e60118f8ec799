//! `config.json`: the agent runtime configuration, in kagent's field names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The agent runtime configuration kagent's ADK runtime reads from `/config/config.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct AgentConfig {
    /// The model and its parameters.
    pub model: serde_json::Value,
    /// Description of the agent.
    pub description: String,
    /// System prompt.
    pub instruction: String,
    /// Streamable HTTP tool servers.
    pub http_tools: Option<Vec<McpToolServer>>,
    /// SSE tool servers.
    pub sse_tools: Option<Vec<McpToolServer>>,
    /// Other Agents the agent calls as tools, over A2A.
    pub remote_agents: Option<Vec<RemoteAgent>>,
    /// Code execution: never on (kagent renders `false` whatever executeCodeBlocks says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute_code: Option<bool>,
    /// Stream model responses.
    pub stream: bool,
    /// Long-term memory: the embedding model and how long memories live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<serde_json::Value>,
    /// Context management.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_config: Option<ContextConfig>,
}

/// An Agent used as a tool: its A2A endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RemoteAgent {
    /// Tool name: `<namespace>__NS__<name>` with `-` as `_`.
    pub name: String,
    /// A2A endpoint.
    pub url: String,
    /// HTTP headers sent with every call.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// What the called agent does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// Context management settings of the runtime.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ContextConfig {
    /// Event history compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionConfig>,
}

/// Event history compaction (ADK's context compression settings).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CompactionConfig {
    /// New invocations that trigger a compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_interval: Option<i64>,
    /// Invocations repeated from the previous compacted range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_size: Option<i64>,
    /// The summarizing model (a `model` block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer_model: Option<serde_json::Value>,
    /// Prompt of the summarizer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt_template: String,
    /// Prompt token count that triggers a compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_threshold: Option<i64>,
    /// Most recent events always kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_retention_size: Option<i64>,
}

/// One tool server entry of config.json.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct McpToolServer {
    /// How to reach the server.
    pub params: McpParams,
    /// Tools the agent may use.
    pub tools: Vec<String>,
    /// Headers forwarded from the A2A caller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<String>,
    /// Tools the runtime asks the chat user to confirm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require_approval: Vec<String>,
}

/// Connection parameters of an MCP server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct McpParams {
    /// Endpoint URL.
    pub url: String,
    /// HTTP headers sent with every request.
    pub headers: BTreeMap<String, String>,
    /// Request timeout in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<serde_json::Number>,
    /// SSE read timeout in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse_read_timeout: Option<serde_json::Number>,
    /// Close the session when the client disconnects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate_on_close: Option<bool>,
}
