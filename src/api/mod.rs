//! The API of `kagent.dev/v1alpha2`: one module per kind.

pub mod agent;
pub mod approval_grant;
pub mod approval_notifier;
pub mod approval_request;
pub mod common;
pub mod freeze;
pub mod mcp_server;
pub mod model_config;
pub mod remote_mcp_server;

pub use agent::{Agent, AgentSpec, AgentStatus, ApprovalMode, GatePlacement};
pub use approval_grant::{ApprovalGrant, ApprovalGrantSpec};
pub use approval_notifier::{ApprovalNotifier, ApprovalNotifierSpec};
pub use approval_request::{ApprovalRequest, ApprovalRequestSpec, ApprovalRequestStatus, Phase};
pub use mcp_server::MCPServer;
pub use model_config::{ModelConfig, ModelConfigSpec};
pub use remote_mcp_server::{RemoteMCPServer, RemoteMCPServerSpec};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every kind here.
pub const GROUP: &str = "kagent.dev";
/// The API version of every kind here.
pub const VERSION: &str = "v1alpha2";

/// Every CRD of hitl-operator, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Agent::crd(),
        ApprovalGrant::crd(),
        ApprovalNotifier::crd(),
        ApprovalRequest::crd(),
        ModelConfig::crd(),
        RemoteMCPServer::crd(),
    ]
}
