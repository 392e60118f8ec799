//! Deadlines that escalate: an Agent's `approval.escalation` (steps after which more people
//! may decide, and whom to tell), the copy with absolute instants the gate puts in each
//! ApprovalRequest it makes, and the pure step computation (which tier a request is in at an
//! instant, when the next step falls due).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::common::DURATION_PATTERN;

/// Most escalation steps an Agent may list (and so the highest tier).
pub const MAX_STEPS: usize = 8;

/// Escalation of an Agent's pending requests (`spec.declarative.approval.escalation`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Escalation {
    /// How long before its expiry a still-pending request's notifiers are sent an `expiring`
    /// notice; unset: none. Must be shorter than the approval timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(DURATION_PATTERN))]
    pub warn_before: Option<String>,
    /// The steps, by `after` strictly increasing, each before the approval timeout: step N
    /// (from 1) makes the request's tier N.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub steps: Vec<EscalationStep>,
}

/// One step of an escalation, as an Agent writes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EscalationStep {
    /// How long after the request's creation the step is taken (`30m`, `1h`).
    #[schemars(length(min = 1, max = 64), pattern(DURATION_PATTERN))]
    pub after: String,
    /// Who may decide from this tier on (they still need the RBAC verb `approve`).
    #[serde(default)]
    pub approvers: EscalationApprovers,
    /// The ApprovalNotifier (same namespace) told when the step is taken (event
    /// `escalated-N`), whatever it selects otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub notifier: Option<String>,
}

/// The people of an escalation tier: Kubernetes groups and usernames.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EscalationApprovers {
    /// Groups (as the apiserver authenticates them, `request.userInfo.groups`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)))]
    pub groups: Vec<String>,
    /// Usernames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 512)))]
    pub users: Vec<String>,
}

impl EscalationApprovers {
    /// Whether `username`, with `groups`, is one of them.
    pub fn include(&self, username: &str, groups: &[String]) -> bool {
        self.users.iter().any(|u| u == username) || self.groups.iter().any(|g| groups.contains(g))
    }
}

/// A request's escalation (`spec.escalation`): its Agent's, with the instants computed from
/// the request's creation by the gate. Immutable, so nothing depends on the Agent later.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("!has(self.steps) || self.steps.all(s, s.tier <= size(self.steps))").message("spec.escalation.steps: tiers are 1 to the number of steps, one step each"),
    validation = kube::core::Rule::new("!has(self.steps) || self.steps.all(a, self.steps.all(b, a.tier >= b.tier || a.at < b.at))").message("spec.escalation.steps: a higher tier begins strictly later")
)]
pub struct RequestEscalation {
    /// When the `expiring` notice goes to the request's notifiers, if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_at: Option<Time>,
    /// The steps, tier 1 first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["tier"]))]
    pub steps: Vec<RequestEscalationStep>,
}

/// One step of a request's escalation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestEscalationStep {
    /// The tier the step begins (1 for the first step).
    #[schemars(range(min = 1, max = 8))]
    pub tier: i32,
    /// When it is due.
    pub at: Time,
    /// Who may decide from this tier on.
    pub approvers: EscalationApprovers,
    /// The ApprovalNotifier told when the step is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub notifier: Option<String>,
}

/// The record of a step taken (`status.escalations`), by the controller that took it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EscalationRecord {
    /// The tier reached.
    #[schemars(range(min = 1, max = 8))]
    pub tier: i32,
    /// When the step was taken, by that controller's clock.
    pub at: Time,
    /// Which controller took it (its pod name).
    #[schemars(length(min = 1, max = 253))]
    pub by: String,
}

impl Escalation {
    /// Checks the escalation against the approval timeout (`timeout` seconds): each `after`
    /// and `warnBefore` a positive duration shorter than the timeout, `after` strictly
    /// increasing, each step naming someone. The error names the field (relative to the
    /// escalation) and why.
    pub fn check(&self, timeout: f64) -> Result<(), (String, String)> {
        let positive = |field: String, text: &str| {
            super::common::parse_duration_seconds(text)
                .filter(|s| *s > 0.0)
                .ok_or_else(|| {
                    (
                        field.clone(),
                        format!("Invalid value: {text:?}: must be a positive duration such as 30s, 5m or 1h"),
                    )
                })
        };
        if self.steps.len() > MAX_STEPS {
            return Err((
                "steps".into(),
                format!(
                    "Too many: {}: must have at most {MAX_STEPS} items",
                    self.steps.len()
                ),
            ));
        }
        if let Some(before) = &self.warn_before {
            let seconds = positive("warnBefore".into(), before)?;
            if seconds >= timeout {
                return Err((
                    "warnBefore".into(),
                    format!(
                        "Invalid value: {before:?}: must be shorter than the approval timeout ({timeout}s)"
                    ),
                ));
            }
        }
        let mut previous: Option<(f64, &str)> = None;
        for (i, step) in self.steps.iter().enumerate() {
            let field = format!("steps[{i}].after");
            let after = positive(field.clone(), &step.after)?;
            if after >= timeout {
                return Err((
                    field,
                    format!(
                        "Invalid value: {:?}: must be shorter than the approval timeout ({timeout}s): a step after expiry never happens",
                        step.after
                    ),
                ));
            }
            if let Some((_, text)) = previous.filter(|(before, _)| after <= *before) {
                return Err((
                    field,
                    format!(
                        "Invalid value: {:?}: must be later than the step before it ({text:?})",
                        step.after
                    ),
                ));
            }
            if step.approvers.groups.is_empty()
                && step.approvers.users.is_empty()
                && step.notifier.is_none()
            {
                return Err((
                    format!("steps[{i}]"),
                    "names no approvers and no notifier: the step would change nothing".into(),
                ));
            }
            previous = Some((after, &step.after));
        }
        Ok(())
    }
}

impl RequestEscalation {
    /// The escalation `escalation` asks for on a request made at `created` that expires at
    /// `expires_at`: each step at `created + after`, the warning at `expires_at - warnBefore`.
    /// Durations that do not parse are refused when the Agent is rendered; here such an
    /// instant would come out at `created`, the earliest (fail safe: tell sooner).
    pub fn at(escalation: &Escalation, created: Timestamp, expires_at: Timestamp) -> Self {
        let seconds = |text: &str| {
            SignedDuration::from_secs_f64(
                super::common::parse_duration_seconds(text).unwrap_or(0.0),
            )
        };
        let instant = |text: &str| created.checked_add(seconds(text)).unwrap_or(Timestamp::MAX);
        Self {
            warn_at: escalation.warn_before.as_deref().map(|before| {
                Time(
                    expires_at
                        .checked_sub(seconds(before))
                        .unwrap_or(created)
                        .max(created),
                )
            }),
            steps: escalation
                .steps
                .iter()
                .zip(1..)
                .map(|(step, tier)| RequestEscalationStep {
                    tier,
                    at: Time(instant(&step.after)),
                    approvers: step.approvers.clone(),
                    notifier: step.notifier.clone(),
                })
                .collect(),
        }
    }

    /// The tier a request is due to be in at `now`: the highest step whose instant has come,
    /// 0 before the first.
    pub fn tier_at(&self, now: Timestamp) -> u32 {
        self.steps
            .iter()
            .filter(|s| s.at.0 <= now)
            .filter_map(|s| u32::try_from(s.tier).ok())
            .max()
            .unwrap_or(0)
    }

    /// The step after `tier`, if there is one.
    pub fn step(&self, tier: u32) -> Option<&RequestEscalationStep> {
        self.steps
            .iter()
            .find(|s| u32::try_from(s.tier).ok() == Some(tier))
    }

    /// When the next step after `tier` falls due, if one will.
    pub fn next_at(&self, tier: u32) -> Option<Timestamp> {
        self.step(tier.checked_add(1)?).map(|s| s.at.0)
    }

    /// The lowest tier `username` (with `groups`) is an approver of, if any: they may decide
    /// from it on. People in no step may decide at every tier.
    pub fn first_tier_of(&self, username: &str, groups: &[String]) -> Option<u32> {
        self.steps
            .iter()
            .filter(|s| s.approvers.include(username, groups))
            .filter_map(|s| u32::try_from(s.tier).ok())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn escalation() -> RequestEscalation {
        let agent = Escalation {
            warn_before: Some("5m".into()),
            steps: vec![
                EscalationStep {
                    after: "10m".into(),
                    approvers: EscalationApprovers {
                        groups: vec!["oncall".into()],
                        users: vec![],
                    },
                    notifier: Some("pager".into()),
                },
                EscalationStep {
                    after: "30m".into(),
                    approvers: EscalationApprovers {
                        groups: vec![],
                        users: vec!["boss".into()],
                    },
                    notifier: None,
                },
            ],
        };
        RequestEscalation::at(
            &agent,
            ts("2026-11-22T00:00:00Z"),
            ts("2026-11-22T01:00:00Z"),
        )
    }

    fn step(after: &str) -> EscalationStep {
        EscalationStep {
            after: after.into(),
            approvers: EscalationApprovers {
                groups: vec!["oncall".into()],
                users: vec![],
            },
            notifier: None,
        }
    }

    #[test]
    fn check_names_the_field_and_why() {
        let ok = Escalation {
            warn_before: Some("5m".into()),
            steps: vec![step("10m"), step("30m")],
        };
        assert_eq!(ok.check(3600.0), Ok(()));
        let cases = [
            (
                vec![step("30m"), step("10m")],
                "steps[1].after",
                "later than the step before",
            ),
            (
                vec![step("10m"), step("10m")],
                "steps[1].after",
                "later than the step before",
            ),
            (
                vec![step("1h")],
                "steps[0].after",
                "shorter than the approval timeout",
            ),
            (vec![step("0s")], "steps[0].after", "positive duration"),
            (vec![step("soon")], "steps[0].after", "positive duration"),
        ];
        for (steps, field, why) in cases {
            let (f, message) = Escalation {
                warn_before: None,
                steps,
            }
            .check(3600.0)
            .unwrap_err();
            assert_eq!(f, field);
            assert!(message.contains(why), "{message}");
        }
        let nobody = Escalation {
            warn_before: None,
            steps: vec![EscalationStep {
                after: "1m".into(),
                ..Default::default()
            }],
        };
        assert_eq!(nobody.check(3600.0).unwrap_err().0, "steps[0]");
        let late_warning = Escalation {
            warn_before: Some("2h".into()),
            steps: vec![],
        };
        assert_eq!(late_warning.check(3600.0).unwrap_err().0, "warnBefore");
        let too_many = Escalation {
            warn_before: None,
            steps: (1..=9).map(|m| step(&format!("{m}m"))).collect(),
        };
        assert_eq!(too_many.check(3600.0).unwrap_err().0, "steps");
    }

    #[test]
    fn steps_come_at_creation_plus_after() {
        let e = escalation();
        assert_eq!(e.steps[0].tier, 1);
        assert_eq!(e.steps[0].at.0, ts("2026-11-22T00:10:00Z"));
        assert_eq!(e.steps[1].tier, 2);
        assert_eq!(e.steps[1].at.0, ts("2026-11-22T00:30:00Z"));
        assert_eq!(e.warn_at.unwrap().0, ts("2026-11-22T00:55:00Z"));
    }

    #[test]
    fn the_tier_is_the_last_step_whose_instant_has_come() {
        let e = escalation();
        assert_eq!(e.tier_at(ts("2026-11-22T00:09:59Z")), 0);
        assert_eq!(e.tier_at(ts("2026-11-22T00:10:00Z")), 1);
        assert_eq!(e.tier_at(ts("2026-11-22T00:29:59Z")), 1);
        assert_eq!(e.tier_at(ts("2026-11-22T00:30:00Z")), 2);
        assert_eq!(e.tier_at(ts("2026-11-23T00:00:00Z")), 2);
        assert_eq!(
            RequestEscalation::default().tier_at(ts("2030-01-01T00:00:00Z")),
            0
        );
    }

    #[test]
    fn the_next_wake_up_is_the_next_step() {
        let e = escalation();
        assert_eq!(e.next_at(0), Some(ts("2026-11-22T00:10:00Z")));
        assert_eq!(e.next_at(1), Some(ts("2026-11-22T00:30:00Z")));
        assert_eq!(e.next_at(2), None);
    }

    #[test]
    fn a_person_decides_from_their_lowest_tier_and_others_always() {
        let e = escalation();
        assert_eq!(e.first_tier_of("carol", &["oncall".into()]), Some(1));
        assert_eq!(e.first_tier_of("boss", &[]), Some(2));
        assert_eq!(e.first_tier_of("alice", &["team".into()]), None);
    }
}
