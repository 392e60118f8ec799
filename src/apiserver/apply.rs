//! Server-side apply with the operator's single field manager, and the check that decides
//! whether an apply is needed at all (so a no-op reconcile writes nothing).

use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::field_manager;
use crate::Result;

/// Server-side apply parameters: our field manager, taking over conflicting fields.
pub fn apply_params() -> PatchParams {
    PatchParams::apply(field_manager::CONTROLLER).force()
}

/// A namespaced object the controller applies.
pub trait Applicable:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Serialize
    + DeserializeOwned
    + Clone
    + std::fmt::Debug
{
}

impl<K> Applicable for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug
{
}

/// Server-side applies a namespaced object (its namespace and name are taken from the object).
pub async fn apply<K: Applicable>(client: &Client, object: &K) -> Result<K> {
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    Ok(api
        .patch(&object.name_any(), &apply_params(), &Patch::Apply(object))
        .await?)
}

/// Server-side applies `object` without taking over fields: where another field manager set a
/// field to another value, the apiserver refuses with 409 Conflict. For an object believed not
/// to exist yet, whose apply must not silently take over one that does.
pub async fn apply_unforced<K: Applicable>(client: &Client, object: &K) -> kube::Result<K> {
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    api.patch(
        &object.name_any(),
        &PatchParams::apply(field_manager::CONTROLLER),
        &Patch::Apply(object),
    )
    .await
}

/// Server-side applies `status` to the `/status` subresource of `object`.
pub async fn apply_status<K>(api: &Api<K>, object: &K, status: &impl Serialize) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": object.name_any()},
        "status": status,
    });
    Ok(api
        .patch_status(&object.name_any(), &apply_params(), &Patch::Apply(body))
        .await?)
}

/// Whether `observed` already holds everything `desired` would apply: its labels, annotations
/// and owner references, and every field of the rest of the object (fields the apiserver
/// defaults, and annotations or labels others add, do not count as drift).
pub fn is_applied<K: Serialize>(desired: &K, observed: Option<&K>) -> bool {
    let Some(observed) = observed else {
        return false;
    };
    let (Some(desired), Ok(observed)) = (applied_form(desired), serde_json::to_value(observed))
    else {
        return false;
    };
    contains(&observed, &desired)
}

/// `desired` as an apply of it shows in the stored object: no status, of the metadata only
/// labels, annotations and owner references, stringData as the base64 data the apiserver
/// stores.
pub(super) fn applied_form<K: Serialize>(desired: &K) -> Option<Value> {
    let mut desired = serde_json::to_value(desired).ok()?;
    let object = desired.as_object_mut()?;
    object.remove("status");
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        metadata
            .retain(|key, _| matches!(key.as_str(), "labels" | "annotations" | "ownerReferences"));
    }
    if let Some(Value::Object(string_data)) = object.remove("stringData") {
        let data = object
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(data) = data {
            for (key, value) in string_data {
                let bytes = value.as_str().unwrap_or_default().as_bytes().to_vec();
                data.insert(
                    key,
                    serde_json::to_value(ByteString(bytes)).unwrap_or(Value::Null),
                );
            }
        }
    }
    Some(desired)
}

/// Whether `observed` contains `desired`: objects by key (a missing key equals a zero value,
/// which Go's `omitempty` drops), lists element by element with equal length, scalars by
/// equality, and resource quantities (values under `limits`/`requests`) by amount, since the
/// apiserver stores them canonicalised (`0.5` becomes `500m`).
fn contains(observed: &Value, desired: &Value) -> bool {
    contains_at(observed, desired, false)
}

fn contains_at(observed: &Value, desired: &Value, quantities: bool) -> bool {
    match (observed, desired) {
        (Value::Object(observed), Value::Object(desired)) => {
            desired.iter().all(|(key, value)| match observed.get(key) {
                Some(present) => contains_at(
                    present,
                    value,
                    quantities || matches!(key.as_str(), "limits" | "requests"),
                ),
                None => is_empty(value),
            })
        }
        (Value::Array(observed), Value::Array(desired)) => {
            observed.len() == desired.len()
                && observed.iter().zip(desired).all(|(o, d)| contains(o, d))
        }
        (Value::Null, desired) => is_empty(desired),
        (Value::String(o), Value::String(d)) if quantities && o != d => {
            match (quantity(o), quantity(d)) {
                (Some(o), Some(d)) => (o - d).abs() <= f64::EPSILON * o.abs().max(d.abs()),
                _ => false,
            }
        }
        (observed, desired) => observed == desired,
    }
}

/// The amount of a Kubernetes quantity such as `500m`, `1.5Gi`, `2e3` or `1k`.
fn quantity(text: &str) -> Option<f64> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => {
            let exponent: i32 = exponent.strip_prefix(['e', 'E'])?.parse().ok()?;
            10f64.powi(exponent)
        }
    };
    Some(number * factor)
}

pub(super) fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn config_map(data: &[(&str, &str)], labels: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn missing_object_needs_apply() {
        assert!(!is_applied(&config_map(&[("a", "1")], &[]), None));
    }

    #[test]
    fn extra_observed_fields_are_not_drift() {
        let desired = config_map(&[("a", "1")], &[("app", "x")]);
        let mut observed = config_map(&[("a", "1")], &[("app", "x"), ("other", "y")]);
        observed.metadata.resource_version = Some("42".into());
        observed.metadata.uid = Some("u".into());
        assert!(is_applied(&desired, Some(&observed)));
    }

    #[test]
    fn changed_or_missing_values_are_drift() {
        let desired = config_map(&[("a", "1"), ("b", "2")], &[("app", "x")]);
        assert!(!is_applied(
            &desired,
            Some(&config_map(&[("a", "1"), ("b", "3")], &[("app", "x")]))
        ));
        assert!(!is_applied(
            &desired,
            Some(&config_map(&[("a", "1")], &[("app", "x")]))
        ));
        assert!(!is_applied(
            &desired,
            Some(&config_map(&[("a", "1"), ("b", "2")], &[]))
        ));
    }

    #[test]
    fn secret_string_data_compares_with_stored_data() {
        let desired = Secret {
            metadata: ObjectMeta {
                name: Some("s".into()),
                ..Default::default()
            },
            string_data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
            ..Default::default()
        };
        let stored = |value: &str| Secret {
            metadata: ObjectMeta {
                name: Some("s".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "k".to_string(),
                ByteString(value.as_bytes().to_vec()),
            )])),
            ..Default::default()
        };
        assert!(is_applied(&desired, Some(&stored("v"))));
        assert!(!is_applied(&desired, Some(&stored("w"))));
    }

    #[test]
    fn lists_compare_element_by_element_with_equal_length() {
        let one = serde_json::json!({"spec": {"containers": [{"name": "agent"}]}});
        let two = serde_json::json!({"spec": {"containers": [
            {"name": "agent", "imagePullPolicy": "Always"}, {"name": "injected"}
        ]}});
        let defaulted = serde_json::json!({"spec": {"containers": [
            {"name": "agent", "imagePullPolicy": "Always"}
        ]}});
        assert!(contains(&defaulted, &one));
        assert!(!contains(&two, &one));
        assert!(contains(&Value::Null, &serde_json::json!([])));
    }

    #[test]
    fn quantities_compare_by_amount() {
        let resources = |cpu: &str, memory: &str| serde_json::json!({"resources": {"limits": {"cpu": cpu, "memory": memory}}});
        assert!(contains(
            &resources("500m", "1Gi"),
            &resources("0.5", "1024Mi")
        ));
        assert!(contains(
            &resources("2k", "1Gi"),
            &resources("2e3", "1073741824")
        ));
        assert!(!contains(
            &resources("500m", "1Gi"),
            &resources("0.6", "1Gi")
        ));
        // Only quantities: other strings still compare as written.
        assert!(!contains(
            &serde_json::json!({"env": {"value": "500m"}}),
            &serde_json::json!({"env": {"value": "0.5"}})
        ));
    }

    #[test]
    fn zero_values_dropped_by_the_apiserver_are_not_drift() {
        let desired = serde_json::json!({"mount": {"readOnly": false, "subPath": "", "n": 0}});
        assert!(contains(&serde_json::json!({"mount": {}}), &desired));
        assert!(!contains(
            &serde_json::json!({"mount": {}}),
            &serde_json::json!({"mount": {"readOnly": true}})
        ));
    }
}
