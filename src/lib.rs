//! hitl-operator: human approval for AI agents' MCP tool calls, as a Kubernetes operator.

// kube's `printcolumn(..., type_ = ...)` repeats keys by design.
#[allow(clippy::duplicated_attributes)]
pub mod api;
pub mod cli;
pub mod error;
pub mod gate;
pub mod render;

pub use error::{Error, Result};
