//! Pure decisions: does a notifier cover a request, which message is due for it now, and when
//! its next attempt may go.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::core::{Selector, SelectorExt};

use crate::api::approval_notifier::ApprovalNotifierSpec;
use crate::api::approval_request::NotificationRecord;
use crate::api::common::parse_duration_seconds;
use crate::api::{ApprovalRequest, Phase};

/// First wait between attempts; it doubles after each failure.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(2);
/// Longest wait between attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// A message about a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// It waits for a decision.
    Created,
    /// It still waits: the Nth reminder.
    Reminder(u32),
    /// It was approved or denied.
    Decided,
    /// It expired without a decision.
    Expired,
    /// It is still pending and expires soon (`spec.escalation.warnAt` has come).
    Expiring,
    /// It reached escalation tier N: sent to that step's notifier.
    Escalated(u32),
}

impl Event {
    /// The name recorded in `status.notifications[].event` and sent in the message.
    pub fn key(self) -> String {
        match self {
            Self::Created => "created".into(),
            Self::Reminder(n) => format!("reminder-{n}"),
            Self::Decided => "decided".into(),
            Self::Expired => "expired".into(),
            Self::Expiring => "expiring".into(),
            Self::Escalated(n) => format!("escalated-{n}"),
        }
    }
}

/// Whether `spec` covers `request`, whose Agent carries `agent_labels` (`None`: the Agent is
/// gone, so only a notifier without an agent selector covers it). A selector that does not
/// parse covers nothing (the notifier's Ready condition says why).
pub fn covers(
    spec: &ApprovalNotifierSpec,
    request: &ApprovalRequest,
    agent_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    if !spec.tools.is_empty() && !spec.tools.contains(&request.spec.tool_name) {
        return false;
    }
    match &spec.agent_selector {
        None => true,
        Some(selector) => match (Selector::try_from(selector.clone()), agent_labels) {
            (Ok(selector), Some(labels)) => selector.matches(labels),
            _ => false,
        },
    }
}

/// The message due for `request` in `phase` at `now` under `spec`: the one that matters most
/// now (a decision or an expiry over the warning before it, that warning over a reminder, the
/// latest reminder over earlier ones, a reminder over `created`). `None` when nothing is to be sent. Whether it was sent already
/// is for [`next_attempt`] to say.
pub fn due(
    spec: &ApprovalNotifierSpec,
    request: &ApprovalRequest,
    phase: Phase,
    now: Timestamp,
) -> Option<Event> {
    let on = spec.notify_on();
    match phase {
        Phase::Approved | Phase::Executed | Phase::Denied => {
            on.on_decided().then_some(Event::Decided)
        }
        Phase::Expired => on.on_expired().then_some(Event::Expired),
        Phase::Cancelled => None,
        Phase::Pending if warn_at(request).is_some_and(|at| at <= now) => Some(Event::Expiring),
        Phase::Pending => {
            let reminder = on.reminder.as_ref().and_then(|reminder| {
                let every = parse_duration_seconds(&reminder.after).filter(|s| *s >= 1.0)?;
                let created = request.metadata.creation_timestamp.as_ref()?.0;
                let waited = now.duration_since(created).as_secs_f64();
                let n = ((waited / every).floor() as u32).min(reminder.count());
                (n >= 1).then_some(Event::Reminder(n))
            });
            reminder.or(on.on_created().then_some(Event::Created))
        }
    }
}

/// When the request's notifiers are warned that it expires soon, if they are.
fn warn_at(request: &ApprovalRequest) -> Option<Timestamp> {
    request
        .spec
        .escalation
        .as_ref()?
        .warn_at
        .as_ref()
        .map(|t| t.0)
}

/// When the warning before `request`'s expiry falls due after `now`, if it will.
pub fn next_warning(request: &ApprovalRequest, phase: Phase, now: Timestamp) -> Option<Timestamp> {
    warn_at(request).filter(|at| phase == Phase::Pending && *at > now)
}

/// The escalation messages due for `request` in `phase`: `escalated-N` to the notifier of
/// each step taken (tier N reached, `status.tier`), while the request is pending. Pairs of the
/// notifier's name and the event.
pub fn escalated(request: &ApprovalRequest, phase: Phase) -> Vec<(String, Event)> {
    let (Phase::Pending, Some(escalation)) = (phase, request.spec.escalation.as_ref()) else {
        return Vec::new();
    };
    let tier = request
        .status
        .as_ref()
        .and_then(|s| s.tier)
        .map_or(0, i32::from);
    escalation
        .steps
        .iter()
        .filter(|step| step.tier <= tier)
        .filter_map(|step| {
            let tier = u32::try_from(step.tier).ok()?;
            Some((step.notifier.clone()?, Event::Escalated(tier)))
        })
        .collect()
}

/// When the next reminder about `request` in `phase` falls due after `now`, if one will.
pub fn next_reminder(
    spec: &ApprovalNotifierSpec,
    request: &ApprovalRequest,
    phase: Phase,
    now: Timestamp,
) -> Option<Timestamp> {
    if phase != Phase::Pending {
        return None;
    }
    let reminder = spec.notify_on().reminder?;
    let every = parse_duration_seconds(&reminder.after).filter(|s| *s >= 1.0)?;
    let created = request.metadata.creation_timestamp.as_ref()?.0;
    let sent = (now.duration_since(created).as_secs_f64() / every)
        .floor()
        .max(0.0) as u32;
    let next = sent.checked_add(1).filter(|n| *n <= reminder.count())?;
    let at = created + SignedDuration::from_secs_f64(every * f64::from(next));
    (at < request.spec.expires_at.0).then_some(at)
}

/// When the next attempt at a message may go, given its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Now: the `n`th attempt.
    Now(u32),
    /// Not before this instant (backoff after a failure).
    At(Timestamp),
    /// Delivered already.
    Delivered,
    /// Every attempt failed: given up.
    GivenUp,
}

/// The next attempt at a message with `record` (none yet: the first), allowing `max_attempts`.
/// An attempt recorded without an outcome (the sender died while sending) counts as failed:
/// it is retried after the backoff, so a message may arrive twice only if the channel
/// accepted it in the instant before that sender died (receivers can drop duplicates by the
/// CloudEvents `id`, the same for every attempt).
pub fn next_attempt(
    record: Option<&NotificationRecord>,
    max_attempts: u32,
    now: Timestamp,
) -> Attempt {
    let Some(record) = record else {
        return Attempt::Now(1);
    };
    if record.delivered_at.is_some() {
        return Attempt::Delivered;
    }
    let made = u32::try_from(record.attempts).unwrap_or(0);
    if made >= max_attempts {
        return Attempt::GivenUp;
    }
    let not_before = record
        .last_attempt_at
        .as_ref()
        .map(|t| t.0 + SignedDuration::try_from(backoff(made)).unwrap_or(SignedDuration::ZERO));
    match not_before {
        Some(at) if at > now => Attempt::At(at),
        _ => Attempt::Now(made + 1),
    }
}

/// The wait after `failed` failed attempts: 2 s, 4 s, 8 s, … at most 5 minutes.
pub fn backoff(failed: u32) -> Duration {
    let factor = 1u32
        .checked_shl(failed.saturating_sub(1))
        .unwrap_or(u32::MAX);
    FIRST_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::approval_request::fixture::request_json;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn notifier(extra: serde_json::Value) -> ApprovalNotifierSpec {
        let mut spec =
            json!({"channel": {"type": "Webhook", "urlFrom": {"name": "hook", "key": "url"}}});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(spec).unwrap()
    }

    fn request(tool: &str) -> ApprovalRequest {
        let mut r = request_json();
        r["spec"]["toolName"] = json!(tool);
        serde_json::from_value(r).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tools_and_agent_labels_select_requests() {
        let r = request("delete_file");
        assert!(
            covers(&notifier(json!({})), &r, None),
            "no selector: every request"
        );
        assert!(!covers(
            &notifier(json!({"tools": ["read_file"]})),
            &r,
            None
        ));
        let by_team = notifier(json!({"agentSelector": {"matchLabels": {"team": "payments"}}}));
        assert!(covers(&by_team, &r, Some(&labels(&[("team", "payments")]))));
        assert!(!covers(&by_team, &r, Some(&labels(&[("team", "web")]))));
        assert!(
            !covers(&by_team, &r, None),
            "an Agent that is gone matches no selector"
        );
        let broken = notifier(
            json!({"agentSelector": {"matchExpressions": [{"key": "team", "operator": "Bogus"}]}}),
        );
        assert!(!covers(&broken, &r, Some(&labels(&[("team", "payments")]))));
    }

    #[test]
    fn the_message_due_follows_the_phase_and_the_clock() {
        let r = request("delete_file");
        let plain = notifier(json!({}));
        let at = ts("2026-11-22T00:20:00Z");
        assert_eq!(due(&plain, &r, Phase::Pending, at), Some(Event::Created));
        assert_eq!(due(&plain, &r, Phase::Approved, at), Some(Event::Decided));
        assert_eq!(
            due(&plain, &r, Phase::Executed, at),
            Some(Event::Decided),
            "one message for a decision"
        );
        assert_eq!(due(&plain, &r, Phase::Denied, at), Some(Event::Decided));
        assert_eq!(due(&plain, &r, Phase::Expired, at), Some(Event::Expired));
        assert_eq!(due(&plain, &r, Phase::Cancelled, at), None);
        let quiet =
            notifier(json!({"events": {"created": false, "decided": false, "expired": false}}));
        for phase in [Phase::Pending, Phase::Approved, Phase::Expired] {
            assert_eq!(due(&quiet, &r, phase, at), None);
        }
    }

    #[test]
    fn reminders_repeat_up_to_their_bound() {
        let r = request("delete_file");
        let reminding = notifier(json!({"events": {"reminder": {"after": "15m", "max": 2}}}));
        let pending = |at: &str| due(&reminding, &r, Phase::Pending, ts(at));
        assert_eq!(pending("2026-11-22T00:14:59Z"), Some(Event::Created));
        assert_eq!(pending("2026-11-22T00:15:00Z"), Some(Event::Reminder(1)));
        assert_eq!(pending("2026-11-22T00:31:00Z"), Some(Event::Reminder(2)));
        assert_eq!(
            pending("2026-11-22T00:59:00Z"),
            Some(Event::Reminder(2)),
            "at most 2"
        );
        let next = |at: &str| next_reminder(&reminding, &r, Phase::Pending, ts(at));
        assert_eq!(
            next("2026-11-22T00:01:00Z"),
            Some(ts("2026-11-22T00:15:00Z"))
        );
        assert_eq!(
            next("2026-11-22T00:15:00Z"),
            Some(ts("2026-11-22T00:30:00Z"))
        );
        assert_eq!(
            next("2026-11-22T00:30:00Z"),
            None,
            "the second was the last"
        );
        assert_eq!(
            next_reminder(&reminding, &r, Phase::Approved, ts("2026-11-22T00:01:00Z")),
            None
        );
        let late = notifier(json!({"events": {"reminder": {"after": "45m", "max": 3}}}));
        assert_eq!(
            next_reminder(&late, &r, Phase::Pending, ts("2026-11-22T00:50:00Z")),
            None,
            "none after expiry"
        );
        let without_created =
            notifier(json!({"events": {"created": false, "reminder": {"after": "15m"}}}));
        assert_eq!(
            due(
                &without_created,
                &r,
                Phase::Pending,
                ts("2026-11-22T00:01:00Z")
            ),
            None
        );
        assert_eq!(Event::Reminder(2).key(), "reminder-2");
    }

    fn record(attempts: i32, last: Option<&str>, delivered: bool) -> NotificationRecord {
        NotificationRecord {
            notifier: "n".into(),
            event: "created".into(),
            attempts,
            last_attempt_at: last.map(|t| Time(ts(t))),
            delivered_at: delivered.then(|| Time(ts("2026-11-22T00:00:01Z"))),
            last_error: None,
        }
    }

    #[test]
    fn attempts_back_off_then_give_up() {
        let now = ts("2026-11-22T00:00:10Z");
        assert_eq!(next_attempt(None, 5, now), Attempt::Now(1));
        assert_eq!(
            next_attempt(Some(&record(1, Some("2026-11-22T00:00:00Z"), true)), 5, now),
            Attempt::Delivered
        );
        // One failure: 2 s later; three failures: 8 s later.
        assert_eq!(
            next_attempt(
                Some(&record(1, Some("2026-11-22T00:00:09Z"), false)),
                5,
                now
            ),
            Attempt::At(ts("2026-11-22T00:00:11Z"))
        );
        assert_eq!(
            next_attempt(
                Some(&record(1, Some("2026-11-22T00:00:08Z"), false)),
                5,
                now
            ),
            Attempt::Now(2)
        );
        assert_eq!(
            next_attempt(
                Some(&record(3, Some("2026-11-22T00:00:05Z"), false)),
                5,
                now
            ),
            Attempt::At(ts("2026-11-22T00:00:13Z"))
        );
        assert_eq!(
            next_attempt(
                Some(&record(5, Some("2026-11-22T00:00:00Z"), false)),
                5,
                now
            ),
            Attempt::GivenUp
        );
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(20), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
