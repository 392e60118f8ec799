//! Wiring: the MCP router (one route per tool server), the `/healthz` + `/metrics` router, and
//! `hitl-operator gate --config FILE`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get, post};
use axum::serve::ListenerExt;

use super::approval::{ApprovalSettings, Approvals};
use super::config::GateConfig;
use super::decision::{Clock, SystemClock};
use super::legacy::{self, LegacyRoute};
use super::metrics::Metrics;
use super::proxy::{self, Shared, Upstream};
use crate::api::remote_mcp_server::McpProtocol;
use crate::{Error, Result};

/// Idle time after which pooled upstream connections are closed.
const POOL_IDLE: Duration = Duration::from_secs(90);

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

/// The pooled upstream HTTP client: one for all servers, TCP_NODELAY, no proxies.
pub fn http_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(256)
        .connect_timeout(Duration::from_secs(10))
        .no_proxy()
        .build()
        .map_err(|e| invalid("params", format!("cannot build the HTTP client: {e}")))
}

/// The gate's MCP router and its metrics, from its configuration and a Kubernetes client.
pub fn build(
    config: &GateConfig,
    client: kube::Client,
    clock: Arc<dyn Clock>,
    pod: String,
    progress_every: Duration,
) -> Result<(Router, Arc<Metrics>)> {
    let metrics = Arc::new(Metrics::default());
    let settings = ApprovalSettings {
        timeout: seconds("approval.timeout_seconds", config.approval.timeout_seconds)?,
        wait: seconds(
            "approval.wait_timeout_seconds",
            config.approval.wait_timeout_seconds,
        )?,
        progress_every,
        pod,
    };
    let shared = Shared {
        http: http_client()?,
        approvals: Approvals::new(client, config.agent.clone(), settings, clock),
        metrics: metrics.clone(),
    };
    let mut router = Router::new();
    let mut seen = HashSet::new();
    for (i, server) in config.servers.iter().enumerate() {
        if !server.route.starts_with('/') || !seen.insert(server.route.clone()) {
            return Err(invalid(
                &format!("servers[{i}].route"),
                format!("{:?} must be a unique absolute path", server.route),
            ));
        }
        let up = Arc::new(
            Upstream::new(server.clone(), &config.agent.name, shared.clone())
                .map_err(|m| invalid(&format!("servers[{i}].params"), m))?,
        );
        router = match server.protocol {
            McpProtocol::StreamableHttp => {
                router.route(&server.route, any(proxy::streamable).with_state(up))
            }
            McpProtocol::Sse => {
                let route = Arc::new(LegacyRoute::new(up));
                router
                    .route(&server.route, get(legacy::open).with_state(route.clone()))
                    .route(
                        &format!("{}/messages", server.route),
                        post(legacy::message).with_state(route),
                    )
            }
        };
    }
    Ok((router, metrics))
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
pub async fn run(config: GateConfig) -> Result<()> {
    let client = kube::Client::try_default().await?;
    let (router, metrics) = build(
        &config,
        client,
        Arc::new(SystemClock),
        pod_name(),
        PROGRESS_EVERY,
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

async fn shutdown_signal() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::agent::{ApprovalMode, ToolServerKind};
    use crate::gate::config::{AgentIdentity, GateApproval, GateServer};
    use crate::render::config::McpParams;

    fn config(edit: impl FnOnce(&mut GateServer)) -> GateConfig {
        let mut server = GateServer {
            namespace: "tools".into(),
            name: "fs".into(),
            kind: ToolServerKind::RemoteMCPServer,
            protocol: McpProtocol::StreamableHttp,
            route: GateServer::route_for("tools", "fs"),
            params: McpParams {
                url: "http://fs.tools:8080/mcp".into(),
                headers: Default::default(),
                timeout: None,
                sse_read_timeout: None,
                terminate_on_close: None,
            },
            tools: vec!["read_file".into()],
            require_approval: vec![],
            allowed_headers: vec![],
        };
        edit(&mut server);
        GateConfig {
            agent: AgentIdentity {
                namespace: "team".into(),
                name: "a".into(),
                uid: String::new(),
                service_account: "a".into(),
            },
            approval: GateApproval {
                mode: ApprovalMode::Gate,
                timeout_seconds: 3600.0,
                wait_timeout_seconds: 30.0,
                ttl_after_finished_seconds: 86400.0,
            },
            listen: "127.0.0.1:0".into(),
            metrics_listen: "127.0.0.1:0".into(),
            servers: vec![server],
        }
    }

    fn build_error(config: &GateConfig) -> String {
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
            .unwrap();
        match build(
            config,
            kube,
            Arc::new(SystemClock),
            "p".into(),
            PROGRESS_EVERY,
        ) {
            Ok(_) => "built".into(),
            Err(e) => e.to_string(),
        }
    }

    #[tokio::test]
    async fn bad_server_entries_are_refused_naming_the_field() {
        assert_eq!(build_error(&config(|_| {})), "built");
        type Edit = fn(&mut GateServer);
        let cases: [(Edit, &str); 4] = [
            (
                |s| s.params.timeout = serde_json::Number::from_f64(0.0),
                "gate.json: servers[0].params: /servers/tools/fs/mcp: params.timeout 0.0: must be a positive number of seconds",
            ),
            (
                |s| s.params.sse_read_timeout = Some((-5).into()),
                "gate.json: servers[0].params: /servers/tools/fs/mcp: params.sse_read_timeout -5: must be a positive number of seconds",
            ),
            (
                |s| s.params.url = "not a url".into(),
                "gate.json: servers[0].params: /servers/tools/fs/mcp: params.url \"not a url\": relative URL without a base",
            ),
            (
                |s| s.route = "servers/x".into(),
                "gate.json: servers[0].route: \"servers/x\" must be a unique absolute path",
            ),
        ];
        for (edit, expected) in cases {
            assert_eq!(build_error(&config(edit)), expected);
        }
    }
}
