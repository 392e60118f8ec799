//! `hitl-operator gate --config FILE`: the approval gate sidecar.

use std::path::PathBuf;

use crate::cli::logging::{self, LogFormat};
use crate::gate::server;
use crate::render::objects::GATE_CONFIG_PATH;

/// Arguments of `hitl-operator gate`.
#[derive(clap::Args, Debug)]
pub struct GateArgs {
    /// Path of gate.json (rendered by the controller into the agent's Secret).
    #[arg(long, env = "HITL_GATE_CONFIG", default_value = GATE_CONFIG_PATH)]
    pub config: PathBuf,
    /// Log format.
    #[arg(
        long,
        env = "LOG_FORMAT",
        value_enum,
        ignore_case = true,
        default_value = "json"
    )]
    pub log_format: LogFormat,
}

/// Runs the gate until it is told to stop.
pub async fn run(args: GateArgs) -> crate::Result<()> {
    logging::install_tls_provider();
    logging::init(args.log_format);
    let config = server::load_config(&args.config.to_string_lossy())?;
    server::run(config).await
}
