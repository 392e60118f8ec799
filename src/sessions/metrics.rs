//! Prometheus metrics of the session store, served on `/metrics` of its health port.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::store::Limit;

/// Labels of an answered request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `sessions`, `session`, `events`, `tasks` or `task` (or `other`).
    pub route: &'static str,
    /// The HTTP status code.
    pub code: u16,
}

/// Labels of a write refused by a quota.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// [`Limit::as_str`].
    pub limit: &'static str,
}

/// Labels of a request refused before the store was asked.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthLabels {
    /// `unauthenticated`, `forbidden` or `unverified`.
    pub reason: &'static str,
}

/// The store's metrics.
pub struct Metrics {
    registry: Registry,
    /// Requests answered, by route and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Time to answer a request, by route.
    pub request_seconds: Family<RequestLabels, Histogram>,
    /// Writes refused by a quota, by limit (`hitl_sessions_limit_refusals_total`).
    pub limit_refusals: Family<LimitLabels, Counter>,
    /// Requests refused before the store was asked: no or a bad token, another Agent's name,
    /// a token that could not be verified.
    pub auth_refusals: Family<AuthLabels, Counter>,
    /// Sessions and tasks deleted by retention (idle, or of a deleted Agent).
    pub swept: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("hitl_sessions");
        let requests = Family::<RequestLabels, Counter>::default();
        let request_seconds = Family::<RequestLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let limit_refusals = Family::<LimitLabels, Counter>::default();
        let auth_refusals = Family::<AuthLabels, Counter>::default();
        let swept = Counter::default();
        registry.register(
            "requests",
            "Requests to kagent's session API answered, by route and HTTP status",
            requests.clone(),
        );
        registry.register(
            "request_seconds",
            "Time to answer a request to kagent's session API",
            request_seconds.clone(),
        );
        registry.register(
            "limit_refusals",
            "Writes refused because they would pass a quota (nothing is evicted), by limit",
            limit_refusals.clone(),
        );
        registry.register(
            "auth_refusals",
            "Requests refused before the store was asked, by reason",
            auth_refusals.clone(),
        );
        registry.register(
            "swept",
            "Sessions and tasks deleted by retention",
            swept.clone(),
        );
        for limit in Limit::ALL {
            limit_refusals
                .get_or_create(&LimitLabels {
                    limit: limit.as_str(),
                })
                .get();
        }
        Self {
            registry,
            requests,
            request_seconds,
            limit_refusals,
            auth_refusals,
            swept,
        }
    }
}

impl Metrics {
    /// The metrics in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }
}
