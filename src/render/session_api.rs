//! Where kagent's agent runtime keeps its sessions, their events and its A2A tasks.
//!
//! The runtime (`kagent-adk static`) will not start without `KAGENT_URL`, and stores every turn
//! through kagent's controller API there (`/api/sessions`, `/api/tasks`), with a projected
//! ServiceAccount token of audience `kagent` as its credential. kagent's controller serves
//! that API only for Agents in its own database, which only kagent's reconciler fills, so for
//! the Agents hitl-operator runs the gate serves it instead (docs/kagent.md, "Sessions and
//! tasks"): in the pod (Sidecar placement) or as the Agent's gate Service (Gateway placement).
//! `--kagent-url` sends every Agent to a kagent controller instead; without a gate and without
//! it, nothing serves the API, and the Agent says so in its `Ready` condition.

use std::str::FromStr;

use k8s_openapi::api::core::v1::{
    EnvVar, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};

use crate::api::ApprovalMode;

/// The runtime's variable naming the session API.
pub const KAGENT_URL_ENV: &str = "KAGENT_URL";
/// The newer runtimes' variable naming kagent's gRPC controller API.
pub const KAGENT_GRPC_URL_ENV: &str = "KAGENT_GRPC_URL";
/// Volume of the runtime's token, projected as kagent projects it.
pub const KAGENT_TOKEN_VOLUME: &str = "kagent-token";
/// Where the runtime reads its token (`kagent-token` in this directory).
pub const KAGENT_TOKEN_DIR: &str = "/var/run/secrets/tokens";
/// Audience of the runtime's token: kagent's controller, never the Kubernetes API.
pub const KAGENT_TOKEN_AUDIENCE: &str = "kagent";
/// Lifetime of the runtime's token (the kubelet renews it before it runs out).
const KAGENT_TOKEN_SECONDS: i64 = 3600;
/// The reason of `Ready=False` when nothing serves the runtime's session API.
pub const NO_SESSION_API_REASON: &str = "NoSessionApi";

/// A kagent controller's HTTP API (`--kagent-url`): `http(s)://host[:port]`, no path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KagentUrl(String);

impl FromStr for KagentUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let url = reqwest::Url::parse(text).map_err(|e| format!("{text:?}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{text:?}: the scheme must be http or https"));
        }
        if url.host_str().is_none() {
            return Err(format!("{text:?}: no host"));
        }
        if !matches!(url.path(), "" | "/") || url.query().is_some() {
            return Err(format!(
                "{text:?}: give the address only (scheme, host and port): the runtime adds /api/..."
            ));
        }
        Ok(Self(text.trim_end_matches('/').to_owned()))
    }
}

impl std::fmt::Display for KagentUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who serves the runtime's sessions and tasks for one Agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionApi {
    /// The Agent's gate, at this URL (its in-pod address, or its Service).
    Gate(String),
    /// A kagent controller (`--kagent-url`).
    Kagent(KagentUrl),
    /// Nothing: no gate runs and no `--kagent-url` is set.
    Missing,
}

impl SessionApi {
    /// The session API of an Agent in `mode` whose gate (if any) is at `gate_url`.
    pub fn of(kagent_url: Option<&KagentUrl>, mode: ApprovalMode, gate_url: &str) -> Self {
        match kagent_url {
            Some(url) => Self::Kagent(url.clone()),
            None if mode.uses_gate() => Self::Gate(gate_url.to_owned()),
            None => Self::Missing,
        }
    }

    /// Whether the gate serves the session API (gate.json's `session_store`).
    pub fn served_by_gate(&self) -> bool {
        matches!(self, Self::Gate(_))
    }

    /// `KAGENT_URL` (when anything serves the API) and `KAGENT_GRPC_URL` (when set) for the
    /// agent container.
    pub fn env(&self, grpc_url: Option<&str>) -> Vec<EnvVar> {
        let url = match self {
            Self::Gate(url) => Some(url.clone()),
            Self::Kagent(url) => Some(url.to_string()),
            Self::Missing => None,
        };
        let value_env = |name: &str, value: String| EnvVar {
            name: name.to_owned(),
            value: Some(value),
            ..EnvVar::default()
        };
        url.map(|url| value_env(KAGENT_URL_ENV, url))
            .into_iter()
            .chain(grpc_url.map(|grpc| value_env(KAGENT_GRPC_URL_ENV, grpc.to_owned())))
            .collect()
    }

    /// Why the Agent cannot be `Ready`, naming the settings that would fix it; `None` when
    /// something serves the API.
    pub fn missing_message(&self, mode: ApprovalMode) -> Option<String> {
        matches!(self, Self::Missing).then(|| {
            format!(
                "kagent's agent runtime stores its sessions and tasks through KAGENT_URL, and nothing serves them: approval mode {} runs no gate (whose session store the agent would use); set the controller's --kagent-url (chart value kagent.url) to a kagent controller that serves this Agent, or use approval mode Gate or Both",
                mode.as_str(),
            )
        })
    }
}

/// The projected token the runtime sends as its credential: audience `kagent`, which the
/// Kubernetes API refuses, renewed by the kubelet (kagent renders the same volume).
pub fn kagent_token_volume() -> Volume {
    Volume {
        name: KAGENT_TOKEN_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(KAGENT_TOKEN_AUDIENCE.to_owned()),
                    expiration_seconds: Some(KAGENT_TOKEN_SECONDS),
                    path: KAGENT_TOKEN_VOLUME.to_owned(),
                }),
                ..VolumeProjection::default()
            }]),
            default_mode: None,
        }),
        ..Volume::default()
    }
}

/// Where the agent container mounts [`kagent_token_volume`].
pub fn kagent_token_mount() -> VolumeMount {
    VolumeMount {
        name: KAGENT_TOKEN_VOLUME.to_owned(),
        mount_path: KAGENT_TOKEN_DIR.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GATE: &str = "http://127.0.0.1:8099";

    #[test]
    fn the_gate_serves_the_sessions_unless_a_kagent_controller_is_named() {
        assert_eq!(
            SessionApi::of(None, ApprovalMode::Gate, GATE),
            SessionApi::Gate(GATE.into())
        );
        assert_eq!(
            SessionApi::of(None, ApprovalMode::Both, GATE),
            SessionApi::Gate(GATE.into())
        );
        assert_eq!(
            SessionApi::of(None, ApprovalMode::Runtime, GATE),
            SessionApi::Missing
        );
        let kagent: KagentUrl = "http://kagent-controller.kagent:8083".parse().unwrap();
        for mode in [
            ApprovalMode::Gate,
            ApprovalMode::Runtime,
            ApprovalMode::Both,
        ] {
            assert_eq!(
                SessionApi::of(Some(&kagent), mode, GATE),
                SessionApi::Kagent(kagent.clone())
            );
        }
    }

    #[test]
    fn the_runtime_gets_the_url_and_the_grpc_address_as_given() {
        let env = SessionApi::Gate(GATE.into()).env(Some("kagent-controller.kagent:8084"));
        let pairs: Vec<_> = env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref().unwrap()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("KAGENT_URL", GATE),
                ("KAGENT_GRPC_URL", "kagent-controller.kagent:8084")
            ]
        );
        assert!(SessionApi::Missing.env(None).is_empty());
    }

    #[test]
    fn a_missing_session_api_names_the_settings_that_fix_it() {
        let message = SessionApi::Missing
            .missing_message(ApprovalMode::Runtime)
            .unwrap();
        assert!(
            message.contains("--kagent-url (chart value kagent.url)"),
            "{message}"
        );
        assert!(
            message.contains("approval mode Runtime runs no gate"),
            "{message}"
        );
        assert_eq!(
            SessionApi::Gate(GATE.into()).missing_message(ApprovalMode::Gate),
            None
        );
    }

    #[test]
    fn kagent_urls_are_addresses_without_a_path() {
        assert_eq!(
            "http://kagent-controller.kagent:8083/"
                .parse::<KagentUrl>()
                .unwrap()
                .to_string(),
            "http://kagent-controller.kagent:8083"
        );
        for bad in [
            "ftp://x",
            "kagent-controller:8083",
            "http://x:8083/api",
            "http://x?a=b",
        ] {
            assert!(bad.parse::<KagentUrl>().is_err(), "{bad}");
        }
    }
}
