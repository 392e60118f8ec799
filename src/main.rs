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
    // Boxed, as the controller's: its flags mirror the controller's rendering flags.
    Render(Box<cli::render::RenderArgs>),
    /// Print every CustomResourceDefinition as YAML (or write them with --output-dir).
    Crds(cli::crds::CrdsArgs),
    /// Run the approval gate sidecar: an MCP proxy that holds gated tool calls for approval.
    Gate(cli::gate::GateArgs),
    /// Run the session store: kagent's session and task API for every Agent's runtime
    /// (`KAGENT_URL`), kept in SQLite or Postgres; `sessions copy` moves it to another database.
    // Boxed: its flags would make every command as large.
    Sessions(Box<cli::sessions::SessionsArgs>),
    /// Run the controller against the cluster of the current kubeconfig (or in-cluster).
    // Boxed: its many flags would make every command as large.
    Controller(Box<hitl_operator::controller::ControllerArgs>),
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
            hitl_operator::controller::malloc::limit_arenas();
            serve(
                "controller",
                tokio::runtime::Builder::new_multi_thread(),
                hitl_operator::controller::run(*args),
            )
        }
        Command::Sessions(args) => serve(
            "sessions",
            tokio::runtime::Builder::new_multi_thread(),
            cli::sessions::run(*args),
        ),
        // One thread: an agent's calls are few, and a proxied message then never waits for
        // another thread to wake up (measured in benches/gate.rs and docs/gate.md).
        Command::Gate(args) => {
            hitl_operator::gate::memory::map_large_allocations();
            serve(
                "gate",
                tokio::runtime::Builder::new_current_thread(),
                cli::gate::run(args),
            )
        }
    }
}

/// Runs a long-lived command on the runtime `builder` makes; failures are logged with their
/// reason and give a non-zero exit.
fn serve(
    name: &str,
    mut builder: tokio::runtime::Builder,
    command: impl Future<Output = hitl_operator::Result<()>>,
) -> ExitCode {
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(reason = error.reason(), %error, "{name} failed");
            eprintln!("error: {name}: {error}");
            ExitCode::FAILURE
        }
    }
}
