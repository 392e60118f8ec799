//! Structural validation of an object against a CRD's `openAPIV3Schema`, with the field
//! paths and wording kube-apiserver uses.
//!
//! Covers what our CRDs use: defaults, types (incl. int-or-string), required, enum, string length and
//! pattern, `date-time`, numeric bounds, item and property counts, `x-kubernetes-list-type`
//! set/map uniqueness, nullability, and unknown fields (the apiserver's strict field
//! validation, which `kubectl apply` uses by default). General JSON-Schema validators cannot
//! express the last three, nor print apiserver messages, hence this walker.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use serde_json::Value;

use super::FieldError;

/// Validates `value` at `path` against `schema`, appending to `errors`.
pub fn check(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        // A null on a field that is not nullable is dropped by the apiserver (pruned), so
        // it only matters if the field is required, which the parent checks.
        return;
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            errors.push(FieldError::invalid_type(path, value, "string or integer"));
        }
        return;
    }
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let Some(expected) = schema.get("type").and_then(Value::as_str) else {
        return;
    };
    if !type_matches(expected, value) {
        errors.push(FieldError::invalid_type(path, value, expected));
        return;
    }
    match value {
        Value::String(text) => check_string(schema, text, path, errors),
        Value::Number(_) => check_number(schema, value, path, errors),
        Value::Array(items) => check_array(schema, items, path, errors),
        Value::Object(map) => check_object(schema, map, preserve, path, errors),
        Value::Bool(_) | Value::Null => {}
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(FieldError::unsupported(path, value, allowed));
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => true,
    }
}

fn check_string(schema: &Value, text: &str, path: &str, errors: &mut Vec<FieldError>) {
    let length = text.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && length > max
    {
        errors.push(FieldError::too_long(path, max));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && length < min
    {
        errors.push(FieldError::invalid(
            path,
            Some(&Value::String(text.to_owned())),
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && !matches_pattern(pattern, text)
    {
        errors.push(FieldError::invalid(
            path,
            Some(&Value::String(text.to_owned())),
            format!("{path} in body should match '{pattern}'"),
        ));
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time")
        && text.parse::<jiff::Timestamp>().is_err()
    {
        errors.push(FieldError::invalid(
            path,
            Some(&Value::String(text.to_owned())),
            format!("{path} in body must be of type date-time: {text:?}"),
        ));
    }
}

/// Whether `text` matches `pattern`; each pattern is compiled once per process. A pattern that
/// does not compile matches nothing (fail closed).
fn matches_pattern(pattern: &str, text: &str) -> bool {
    static COMPILED: LazyLock<Mutex<HashMap<String, Option<regex::Regex>>>> =
        LazyLock::new(Mutex::default);
    let mut compiled = COMPILED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    compiled
        .entry(pattern.to_owned())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .as_ref()
        .is_some_and(|re| re.is_match(text))
}

fn check_number(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(number) = value.as_f64() else {
        return;
    };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && number < min
    {
        errors.push(FieldError::invalid(
            path,
            Some(value),
            format!(
                "{} in body should be greater than or equal to {}",
                path,
                trim_number(min)
            ),
        ));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && number > max
    {
        errors.push(FieldError::invalid(
            path,
            Some(value),
            format!(
                "{} in body should be less than or equal to {}",
                path,
                trim_number(max)
            ),
        ));
    }
}

fn trim_number(number: f64) -> String {
    if number.fract() == 0.0 {
        format!("{}", number as i64)
    } else {
        number.to_string()
    }
}

fn check_array(schema: &Value, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        errors.push(FieldError::too_many(path, items.len(), max));
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        // kube-apiserver 1.36 prints the number of items as the value.
        errors.push(FieldError::invalid(
            path,
            Some(&Value::from(items.len())),
            format!("{path} in body should have at least {min} items"),
        ));
    }
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            let mut seen = HashSet::new();
            for (index, item) in items.iter().enumerate() {
                if !seen.insert(item.to_string()) {
                    errors.push(FieldError::duplicate(&format!("{path}[{index}]"), item));
                }
            }
        }
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| keys.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut seen = HashSet::new();
            for (index, item) in items.iter().enumerate() {
                let key: Vec<String> = keys
                    .iter()
                    .map(|key| item.get(key).map(Value::to_string).unwrap_or_default())
                    .collect();
                if !seen.insert(key) {
                    let shown: serde_json::Map<String, Value> = keys
                        .iter()
                        .filter_map(|key| item.get(key).map(|v| ((*key).to_owned(), v.clone())))
                        .collect();
                    errors.push(FieldError::duplicate(
                        &format!("{path}[{index}]"),
                        &Value::Object(shown),
                    ));
                }
            }
        }
        _ => {}
    }
    if let Some(item_schema) = schema.get("items") {
        for (index, item) in items.iter().enumerate() {
            check(item_schema, item, &format!("{path}[{index}]"), errors);
        }
    }
}

fn check_object(
    schema: &Value,
    map: &serde_json::Map<String, Value>,
    preserve: bool,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|v| v.is_object());
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if map.get(name).is_none_or(Value::is_null) {
                errors.push(FieldError::required(&join(path, name)));
            }
        }
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && map.len() as u64 > max
    {
        errors.push(FieldError::too_many(path, map.len(), max));
    }
    for (name, value) in map {
        if let Some(property) = properties.and_then(|props| props.get(name)) {
            check(property, value, &join(path, name), errors);
        } else if let Some(additional) = additional {
            check(additional, value, &format!("{path}[{name}]"), errors);
        } else if !preserve {
            errors.push(FieldError::unknown(&join(path, name)));
        }
    }
}

/// Fills in the schema's `default` of every absent property, as the apiserver does when it
/// decodes an object, before validation and CEL rules see it.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if let Some(default) = property.get("default")
                        && !map.contains_key(name)
                    {
                        map.insert(name.clone(), default.clone());
                    }
                }
                for (name, child) in map.iter_mut() {
                    if let Some(property) = properties.get(name) {
                        apply_defaults(property, child);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|v| v.is_object())
            {
                for child in map.values_mut() {
                    apply_defaults(additional, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// `parent.child`, or `child` at the root.
pub fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}
