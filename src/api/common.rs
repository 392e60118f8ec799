//! Types shared by several kinds: value references and Go-style durations.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Where a value comes from when it is not written inline.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValueSource {
    /// Kind of object holding the value.
    #[serde(rename = "type")]
    pub source_type: ValueSourceType,
    /// Name of the Secret or ConfigMap, in the namespace of the referring object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key inside the Secret or ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// Kind of object a [`ValueSource`] reads from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ValueSourceType {
    /// A core/v1 Secret.
    Secret,
    /// A core/v1 ConfigMap.
    ConfigMap,
}

impl ValueSourceType {
    /// The Kubernetes kind name.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Secret => "Secret",
            Self::ConfigMap => "ConfigMap",
        }
    }
}

/// A named value (an HTTP header, for example), given inline or read from a Secret/ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.value) != has(self.valueFrom)").message("exactly one of value and valueFrom must be set"))]
pub struct ValueRef {
    /// Name of the value (for headersFrom: the HTTP header name).
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// The value itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8192))]
    pub value: Option<String>,
    /// Read the value from a Secret or ConfigMap key instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueSource>,
}

/// Which namespaces may reference an object across namespaces: kagent's handshake, after the
/// Gateway API's cross-namespace route attachment. Unset means `Same`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!(self.from == 'Selector' && !has(self.selector))").message("selector must be specified when from is Selector"))]
pub struct AllowedNamespaces {
    /// Where references may come from: `All`, `Same` (default) or `Selector`.
    #[serde(default)]
    pub from: FromNamespaces,
    /// The namespaces, by their labels, allowed when `from` is `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Origin of allowed references.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum FromNamespaces {
    /// Every namespace.
    All,
    /// Only the object's own namespace.
    #[default]
    Same,
    /// Namespaces whose labels match `selector`.
    Selector,
}

/// A tool definition a person accepted on its tool server: the tool's name and the digest of
/// its definition as listed (`tools/list`: name, description, input schema, annotations). A
/// gate that lists the tool with another definition, or a tool not accepted while others are,
/// makes its calls wait for an approval that shows the change, until the new definition is
/// accepted here (docs/policies.md, "Changed tool definitions"). An extension of this project;
/// kagent ignores it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedToolDefinition {
    /// The tool's name.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// SHA-256 (lowercase hex) of the RFC 8785 canonical JSON of the tool's definition, as
    /// `status.discoveredTools[].definitionSha256` and a request's
    /// `spec.toolAnnotations.definitionSha256` show it.
    #[schemars(length(min = 64, max = 64), pattern(r"^[0-9a-f]{64}$"))]
    pub definition_sha256: String,
}

/// Schema of a free-form JSON object kept as written (`x-kubernetes-preserve-unknown-fields`).
pub fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Pattern accepted for duration fields: Go `time.ParseDuration` syntax such as `30s`, `5m0s`, `1h`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// Parses a Go-style duration (`1h30m`, `5m0s`, `250ms`, `1.5h`) into seconds.
///
/// Returns `None` for anything `time.ParseDuration` would reject (except negative values,
/// which no field of ours accepts).
pub fn parse_duration_seconds(text: &str) -> Option<f64> {
    if text == "0" {
        return Some(0.0);
    }
    let mut rest = text;
    let mut total = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let (unit_seconds, unit_len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .iter()
        .find(|(unit, _)| rest.starts_with(unit))
        .map(|(unit, seconds)| (*seconds, unit.len()))?;
        total += number * unit_seconds;
        rest = &rest[unit_len..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_duration_seconds;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration_seconds("30s"), Some(30.0));
        assert_eq!(parse_duration_seconds("5m0s"), Some(300.0));
        assert_eq!(parse_duration_seconds("1h"), Some(3600.0));
        assert_eq!(parse_duration_seconds("1h30m"), Some(5400.0));
        assert_eq!(parse_duration_seconds("1.5h"), Some(5400.0));
        assert_eq!(parse_duration_seconds("250ms"), Some(0.25));
        assert_eq!(parse_duration_seconds("0"), Some(0.0));
    }

    #[test]
    fn rejects_malformed_durations() {
        for bad in ["", "5", "h", "5 m", "-1s", "1d", "1..5s"] {
            assert_eq!(parse_duration_seconds(bad), None, "{bad}");
        }
    }
}
