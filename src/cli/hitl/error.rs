//! Why a `kubectl hitl` command could not run at all (per-request results are [`crate::decide::Outcome`]s).

/// A failure that stops a command.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// No usable kubeconfig or in-cluster config.
    #[error("cannot load a kubeconfig: {0}")]
    Kubeconfig(String),
    /// The caller's username could not be found out, so no decidedBy can be written.
    #[error("cannot find out who you are: {0}")]
    Identity(String),
    /// The caller may not list the requests the command would show.
    #[error("{0}")]
    CannotList(String),
    /// The Kubernetes API failed in a way the command does not handle.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(String),
}

impl From<std::io::Error> for CommandError {
    fn from(e: std::io::Error) -> Self {
        Self::Output(e.to_string())
    }
}

impl From<serde_json::Error> for CommandError {
    fn from(e: serde_json::Error) -> Self {
        Self::Output(e.to_string())
    }
}
