//! The approval gate: in process between real and stub MCP peers and a fake apiserver, and as
//! the real `hitl-operator gate` binary. The tests with the npm peers fail when
//! tests/mcp-peers/node_modules is missing, those with the Python peers when
//! tests/mcp-peers-py/.venv is (`make peers`): a test that did not run never reports a pass.

mod harness;
mod stub;

mod binary;
mod callers;
mod config_errors;
mod freeze;
mod memory;
mod npm_peers;
mod python_peers;
mod restart;
mod rules;
mod stub_upstream;
mod tool_risk;
