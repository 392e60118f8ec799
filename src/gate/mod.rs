//! The approval gate sidecar: an MCP proxy that holds gated tool calls until a human decides.

pub mod approval;
pub mod arrived;
pub mod call;
pub mod caller_quota;
pub mod callers;
pub mod continuation;
pub mod decision;
pub mod freeze;
pub mod grants;
pub mod hash;
pub mod http_sse;
pub mod jsonrpc;
pub mod memory;
pub mod messages;
pub mod metrics;
pub mod open_requests;
pub mod outcome;
pub mod policy;
pub mod pool;
pub mod redact;
pub mod resume;
pub mod routes;
pub mod server;
pub mod sessions;
pub mod streamable_http;
pub mod upstream;
