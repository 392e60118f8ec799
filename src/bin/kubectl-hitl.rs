//! `kubectl-hitl`: the kubectl plugin for ApprovalRequests (`kubectl hitl list|get|approve|deny|watch`).

use std::process::ExitCode;

use clap::Parser;
use hitl_operator::cli::hitl::{Cli, run};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    hitl_operator::tls::install_provider();
    let cli = Cli::parse();
    let ok = run(cli, &mut std::io::stdout(), &mut std::io::stderr()).await;
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
