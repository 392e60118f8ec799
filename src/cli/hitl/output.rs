//! `-o yaml|json`: machine-readable output of one request or a list.

use serde::Serialize;

use super::error::CommandError;

/// A machine-readable output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// YAML, like `kubectl get -o yaml`.
    Yaml,
    /// JSON, like `kubectl get -o json`.
    Json,
}

/// `value` in `format`, ending in a newline.
pub fn encode<T: Serialize>(value: &T, format: Format) -> Result<String, CommandError> {
    Ok(match format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(value)?),
        Format::Yaml => {
            serde_saphyr::to_string(value).map_err(|e| CommandError::Output(e.to_string()))?
        }
    })
}

/// A `v1 List` holding `items`, the shape `kubectl get -o yaml` prints for several objects.
pub fn list<T: Serialize>(items: &[T]) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items})
}
