//! The freeze on the controller's side, the same for Agents and ToolGates
//! ([`Freezable`](crate::api::freeze::Freezable)): the `Frozen` condition a reconcile sets from
//! [`Stores::freeze_of`](super::Stores::freeze_of) or removes once the freeze is lifted, and
//! the Event saying so when it changes. (The ApprovalRequest reconciler cancels the frozen
//! object's open requests: [`Standing::Frozen`](super::approval_request::Standing::Frozen).)

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::events::EventType;

use super::Context;
use crate::api::freeze::{FROZEN, Freeze};
use crate::apiserver::conditions::{ConditionChange, find};

/// What `freeze` does to the object's conditions: sets its `Frozen` condition, or removes it
/// when the object is not frozen.
pub fn frozen_condition(
    freeze: Option<&Freeze>,
    generation: Option<i64>,
    now: Timestamp,
) -> ConditionChange {
    match freeze {
        Some(freeze) => ConditionChange::Set(freeze.condition(generation, now)),
        None => ConditionChange::Remove(FROZEN),
    }
}

/// Whether `freeze` changes what the `Frozen` condition among `current` says: a freeze begun
/// or lifted, or now declared elsewhere or for another reason (its message describes it).
pub fn freeze_changed(current: &[Condition], freeze: Option<&Freeze>) -> bool {
    find(current, FROZEN).map(|c| c.message.clone()) != freeze.map(ToString::to_string)
}

/// Publishes on `object` its freeze, or the freeze's lifting (`freeze` is `None`), when that
/// changes what its `Frozen` condition among `current` said ([`freeze_changed`]).
pub async fn announce_freeze<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    current: &[Condition],
    freeze: Option<&Freeze>,
) {
    if !freeze_changed(current, freeze) {
        return;
    }
    let (type_, reason, note) = match freeze {
        Some(freeze) => (
            EventType::Warning,
            FROZEN,
            format!("{freeze}: its gated tool calls are refused and its pending ApprovalRequests cancelled"),
        ),
        None => (
            EventType::Normal,
            "Unfrozen",
            "freeze lifted: gated tool calls ask for approval again; nothing refused or cancelled runs by itself".to_string(),
        ),
    };
    let targets = [object.object_ref(&())];
    ctx.publish(type_, reason, note, "Freeze", &targets).await;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::ToolGate;
    use crate::api::freeze::{FREEZE_ANNOTATION, NAMESPACE_FROZEN, TOOL_GATE_FROZEN};
    use crate::apiserver::conditions::set_condition;

    fn tool_gate(annotation: Option<&str>) -> ToolGate {
        let mut tool_gate: ToolGate = serde_json::from_value(serde_json::json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "ToolGate",
            "metadata": {"name": "pay", "namespace": "team"},
            "spec": {"server": {"url": "http://ledger:8080/mcp"}, "toolNames": ["transfer"]},
        }))
        .unwrap();
        if let Some(reason) = annotation {
            tool_gate.metadata.annotations =
                Some(BTreeMap::from([(FREEZE_ANNOTATION.into(), reason.into())]));
        }
        tool_gate
    }

    fn namespace(reason: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(FREEZE_ANNOTATION.to_string(), reason.to_string())])
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    /// `conditions` after the change `freeze` makes at `at(seconds)`.
    fn applied(conditions: &[Condition], freeze: Option<&Freeze>, seconds: i64) -> Vec<Condition> {
        let mut conditions = conditions.to_vec();
        frozen_condition(freeze, Some(2), at(seconds)).apply(&mut conditions);
        conditions
    }

    #[test]
    fn a_tool_gates_freeze_is_set_kept_and_removed_in_its_conditions() {
        let own = Freeze::declared(&tool_gate(Some("incident 42")), None);
        let frozen = applied(&[], own.as_ref(), 0);
        let condition = find(&frozen, FROZEN).expect("set");
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", TOOL_GATE_FROZEN)
        );
        assert_eq!(
            condition.message,
            "ToolGate pay is frozen (hitl.kagent.dev/freeze: incident 42)"
        );
        // Still frozen: the condition, its transition time included, is as it was.
        assert_eq!(applied(&frozen, own.as_ref(), 60), frozen);
        // Lifted: gone; nothing else is touched.
        let mut others = frozen.clone();
        set_condition(
            &mut others,
            crate::apiserver::new_condition("Ready", true, "DeploymentReady", "", None, at(0)),
        );
        let lifted = applied(&others, None, 120);
        assert_eq!(
            lifted.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["Ready"]
        );

        let by_namespace = Freeze::declared(&tool_gate(None), Some(&namespace("drill")));
        let frozen = applied(&[], by_namespace.as_ref(), 0);
        let condition = find(&frozen, FROZEN).expect("set");
        assert_eq!(condition.reason, NAMESPACE_FROZEN);
        assert_eq!(
            Freeze::seen_by_gate(&ToolGate {
                status: Some(crate::api::tool_gate::ToolGateStatus {
                    conditions: frozen.clone(),
                    ..Default::default()
                }),
                ..tool_gate(None)
            }),
            Some("Namespace team is frozen (hitl.kagent.dev/freeze: drill)".into()),
            "the ToolGate's gate honours the condition the controller sets"
        );
    }

    #[test]
    fn a_freeze_is_announced_when_it_begins_moves_or_is_lifted_only() {
        let own = Freeze::declared(&tool_gate(Some("incident 42")), None);
        let by_namespace = Freeze::declared(&tool_gate(None), Some(&namespace("incident 42")));
        let other_reason = Freeze::declared(&tool_gate(Some("incident 43")), None);
        let frozen = applied(&[], own.as_ref(), 0);
        assert!(!freeze_changed(&[], None), "never frozen");
        assert!(freeze_changed(&[], own.as_ref()), "frozen");
        assert!(!freeze_changed(&frozen, own.as_ref()), "still frozen");
        assert!(
            freeze_changed(&frozen, by_namespace.as_ref()),
            "now by its Namespace"
        );
        assert!(
            freeze_changed(&frozen, other_reason.as_ref()),
            "for another reason"
        );
        assert!(freeze_changed(&frozen, None), "lifted");
    }
}
