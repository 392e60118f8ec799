//! Start-up of `hitl-operator controller`: flags checked, logging, the health and metrics
//! server, Slack's endpoint, then the controllers, while holding the Lease when leader election
//! is on, until SIGTERM.

use std::sync::Arc;

use futures::FutureExt;
use kube::Client;
use tokio::sync::watch;

use super::health::{self, Health};
use super::leader::{SHUTDOWN_GRACE, grace_over, lead, stop_on_termination, stopped};
use super::watches::Watches;
use super::{
    Context, ControllerArgs, Metrics, SystemClock, agent, approval_request, model_config, notifier,
    remote_mcp_server, slack, token_review, tool_gate,
};
use crate::Result;
use crate::cli::logging;
use crate::egress::destination::Destinations;

/// Runs the controller until SIGTERM; with leader election, only while holding the Lease.
pub async fn run(args: ControllerArgs) -> Result<()> {
    crate::tls::install_provider();
    logging::init(args.log_format);
    let metrics = Arc::new(Metrics::default());
    let client = {
        let metrics = metrics.clone();
        crate::apiserver::client::counted_client(move |kind| metrics.api_request(kind)).await?
    };
    args.check_agent_selector(&client).await?;
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

/// Makes every watch once ([`Watches`]), builds the six controllers on them (and the keeper of
/// the ToolGates' TokenReview binding) and runs them
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
    let binding = args.token_review();
    let bound = binding.as_ref().map(|binding| {
        token_review::Bound::new(binding.name.clone(), watches.tool_gates_changed.clone())
    });
    let mut ctx = Context::new(
        client,
        Arc::new(SystemClock),
        metrics,
        args.render_options(),
        watches.stores,
        watches.caches,
        instance,
    )
    .with_notifier_destinations(Destinations::new(args.notifier_allow_cidrs.clone()));
    if let Some(bound) = &bound {
        ctx = ctx.with_token_review(bound.clone());
    }
    let ctx = Arc::new(ctx);
    // The ClusterRoleBinding of the ToolGates' gates, when one is set: it follows the set of
    // ToolGates, so it is kept beside their controller, not by it.
    let token_review_binding = match binding.zip(bound) {
        Some((binding, bound)) => {
            token_review::keep(binding, ctx.clone(), bound, stopped(&stop)).boxed()
        }
        None => futures::future::ready(()).boxed(),
    };
    let controllers = futures::future::join3(
        futures::future::join5(
            agent::controller(watches.agent, ctx.clone(), stopped(&stop)),
            approval_request::controller(watches.approval_request, ctx.clone(), stopped(&stop)),
            model_config::controller(watches.model_config, ctx.clone(), stopped(&stop)),
            remote_mcp_server::controller(watches.remote_mcp_server, ctx.clone(), stopped(&stop)),
            notifier::controller(watches.notifier, ctx.clone(), stopped(&stop)),
        ),
        tool_gate::controller(watches.tool_gate, ctx.clone(), stopped(&stop)),
        token_review_binding,
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
    use clap::Parser;
    use hitl_test_kit::{FakeApi, eventually};
    use std::time::Duration;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/demo/leases";

    /// The fake apiserver (no objects: empty lists, watches that stay open without events) and
    /// a client of it.
    async fn apiserver() -> (FakeApi, Client) {
        crate::tls::install_provider();
        let api = FakeApi::start().await;
        let client = api.client();
        (api, client)
    }

    /// Whether a request (of full objects, not metadata only) starting with `prefix` was seen.
    fn requested(api: &FakeApi, prefix: &str) -> bool {
        api.seen()
            .iter()
            .any(|s| !s.metadata_only && s.uri.starts_with(prefix))
    }

    /// Who holds the Lease, once it was created.
    fn holder(api: &FakeApi) -> Option<String> {
        let lease = api.get(LEASES, "hitl-operator")?;
        lease["spec"]["holderIdentity"].as_str().map(str::to_string)
    }

    #[tokio::test]
    async fn leader_reconciles_while_holding_the_lease_and_releases_it_on_stop() {
        let (api, client) = apiserver().await;
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
        eventually("taking the Lease in the lease namespace", || holder(&api)).await;
        eventually("starting the controllers", || {
            requested(&api, "/apis/kagent.dev/v1alpha2/namespaces/demo/agents?").then_some(())
        })
        .await;
        eventually("readiness", || health.is_ready().then_some(())).await;
        assert!(requested(&api, &format!("{LEASES}/hitl-operator")));

        stop_tx.send_replace(true);
        running
            .await
            .unwrap()
            .expect("a requested stop is not an error");
        assert_eq!(holder(&api), None, "the Lease is released on shutdown");
    }

    #[tokio::test]
    async fn a_replica_that_cannot_reach_the_lease_stays_up_unready_and_leads_once_it_can() {
        let (api, client) = apiserver().await;
        // The apiserver takes requests for the Lease and never answers them.
        api.stall(LEASES);
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
        let lease_requests = || {
            api.seen()
                .iter()
                .filter(|s| s.uri.starts_with(LEASES))
                .count()
        };
        // Past one attempt's bound (CONTEND_ATTEMPT, 1 s in tests): it is made again.
        eventually("a second attempt to read the Lease", || {
            (lease_requests() >= 2).then_some(())
        })
        .await;
        assert!(!running.is_finished(), "the replica exited: {running:?}");
        assert!(!health.is_ready(), "ready without having read the Lease");
        assert_eq!(holder(&api), None);

        api.unstall(LEASES);
        eventually("taking the Lease once the apiserver answers", || {
            holder(&api)
        })
        .await;
        eventually("readiness", || health.is_ready().then_some(())).await;
        stop_tx.send_replace(true);
        running
            .await
            .unwrap()
            .expect("a requested stop is not an error");
    }

    #[tokio::test]
    async fn a_stop_while_the_lease_cannot_be_reached_exits_at_once() {
        let (api, client) = apiserver().await;
        api.stall(LEASES);
        let args = Cli::try_parse_from(["controller", "--namespace", "demo"])
            .unwrap()
            .args;
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let running = tokio::spawn({
            let stop_tx = stop_tx.clone();
            async move {
                let health = Arc::<Health>::default();
                lead(&client, &args, &health, stop_tx, stop_rx, |_| async {
                    panic!("the controllers ran without the Lease")
                })
                .await
            }
        });
        eventually("an attempt to read the Lease", || {
            api.seen()
                .iter()
                .any(|s| s.uri.starts_with(LEASES))
                .then_some(())
        })
        .await;
        stop_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("a stop ends the attempts to read the Lease")
            .unwrap()
            .expect("a requested stop is not an error");
    }

    #[tokio::test]
    async fn a_stop_during_a_hung_reconcile_exits_promptly_and_releases_the_lease() {
        let (api, client) = apiserver().await;
        let agents = "/apis/kagent.dev/v1alpha2/namespaces/demo/agents";
        api.put(
            agents,
            serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                "metadata": {"name": "stuck", "namespace": "demo", "uid": "u1", "generation": 1},
                "spec": {"type": "Declarative",
                         "declarative": {"systemMessage": "hi", "modelConfig": "model"}},
            }),
        );
        // The write of its status never answers: the reconcile stays in flight.
        api.stall(&format!("{agents}/stuck/status"));
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
            || requested(&api, &format!("{agents}/stuck/status")).then_some(()),
        )
        .await;

        stop_tx.send_replace(true);
        // SHUTDOWN_GRACE + RELEASE_BOUND is the most a stop may take; 20 s only catches a hang.
        tokio::time::timeout(Duration::from_secs(20), running)
            .await
            .expect("stopping does not wait for the hung reconcile")
            .unwrap()
            .expect("a requested stop is not an error");
        let lease = api
            .get(LEASES, "hitl-operator")
            .expect("the Lease was taken");
        assert!(
            lease["spec"]["holderIdentity"].is_null(),
            "the Lease is released on shutdown: {lease}"
        );
    }

    #[tokio::test]
    async fn starts_every_watch_becomes_ready_and_stops_gracefully() {
        let (api, client) = apiserver().await;
        let args = Cli::try_parse_from(["controller", "--namespace", "demo"])
            .unwrap()
            .args;
        let health = Arc::new(Health::default());
        let (stop_tx, stop_rx) = watch::channel(false);
        let running = tokio::spawn({
            let health = health.clone();
            async move { run_controllers(client, &args, Arc::default(), health, stop_rx).await }
        });
        eventually("readiness", || health.is_ready().then_some(())).await;
        stop_tx.send_replace(true);
        running.await.expect("controllers stop on the stop signal");

        let seen = api.seen();
        let listed = |path: &str, metadata: bool| {
            seen.iter()
                .any(|s| s.metadata_only == metadata && s.uri.starts_with(path))
        };
        for path in [
            "/apis/kagent.dev/v1alpha2/namespaces/demo/agents?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/approvalrequests?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/remotemcpservers?",
            "/apis/kagent.dev/v1alpha2/namespaces/demo/modelconfigs?",
            "/apis/apps/v1/namespaces/demo/deployments?&limit=",
            "/api/v1/namespaces/demo/secrets?&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/rolebindings?&limit=",
            "/apis/networking.k8s.io/v1/namespaces/demo/networkpolicies?&limit=",
        ] {
            assert!(listed(path, false), "{path} not requested; saw {seen:#?}");
        }
        for path in [
            "/api/v1/namespaces/demo/secrets?",
            "/api/v1/namespaces/demo/secrets?&labelSelector=app.kubernetes.io%2Fmanaged-by%21%3Dhitl-operator",
            "/api/v1/namespaces/demo/configmaps?",
            "/api/v1/namespaces/demo/services?",
        ] {
            assert!(
                listed(path, true),
                "metadata of {path} not requested; saw {seen:#?}"
            );
        }
        // Full Secrets are only ever listed with the managed-by selector.
        assert!(
            seen.iter()
                .filter(
                    |s| !s.metadata_only && s.uri.starts_with("/api/v1/namespaces/demo/secrets?")
                )
                .all(|s| s
                    .uri
                    .contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dhitl-operator")),
            "{seen:#?}"
        );
    }
}
