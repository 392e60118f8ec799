//! kmcp's `MCPServer` kind (`kagent.dev/v1alpha1`), read as a tool server. hitl-operator does
//! not serve this kind (kmcp installs its CRD and runs the server); it only reads the fields
//! that say how to reach the server.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The parts of a kmcp MCPServer's spec that locate the server; other fields are ignored.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kagent.dev",
    version = "v1alpha1",
    kind = "MCPServer",
    plural = "mcpservers",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MCPServerSpec {
    /// How kmcp deploys the server.
    #[serde(default)]
    pub deployment: MCPServerDeployment,
    /// Timeout of requests to the server, such as `30s` (kmcp's default: 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// The deployment of a kmcp MCPServer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MCPServerDeployment {
    /// Port the server's Service listens on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
}
