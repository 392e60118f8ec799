//! Status conditions: build one, and set it in a list keeping `lastTransitionTime` when its
//! status did not change (so re-computing an unchanged status writes nothing).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition of `type_` with status `True`/`False`, observed at `generation`, as of `now`.
pub fn new_condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: Time(now),
    }
}

/// Replaces (or adds) the condition of the same type. When the status is unchanged the
/// previous `lastTransitionTime` is kept.
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
}

/// Removes the condition of `type_`, if present (a condition that no longer applies).
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// One change to a list of conditions: a condition set, or one that no longer applies removed.
#[derive(Clone, Debug)]
pub enum ConditionChange {
    /// Sets this condition ([`set_condition`]).
    Set(Condition),
    /// Removes the condition of this type ([`remove_condition`]).
    Remove(&'static str),
}

impl ConditionChange {
    /// Makes the change in `conditions`.
    pub fn apply(&self, conditions: &mut Vec<Condition>) {
        match self {
            ConditionChange::Set(condition) => set_condition(conditions, condition.clone()),
            ConditionChange::Remove(type_) => remove_condition(conditions, type_),
        }
    }
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn removes_only_the_named_condition() {
        let mut conditions = vec![
            new_condition("Ready", true, "A", "m", Some(1), at(10)),
            new_condition("Other", true, "A", "m", Some(1), at(10)),
        ];
        remove_condition(&mut conditions, "Ready");
        remove_condition(&mut conditions, "Absent");
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "Other");
    }

    #[test]
    fn keeps_transition_time_when_status_unchanged() {
        let mut conditions = vec![new_condition("Ready", true, "A", "m", Some(1), at(10))];
        set_condition(
            &mut conditions,
            new_condition("Ready", true, "B", "n", Some(2), at(20)),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
        assert_eq!(conditions[0].reason, "B");
        assert_eq!(conditions[0].observed_generation, Some(2));
    }

    #[test]
    fn moves_transition_time_when_status_changes() {
        let mut conditions = vec![new_condition("Ready", true, "A", "m", Some(1), at(10))];
        set_condition(
            &mut conditions,
            new_condition("Ready", false, "A", "m", Some(1), at(20)),
        );
        set_condition(
            &mut conditions,
            new_condition("Accepted", true, "R", "", Some(1), at(30)),
        );
        assert_eq!(conditions[0].last_transition_time, Time(at(20)));
        assert_eq!(conditions[0].status, "False");
        assert_eq!(find(&conditions, "Accepted").unwrap().reason, "R");
    }
}
