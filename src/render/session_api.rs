//! Where kagent's agent runtime keeps its conversations: its sessions, their events and its
//! A2A tasks.
//!
//! The runtime (`kagent-adk static`) will not start without `KAGENT_URL`, and stores every turn
//! through kagent's HTTP session API there (`/api/sessions`, `/api/tasks`), with the projected
//! ServiceAccount token in `/var/run/secrets/tokens/kagent-token` as its credential. For every
//! Agent, whatever its approval mode and placement, that API is hitl-operator's session store
//! (`hitl-operator sessions`, `--session-store-url`; docs/sessions.md), which takes only a token
//! of its own audience ([`SESSION_STORE_AUDIENCE`]); `--kagent-url` sends every Agent to a kagent
//! controller instead, with a token of audience `kagent` as kagent renders it (docs/kagent.md,
//! "Sessions and tasks").

use std::str::FromStr;

use k8s_openapi::api::core::v1::{
    EnvVar, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;

use crate::cidr::Cidr;
use crate::contract::session_store::{
    DEFAULT_SESSION_STORE_URL, SESSION_STORE_AUDIENCE, SESSION_STORE_COMPONENT, SESSION_STORE_PORT,
};
use crate::render::network;

/// The runtime's variable naming the session API.
pub const KAGENT_URL_ENV: &str = "KAGENT_URL";
/// The newer runtimes' variable naming kagent's gRPC controller API.
pub const KAGENT_GRPC_URL_ENV: &str = "KAGENT_GRPC_URL";
/// Volume of the runtime's token, projected as kagent projects it.
pub const KAGENT_TOKEN_VOLUME: &str = "kagent-token";
/// Where the runtime reads its token (`kagent-token` in this directory).
pub const KAGENT_TOKEN_DIR: &str = "/var/run/secrets/tokens";
/// Audience of the runtime's token for a kagent controller (`--kagent-url`), as kagent renders
/// it; never the Kubernetes API's.
pub const KAGENT_TOKEN_AUDIENCE: &str = "kagent";
/// Lifetime of the runtime's token (the kubelet renews it before it runs out).
const KAGENT_TOKEN_SECONDS: i64 = 3600;

/// The address of a session API (`--session-store-url`, `--kagent-url`):
/// `http(s)://host[:port]`, no path (the runtime adds `/api/...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionApiUrl(String);

impl SessionApiUrl {
    /// The session store's address when the chart is installed as the README says
    /// ([`DEFAULT_SESSION_STORE_URL`]).
    pub fn default_store() -> Self {
        DEFAULT_SESSION_STORE_URL
            .parse()
            .expect("the default session store URL is valid")
    }
}

impl FromStr for SessionApiUrl {
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

impl std::fmt::Display for SessionApiUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who serves the runtime's sessions and tasks for one Agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionApi {
    /// hitl-operator's session store (`--session-store-url`): every Agent's, unless
    /// `--kagent-url` is set.
    Store(SessionApiUrl),
    /// A kagent controller (`--kagent-url`).
    Kagent(SessionApiUrl),
}

impl SessionApi {
    /// The session API of every Agent: the kagent controller at `kagent_url` if one is named,
    /// else the session store at `store_url`.
    pub fn of(store_url: &SessionApiUrl, kagent_url: Option<&SessionApiUrl>) -> Self {
        match kagent_url {
            Some(url) => Self::Kagent(url.clone()),
            None => Self::Store(store_url.clone()),
        }
    }

    /// The runtime's `KAGENT_URL` (the Agent's `status.sessionStore`).
    pub fn url(&self) -> &SessionApiUrl {
        match self {
            Self::Store(url) | Self::Kagent(url) => url,
        }
    }

    /// Audience of the runtime's token: the one the serving API verifies.
    pub fn audience(&self) -> &'static str {
        match self {
            Self::Store(_) => SESSION_STORE_AUDIENCE,
            Self::Kagent(_) => KAGENT_TOKEN_AUDIENCE,
        }
    }

    /// Who serves the API, in words (`render`'s output).
    pub fn server(&self) -> &'static str {
        match self {
            Self::Store(_) => "hitl-operator's session store",
            Self::Kagent(_) => "the kagent controller of --kagent-url",
        }
    }

    /// `KAGENT_URL`, and `KAGENT_GRPC_URL` when set, for the agent container.
    pub fn env(&self, grpc_url: Option<&str>) -> Vec<EnvVar> {
        let value_env = |name: &str, value: String| EnvVar {
            name: name.to_owned(),
            value: Some(value),
            ..EnvVar::default()
        };
        std::iter::once(value_env(KAGENT_URL_ENV, self.url().to_string()))
            .chain(grpc_url.map(|grpc| value_env(KAGENT_GRPC_URL_ENV, grpc.to_owned())))
            .collect()
    }

    /// The projected token the runtime sends as its credential, of [`Self::audience`] (which
    /// the Kubernetes API refuses), renewed by the kubelet; kagent renders the same volume
    /// with its own audience.
    pub fn token_volume(&self) -> Volume {
        Volume {
            name: KAGENT_TOKEN_VOLUME.to_owned(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some(self.audience().to_owned()),
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

    /// What Gateway placement's egress policy adds so that the agent pods reach the API;
    /// `None` when its rule for addresses outside the cluster already lets them. The store's
    /// pods are selected by their label ([`SESSION_STORE_COMPONENT`]); of a kagent controller
    /// the policy knows no label, so any pod of its namespace on the API's port.
    pub fn egress(&self, cluster_cidrs: &[Cidr]) -> Option<NetworkPolicyEgressRule> {
        let pods = match self {
            Self::Store(_) => Some(SESSION_STORE_COMPONENT),
            Self::Kagent(_) => None,
        };
        network::egress_to_service(
            &self.url().to_string(),
            SESSION_STORE_PORT,
            pods,
            cluster_cidrs,
        )
    }
}

/// Where the agent container mounts [`SessionApi::token_volume`].
pub fn token_mount() -> VolumeMount {
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

    const KAGENT: &str = "http://kagent-controller.kagent:8083";

    #[test]
    fn the_store_serves_the_sessions_unless_a_kagent_controller_is_named() {
        let store = SessionApiUrl::default_store();
        assert_eq!(
            SessionApi::of(&store, None),
            SessionApi::Store(store.clone())
        );
        let kagent: SessionApiUrl = KAGENT.parse().unwrap();
        assert_eq!(
            SessionApi::of(&store, Some(&kagent)),
            SessionApi::Kagent(kagent.clone())
        );
        assert_eq!(
            SessionApi::of(&store, None).url().to_string(),
            "http://hitl-sessions.hitl-system.svc:8083"
        );
    }

    #[test]
    fn the_runtime_gets_the_url_and_the_grpc_address_as_given() {
        let api = SessionApi::Store(SessionApiUrl::default_store());
        let env = api.env(Some("kagent-controller.kagent:8084"));
        let pairs: Vec<_> = env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref().unwrap()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("KAGENT_URL", "http://hitl-sessions.hitl-system.svc:8083"),
                ("KAGENT_GRPC_URL", "kagent-controller.kagent:8084")
            ]
        );
        assert_eq!(api.env(None).len(), 1);
    }

    #[test]
    fn the_token_is_of_the_audience_of_whoever_serves_the_api() {
        let audience = |api: &SessionApi| {
            let volume = api.token_volume();
            let sources = volume.projected.unwrap().sources.unwrap();
            let token = sources[0].service_account_token.clone().unwrap();
            assert_eq!(token.path, "kagent-token");
            assert_eq!(volume.name, "kagent-token");
            token.audience.unwrap()
        };
        let store = SessionApi::Store(SessionApiUrl::default_store());
        assert_eq!(audience(&store), "hitl-operator-sessions");
        assert_eq!(
            audience(&SessionApi::Kagent(KAGENT.parse().unwrap())),
            "kagent"
        );
        assert_eq!(token_mount().mount_path, "/var/run/secrets/tokens");
    }

    #[test]
    fn session_api_urls_are_addresses_without_a_path() {
        assert_eq!(
            "http://kagent-controller.kagent:8083/"
                .parse::<SessionApiUrl>()
                .unwrap()
                .to_string(),
            KAGENT
        );
        for bad in [
            "ftp://x",
            "kagent-controller:8083",
            "http://x:8083/api",
            "http://x?a=b",
        ] {
            assert!(bad.parse::<SessionApiUrl>().is_err(), "{bad}");
        }
    }
}
