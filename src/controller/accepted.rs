//! The `Accepted` condition of an Agent or a ToolGate: what came of rendering its objects and
//! applying them, and the Event that announces a change of it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::events::EventType;

use super::Context;
use crate::apiserver::conditions::find;
use crate::apiserver::new_condition;
use crate::error::{Error, Result};

/// Condition: whether the object's spec was rendered and its objects applied.
pub const ACCEPTED: &str = "Accepted";

/// `Accepted` once the objects rendered and `applied` says how applying them went: True,
/// `Reconciled` with the success message; or False with the error, whose reason is
/// `OwnedByAnotherController` for another owner's object (a lasting state, named as such) and
/// `ReconcileFailed` otherwise. The error comes back too, for the reconcile to be retried.
pub fn after_apply(
    applied: Result<String>,
    generation: Option<i64>,
    now: Timestamp,
) -> (Condition, Option<Error>) {
    match applied {
        Ok(message) => (
            new_condition(ACCEPTED, true, "Reconciled", message, generation, now),
            None,
        ),
        Err(error) => {
            let reason = match error {
                Error::OwnedElsewhere { .. } => error.reason(),
                _ => "ReconcileFailed",
            };
            let condition =
                new_condition(ACCEPTED, false, reason, error.to_string(), generation, now);
            (condition, Some(error))
        }
    }
}

/// `Accepted` False when rendering refused the spec (`InvalidSpec`, `RefNotFound`: nothing to
/// retry until something changes); any other error comes back as it is.
pub fn refused(error: Error, generation: Option<i64>, now: Timestamp) -> Result<Condition> {
    match error {
        Error::InvalidSpec { .. } | Error::RefNotFound { .. } => Ok(new_condition(
            ACCEPTED,
            false,
            error.reason(),
            error.to_string(),
            generation,
            now,
        )),
        error => Err(error),
    }
}

/// Publishes `accepted` on `object` (Normal when True, Warning otherwise) if it says something
/// else than the `Accepted` condition among `current`.
pub async fn announce<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    current: &[Condition],
    accepted: &Condition,
) {
    let unchanged = find(current, ACCEPTED).is_some_and(|old| {
        (&old.status, &old.reason, &old.message)
            == (&accepted.status, &accepted.reason, &accepted.message)
    });
    if unchanged {
        return;
    }
    let type_ = if accepted.status == "True" {
        EventType::Normal
    } else {
        EventType::Warning
    };
    let targets = [object.object_ref(&())];
    ctx.publish(
        type_,
        &accepted.reason,
        accepted.message.clone(),
        "Reconcile",
        &targets,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-27T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn applying_gives_reconciled_or_the_lasting_owner_or_a_failure_to_retry() {
        let (ok, failure) = after_apply(Ok("rendered and applied".into()), Some(2), now());
        assert_eq!(
            (ok.status.as_str(), ok.reason.as_str(), ok.message.as_str()),
            ("True", "Reconciled", "rendered and applied")
        );
        assert!(failure.is_none());
        let owned = Error::OwnedElsewhere {
            object: "Deployment ns/a".into(),
            owner: "kagent".into(),
        };
        let (condition, failure) = after_apply(Err(owned), Some(2), now());
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "OwnedByAnotherController")
        );
        assert!(matches!(failure, Some(Error::OwnedElsewhere { .. })));
    }

    #[test]
    fn a_refused_spec_is_a_condition_and_anything_else_an_error() {
        let invalid = Error::InvalidSpec {
            object: "Agent ns/a".into(),
            field: "spec".into(),
            message: "bad".into(),
        };
        let condition = refused(invalid, None, now()).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "InvalidSpec")
        );
        let other = Error::Bind {
            addr: "x".into(),
            source: std::io::Error::other("no"),
        };
        assert!(refused(other, None, now()).is_err());
    }
}
