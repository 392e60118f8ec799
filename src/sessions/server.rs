//! `hitl-operator sessions`: the session store's process. kagent's session API ([`super::http`])
//! on `listen`; `/healthz`, `/readyz` (the database answers) and `/metrics` on
//! `health_listen`; retention ([`super::retention`]) and Events for refused writes in the
//! background. Until the database first answers (and its migrations ran), the API port is not
//! open and `/readyz` fails; afterwards `/readyz` fails whenever the database does not answer.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Reporter};
use tokio::sync::mpsc;

use super::auth::PodTokens;
use super::http::{Api, Bounds, LimitNotice};
use super::memory::MemoryStore;
use super::metrics::Metrics;
use super::retention::{Retention, Sweeper};
use super::sql::SqlStore;
use super::store::{Quotas, SessionStore};
use crate::controller::events::{EVENTS_PER_RECORDER, Events};
use crate::{Error, Result};

/// How long `/readyz` waits for the database.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause between attempts to reach the database at start.
const CONNECT_RETRY: Duration = Duration::from_secs(2);

/// Time open requests get to finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The shortest time between two Events on one Agent for one limit.
const NOTICE_EVERY: Duration = Duration::from_secs(60);

/// Notices of refused writes waiting for their Event; more are dropped (the metric counts
/// every refusal).
const NOTICE_QUEUE: usize = 256;

/// Where the store keeps its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Database {
    /// In the process's memory: lost at every restart (`--database memory:`).
    Memory,
    /// A SQLite file or a Postgres database, by its URL.
    Url(String),
}

impl Database {
    /// The database a `--database` value names: `memory:`, `sqlite://PATH` or
    /// `postgres://...` (also `postgresql://`).
    pub fn parse(url: &str) -> std::result::Result<Self, String> {
        let url = url.trim();
        if url == "memory:" {
            return Ok(Self::Memory);
        }
        match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("sqlite" | "postgres" | "postgresql") => Ok(Self::Url(url.to_owned())),
            _ => Err(
                "the database is memory:, sqlite://PATH or postgres://USER@HOST/DB (the scheme names the backend)"
                    .into(),
            ),
        }
    }

    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted(&self) -> String {
        match self {
            Self::Memory => "memory:".into(),
            Self::Url(url) => match reqwest::Url::parse(url) {
                Ok(mut parsed) if parsed.password().is_some() => {
                    let _ = parsed.set_password(Some("***"));
                    parsed.to_string()
                }
                _ => url
                    .split_once('?')
                    .map_or_else(|| url.clone(), |(base, _)| base.to_owned()),
            },
        }
    }
}

/// What the process serves, and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// Address of kagent's session API.
    pub listen: SocketAddr,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    pub health_listen: SocketAddr,
    /// Where the data is kept.
    pub database: Database,
    /// Audience of the tokens the store takes.
    pub audience: String,
    /// What one Agent may keep.
    pub quotas: Quotas,
    /// Bounds of bodies and of the bytes in flight.
    pub bounds: Bounds,
    /// Retention of idle sessions and of deleted Agents' data.
    pub retention: Retention,
}

/// Runs the store until SIGTERM or Ctrl-C.
pub async fn run(options: Options) -> Result<()> {
    let client = crate::apiserver::client::nodelay_client().await?;
    let metrics = Arc::new(Metrics::default());
    let health = bind(options.health_listen).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        crate::gate::server::shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    tracing::info!(database = %options.database.redacted(), listen = %options.listen,
        health = %options.health_listen, "session store starting");
    match &options.database {
        Database::Memory => {
            let connected = Arc::new(OnceLock::new());
            let health = spawn_health(health, metrics.clone(), connected.clone(), stop_rx.clone());
            let _ = connected.set(Arc::new(MemoryStore::new(options.quotas)));
            serve(options, client, connected, metrics, health, stop_rx).await
        }
        Database::Url(url) => {
            let connected = Arc::new(OnceLock::new());
            let health = spawn_health(health, metrics.clone(), connected.clone(), stop_rx.clone());
            loop {
                match SqlStore::connect(url, options.quotas).await {
                    Ok(store) => {
                        let _ = connected.set(Arc::new(store));
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "session store: database not reachable yet; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(CONNECT_RETRY) => {}
                            _ = stopped(stop_rx.clone()) => return Ok(()),
                        }
                    }
                }
            }
            serve(options, client, connected, metrics, health, stop_rx).await
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })
}

async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// The store, once its database has answered.
type Connected<S> = Arc<OnceLock<Arc<S>>>;

struct HealthState<S> {
    metrics: Arc<Metrics>,
    store: Connected<S>,
}

impl<S> Clone for HealthState<S> {
    fn clone(&self) -> Self {
        Self {
            metrics: self.metrics.clone(),
            store: self.store.clone(),
        }
    }
}

/// Serves `/healthz`, `/readyz` and `/metrics` on `listener` until `stop`.
fn spawn_health<S: SessionStore>(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    store: Connected<S>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics_text::<S>))
        .with_state(HealthState { metrics, store });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(stopped(stop))
            .await
        {
            tracing::error!(error = %e, "session store: health server failed");
        }
    })
}

async fn readyz<S: SessionStore>(State(state): State<HealthState<S>>) -> impl IntoResponse {
    let Some(store) = state.store.get() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "database not reached yet".to_owned(),
        );
    };
    match tokio::time::timeout(PING_TIMEOUT, store.ping()).await {
        Ok(Ok(())) => (StatusCode::OK, "ok".to_owned()),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the database did not answer within {}s",
                PING_TIMEOUT.as_secs()
            ),
        ),
    }
}

async fn metrics_text<S: SessionStore>(State(state): State<HealthState<S>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

/// Serves the API on the connected store until stopped, then waits for the health server.
async fn serve<S: SessionStore>(
    options: Options,
    client: Client,
    connected: Connected<S>,
    metrics: Arc<Metrics>,
    health_task: tokio::task::JoinHandle<()>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let store = connected
        .get()
        .expect("serve is called once the store is connected")
        .clone();
    let (notice_tx, notice_rx) = mpsc::channel(NOTICE_QUEUE);
    tokio::spawn(publish_notices(client.clone(), notice_rx));
    let sweeper = Sweeper::new(
        store.clone(),
        client.clone(),
        options.retention,
        metrics.clone(),
    );
    let sweeps = tokio::spawn(sweeper.run(stop.clone()));
    let auth = PodTokens::new(client, options.audience.clone());
    let api = Arc::new(Api::new(
        store,
        auth,
        options.bounds,
        metrics,
        Some(notice_tx),
    ));
    let router = Router::new().fallback(move |request: Request| {
        let api = api.clone();
        async move { api.serve(request).await }
    });
    let listener = bind(options.listen).await?;
    tracing::info!(listen = %options.listen, "session store serving kagent's session API");
    let server = axum::serve(listener, router).with_graceful_shutdown(stopped(stop.clone()));
    let grace = async {
        stopped(stop).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let result = tokio::select! {
        served = server => served.map_err(|source| Error::Bind {
            addr: options.listen.to_string(),
            source,
        }),
        _ = grace => {
            tracing::info!("requests still open after the grace period; exiting");
            Ok(())
        }
    };
    sweeps.abort();
    let _ = health_task.await;
    result
}

/// Publishes a Warning Event on the Agent of each refused write, at most one per Agent and
/// limit every [`NOTICE_EVERY`].
async fn publish_notices(client: Client, mut notices: mpsc::Receiver<LimitNotice>) {
    let events = Events::new(
        client,
        Reporter {
            controller: "hitl-operator-sessions".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
        EVENTS_PER_RECORDER,
    );
    let mut last = std::collections::HashMap::new();
    while let Some(notice) = notices.recv().await {
        let key = (notice.agent.clone(), notice.limit);
        let now = tokio::time::Instant::now();
        if last
            .get(&key)
            .is_some_and(|at: &tokio::time::Instant| now.duration_since(*at) < NOTICE_EVERY)
        {
            continue;
        }
        if last.len() > 10_000 {
            last.retain(|_, at| now.duration_since(*at) < NOTICE_EVERY);
        }
        last.insert(key, now);
        let event = Event {
            type_: EventType::Warning,
            reason: "SessionStoreLimitReached".into(),
            note: Some(notice.message.chars().take(1000).collect()),
            action: "StoreConversation".into(),
            secondary: None,
        };
        let target = ObjectReference {
            api_version: Some("kagent.dev/v1alpha2".into()),
            kind: Some("Agent".into()),
            namespace: Some(notice.agent.namespace.clone()),
            name: Some(notice.agent.name.clone()),
            ..ObjectReference::default()
        };
        if let Err(e) = events.publish(&event, &target).await {
            tracing::warn!(agent = %notice.agent, error = %e, "session store: could not publish the Event of a refused write");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_is_named_by_its_scheme() {
        assert_eq!(Database::parse("memory:"), Ok(Database::Memory));
        assert_eq!(
            Database::parse("sqlite:///var/lib/s.db"),
            Ok(Database::Url("sqlite:///var/lib/s.db".into()))
        );
        assert!(Database::parse("postgres://u@db/s").is_ok());
        assert!(Database::parse("postgresql://u@db/s").is_ok());
        assert!(Database::parse("/var/lib/s.db").is_err());
        assert!(Database::parse("mysql://db").is_err());
    }

    #[test]
    fn a_logged_url_shows_no_password() {
        let db = Database::parse("postgres://app:s3cret@db:5432/sessions?sslmode=require").unwrap();
        let shown = db.redacted();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("app:***@db"), "{shown}");
    }
}
