//! Command-line front ends of the `hitl-operator` binary and the `kubectl-hitl` plugin.

pub mod crds;
pub mod gate;
pub mod hitl;
pub mod logging;
pub mod render;
pub mod sessions;
