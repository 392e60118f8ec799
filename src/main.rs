//! `hitl-operator`: the controller, the approval gate sidecar, and offline tools.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Human approval for AI agents' MCP tool calls, as a Kubernetes operator.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every CustomResourceDefinition as YAML.
    Crds,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Crds => {
            print!("{}", hitl_operator::cli::crds::crds_yaml());
            ExitCode::SUCCESS
        }
    }
}
