//! Leadership and stopping: the controllers run only while this replica holds the Lease
//! (`--leader-election`), and stop on SIGTERM or when the Lease is lost, with a bounded grace.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use super::ControllerArgs;
use super::health::Health;
use crate::apiserver::backoff::BackoffWhileFailing;
use crate::{Error, Result};

/// How long in-flight reconciles may finish after a stop before they are dropped.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long releasing the Lease may take at shutdown before the process exits anyway.
const RELEASE_BOUND: Duration = Duration::from_secs(2);
/// How long one attempt to read (or create) the Lease may take before it is given up and made
/// again (shorter in the tests, which stall it).
const CONTEND_ATTEMPT: Duration = if cfg!(test) {
    Duration::from_secs(1)
} else {
    Duration::from_secs(10)
};
/// The wait after the first failed attempt to read the Lease, doubled after each next one up to
/// [`CONTEND_RETRY_MAX`].
const CONTEND_RETRY_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two attempts to read the Lease.
const CONTEND_RETRY_MAX: Duration = Duration::from_secs(5);

/// Resolves when SIGTERM or Ctrl-C arrives.
async fn termination() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// A stop signal that turns true on SIGTERM or Ctrl-C (and, with leader election, when the
/// Lease is lost: [`lead`] sends it then).
pub(super) fn stop_on_termination() -> (Arc<watch::Sender<bool>>, watch::Receiver<bool>) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            termination().await;
            tracing::info!("termination requested, shutting down");
            stop_tx.send_replace(true);
        });
    }
    (stop_tx, stop_rx)
}

/// Resolves once `stop` turns true.
pub(super) fn stopped(
    stop: &watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + Sync + 'static {
    let mut stop = stop.clone();
    async move {
        let _ = stop.wait_for(|stop| *stop).await;
    }
}

/// Resolves [`SHUTDOWN_GRACE`] after `stop` turns true.
pub(super) async fn grace_over(stop: &watch::Receiver<bool>) {
    stopped(stop).await;
    tokio::time::sleep(SHUTDOWN_GRACE).await;
}

/// Waits for the Lease, runs the controllers while holding it, and releases it once `stop`
/// turns true. Losing the Lease stops the controllers and returns an error. `controllers`
/// runs them until the receiver it is given turns true.
pub(super) async fn lead<F: Future<Output = ()>>(
    client: &Client,
    args: &ControllerArgs,
    health: &Health,
    stop_tx: Arc<watch::Sender<bool>>,
    stop_rx: watch::Receiver<bool>,
    controllers: impl FnOnce(watch::Receiver<bool>) -> F,
) -> Result<()> {
    let lease_namespace = args
        .lease_namespace
        .clone()
        .or_else(|| args.namespace.clone())
        .unwrap_or_else(|| client.default_namespace().to_string());
    let identity = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME"));
    let contend = || async {
        let mut builder = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
            .with_namespace(&lease_namespace);
        if let Ok(identity) = &identity {
            builder = builder.with_identity(identity);
        }
        Ok::<_, Error>(builder.build().await?.watch().await)
    };
    let Some((mut leader, mut lease_task)) = until_contended(contend, &stop_rx).await else {
        return Ok(());
    };
    // A standby replica is healthy and ready; it just does not reconcile.
    health.set_ready(true);
    tracing::info!(lease = %args.lease_name, namespace = %lease_namespace, "waiting for leadership");
    let mut waiting_stop = stop_rx.clone();
    let mut released = std::pin::pin!(lease_released(client, &lease_namespace, &args.lease_name));
    let became_leader = loop {
        let leading = tokio::select! {
            result = leader.wait_for(|leading| *leading) => Some(result.is_ok()),
            _ = waiting_stop.wait_for(|stop| *stop) => Some(false),
            Some(()) = released.next() => None,
        };
        if let Some(leading) = leading {
            break leading;
        }
        // Released: the lease manager would sleep until the expiry it last read, but the Lease
        // is free now, so contend again at once.
        drop(leader);
        let _ = tokio::time::timeout(RELEASE_BOUND, lease_task).await;
        let Some(contended) = until_contended(contend, &stop_rx).await else {
            return Ok(());
        };
        (leader, lease_task) = contended;
    };
    let mut lost = false;
    if became_leader {
        tracing::info!("acquired the Lease, starting controllers");
        let lost_flag = Arc::new(AtomicBool::new(false));
        let watcher_task = {
            let (stop_tx, lost_flag, mut leader) =
                (stop_tx.clone(), lost_flag.clone(), leader.clone());
            tokio::spawn(async move {
                if leader.wait_for(|leading| !*leading).await.is_ok() {
                    tracing::error!("lost the Lease, stopping controllers");
                    lost_flag.store(true, Ordering::Relaxed);
                    stop_tx.send_replace(true);
                }
            })
        };
        controllers(stop_rx).await;
        watcher_task.abort();
        lost = lost_flag.load(Ordering::Relaxed);
    }
    // Closing the channel makes the lease task release the Lease and return.
    drop(leader);
    match tokio::time::timeout(RELEASE_BOUND, lease_task).await {
        Ok(Ok(result)) => drop(result?),
        Ok(Err(error)) => tracing::warn!(%error, "lease task failed"),
        Err(_) => tracing::warn!("releasing the Lease timed out; it expires on its own"),
    }
    if lost {
        // Exit non-zero so the pod restarts as a standby with fresh caches.
        return Err(Error::LeaderElection(
            kube_lease_manager::LeaseManagerError::InconsistentState("lost the Lease".into()),
        ));
    }
    Ok(())
}

/// Runs `contend` (reading or creating the Lease, and starting to contend for it) until it
/// succeeds: an attempt that fails, or takes longer than [`CONTEND_ATTEMPT`], is logged and made
/// again after a wait ([`CONTEND_RETRY_FIRST`], doubling up to [`CONTEND_RETRY_MAX`]). `None`
/// once `stop` turns true. So a replica that cannot reach the apiserver when it starts (a node's
/// pod network not yet routed, the apiserver restarting) stays up, not ready, and goes on
/// within seconds of the apiserver answering, instead of exiting into the kubelet's restart
/// backoff (10 s doubling up to 5 min), which made a minute's outage at install keep both
/// replicas unready for minutes.
async fn until_contended<T, F, Fut>(mut contend: F, stop: &watch::Receiver<bool>) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut wait = CONTEND_RETRY_FIRST;
    let mut stop = std::pin::pin!(stopped(stop));
    loop {
        let attempt = tokio::select! {
            attempt = tokio::time::timeout(CONTEND_ATTEMPT, contend()) => attempt,
            () = &mut stop => return None,
        };
        match attempt {
            Ok(Ok(contended)) => return Some(contended),
            Ok(Err(error)) => {
                tracing::warn!(%error, retry_in = ?wait, "cannot read the Lease; trying again");
            }
            Err(_) => tracing::warn!(
                bound = ?CONTEND_ATTEMPT,
                retry_in = ?wait,
                "no answer from the apiserver for the Lease; trying again"
            ),
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = &mut stop => return None,
        }
        wait = (wait * 2).min(CONTEND_RETRY_MAX);
    }
}

/// Yields whenever the Lease `namespace/name` has no holder: its leader released it on
/// shutdown (or it was never taken). Watch failures are retried with backoff.
fn lease_released(
    client: &Client,
    namespace: &str,
    name: &str,
) -> impl Stream<Item = ()> + Send + 'static {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(Api::<Lease>::namespaced(client.clone(), namespace), config)
        .backoff_while_failing()
        .applied_objects()
        .filter_map(|lease| async move {
            let holder = lease.ok()?.spec?.holder_identity;
            holder.is_none_or(|holder| holder.is_empty()).then_some(())
        })
}
