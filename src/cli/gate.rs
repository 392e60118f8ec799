//! `hitl-operator gate --config FILE`: the approval gate sidecar.

use std::path::PathBuf;

use crate::gate::server;

/// Arguments of `hitl-operator gate`.
#[derive(clap::Args, Debug)]
pub struct GateArgs {
    /// Path of gate.json (rendered by the controller into the agent's Secret).
    #[arg(long, env = "HITL_GATE_CONFIG", default_value = "/config/gate.json")]
    pub config: PathBuf,
}

/// Runs the gate until it is told to stop.
pub async fn run(args: GateArgs) -> crate::Result<()> {
    let config = server::load_config(&args.config.to_string_lossy())?;
    server::run(config).await
}
