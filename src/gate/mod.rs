//! The approval gate sidecar: an MCP proxy that holds gated tool calls until a human decides.
// The crate's one Error enum is large (it names objects and fields); gate paths are not hot
// enough on the error side for boxing to matter.
#![allow(clippy::result_large_err)]

pub mod approval;
pub mod config;
pub mod decision;
pub mod hash;
pub mod jsonrpc;
pub mod legacy;
pub mod metrics;
pub mod outcome;
pub mod proxy;
pub mod redact;
pub mod server;
pub mod sse;
