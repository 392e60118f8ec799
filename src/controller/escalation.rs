//! Escalation steps of pending requests (`spec.escalation`), taken by the controller, which
//! runs only while it leads: one tier per write, each a resourceVersion-guarded status write
//! that declines when the tier is already reached, so a step is taken once across replicas,
//! restarts and a leader change (a controller working from a stale cache loses the write, reads
//! again and finds the step taken). The CRD keeps `status.tier` from ever decreasing and
//! `status.escalations` append-only, whoever writes. The winner writes an Event; the step's
//! notifier is told by [`super::notifier::deliver`] (event `escalated-N`), whose own guarded
//! records keep that message to one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;

use super::Context;
use crate::Result;
use crate::api::approval_request::ApprovalRequestStatus;
use crate::api::escalation::EscalationRecord;
use crate::api::{ApprovalRequest, Phase};
use crate::apiserver::field_manager;
use crate::apiserver::guarded::{Guarded, GuardedWrite};

/// Guarded writes tried before leaving the step to the next reconcile.
const WRITE_TRIES: u32 = 3;

/// What [`due`] says of a request now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing to take now; the next step falls due then, if ever.
    Wait(Option<Timestamp>),
    /// Tier `n` is due and not yet recorded: take it (the tier after the recorded one; later
    /// ones follow, one write each).
    Take(u32),
}

/// The step due for `request` in `phase` at `now`. Only a Pending request escalates.
pub fn due(request: &ApprovalRequest, phase: Phase, now: Timestamp) -> Due {
    let Some(escalation) = request.spec.escalation.as_deref() else {
        return Due::Wait(None);
    };
    if phase != Phase::Pending {
        return Due::Wait(None);
    }
    let recorded = request.tier();
    if escalation.tier_at(now) > recorded {
        Due::Take(recorded + 1)
    } else {
        Due::Wait(escalation.next_at(recorded))
    }
}

/// The status change that takes tier `tier` on `current` by `by` at `now`: declined (with the
/// tier it is at) when `current` is at `tier` or beyond already.
pub fn take(
    current: &ApprovalRequest,
    tier: u32,
    by: &str,
    now: Timestamp,
) -> std::result::Result<ApprovalRequestStatus, u32> {
    let recorded = current.tier();
    if recorded >= tier {
        return Err(recorded);
    }
    let mut escalations = current
        .status
        .as_ref()
        .map(|s| s.escalations.to_vec())
        .unwrap_or_default();
    let tier = u8::try_from(tier).map_err(|_| recorded)?;
    escalations.push(EscalationRecord {
        tier: i32::from(tier),
        at: Time(now),
        by: by.to_owned(),
    });
    Ok(ApprovalRequestStatus {
        tier: Some(tier),
        escalations: escalations.into_boxed_slice(),
        ..ApprovalRequestStatus::default()
    })
}

/// The notifier of a step taken, as the controller's cache shows it when the step is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepNotifier {
    /// The step names no notifier.
    None,
    /// The named ApprovalNotifier exists: it is told (event `escalated-N`).
    Found,
    /// The named ApprovalNotifier does not exist: nobody is told, and the step's Event is a
    /// Warning that says so.
    Missing,
}

impl StepNotifier {
    /// What `name`, if named, is, with `exists` saying whether an ApprovalNotifier has that name.
    pub fn of(name: Option<&str>, exists: impl FnOnce(&str) -> bool) -> Self {
        match name {
            None => Self::None,
            Some(name) if exists(name) => Self::Found,
            Some(_) => Self::Missing,
        }
    }

    /// The label of `hitl_escalations`: `none`, `found` or `missing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Found => "found",
            Self::Missing => "missing",
        }
    }
}

fn notifier_exists(ctx: &Context, namespace: &str, name: &str) -> bool {
    ctx.stores
        .notifiers
        .get(&kube::runtime::reflector::ObjectRef::new(name).within(namespace))
        .is_some()
}

/// Takes the step due for `request` (from the cache) in `phase`, if one is: returns when to
/// look again. A step taken brings its own reconcile (the write), which takes the next.
pub async fn step(
    ctx: &Context,
    request: &ApprovalRequest,
    phase: Phase,
    targets: &[k8s_openapi::api::core::v1::ObjectReference],
    now: Timestamp,
) -> Result<Option<Timestamp>> {
    let tier = match due(request, phase, now) {
        Due::Wait(next) => return Ok(next),
        Due::Take(tier) => tier,
    };
    let namespace = request.namespace().unwrap_or_default();
    let api: Api<ApprovalRequest> = Api::namespaced(ctx.client.clone(), &namespace);
    let by = ctx.identity.clone();
    let outcome = GuardedWrite::status(&api, field_manager::ESCALATION, WRITE_TRIES)
        .write(request.clone(), |current| take(current, tier, &by, now))
        .await?;
    match outcome.guarded {
        Guarded::Written(written) => {
            let step = written
                .spec
                .escalation
                .as_deref()
                .and_then(|e| e.step(tier).cloned());
            let who = step
                .as_ref()
                .map(|s| {
                    let mut who: Vec<String> = s.approvers.users.clone();
                    who.extend(s.approvers.groups.iter().map(|g| format!("group {g}")));
                    who.join(", ")
                })
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| "nobody more".into());
            let mut note = format!(
                "ApprovalRequest {}: escalated to tier {tier} at {now}: {who} may decide from now on; expires at {}",
                request.name_any(),
                request.spec.expires_at.0
            );
            let notifier = step.as_ref().and_then(|s| s.notifier.as_deref());
            let told = StepNotifier::of(notifier, |name| notifier_exists(ctx, &namespace, name));
            let event_type = match told {
                StepNotifier::Missing => {
                    note.push_str(&format!(
                        "; its notifier {:?} is not an ApprovalNotifier in namespace {namespace}: nobody was told",
                        notifier.unwrap_or_default()
                    ));
                    EventType::Warning
                }
                StepNotifier::None | StepNotifier::Found => EventType::Normal,
            };
            tracing::info!(%namespace, request = %request.name_any(), tier, conflicts = outcome.conflicts, notifier = told.as_str(), "escalation step taken");
            ctx.metrics.escalated(told.as_str());
            ctx.publish(event_type, "Escalated", note, "Escalate", targets)
                .await;
            Ok(Some(now))
        }
        Guarded::Declined(reached) => {
            tracing::debug!(%namespace, request = %request.name_any(), tier, reached, "escalation step taken already");
            Ok(request
                .spec
                .escalation
                .as_deref()
                .and_then(|e| e.next_at(reached)))
        }
        Guarded::Gone | Guarded::Contended => Ok(Some(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::fixture::request_json;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn escalating(tier: Option<i32>) -> ApprovalRequest {
        let mut r = request_json();
        r["spec"]["escalation"] = json!({"steps": [
            {"tier": 1, "at": "2026-11-22T00:10:00Z", "approvers": {"groups": ["oncall"]}, "notifier": "pager"},
            {"tier": 2, "at": "2026-11-22T00:30:00Z", "approvers": {"users": ["boss"]}}
        ]});
        if let Some(tier) = tier {
            r["status"] = json!({"tier": tier});
        }
        serde_json::from_value(r).unwrap()
    }

    #[test]
    fn a_pending_request_takes_the_tier_after_the_recorded_one() {
        let early = ts("2026-11-22T00:05:00Z");
        let late = ts("2026-11-22T00:45:00Z");
        assert_eq!(
            due(&escalating(None), Phase::Pending, early),
            Due::Wait(Some(ts("2026-11-22T00:10:00Z")))
        );
        // Both steps are past: one tier per write, in order.
        assert_eq!(due(&escalating(None), Phase::Pending, late), Due::Take(1));
        assert_eq!(
            due(&escalating(Some(1)), Phase::Pending, late),
            Due::Take(2)
        );
        assert_eq!(
            due(&escalating(Some(2)), Phase::Pending, late),
            Due::Wait(None)
        );
        assert_eq!(
            due(&escalating(Some(1)), Phase::Pending, early),
            Due::Wait(Some(ts("2026-11-22T00:30:00Z")))
        );
        // A decided or finished request does not escalate.
        for phase in [
            Phase::Approved,
            Phase::Denied,
            Phase::Expired,
            Phase::Cancelled,
        ] {
            assert_eq!(due(&escalating(None), phase, late), Due::Wait(None));
        }
    }

    #[test]
    fn a_steps_notifier_is_none_found_or_missing() {
        assert_eq!(StepNotifier::of(None, |_| true), StepNotifier::None);
        assert_eq!(
            StepNotifier::of(Some("pager"), |n| n == "pager"),
            StepNotifier::Found
        );
        assert_eq!(
            StepNotifier::of(Some("pager"), |_| false),
            StepNotifier::Missing
        );
        assert_eq!(StepNotifier::Missing.as_str(), "missing");
    }

    #[test]
    fn taking_a_tier_reached_already_is_declined() {
        let now = ts("2026-11-22T00:45:00Z");
        let status = take(&escalating(None), 1, "controller-0", now).unwrap();
        assert_eq!(status.tier, Some(1));
        assert_eq!(status.escalations.len(), 1);
        assert_eq!(status.escalations[0].by, "controller-0");
        // The write body holds only the escalation's fields.
        let body = serde_json::to_value(&status).unwrap();
        assert_eq!(
            body,
            json!({"tier": 1, "escalations": [{"tier": 1, "at": "2026-11-22T00:45:00Z", "by": "controller-0"}]})
        );
        assert_eq!(take(&escalating(Some(1)), 1, "controller-1", now), Err(1));
        assert_eq!(take(&escalating(Some(2)), 1, "controller-1", now), Err(2));
    }
}
