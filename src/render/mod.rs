//! Pure rendering: an Agent and the objects it references become config.json, gate.json and
//! the Kubernetes objects the controller applies.

pub mod config;
