//! Wiring: the MCP router (one route per tool server), the `/healthz` + `/metrics` router, and
//! `hitl-operator gate --config FILE`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use axum::serve::ListenerExt;
use hyper_util::client::legacy::connect::HttpConnector;
use jiff::SignedDuration;

use super::approval::{ApprovalSettings, Approvals};
use super::callers::Callers;
use super::decision::{Clock, SystemClock};
use super::freeze::FreezeWatch;
use super::http_sse::SseRoute;
use super::metrics::Metrics;
use super::open_requests::OpenRequests;
use super::policy::ServerPolicy;
use super::pool::Connector;
use super::routes::{McpRoutes, McpRoutesBuilder};
use super::upstream::{Shared, Upstream};
use crate::api::approval_request::PolicyKind;
use crate::api::remote_mcp_server::McpProtocol;
use crate::contract::binding_key::BindingKey;
use crate::contract::gate_config::GateConfig;
use crate::{Error, Result};

/// Time open connections get to finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Default interval between progress notifications of a waiting call.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

fn invalid(field: &str, message: impl Into<String>) -> Error {
    Error::InvalidSpec {
        object: "gate.json".into(),
        field: field.into(),
        message: message.into(),
    }
}

fn seconds(field: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s).map_err(|e| invalid(field, format!("{s}: {e}")))
}

/// How the gate connects to upstreams, one for all servers: `http` and `https` (rustls with
/// ring, the platform's verifier and so the system's trust roots, as reqwest had), TCP_NODELAY,
/// TCP keepalive, no proxies; the TCP settings are reqwest's defaults, which the gate used
/// before.
pub fn connector() -> Result<Connector> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(Duration::from_secs(10)));
    tcp.set_keepalive(Some(Duration::from_secs(15)));
    tcp.set_keepalive_interval(Some(Duration::from_secs(15)));
    tcp.set_keepalive_retries(Some(3));
    tcp.set_tcp_user_timeout(Some(Duration::from_secs(30)));
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_platform_verifier(rustls::crypto::ring::default_provider())
        .map_err(|e| invalid("params", format!("cannot set up TLS for upstreams: {e}")))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp))
}

/// The gate's MCP routes and its metrics, from its configuration, the Agent's binding key, a
/// Kubernetes client and the view of the Agent's freeze. The count of the agent's open
/// requests watches through the client from the first call that would create one. A shared
/// gate (`agent.kind: ToolGate`) must have `callers`, and only it may: its every request is
/// then authenticated ([`super::callers`]).
pub fn build(
    config: &GateConfig,
    key: BindingKey,
    client: kube::Client,
    clock: Arc<dyn Clock>,
    pod: String,
    progress_every: Duration,
    freeze: FreezeWatch,
) -> Result<(McpRoutes, Arc<Metrics>)> {
    let metrics = Arc::new(Metrics::default());
    if config.approval.max_open_requests == 0 {
        return Err(invalid(
            "approval.max_open_requests",
            "0: must be at least 1 (no call could ever ask for approval)",
        ));
    }
    let callers = match (&config.callers, config.agent.kind) {
        (Some(policy), PolicyKind::ToolGate) => Some(Arc::new(
            Callers::new(policy, client.clone(), clock.clone())
                .map_err(|(field, why)| invalid(&field, why))?,
        )),
        (None, PolicyKind::Agent) => None,
        (None, PolicyKind::ToolGate) => {
            return Err(invalid(
                "callers",
                "absent: a ToolGate's shared gate must verify who calls (callers.audiences)",
            ));
        }
        (Some(_), PolicyKind::Agent) => {
            return Err(invalid(
                "callers",
                "set on an Agent's gate: only a ToolGate's shared gate has callers",
            ));
        }
    };
    let settings = ApprovalSettings {
        timeout: seconds("approval.timeout_seconds", config.approval.timeout_seconds)?,
        wait: seconds(
            "approval.wait_timeout_seconds",
            config.approval.wait_timeout_seconds,
        )?,
        progress_every,
        pod,
        metrics: metrics.clone(),
        freeze,
        grant_max_ttl: config
            .approval
            .grant_max_ttl_seconds
            .map(|s| seconds("approval.grant_max_ttl_seconds", s))
            .transpose()?
            .map(|ttl| SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX)),
        open: OpenRequests::watching(
            client.clone(),
            &config.agent,
            config.approval.max_open_requests,
        ),
        escalation: config.approval.escalation.clone(),
    };
    let shared = Shared {
        connector: connector()?,
        key,
        approvals: Approvals::new(client, config.agent.clone(), settings, clock),
        metrics: metrics.clone(),
        callers: callers.clone(),
    };
    let mut routes = McpRoutesBuilder::new(callers);
    for (i, server) in config.servers.iter().enumerate() {
        let taken = match server.protocol {
            McpProtocol::StreamableHttp => routes.has(&server.route),
            McpProtocol::Sse => {
                routes.has(&server.route) || routes.has(&format!("{}/messages", server.route))
            }
        };
        if !server.route.starts_with('/') || taken {
            return Err(invalid(
                &format!("servers[{i}].route"),
                format!("{:?} must be a unique absolute path", server.route),
            ));
        }
        let policy = ServerPolicy::compile(&config.agent, server)
            .map_err(|m| invalid(&format!("servers[{i}].rules"), m))?;
        let up = Arc::new(
            Upstream::new(server.clone(), policy, &config.agent.name, shared.clone())
                .map_err(|m| invalid(&format!("servers[{i}].params"), m))?,
        );
        match server.protocol {
            McpProtocol::StreamableHttp => routes.streamable(&server.route, up),
            McpProtocol::Sse => routes.sse(&server.route, Arc::new(SseRoute::new(up))),
        }
    }
    Ok((routes.build(), metrics))
}

/// `/healthz` and `/metrics`.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.encode(),
                    )
                }
            }),
        )
}

/// Reads and parses `gate.json`.
pub fn load_config(path: &str) -> Result<GateConfig> {
    let text = std::fs::read(path).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    Ok(serde_json::from_slice(&text)?)
}

/// This gate's name in `status.consumedBy`: `$POD_NAME`, else the hostname.
pub fn pod_name() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "approval-gate".into())
}

/// Sets TCP_NODELAY on an accepted connection.
pub fn nodelay(stream: &mut tokio::net::TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

async fn bind(addr: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.into(),
            source,
        })
}

/// Runs the gate until SIGTERM or Ctrl-C: MCP on `listen`, health and metrics on
/// `metrics_listen`, the in-cluster (or kubeconfig) Kubernetes client.
pub async fn run(config: GateConfig, key: BindingKey) -> Result<()> {
    let client = crate::apiserver::client::nodelay_client().await?;
    let freeze = FreezeWatch::spawn(
        client.clone(),
        config.agent.kind,
        &config.agent.namespace,
        &config.agent.name,
    );
    let (router, metrics) = build(
        &config,
        key,
        client,
        Arc::new(SystemClock),
        pod_name(),
        PROGRESS_EVERY,
        freeze,
    )?;
    let mcp = bind(&config.listen).await?;
    let health = bind(&config.metrics_listen).await?;
    tracing::info!(listen = %config.listen, metrics = %config.metrics_listen,
        servers = config.servers.len(), agent = %config.agent.name, "approval gate started");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mcp_server =
        axum::serve(mcp.tap_io(nodelay), router).with_graceful_shutdown(stopped(stop_rx.clone()));
    let health_server = axum::serve(health, metrics_router(metrics))
        .with_graceful_shutdown(stopped(stop_rx.clone()));
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    // Open event streams may never end by themselves: give requests a grace period, then go.
    let grace = async {
        stopped(stop_rx).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        (a, b) = async { tokio::join!(mcp_server, health_server) } => a.and(b).map_err(|source| Error::Bind {
            addr: config.listen.clone(),
            source,
        }),
        _ = grace => {
            tracing::info!("connections still open after the grace period; exiting");
            Ok(())
        }
    }
}

/// Resolves at SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
