//! The one error type of hitl-operator. Its [`Error::reason`] is used for Event reasons,
//! condition reasons and metric labels.

/// Everything that can go wrong while validating, rendering or reconciling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object is invalid: names the object, the field and why.
    #[error("{object}: {field}: {message}")]
    InvalidSpec {
        /// `Kind namespace/name`.
        object: String,
        /// Field path, such as `spec.declarative.modelConfig`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A referenced object does not exist (or lacks the referenced key).
    #[error("{object}: {field}: {missing} not found")]
    RefNotFound {
        /// `Kind namespace/name` of the referring object.
        object: String,
        /// Field holding the reference.
        field: String,
        /// What is missing: `Kind namespace/name`, optionally followed by ` key "k"`.
        missing: String,
    },
    /// The Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// JSON (de)serialization failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// YAML parsing failed.
    #[error("{file}: YAML: {message}")]
    Yaml {
        /// File being read.
        file: String,
        /// Parser message.
        message: String,
    },
    /// The ApprovalRequest a gated call waited on was deleted.
    #[error("ApprovalRequest {name} was deleted while the call waited")]
    RequestDeleted {
        /// Name of the request.
        name: String,
    },
    /// Creating a call's ApprovalRequest kept colliding with finished requests of other gates.
    #[error("could not create an ApprovalRequest {name}-<n>: too many concurrent generations")]
    CreateRace {
        /// Name of the call's requests without the generation.
        name: String,
    },
    /// Listing an MCP server's tools failed.
    #[error("{server}: listing tools: {message}")]
    ToolDiscovery {
        /// `RemoteMCPServer namespace/name`.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// Leader election on the Lease failed.
    #[error("leader election: {0}")]
    LeaderElection(#[from] kube_lease_manager::LeaseManagerError),
    /// A listener could not be bound.
    #[error("listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// File or directory.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

impl Error {
    /// A stable CamelCase reason for Events, conditions and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidSpec { .. } => "InvalidSpec",
            Self::RefNotFound { .. } => "RefNotFound",
            Self::Kube(_) => "KubeError",
            Self::Json(_) => "SerializationError",
            Self::Yaml { .. } => "InvalidYaml",
            Self::Io { .. } => "IoError",
            Self::RequestDeleted { .. } => "ApprovalRequestDeleted",
            Self::CreateRace { .. } => "ApprovalRequestCreateRace",
            Self::Bind { .. } => "BindError",
            Self::ToolDiscovery { .. } => "ToolDiscoveryFailed",
            Self::LeaderElection(_) => "LeaderElectionFailed",
        }
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
