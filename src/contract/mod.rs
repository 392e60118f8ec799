//! The contract between the controller and the gate: what the controller renders for an
//! Agent and the gate (or kagent's runtime) reads. Both sides import it from here, so neither
//! `render` nor `gate` imports the other.
//!
//! - [`gate_config`]: `gate.json`, what the gate enforces;
//! - [`agent_config`]: `config.json`, the agent runtime's configuration (kagent's field names);
//! - [`mounts`]: where those files and the binding key are mounted in the pod;
//! - [`binding_key`]: the per-Agent secret that keys the hash binding an approval to its call;
//! - [`session_store`]: what the session store takes from the runtime the controller renders.

pub mod agent_config;
pub mod binding_key;
pub mod gate_config;
pub mod mounts;
pub mod session_store;
