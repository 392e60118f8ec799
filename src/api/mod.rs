//! The API of `kagent.dev/v1alpha2`: one module per kind.

pub mod agent;
pub mod approval_grant;
pub mod approval_notifier;
pub mod approval_request;
pub mod common;
pub mod escalation;
pub mod freeze;
pub mod mcp_server;
pub mod model_config;
pub mod remote_mcp_server;
pub mod tool_gate;

pub use agent::{Agent, AgentSpec, AgentStatus, ApprovalMode, GatePlacement};
pub use approval_grant::{ApprovalGrant, ApprovalGrantSpec};
pub use approval_notifier::{ApprovalNotifier, ApprovalNotifierSpec};
pub use approval_request::{ApprovalRequest, ApprovalRequestSpec, ApprovalRequestStatus, Phase};
pub use mcp_server::MCPServer;
pub use model_config::{ModelConfig, ModelConfigSpec};
pub use remote_mcp_server::{RemoteMCPServer, RemoteMCPServerSpec};
pub use tool_gate::{ToolGate, ToolGateSpec};

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
        ToolGate::crd(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The controller caches every Agent and every ApprovalRequest, so their size before any
    /// string is memory per object (docs/controller.md, "Memory on the real control plane").
    /// Boxing the rarely set parts keeps them small; this fails when a field makes them grow.
    #[test]
    fn cached_kinds_stay_small() {
        // The bounds sit just above the sizes with the boxing (x86_64); what it saved:
        // docs/performance-history.md#controller-caches-and-memory. A shared gate's
        // spec.caller is boxed (unboxed it added 64 bytes); spec.agentRef.kind costs 8 (a byte
        // and its padding); the Agent's status.sessionStore 24 (a cached Agent keeps no status,
        // only the room for one). Issue 60: the Agent's boxed approval.escalation 8; a
        // request's boxed spec.escalation 8 and status.escalations 16 (a boxed slice; its
        // status.tier, a byte, fits in padding); spec.edit (boxed) 8, spec.editApprovals 24 and
        // status.editedArgumentsSha256 24; spec.toolAnnotations (boxed) 8: 64 bytes per 1000
        // cached requests is 64 KiB.
        let (agent, request) = (
            std::mem::size_of::<Agent>(),
            std::mem::size_of::<ApprovalRequest>(),
        );
        assert!(agent <= 816, "an Agent takes {agent} bytes");
        assert!(request <= 1016, "an ApprovalRequest takes {request} bytes");
    }
}
