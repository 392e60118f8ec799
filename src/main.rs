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
    /// Run the controller against the cluster of the current kubeconfig (or in-cluster).
    Controller(hitl_operator::controller::ControllerArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Render(args) => ExitCode::from(cli::render::run(&args)),
        Command::Controller(args) => {
            let runtime = tokio::runtime::Runtime::new().expect("starting the tokio runtime");
            match runtime.block_on(hitl_operator::controller::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::FAILURE
                }
            }
        }
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
    }
}
