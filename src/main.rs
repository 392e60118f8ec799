//! `hitl-operator`: the controller, the approval gate sidecar, and offline tools.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hitl_operator::cli;

/// Human approval for AI agents' MCP tool calls, as a Kubernetes operator.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate manifests offline (schema + CEL, apiserver-style messages) and print every
    /// object the controller would apply for the Agents among them.
    Render(cli::render::RenderArgs),
    /// Print every CustomResourceDefinition as YAML (or write them with --output-dir).
    Crds(cli::crds::CrdsArgs),
    /// Run the approval gate sidecar: an MCP proxy that holds gated tool calls for approval.
    Gate(cli::gate::GateArgs),
    /// Run the controller against the cluster of the current kubeconfig (or in-cluster).
    Controller(hitl_operator::controller::ControllerArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Render(args) => ExitCode::from(cli::render::run(&args)),
        Command::Crds(cli::crds::CrdsArgs {
            output_dir: Some(dir),
        }) => match cli::crds::write_crds(&dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Crds(_) => {
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(cli::crds::crds_yaml().as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Controller(args) => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(hitl_operator::controller::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(reason = e.reason(), error = %e, "controller failed");
                    ExitCode::FAILURE
                }
            }
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
            match runtime.block_on(cli::gate::run(args)) {
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
