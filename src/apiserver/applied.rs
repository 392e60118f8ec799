//! Digests of what the controller applied, so a cache can keep eight bytes of an object
//! instead of the object and still tell whether a desired object is applied.
//!
//! The observed side is the object projected onto the fields our field manager owns (its
//! server-side apply entry in managedFields): exactly the fields an apply of ours set, with the
//! values they have now. Another writer that changes one of those fields takes it over, so the
//! projection loses it and the digest no longer matches. The desired side is the object as
//! [`is_applied`](super::is_applied) compares it. Both leave out empty values, which the
//! apiserver drops. Equal digests mean applied; different ones mean "read the object and
//! compare" (the apiserver may also have defaulted a field inside one we set, such as a
//! fieldRef's apiVersion, or canonicalised a quantity).

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use kube::Resource;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::apply::{applied_form, is_empty};
use super::field_manager;

/// Digest of `desired` in the form an apply of it leaves in the object (managedFields do not
/// track apiVersion and kind).
pub fn desired_digest<K: Serialize>(desired: &K) -> Option<u64> {
    let mut form = applied_form(desired)?;
    let object = form.as_object_mut()?;
    object.remove("apiVersion");
    object.remove("kind");
    Some(digest(&form))
}

/// Digest of the fields of `observed` that our field manager applied; `None` when it applied
/// none (the object was never applied by us, or the fields cannot be followed).
pub fn observed_digest<K: Serialize>(observed: &K, meta: &ObjectMeta) -> Option<u64> {
    let fields = meta
        .managed_fields
        .iter()
        .flatten()
        .find(|entry| {
            entry.manager.as_deref() == Some(field_manager::CONTROLLER)
                && entry.operation.as_deref() == Some("Apply")
                && entry.subresource.as_deref().unwrap_or_default().is_empty()
        })?
        .fields_v1
        .as_ref()?;
    let observed = serde_json::to_value(observed).ok()?;
    project(&observed, &fields.0).map(|projection| digest(&projection))
}

/// `object` as the apiserver holds it after our server-side apply of exactly `object`: with a
/// managedFields entry of our field manager owning every field it sets (lists taken whole).
/// For caches filled by hand, in tests and benchmarks.
pub fn applied_by_us<K: Resource + Serialize>(mut object: K) -> K {
    let mut form = applied_form(&object).unwrap_or_else(|| json!({}));
    if let Some(form) = form.as_object_mut() {
        form.remove("apiVersion");
        form.remove("kind");
    }
    let fields = field_set(&form);
    object.meta_mut().managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some(field_manager::CONTROLLER.into()),
        operation: Some("Apply".into()),
        fields_v1: Some(FieldsV1(fields)),
        ..ManagedFieldsEntry::default()
    }]);
    object
}

/// The managedFields set naming every field of `value`.
fn field_set(value: &Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .map(|(key, value)| (format!("f:{key}"), field_set(value)))
                .collect(),
        ),
        _ => json!({}),
    }
}

/// `value` restricted to `fields` (a managedFields `fieldsV1` set): `f:<name>` selects a key of
/// an object, `k:<key>` the list element whose fields equal the key, `v:<value>` a list element
/// by value; a field with no sub-fields is taken whole. `None` for what the set does not
/// describe (an element by index).
fn project(value: &Value, fields: &Value) -> Option<Value> {
    let Value::Object(fields) = fields else {
        return None;
    };
    let selectors: Vec<(&String, &Value)> = fields.iter().filter(|(key, _)| *key != ".").collect();
    if selectors.is_empty() {
        return Some(value.clone());
    }
    match value {
        Value::Object(object) => {
            let mut projected = Map::new();
            for (selector, sub) in selectors {
                let name = selector.strip_prefix("f:")?;
                if let Some(field) = object.get(name) {
                    projected.insert(name.to_string(), project(field, sub)?);
                }
            }
            Some(Value::Object(projected))
        }
        Value::Array(items) => {
            let mut chosen = Vec::new();
            for item in items {
                for (selector, sub) in &selectors {
                    if element_matches(item, selector)? {
                        chosen.push(project(item, sub)?);
                        break;
                    }
                }
            }
            Some(Value::Array(chosen))
        }
        _ => None,
    }
}

/// Whether list element `item` is the one `selector` (`k:{json}` or `v:json`) names.
fn element_matches(item: &Value, selector: &str) -> Option<bool> {
    if let Some(key) = selector.strip_prefix("k:") {
        let Value::Object(key) = serde_json::from_str::<Value>(key).ok()? else {
            return None;
        };
        return Some(
            key.iter()
                .all(|(name, wanted)| item.get(name) == Some(wanted)),
        );
    }
    let value: Value = serde_json::from_str(selector.strip_prefix("v:")?).ok()?;
    Some(*item == value)
}

/// A digest of `value` independent of key order, with empty values left out.
fn digest(value: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    feed(value, &mut hasher);
    hasher.finish()
}

fn feed(value: &Value, hasher: &mut DefaultHasher) {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object
                .iter()
                .filter(|(_, value)| !is_blank(value))
                .map(|(key, _)| key)
                .collect();
            keys.sort();
            hasher.write_u8(b'{');
            for key in keys {
                key.hash(hasher);
                feed(&object[key], hasher);
            }
            hasher.write_u8(b'}');
        }
        Value::Array(items) => {
            hasher.write_u8(b'[');
            items.len().hash(hasher);
            for item in items {
                feed(item, hasher);
            }
        }
        Value::String(text) => {
            hasher.write_u8(b's');
            text.hash(hasher);
        }
        Value::Number(number) => {
            hasher.write_u8(b'n');
            number.to_string().hash(hasher);
        }
        Value::Bool(flag) => {
            hasher.write_u8(b'b');
            flag.hash(hasher);
        }
        Value::Null => hasher.write_u8(b'0'),
    }
}

/// Empty itself, or an object of only empty values (as the apiserver stores it: not at all).
fn is_blank(value: &Value) -> bool {
    match value {
        Value::Object(object) => object.values().all(is_blank),
        value => is_empty(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    fn deployment(value: Value) -> Deployment {
        serde_json::from_value(value).unwrap()
    }

    fn with_entry(mut object: Deployment, manager: &str, fields: Value) -> Deployment {
        object.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }]);
        object
    }

    fn observed(object: &Deployment) -> Option<u64> {
        observed_digest(object, &object.metadata)
    }

    fn desired() -> Deployment {
        deployment(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "a", "namespace": "n", "labels": {"app": "a"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "a"}},
                     "template": {"spec": {"containers": [
                        {"name": "agent", "image": "i:1", "ports": [{"containerPort": 8080}]}]}}},
        }))
    }

    /// What the apiserver stores after applying `desired()`: defaults and others' fields added.
    fn stored(image: &str) -> Deployment {
        deployment(json!({
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7",
                         "labels": {"app": "a", "other": "x"}},
            "spec": {"replicas": 1, "revisionHistoryLimit": 10,
                     "selector": {"matchLabels": {"app": "a"}},
                     "template": {"spec": {"dnsPolicy": "ClusterFirst", "containers": [
                        {"name": "agent", "image": image, "imagePullPolicy": "IfNotPresent",
                         "ports": [{"containerPort": 8080, "protocol": "TCP"}]}]}}},
            "status": {"replicas": 1},
        }))
    }

    fn ours() -> Value {
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {
                "f:containers": {"k:{\"name\":\"agent\"}": {
                    ".": {}, "f:name": {}, "f:image": {},
                    "f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {
                        ".": {}, "f:containerPort": {}}}}}}}},
        })
    }

    #[test]
    fn the_applied_fields_of_an_unchanged_object_match_the_desired_one() {
        let desired = desired_digest(&desired());
        assert!(desired.is_some());
        assert_eq!(
            observed(&with_entry(
                stored("i:1"),
                field_manager::CONTROLLER,
                ours()
            )),
            desired
        );
    }

    #[test]
    fn a_changed_or_taken_over_field_no_longer_matches() {
        let desired = desired_digest(&desired());
        assert_ne!(
            observed(&with_entry(
                stored("i:2"),
                field_manager::CONTROLLER,
                ours()
            )),
            desired
        );
        // Another writer changed the image: it owns the field now, our set lacks it.
        let mut taken = ours();
        taken["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"agent\"}"]
            .as_object_mut()
            .unwrap()
            .remove("f:image");
        assert_ne!(
            observed(&with_entry(stored("i:2"), field_manager::CONTROLLER, taken)),
            desired
        );
    }

    #[test]
    fn without_an_apply_entry_of_ours_there_is_no_digest() {
        assert_eq!(observed(&stored("i:1")), None);
        assert_eq!(
            observed(&with_entry(stored("i:1"), "kubectl", ours())),
            None
        );
    }

    #[test]
    fn list_elements_are_found_by_key_or_value_and_indexes_are_not_followed() {
        let list = json!([{"name": "a", "x": 1}, {"name": "b", "x": 2}]);
        assert_eq!(
            project(&list, &json!({"k:{\"name\":\"b\"}": {"f:x": {}}})),
            Some(json!([{"x": 2}]))
        );
        assert_eq!(
            project(&json!(["p", "q"]), &json!({"v:\"q\"": {}})),
            Some(json!(["q"]))
        );
        assert_eq!(project(&list, &json!({"i:0": {}})), None);
    }

    #[test]
    fn digests_ignore_key_order_and_empty_values() {
        assert_eq!(
            digest(&json!({"a": 1, "b": {"c": [], "d": ""}, "e": false})),
            digest(&json!({"a": 1}))
        );
        assert_ne!(digest(&json!({"a": 1})), digest(&json!({"a": 2})));
        assert_ne!(digest(&json!({"a": [1]})), digest(&json!({"a": [1, 0]})));
    }
}
