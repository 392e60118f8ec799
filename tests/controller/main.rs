//! Reconcilers against a scripted mock API server: every request is checked for method, path
//! (with `fieldManager=hitl-operator&force=true` on applies) and body.

mod agent;
mod approval_request;
mod escalation;
mod harness;
mod model_config;
mod notifier;
mod remote_mcp_server;
mod tool_gate;
