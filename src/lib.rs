//! hitl-operator: human approval for AI agents' MCP tool calls, as a Kubernetes operator.

pub mod api;
pub mod apiserver;
pub mod budget;
pub mod cidr;
pub mod cli;
pub mod condition;
pub mod contract;
pub mod controller;
pub mod decide;
pub mod edit;
pub mod egress;
pub mod error;
pub mod gate;
pub mod manifest;
pub mod notify;
pub mod render;
pub mod sessions;
pub mod sse;
pub mod tls;
pub mod tool_risk;
pub mod validate;
pub mod visible;

pub use error::{Error, Result};
