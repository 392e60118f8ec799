//! Prometheus metrics of the controller, served on `/metrics`.

use std::sync::RwLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::RequestsByAgent;
use crate::apiserver::request_kind::RequestKind;

/// Labels naming a controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `agent`, `remotemcpserver`, `modelconfig` or `approvalrequest`.
    pub controller: &'static str,
}

/// Labels of a failed reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Which controller failed.
    pub controller: &'static str,
    /// [`crate::Error::reason`] of the failure.
    pub reason: &'static str,
}

/// Labels of a finished approval.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `approved`, `denied`, `expired` or `cancelled`.
    pub outcome: &'static str,
}

/// Labels of an escalation step taken.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EscalationLabels {
    /// The step's notifier: `none` (it names none), `found` or `missing` (nobody was told).
    pub notifier: &'static str,
}

/// Labels of a request to the apiserver ([`RequestKind`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// GET, LIST, WATCH, POST, PUT, PATCH, APPLY or DELETE.
    pub verb: &'static str,
    /// The resource, with its subresource (`agents/status`).
    pub resource: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric the controller exports.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
    approvals_pending: Gauge,
    /// The running controllers' index of ApprovalRequests, which `approvals_pending` is read
    /// from at each scrape; none in a standby.
    pending_in: RwLock<Option<RequestsByAgent>>,
    decisions: Family<OutcomeLabels, Counter>,
    decision_latency: Histogram,
    notifications: Family<OutcomeLabels, Counter>,
    escalations: Family<EscalationLabels, Counter>,
    api_requests: Family<RequestLabels, Counter>,
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("hitl");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration: HistogramFamily<ControllerLabels> =
            Family::new_with_constructor(reconcile_histogram);
        let approvals_pending = Gauge::default();
        let decisions = Family::<OutcomeLabels, Counter>::default();
        // 1 s .. ~9 h
        let decision_latency = Histogram::new(exponential_buckets(1.0, 2.0, 16));
        let notifications = Family::<OutcomeLabels, Counter>::default();
        let escalations = Family::<EscalationLabels, Counter>::default();
        let api_requests = Family::<RequestLabels, Counter>::default();
        registry.register("reconcile", "Reconciles by controller", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Failed reconciles by controller and error reason",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconciles by controller",
            reconcile_duration.clone(),
        );
        registry.register(
            "approvals_pending",
            "ApprovalRequests waiting for a decision",
            approvals_pending.clone(),
        );
        registry.register(
            "decisions",
            "Finished ApprovalRequests by outcome",
            decisions.clone(),
        );
        registry.register(
            "decision_latency_seconds",
            "Time from an ApprovalRequest's creation to its decision",
            decision_latency.clone(),
        );
        registry.register(
            "notifications",
            "Attempts to deliver ApprovalNotifier messages by outcome (delivered, failed, given_up)",
            notifications.clone(),
        );
        registry.register(
            "escalations",
            "Escalation steps taken by this controller, by what their notifier was (none, found, missing)",
            escalations.clone(),
        );
        registry.register(
            "apiserver_requests",
            "Requests the controller sent to the apiserver, by verb and resource",
            api_requests.clone(),
        );
        Self {
            registry,
            api_requests,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            approvals_pending,
            pending_in: RwLock::default(),
            decisions,
            decision_latency,
            notifications,
            escalations,
        }
    }
}

impl Metrics {
    /// Counts one request sent to the apiserver.
    pub fn api_request(&self, kind: RequestKind) {
        self.api_requests
            .get_or_create(&RequestLabels {
                verb: kind.verb,
                resource: kind.resource,
            })
            .inc();
    }

    /// Records one reconcile of `controller` that took `elapsed` and failed with `error`, if any.
    pub fn reconciled(
        &self,
        controller: &'static str,
        elapsed: Duration,
        error: Option<&crate::Error>,
    ) {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if let Some(error) = error {
            self.reconcile_errors
                .get_or_create(&ErrorLabels {
                    controller,
                    reason: error.reason(),
                })
                .inc();
        }
    }

    /// Reads `hitl_approvals_pending` from `requests` at each scrape, or reports 0 with none
    /// (a standby). The index keeps the count as the watch goes, so neither a scrape nor a
    /// request reconcile passes over every request.
    pub fn count_pending_in(&self, requests: Option<RequestsByAgent>) {
        *self.pending_in.write().unwrap_or_else(|e| e.into_inner()) = requests;
    }

    fn update_pending(&self) {
        let pending = self
            .pending_in
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, RequestsByAgent::waiting);
        self.approvals_pending
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// Counts a finished request, and the latency of a human decision when there was one.
    pub fn decided(&self, outcome: &'static str, latency: Option<Duration>) {
        self.decisions
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        if let Some(latency) = latency {
            self.decision_latency.observe(latency.as_secs_f64());
        }
    }

    /// Counts an attempt to deliver a notification: `delivered`, `failed` (retried later) or
    /// `given_up` (its last attempt failed).
    pub fn notified(&self, outcome: &'static str) {
        self.notifications
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts an escalation step taken, by what its notifier was ([`super::escalation::StepNotifier`]).
    pub fn escalated(&self, notifier: &'static str) {
        self.escalations
            .get_or_create(&EscalationLabels { notifier })
            .inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        self.update_pending();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::fixture::request_json;
    use crate::controller::compact::CachedRequest;
    use kube::runtime::watcher;
    use serde_json::json;

    /// A request named `name` with status phase `phase`, if any.
    fn request(name: &str, phase: Option<&str>) -> CachedRequest {
        let mut request = request_json();
        request["metadata"]["name"] = json!(name);
        request["status"] = json!(phase.map(|phase| json!({"phase": phase})));
        CachedRequest::new(serde_json::from_value(request).unwrap())
    }

    /// An index of one request per entry of `phases`, each with that status phase, if any.
    fn requests_in(phases: &[Option<&str>]) -> RequestsByAgent {
        let requests: Vec<_> = (0..)
            .zip(phases)
            .map(|(i, phase)| request(&format!("r{i}"), *phase))
            .collect();
        RequestsByAgent::listed(&requests)
    }

    #[test]
    fn pending_approvals_are_read_from_the_index_when_scraped() {
        let metrics = Metrics::default();
        assert!(metrics.encode().contains("hitl_approvals_pending 0\n"));
        let requests = requests_in(&[None, Some("Pending"), Some("Approved"), Some("Executed")]);
        metrics.count_pending_in(Some(requests.clone()));
        assert!(metrics.encode().contains("hitl_approvals_pending 2\n"));
        // The next scrape sees what the watch brought since.
        requests.observe(&watcher::Event::Apply(request("r0", Some("Denied"))));
        assert!(metrics.encode().contains("hitl_approvals_pending 1\n"));
        // A standby counts nothing, and holds no cache.
        metrics.count_pending_in(None);
        assert!(metrics.encode().contains("hitl_approvals_pending 0\n"));
    }

    #[test]
    fn exports_the_documented_names() {
        let metrics = Metrics::default();
        metrics.reconciled(
            "agent",
            Duration::from_millis(3),
            Some(&crate::Error::ToolDiscovery {
                server: "s".into(),
                message: "m".into(),
            }),
        );
        metrics.count_pending_in(Some(requests_in(&[None, Some("Pending"), Some("Denied")])));
        metrics.decided("approved", Some(Duration::from_secs(5)));
        metrics.notified("delivered");
        metrics.api_request(RequestKind {
            verb: "APPLY",
            resource: "agents/status".into(),
        });
        let text = metrics.encode();
        for line in [
            "hitl_reconcile_total{controller=\"agent\"} 1",
            "hitl_reconcile_errors_total{controller=\"agent\",reason=\"ToolDiscoveryFailed\"} 1",
            "hitl_reconcile_duration_seconds_count{controller=\"agent\"} 1",
            "hitl_approvals_pending 2",
            "hitl_decisions_total{outcome=\"approved\"} 1",
            "hitl_decision_latency_seconds_count 1",
            "hitl_notifications_total{outcome=\"delivered\"} 1",
            "hitl_apiserver_requests_total{verb=\"APPLY\",resource=\"agents/status\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
