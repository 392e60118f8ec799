//! Command-line front ends of the `hitl-operator` binary.

pub mod crds;
pub mod render;
