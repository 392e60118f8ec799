//! The freeze switch: the annotation `hitl.kagent.dev/freeze` on an Agent (or a ToolGate) or on
//! its Namespace stops every call of its gated tools at once. The annotation's value is the
//! reason (e.g. `incident 42`). The controller reports a freeze as the object's `Frozen`
//! condition and cancels its pending requests; the gate refuses gated calls while it sees one.
//!
//! The gate reads only its own Agent or ToolGate ([`Freezable`]): the annotation, and the
//! `Frozen` condition with reason [`NAMESPACE_FROZEN`], which the controller sets from the
//! Namespace's annotation.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use super::approval_request::PolicyKind;
use super::{Agent, ToolGate};
use crate::apiserver::conditions::find;
use crate::apiserver::new_condition;

/// Annotation that freezes an Agent or a ToolGate, or every one of a Namespace; its value is the
/// reason.
pub const FREEZE_ANNOTATION: &str = "hitl.kagent.dev/freeze";
/// Condition of an Agent or a ToolGate: present, `True`, while it is frozen.
pub const FROZEN: &str = "Frozen";
/// Reason of [`FROZEN`] when the Agent itself carries the annotation.
pub const AGENT_FROZEN: &str = "AgentFrozen";
/// Reason of [`FROZEN`] when the ToolGate itself carries the annotation.
pub const TOOL_GATE_FROZEN: &str = "ToolGateFrozen";
/// Reason of [`FROZEN`] when the Namespace of the Agent or ToolGate carries the annotation.
pub const NAMESPACE_FROZEN: &str = "NamespaceFrozen";
/// Longest reason kept (the rest is cut): it goes into condition messages and refusals.
const MAX_REASON_CHARS: usize = 512;

/// Where a freeze was declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreezeScope {
    /// The object's own annotation: the Agent's, or the ToolGate's.
    Own,
    /// The annotation of the object's Namespace.
    Namespace,
}

/// The kinds a freeze applies to: what their gate enforces can be frozen.
pub trait Freezable: Resource<DynamicType = ()> {
    /// Which kind it is.
    const KIND: PolicyKind;

    /// The object's status conditions (where the controller's `Frozen` condition is).
    fn conditions(&self) -> &[Condition];
}

impl Freezable for Agent {
    const KIND: PolicyKind = PolicyKind::Agent;

    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl Freezable for ToolGate {
    const KIND: PolicyKind = PolicyKind::ToolGate;

    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

/// A freeze of an Agent or ToolGate: where it was declared, on what, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Freeze {
    /// The object's own annotation, or its Namespace's.
    pub scope: FreezeScope,
    /// The kind of the frozen object.
    pub kind: PolicyKind,
    /// The name of the annotated object.
    pub object: String,
    /// The annotation's value.
    pub reason: String,
}

impl fmt::Display for Freeze {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.scope {
            FreezeScope::Own => self.kind.as_str(),
            FreezeScope::Namespace => "Namespace",
        };
        write!(
            f,
            "{what} {} is frozen ({FREEZE_ANNOTATION}: {})",
            self.object, self.reason
        )
    }
}

/// The reason in a freeze annotation: its value, trimmed and cut to [`MAX_REASON_CHARS`], or
/// `unspecified` when empty. `None` without the annotation.
pub fn annotated_reason(annotations: &BTreeMap<String, String>) -> Option<String> {
    let value = annotations.get(FREEZE_ANNOTATION)?.trim();
    Some(if value.is_empty() {
        "unspecified".to_string()
    } else {
        value.chars().take(MAX_REASON_CHARS).collect()
    })
}

impl Freeze {
    /// The freeze the controller sees for `object` (an Agent or a ToolGate): its own
    /// annotation first, else that of its Namespace (`namespace_annotations`).
    pub fn declared<K: Freezable>(
        object: &K,
        namespace_annotations: Option<&BTreeMap<String, String>>,
    ) -> Option<Self> {
        let kind = K::KIND;
        if let Some(reason) = annotated_reason(object.annotations()) {
            return Some(Self {
                scope: FreezeScope::Own,
                kind,
                object: object.name_any(),
                reason,
            });
        }
        let reason = annotated_reason(namespace_annotations?)?;
        Some(Self {
            scope: FreezeScope::Namespace,
            kind,
            object: object.namespace().unwrap_or_default(),
            reason,
        })
    }

    /// The freeze the gate honours for `object`, described, read from the object alone: its
    /// annotation, else the controller's `Frozen` condition for its Namespace. The gate cannot
    /// read Namespaces, and the condition stays until the controller sees the Namespace lifted:
    /// a controller that is down keeps the object frozen, never the other way round.
    pub fn seen_by_gate<K: Freezable>(object: &K) -> Option<String> {
        if let Some(reason) = annotated_reason(object.annotations()) {
            let freeze = Self {
                scope: FreezeScope::Own,
                kind: K::KIND,
                object: object.name_any(),
                reason,
            };
            return Some(freeze.to_string());
        }
        let condition = find(object.conditions(), FROZEN)?;
        (condition.status == "True" && condition.reason == NAMESPACE_FROZEN)
            .then(|| condition.message.clone())
    }

    /// The object's `Frozen` condition for this freeze; its message describes it.
    pub fn condition(&self, generation: Option<i64>, now: Timestamp) -> Condition {
        let reason = match self.scope {
            FreezeScope::Own => match self.kind {
                PolicyKind::Agent => AGENT_FROZEN,
                PolicyKind::ToolGate => TOOL_GATE_FROZEN,
            },
            FreezeScope::Namespace => NAMESPACE_FROZEN,
        };
        new_condition(FROZEN, true, reason, self.to_string(), generation, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(annotation: Option<&str>, condition: Option<(&str, &str, &str)>) -> Agent {
        let mut agent: Agent = serde_json::from_value(serde_json::json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"name": "ops", "namespace": "team"},
            "spec": {"type": "Declarative"},
        }))
        .unwrap();
        if let Some(value) = annotation {
            agent
                .annotations_mut()
                .insert(FREEZE_ANNOTATION.into(), value.into());
        }
        if let Some((status, reason, message)) = condition {
            let at = "2026-11-23T00:00:00Z".parse().unwrap();
            let mut condition = new_condition(FROZEN, status == "True", reason, message, None, at);
            condition.status = status.into();
            agent.status = Some(crate::api::AgentStatus {
                conditions: vec![condition],
                ..Default::default()
            });
        }
        agent
    }

    fn namespace(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(FREEZE_ANNOTATION.to_string(), value.to_string())])
    }

    #[test]
    fn the_agents_own_annotation_comes_before_its_namespaces() {
        let frozen = Freeze::declared(
            &agent(Some(" incident 42 "), None),
            Some(&namespace("drill")),
        );
        let frozen = frozen.unwrap();
        assert_eq!(
            (frozen.scope, frozen.reason.as_str()),
            (FreezeScope::Own, "incident 42")
        );
        assert_eq!(
            frozen.to_string(),
            "Agent ops is frozen (hitl.kagent.dev/freeze: incident 42)"
        );
        let by_namespace = Freeze::declared(&agent(None, None), Some(&namespace("drill"))).unwrap();
        assert_eq!(by_namespace.scope, FreezeScope::Namespace);
        assert_eq!(
            by_namespace.to_string(),
            "Namespace team is frozen (hitl.kagent.dev/freeze: drill)"
        );
        assert_eq!(Freeze::declared(&agent(None, None), None), None);
        assert_eq!(
            Freeze::declared(&agent(None, None), Some(&BTreeMap::new())),
            None
        );
    }

    #[test]
    fn an_empty_annotation_still_freezes_and_a_long_reason_is_cut() {
        let empty = Freeze::declared(&agent(Some("  "), None), None).unwrap();
        assert_eq!(empty.reason, "unspecified");
        let long = Freeze::declared(&agent(Some(&"x".repeat(2000)), None), None).unwrap();
        assert_eq!(long.reason.chars().count(), MAX_REASON_CHARS);
    }

    #[test]
    fn the_gate_honours_the_annotation_and_the_namespace_condition_only() {
        assert_eq!(
            Freeze::seen_by_gate(&agent(Some("incident 42"), None)).as_deref(),
            Some("Agent ops is frozen (hitl.kagent.dev/freeze: incident 42)")
        );
        let message = "Namespace team is frozen (hitl.kagent.dev/freeze: drill)";
        assert_eq!(
            Freeze::seen_by_gate(&agent(None, Some(("True", NAMESPACE_FROZEN, message))))
                .as_deref(),
            Some(message)
        );
        // The Agent's own freeze, lifted, while the controller has not updated the condition
        // yet: the annotation is what counts for the Agent itself.
        assert_eq!(
            Freeze::seen_by_gate(&agent(None, Some(("True", AGENT_FROZEN, "old")))),
            None
        );
        assert_eq!(
            Freeze::seen_by_gate(&agent(None, Some(("False", NAMESPACE_FROZEN, message)))),
            None
        );
        assert_eq!(Freeze::seen_by_gate(&agent(None, None)), None);
    }

    #[test]
    fn the_condition_names_the_scope_in_its_reason_and_describes_the_freeze() {
        let at = "2026-11-23T00:00:00Z".parse().unwrap();
        let freeze = Freeze::declared(&agent(None, None), Some(&namespace("drill"))).unwrap();
        let condition = freeze.condition(Some(3), at);
        assert_eq!(
            (
                condition.type_.as_str(),
                condition.status.as_str(),
                condition.reason.as_str()
            ),
            (FROZEN, "True", NAMESPACE_FROZEN)
        );
        assert_eq!(condition.message, freeze.to_string());
        assert_eq!(
            Freeze::seen_by_gate(&agent(
                None,
                Some(("True", NAMESPACE_FROZEN, &condition.message))
            )),
            Some(freeze.to_string())
        );
    }
}
