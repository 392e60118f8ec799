//! The health and metrics server: `/healthz`, `/readyz` and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::task::JoinHandle;

use super::{CacheSync, Metrics};
use crate::{Error, Result};

/// Health of the process, served on `/healthz` and `/readyz`.
#[derive(Default)]
pub struct Health {
    ready: AtomicBool,
}

impl Health {
    /// Whether `/readyz` answers ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Makes `/readyz` answer ready, or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Not ready until `caches` have listed, then ready again: the task that does so.
    pub(super) fn ready_once_synced(self: Arc<Self>, caches: CacheSync) -> JoinHandle<()> {
        tokio::spawn(async move {
            self.set_ready(false);
            caches.synced().await;
            self.set_ready(true);
            tracing::info!("caches synced");
        })
    }
}

#[derive(Clone)]
struct ServerState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// The `/healthz`, `/readyz` and `/metrics` routes.
pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(state): State<ServerState>| async move {
                if state.health.is_ready() {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(state): State<ServerState>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    state.metrics.encode(),
                )
                    .into_response()
            }),
        )
        .with_state(ServerState { metrics, health })
}

/// Serves [`router`] on `addr` in a task of its own (a start-up error when `addr` cannot be
/// bound).
pub(super) async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    let server = axum::serve(listener, router(metrics, health));
    tokio::spawn(async move {
        if let Err(error) = server.await {
            tracing::error!(%error, "metrics server stopped");
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let response = router
            .clone()
            .oneshot(http::Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics() {
        let metrics = Arc::new(Metrics::default());
        let health = Arc::new(Health::default());
        let router = router(metrics.clone(), health.clone());
        assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(&router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        health.ready.store(true, Ordering::Relaxed);
        assert_eq!(get(&router, "/readyz").await.0, StatusCode::OK);
        let (status, body) = get(&router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("hitl_approvals_pending 0"), "{body}");
    }
}
