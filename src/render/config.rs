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
    /// Remote A2A agents (not supported; always null).
    pub remote_agents: Option<Vec<serde_json::Value>>,
    /// Code execution (not supported; omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute_code: Option<bool>,
    /// Stream model responses.
    pub stream: bool,
    /// Long-term memory: the embedding model and how long memories live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<serde_json::Value>,
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
