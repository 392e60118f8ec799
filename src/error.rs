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
    /// A guarded write ([`crate::apiserver::guarded`]) met a 409 Conflict on every attempt.
    #[error("{kind} {name} changed under each of {attempts} guarded writes; nothing was written")]
    Contended {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// Attempts made.
        attempts: u32,
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
    /// The controller's caches did not list within the bound a reconcile may wait.
    #[error("caches not synced after {waited}s (still listing: {unlisted}); will retry")]
    CachesNotSynced {
        /// Seconds waited.
        waited: u64,
        /// Kinds whose caches had not listed.
        unlisted: String,
    },
    /// A reconcile did not finish within its bound.
    #[error("reconcile did not finish within {waited}s; will retry")]
    ReconcileTimeout {
        /// Seconds waited.
        waited: u64,
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
    /// The gate's binding key is missing, unreadable or too short.
    #[error("binding key {path}: {source}")]
    BindingKey {
        /// Where the key was read from.
        path: String,
        /// Cause.
        source: crate::contract::binding_key::KeyError,
    },
    /// The gate created ApprovalRequests faster than it may.
    #[error(
        "too many approval requests from this agent (at most {burst} at once, then {per_second} per second); retry later"
    )]
    TooManyRequests {
        /// Requests allowed at once.
        burst: u32,
        /// Requests allowed per second after that.
        per_second: u32,
    },
    /// The agent holds as many open ApprovalRequests as it may: no request was created.
    #[error(
        "the agent has {open} open ApprovalRequests, its cap (approval.maxOpenRequests: {cap}); no request was created"
    )]
    OpenRequestCap {
        /// Open requests the gate counted (its own creations in flight included).
        open: usize,
        /// The cap.
        cap: u32,
    },
    /// The gate does not know how many open ApprovalRequests the agent holds, so it creates
    /// none.
    #[error("cannot count the agent's open ApprovalRequests ({why}); no request was created")]
    OpenRequestsUnknown {
        /// Why not.
        why: String,
    },
    /// The Kubernetes API did not answer within the time a gated call may wait.
    #[error(
        "the Kubernetes API did not answer within {waited}s (approval.waitTimeout plus {grace}s)"
    )]
    ApiTimeout {
        /// Seconds waited in all.
        waited: u64,
        /// Seconds allowed beyond the wait timeout.
        grace: u64,
    },
    /// An object the controller would write exists and belongs to another controller or person.
    #[error(
        "{object} exists and is not hitl-operator's ({owner}); it was left alone: delete it, or hand the Agent to hitl-operator as docs/kagent.md says"
    )]
    OwnedElsewhere {
        /// `Kind namespace/name`.
        object: String,
        /// Whose it is.
        owner: String,
    },
    /// A grant was used for a call, but the ApprovalRequest recording it could not be written;
    /// the call did not run.
    #[error(
        "the ApprovalGrant {grant} covers the call, but recording it failed: {source}; the call was not run"
    )]
    GrantRecord {
        /// Name of the grant used.
        grant: String,
        /// Cause.
        source: kube::Error,
    },
    /// The operating system's random source failed.
    #[error("random source: {0}")]
    Random(#[from] getrandom::Error),
    /// The session store's database failed, or a `sessions copy` could not finish.
    #[error("session store: {0}")]
    SessionStore(#[from] crate::sessions::store::StoreError),
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
            Self::BindingKey { .. } => "BindingKeyInvalid",
            Self::ApiTimeout { .. } => "ApiTimeout",
            Self::TooManyRequests { .. } => "ApprovalRateLimited",
            Self::OpenRequestCap { .. } => "OpenRequestCapReached",
            Self::OpenRequestsUnknown { .. } => "OpenRequestsUnknown",
            Self::Random(_) => "RandomSourceFailed",
            Self::GrantRecord { .. } => "GrantRecordFailed",
            Self::OwnedElsewhere { .. } => "OwnedByAnotherController",
            Self::RequestDeleted { .. } => "ApprovalRequestDeleted",
            Self::CreateRace { .. } => "ApprovalRequestCreateRace",
            Self::Contended { .. } => "WriteContended",
            Self::Bind { .. } => "BindError",
            Self::ToolDiscovery { .. } => "ToolDiscoveryFailed",
            Self::CachesNotSynced { .. } => "CachesNotSynced",
            Self::ReconcileTimeout { .. } => "ReconcileTimeout",
            Self::LeaderElection(_) => "LeaderElectionFailed",
            Self::SessionStore(_) => "SessionStoreFailed",
        }
    }
}

impl Error {
    /// Whether the API said the object is gone or its namespace is being deleted
    /// ([`is_gone`]), so no retry can succeed and none is needed.
    pub fn is_gone(&self) -> bool {
        matches!(self, Self::Kube(error) if is_gone(error))
    }
}

/// Whether `error` is a 404, or the 403 the API returns for writes into a namespace that is
/// being deleted.
pub fn is_gone(error: &kube::Error) -> bool {
    let kube::Error::Api(status) = error else {
        return false;
    };
    status.code == 404
        || (status.code == 403
            && (status.message.contains("because it is being terminated")
                || status.details.as_ref().is_some_and(|details| {
                    details
                        .causes
                        .iter()
                        .any(|cause| cause.reason == "NamespaceTerminating")
                })))
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
