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
    /// Run the approval gate sidecar: an MCP proxy that holds gated tool calls for approval.
    Gate(hitl_operator::cli::gate::GateArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Crds => {
            print!("{}", hitl_operator::cli::crds::crds_yaml());
            ExitCode::SUCCESS
        }
        Command::Gate(args) => {
            // kube uses rustls with ring; no crate may pick another provider first.
            let _ = rustls::crypto::ring::default_provider().install_default();
            init_tracing();
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(hitl_operator::cli::gate::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(reason = e.reason(), error = %e, "gate failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// JSON logs to stderr, filtered by `RUST_LOG` (default `info`).
fn init_tracing() {
    tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}
