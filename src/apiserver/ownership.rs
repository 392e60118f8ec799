//! Whose an existing object is: the controller applies only to objects it made, so that it never
//! fights another controller (kagent's renders Deployments and Secrets under the same names).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Our value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "hitl-operator";

/// Who else owns an object with metadata `meta`, if anyone: a managed-by label other than
/// ours (or none), a controller ownerReference to anything but `controller_uid`, or no
/// controller ownerReference at all (whatever its labels say: anyone may set a label, and an
/// object this operator made always names its Agent or ToolGate as its controller). `None`
/// means it is ours to apply to.
pub fn foreign_owner(meta: &ObjectMeta, controller_uid: &str) -> Option<String> {
    let managed_by = meta
        .labels
        .as_ref()
        .and_then(|labels| labels.get(MANAGED_BY_LABEL));
    if managed_by.map(String::as_str) != Some(MANAGED_BY) {
        return Some(match managed_by {
            Some(other) => format!("{MANAGED_BY_LABEL}={other}"),
            None => format!("no {MANAGED_BY_LABEL} label"),
        });
    }
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true));
    match controller {
        Some(owner) if !controller_uid.is_empty() && owner.uid == controller_uid => None,
        Some(owner) => Some(format!(
            "controlled by {} {} (uid {})",
            owner.kind, owner.name, owner.uid
        )),
        None => Some(
            "no controller ownerReference: this operator did not make it (only its labels say so)"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(yaml: &str) -> ObjectMeta {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn only_objects_labelled_ours_and_controlled_by_the_agent_are_ours() {
        let ours = meta(
            "{name: a, labels: {app.kubernetes.io/managed-by: hitl-operator}, ownerReferences: [{apiVersion: kagent.dev/v1alpha2, kind: Agent, name: a, uid: u1, controller: true}]}",
        );
        assert_eq!(foreign_owner(&ours, "u1"), None);
        assert_eq!(
            foreign_owner(&ours, "u2"),
            Some("controlled by Agent a (uid u1)".into())
        );
        let kagent = meta("{name: a, labels: {app.kubernetes.io/managed-by: kagent}}");
        assert_eq!(
            foreign_owner(&kagent, "u1"),
            Some("app.kubernetes.io/managed-by=kagent".into())
        );
        let unlabelled = meta("{name: a}");
        assert_eq!(
            foreign_owner(&unlabelled, "u1"),
            Some("no app.kubernetes.io/managed-by label".into())
        );
        // A non-controller owner (a garbage-collection link someone added) is not a claim; our
        // label without our controller reference is not ours either (issue 54: anyone may
        // label a Secret, and a planted binding key must never be adopted).
        let linked = meta(
            "{name: a, labels: {app.kubernetes.io/managed-by: hitl-operator}, ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: x, uid: u9}]}",
        );
        let unowned = Some(
            "no controller ownerReference: this operator did not make it (only its labels say so)"
                .to_owned(),
        );
        assert_eq!(foreign_owner(&linked, "u1"), unowned);
        let planted = meta("{name: a, labels: {app.kubernetes.io/managed-by: hitl-operator}}");
        assert_eq!(foreign_owner(&planted, "u1"), unowned);
        let with_ours_too = meta(
            "{name: a, labels: {app.kubernetes.io/managed-by: hitl-operator}, ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: x, uid: u9}, {apiVersion: kagent.dev/v1alpha2, kind: Agent, name: a, uid: u1, controller: true}]}",
        );
        assert_eq!(foreign_owner(&with_ours_too, "u1"), None);
    }
}
