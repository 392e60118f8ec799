//! Whose an existing object is: the controller applies only to objects it made, so that it never
//! fights another controller (kagent's renders Deployments and Secrets under the same names).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Our value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "hitl-operator";

/// Who else owns an object with metadata `meta`, if anyone: a managed-by label other than
/// ours (or none), or a controller ownerReference to anything but `controller_uid`. `None`
/// means it is ours to apply to.
pub fn foreign_owner(meta: &ObjectMeta, controller_uid: Option<&str>) -> Option<String> {
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
    meta.owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true) && Some(owner.uid.as_str()) != controller_uid)
        .map(|owner| {
            format!(
                "controlled by {} {} (uid {})",
                owner.kind, owner.name, owner.uid
            )
        })
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
        assert_eq!(foreign_owner(&ours, Some("u1")), None);
        assert_eq!(
            foreign_owner(&ours, Some("u2")),
            Some("controlled by Agent a (uid u1)".into())
        );
        let kagent = meta("{name: a, labels: {app.kubernetes.io/managed-by: kagent}}");
        assert_eq!(
            foreign_owner(&kagent, Some("u1")),
            Some("app.kubernetes.io/managed-by=kagent".into())
        );
        let unlabelled = meta("{name: a}");
        assert_eq!(
            foreign_owner(&unlabelled, Some("u1")),
            Some("no app.kubernetes.io/managed-by label".into())
        );
        // A non-controller owner (a garbage-collection link someone added) is not a claim.
        let linked = meta(
            "{name: a, labels: {app.kubernetes.io/managed-by: hitl-operator}, ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: x, uid: u9}]}",
        );
        assert_eq!(foreign_owner(&linked, Some("u1")), None);
    }
}
