//! Start-up of `hitl-operator controller`: flags checked, logging, the health and metrics
//! server, Slack's endpoint, then the controllers, while holding the Lease when leader election
//! is on, until SIGTERM.

use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;

use super::health::{self, Health};
use super::leader::{SHUTDOWN_GRACE, grace_over, lead, stop_on_termination, stopped};
use super::watches::Watches;
use super::{
    Context, ControllerArgs, Metrics, SystemClock, agent, approval_request, model_config, notifier,
    remote_mcp_server, slack,
};
use crate::Result;
use crate::cli::logging;
use crate::egress::destination::Destinations;

/// Runs the controller until SIGTERM; with leader election, only while holding the Lease.
pub async fn run(args: ControllerArgs) -> Result<()> {
    logging::install_tls_provider();
    logging::init(args.log_format);
    let client = crate::apiserver::client::nodelay_client().await?;
    args.check_agent_selector(&client).await?;
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());
    health::serve(args.metrics_addr, metrics.clone(), health.clone()).await?;
    slack::serve(&args).await?;

    // `stop` turns true on SIGTERM or when leadership is lost.
    let (stop_tx, stop_rx) = stop_on_termination();
    let controllers = |stop| run_controllers(client.clone(), &args, metrics, health.clone(), stop);
    if !args.leader_election {
        health.set_ready(true);
        controllers(stop_rx).await;
        return Ok(());
    }
    lead(&client, &args, &health, stop_tx, stop_rx, controllers).await
}

/// Makes every watch once ([`Watches`]), builds the five controllers on them and runs them
/// until `stop` turns true.
async fn run_controllers(
    client: Client,
    args: &ControllerArgs,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop: watch::Receiver<bool>,
) {
    let watches = Watches::new(
        &client,
        args.namespace.as_deref(),
        args.agent_selector.as_deref(),
    );
    let metadata_watches = tokio::spawn(watches.metadata);
    let instance = std::env::var("POD_NAME").ok();
    let ctx = Arc::new(
        Context::new(
            client,
            Arc::new(SystemClock),
            metrics,
            args.render_options(),
            watches.stores,
            watches.caches,
            instance,
        )
        .with_notifier_destinations(Destinations::new(args.notifier_allow_cidrs.clone())),
    );
    let controllers = futures::future::join5(
        agent::controller(watches.agent, ctx.clone(), stopped(&stop)),
        approval_request::controller(watches.approval_request, ctx.clone(), stopped(&stop)),
        model_config::controller(watches.model_config, ctx.clone(), stopped(&stop)),
        remote_mcp_server::controller(watches.remote_mcp_server, ctx.clone(), stopped(&stop)),
        notifier::controller(watches.notifier, ctx.clone(), stopped(&stop)),
    );

    let trimming = tokio::spawn(super::malloc::trim_free_memory());
    ctx.metrics
        .count_pending_in(Some(ctx.stores.requests_by_agent.clone()));
    let readiness = health.ready_once_synced(ctx.caches.clone());

    // Once stopping, in-flight reconciles get SHUTDOWN_GRACE to finish; whatever is still
    // running then is dropped (each reconcile is idempotent and resumes on the next leader).
    tokio::select! {
        _ = controllers => tracing::info!("controllers stopped"),
        _ = watches.shared => {
            tracing::error!("a watch stream ended unexpectedly");
        }
        _ = grace_over(&stop) => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "reconciles still running at shutdown; abandoning them");
        }
    }
    readiness.abort();
    trimming.abort();
    metadata_watches.abort();
    ctx.metrics.count_pending_in(None);
}

#[cfg(test)]
mod wiring_tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::extract::Request;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use clap::Parser;
    use std::net::SocketAddr;
    use std::sync::Mutex;
    use std::time::Duration;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    /// What the stand-in API server saw, the one Lease it holds, and the Agents it lists.
    #[derive(Default)]
    struct Fake {
        seen: Mutex<Vec<String>>,
        lease: Mutex<Option<serde_json::Value>>,
        agents: Vec<serde_json::Value>,
    }

    /// The Lease endpoint: get (404 until created), create, and patches merged into its spec.
    fn lease(fake: &Fake, method: &http::Method, body: &[u8]) -> axum::response::Response {
        let mut lease = fake.lease.lock().unwrap();
        if *method == http::Method::POST {
            *lease = Some(serde_json::from_slice(body).unwrap());
        } else if *method == http::Method::PATCH {
            let patch: serde_json::Value = serde_json::from_slice(body).unwrap();
            let stored = lease.as_mut().expect("lease created before it is patched");
            let spec = stored
                .as_object_mut()
                .unwrap()
                .entry("spec")
                .or_insert_with(|| serde_json::json!({}));
            for (key, value) in patch["spec"].as_object().cloned().unwrap_or_default() {
                if value.is_null() {
                    spec.as_object_mut().unwrap().remove(&key);
                } else {
                    spec[key] = value;
                }
            }
        }
        match lease.clone() {
            Some(mut stored) => {
                stored["metadata"]["resourceVersion"] = "1".into();
                axum::Json(stored).into_response()
            }
            None => (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": "not found",
                })),
            )
                .into_response(),
        }
    }

    /// A stand-in API server: a Lease, empty lists, and watches that stay open without events.
    async fn fake_apiserver(fake: Arc<Fake>) -> SocketAddr {
        let app = Router::new().fallback(move |request: Request| {
            let fake = fake.clone();
            async move {
                let metadata_only = request
                    .headers()
                    .get("accept")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
                let method = request.method().clone();
                let uri = request.uri().to_string();
                fake.seen.lock().unwrap().push(format!(
                    "{}{}",
                    if metadata_only { "metadata " } else { "" },
                    uri.split("&resourceVersion").next().unwrap_or_default()
                ));
                if uri.contains("watch=true") {
                    return Body::from_stream(futures::stream::pending::<
                        Result<bytes::Bytes, std::io::Error>,
                    >())
                    .into_response();
                }
                let lists = method == http::Method::GET && uri.contains('?');
                if uri.starts_with("/apis/coordination.k8s.io/") && !lists {
                    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
                        .await
                        .unwrap();
                    return lease(&fake, &method, &body);
                }
                if !uri.contains('?') {
                    // Reads and writes of single objects never answer: a reconcile that gets
                    // this far stays in flight.
                    return futures::future::pending().await;
                }
                let kind = if metadata_only {
                    "PartialObjectMetadataList"
                } else {
                    "List"
                };
                let items = if uri.contains("/agents?") {
                    fake.agents.clone()
                } else if uri.contains("/leases?") {
                    fake.lease.lock().unwrap().iter().cloned().collect()
                } else {
                    Vec::new()
                };
                axum::Json(serde_json::json!({
                    "apiVersion": "v1", "kind": kind,
                    "metadata": {"resourceVersion": "1"}, "items": items,
                }))
                .into_response()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    fn client_for(addr: SocketAddr) -> Client {
        logging::install_tls_provider();
        Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap()
    }

    /// Polls `condition` (bounded, so a regression fails instead of hanging).
    async fn eventually(what: &str, condition: impl Fn() -> bool) {
        for _ in 0..3000 {
            if condition() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{what} never happened");
    }

    #[tokio::test]
    async fn leader_reconciles_while_holding_the_lease_and_releases_it_on_stop() {
        let fake = Arc::new(Fake::default());
        let client = client_for(fake_apiserver(fake.clone()).await);
        let args = Cli::try_parse_from(["controller", "--namespace", "demo"])
            .unwrap()
            .args;
        let health = Arc::new(Health::default());
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let running = tokio::spawn({
            let (health, stop_tx) = (health.clone(), stop_tx.clone());
            async move {
                lead(&client, &args, &health, stop_tx, stop_rx, |stop| {
                    run_controllers(client.clone(), &args, Arc::default(), health.clone(), stop)
                })
                .await
            }
        });
        let holder = || {
            fake.lease
                .lock()
                .unwrap()
                .as_ref()
                .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        };
        let listed_agents = || {
            fake.seen
                .lock()
                .unwrap()
                .iter()
                .any(|s| s.starts_with("/apis/kagent.dev/v1alpha2/namespaces/demo/agents?"))
        };
        eventually("taking the Lease in the lease namespace", || {
            holder().is_some()
        })
        .await;
        eventually("starting the controllers", listed_agents).await;
        eventually("readiness", || health.is_ready()).await;
        assert!(fake.seen.lock().unwrap().iter().any(|s| {
            s.starts_with("/apis/coordination.k8s.io/v1/namespaces/demo/leases/hitl-operator")
        }),);

        stop_tx.send_replace(true);
        running
            .await
            .unwrap()
            .expect("a requested stop is not an error");
        assert_eq!(holder(), None, "the Lease is released on shutdown");
    }

    #[tokio::test]
    async fn a_stop_during_a_hung_reconcile_exits_promptly_and_releases_the_lease() {
        let fake = Arc::new(Fake {
            agents: vec![serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                "metadata": {"name": "stuck", "namespace": "demo", "uid": "u1",
                             "resourceVersion": "1", "generation": 1},
                "spec": {"type": "Declarative",
                         "declarative": {"systemMessage": "hi", "modelConfig": "model"}},
            })],
            ..Fake::default()
        });
        let client = client_for(fake_apiserver(fake.clone()).await);
        let args = Cli::try_parse_from(["controller", "--namespace", "demo"])
            .unwrap()
            .args;
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let running = tokio::spawn({
            let stop_tx = stop_tx.clone();
            async move {
                let health = Arc::<Health>::default();
                lead(&client, &args, &health, stop_tx, stop_rx, |stop| {
                    run_controllers(client.clone(), &args, Arc::default(), health.clone(), stop)
                })
                .await
            }
        });
        eventually(
            "the Agent's reconcile to hang on writing its status (its ModelConfig is missing)",
            || {
                fake.seen.lock().unwrap().iter().any(|s| {
                    s.starts_with("/apis/kagent.dev/v1alpha2/namespaces/demo/agents/stuck/status")
                })
            },
        )
        .await;

        stop_tx.send_replace(true);
        // SHUTDOWN_GRACE + RELEASE_BOUND is the most a stop may take; 20 s only catches a hang.
        tokio::time::timeout(Duration::from_secs(20), running)
            .await
            .expect("stopping does not wait for the hung reconcile")
            .unwrap()
            .expect("a requested stop is not an error");
        let lease = fake
            .lease
            .lock()
            .unwrap()
            .clone()
            .expect("the Lease was taken");
        assert!(
            lease["spec"]["holderIdentity"].is_null(),
            "the Lease is released on shutdown: {lease}"
        );
    }

    #[tokio::test]
    async fn starts_every_watch_becomes_ready_and_stops_gracefully() {
        let fake = Arc::new(Fake::default());
        let client = client_for(fake_apiserver(fake.clone()).await);
        let args = Cli::try_parse_from(["controller", "--namespace", "demo"])
            .unwrap()
            .args;
        let health = Arc::new(Health::default());
        let (stop_tx, stop_rx) = watch::channel(false);
        let running = tokio::spawn({
            let health = health.clone();
            async move { run_controllers(client, &args, Arc::default(), health, stop_rx).await }
        });
        eventually("readiness", || health.is_ready()).await;
        stop_tx.send_replace(true);
        running.await.expect("controllers stop on the stop signal");

        let seen = fake.seen.lock().unwrap().clone();
        let listed = |path: &str| seen.iter().any(|s| s.starts_with(path));
        for path in [
            "/apis/kagent.dev/v1alpha2/namespaces/demo/agents?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/approvalrequests?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/remotemcpservers?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/modelconfigs?",
            "/apis/apps/v1/namespaces/demo/deployments?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator",
            "/api/v1/namespaces/demo/secrets?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/rolebindings?&labelSelector=",
            "/apis/networking.k8s.io/v1/namespaces/demo/networkpolicies?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator",
            "metadata /api/v1/namespaces/demo/secrets?",
            "metadata /api/v1/namespaces/demo/configmaps?",
            "metadata /api/v1/namespaces/demo/services?",
        ] {
            assert!(listed(path), "{path} not requested; saw {seen:#?}");
        }
        // Full Secrets are only ever listed with the managed-by selector.
        assert!(
            seen.iter()
                .filter(|s| s.starts_with("/api/v1/namespaces/demo/secrets?"))
                .all(|s| s.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator")),
            "{seen:#?}"
        );
    }
}
