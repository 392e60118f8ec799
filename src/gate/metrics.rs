//! The gate's Prometheus metrics.

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a `tools/call` ended at the gate.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    /// Needed no approval and was forwarded.
    forwarded,
    /// Approved, consumed and forwarded.
    approved,
    /// Covered by an ApprovalGrant, recorded and forwarded.
    granted,
    /// The next round of an approved call whose answer needed input (MCP 2026-07-28), forwarded
    /// on that call's approval.
    continued,
    /// Denied by a person.
    denied,
    /// Not approved before expiresAt.
    expired,
    /// Still waiting when the gate's wait ended; the caller was told how to approve.
    pending,
    /// Refused without asking: tool not listed, approval already used, request cancelled, or
    /// the agent at its cap of open requests.
    refused,
    /// Refused without asking by a Deny approval rule of the Agent.
    denied_by_rule,
    /// Refused because the Agent is frozen (or the gate cannot tell whether it is).
    frozen,
    /// An error (apiserver, upstream, malformed request or decision); not forwarded.
    error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    outcome: Outcome,
}

/// How the gate's attempt to carry a client's MCP session onto a new upstream session ended
/// ([`super::resume`]).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Resumed {
    /// A new upstream session began (`initialize`, `notifications/initialized`) and serves the
    /// client's session from now on.
    resumed,
    /// The new `initialize` failed; the client's request was answered with an error.
    failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResumedLabels {
    server: String,
    outcome: Resumed,
}

/// Every metric of the gate, registered in one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    approval_wait: Histogram,
    upstream_latency: Histogram,
    claim_conflicts: Counter,
    grant_use_conflicts: Counter,
    open_request_cap_reached: Counter,
    awaiting_decision: Gauge,
    sessions_resumed: Family<ResumedLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("hitl_gate");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "tool_calls",
            "tools/call requests by outcome",
            calls.clone(),
        );
        let approval_wait = Histogram::new(exponential_buckets(0.05, 2.0, 16));
        registry.register(
            "approval_wait_seconds",
            "Time a gated call waited for a decision",
            approval_wait.clone(),
        );
        let upstream_latency = Histogram::new(exponential_buckets(0.0001, 2.0, 20));
        registry.register(
            "upstream_latency_seconds",
            "Time until the upstream MCP server answered (response headers)",
            upstream_latency.clone(),
        );
        let claim_conflicts = Counter::default();
        registry.register(
            "claim_conflicts",
            "Claims of an approval (the resourceVersion-guarded status write) answered 409 Conflict",
            claim_conflicts.clone(),
        );
        let grant_use_conflicts = Counter::default();
        registry.register(
            "grant_use_conflicts",
            "Uses of an ApprovalGrant (the resourceVersion-guarded status write) answered 409 Conflict and judged again",
            grant_use_conflicts.clone(),
        );
        let open_request_cap_reached = Counter::default();
        registry.register(
            "open_request_cap_reached",
            "Gated calls refused because the agent held its cap of open ApprovalRequests (approval.maxOpenRequests); no request was created",
            open_request_cap_reached.clone(),
        );
        let awaiting_decision = Gauge::default();
        registry.register(
            "calls_awaiting_decision",
            "Gated calls in the approval flow now: their request is being found, created or waited on",
            awaiting_decision.clone(),
        );
        let sessions_resumed = Family::<ResumedLabels, Counter>::default();
        registry.register(
            "upstream_sessions_resumed",
            "Client MCP sessions the gate carried onto a new upstream session after the upstream forgot theirs (a restart), by server and outcome",
            sessions_resumed.clone(),
        );
        Self {
            registry,
            calls,
            approval_wait,
            upstream_latency,
            claim_conflicts,
            grant_use_conflicts,
            open_request_cap_reached,
            awaiting_decision,
            sessions_resumed,
        }
    }
}

impl Metrics {
    /// Counts a claim that got 409 Conflict (the request changed since the gate read it).
    pub fn claim_conflict(&self) {
        self.claim_conflicts.inc();
    }

    /// Counts a use of a grant that got 409 Conflict (the grant changed since the gate read it).
    pub fn grant_use_conflict(&self) {
        self.grant_use_conflicts.inc();
    }

    /// Counts a gated call refused at the agent's cap of open requests.
    pub fn open_request_cap_reached(&self) {
        self.open_request_cap_reached.inc();
    }

    /// Counts a gated call as awaiting its decision until the returned guard is dropped.
    pub fn awaiting_decision(&self) -> AwaitingDecision {
        self.awaiting_decision.inc();
        AwaitingDecision(self.awaiting_decision.clone())
    }

    /// Counts a `tools/call` outcome.
    pub fn call(&self, outcome: Outcome) {
        self.calls.get_or_create(&CallLabels { outcome }).inc();
    }

    /// Counts an attempt to carry a client's session of `server` (`namespace/name`) onto a new
    /// upstream session.
    pub fn session_resumed(&self, server: &str, outcome: Resumed) {
        self.sessions_resumed
            .get_or_create(&ResumedLabels {
                server: server.to_string(),
                outcome,
            })
            .inc();
    }

    /// Records how long a gated call waited for its decision.
    pub fn approval_wait(&self, d: Duration) {
        self.approval_wait.observe(d.as_secs_f64());
    }

    /// Records an upstream round trip.
    pub fn upstream(&self, d: Duration) {
        self.upstream_latency.observe(d.as_secs_f64());
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// A gated call counted in `hitl_gate_calls_awaiting_decision` while this lives.
#[derive(Debug)]
pub struct AwaitingDecision(Gauge);

impl Drop for AwaitingDecision {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_outcomes_and_histograms() {
        let m = Metrics::default();
        m.call(Outcome::denied);
        m.call(Outcome::denied);
        m.call(Outcome::forwarded);
        m.approval_wait(Duration::from_millis(300));
        m.upstream(Duration::from_micros(250));
        m.session_resumed("tools/fs", Resumed::resumed);
        m.session_resumed("tools/fs", Resumed::failed);
        m.session_resumed("tools/fs", Resumed::failed);
        let text = m.encode();
        assert!(
            text.contains(
                r#"hitl_gate_upstream_sessions_resumed_total{server="tools/fs",outcome="failed"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"hitl_gate_tool_calls_total{outcome="denied"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"hitl_gate_tool_calls_total{outcome="forwarded"} 1"#));
        assert!(text.contains("hitl_gate_approval_wait_seconds_count 1"));
        assert!(text.contains("hitl_gate_upstream_latency_seconds_count 1"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn counts_calls_awaiting_a_decision_while_their_guards_live() {
        let m = Metrics::default();
        let first = m.awaiting_decision();
        let second = m.awaiting_decision();
        assert!(m.encode().contains("hitl_gate_calls_awaiting_decision 2"));
        drop(first);
        assert!(m.encode().contains("hitl_gate_calls_awaiting_decision 1"));
        drop(second);
        assert!(m.encode().contains("hitl_gate_calls_awaiting_decision 0"));
    }
}
