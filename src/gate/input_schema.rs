//! A tool's `inputSchema` as its `tools/list` entry showed it, kept to check an approver's
//! edited arguments (docs/approvers.md, "Edit, then approve"). Kept as its JSON text, bounded
//! by [`MAX_INPUT_SCHEMA_BYTES`], and compiled only when an edit of the tool's calls must be
//! judged, once per definition: listing tools and calls that are not edited never compile it.
//! The schema is the server's: it is compiled offline, so no `$ref` is fetched from the network
//! or read from a file.

use std::sync::{Arc, OnceLock};

use jsonschema::Validator;
use serde_json::Value;

use crate::edit::bounded;

/// Largest input schema (its JSON text, in bytes) the gate keeps; edits of a tool with a
/// larger one are refused.
pub const MAX_INPUT_SCHEMA_BYTES: usize = 256 * 1024;

/// One tool's listed input schema.
#[derive(Debug)]
pub struct InputSchema {
    /// The schema's JSON text, or why it is not kept.
    listed: Result<Box<str>, String>,
    /// The compiled validator, or why the schema does not compile; made on first use.
    compiled: OnceLock<Result<Arc<Validator>, String>>,
}

impl InputSchema {
    /// The `inputSchema` of a `tools/list` entry (`None` when the entry has none).
    pub fn listed(schema: Option<&Value>) -> Self {
        let listed = match schema {
            None => Err("the tool's list entry has no inputSchema".to_owned()),
            Some(schema) => {
                let text = serde_json::to_string(schema).expect("a JSON value serializes");
                if text.len() > MAX_INPUT_SCHEMA_BYTES {
                    Err(format!(
                        "the tool's listed inputSchema is {} bytes; the gate keeps at most {MAX_INPUT_SCHEMA_BYTES}",
                        text.len()
                    ))
                } else {
                    Ok(text.into_boxed_str())
                }
            }
        };
        Self {
            listed,
            compiled: OnceLock::new(),
        }
    }

    /// Whether `other` is the same listed schema (so a compiled validator can be kept).
    pub fn same_as(&self, other: &Self) -> bool {
        self.listed == other.listed
    }

    /// The compiled validator, or why the schema cannot check arguments: too large, absent, or
    /// not a schema the validator compiles without fetching anything.
    pub fn validator(&self) -> Result<Arc<Validator>, String> {
        self.compiled
            .get_or_init(|| {
                let text = self.listed.as_ref().map_err(Clone::clone)?;
                let schema: Value = serde_json::from_str(text).expect("the gate's own JSON parses");
                jsonschema::options()
                    .offline()
                    .build(&schema)
                    .map(Arc::new)
                    .map_err(|e| {
                        format!(
                            "the tool's listed inputSchema does not compile: {}",
                            bounded(&e.to_string())
                        )
                    })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn compiles_lazily_and_checks_arguments() {
        let schema = InputSchema::listed(Some(&json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        })));
        assert!(schema.compiled.get().is_none(), "compiled when listed");
        let validator = schema.validator().unwrap();
        assert!(validator.is_valid(&json!({"n": 1})));
        assert!(!validator.is_valid(&json!({"n": "x"})));
        assert!(schema.compiled.get().is_some());
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        assert_eq!(
            InputSchema::listed(None).validator().unwrap_err(),
            "the tool's list entry has no inputSchema"
        );
        let big = json!({"type": "object", "description": "x".repeat(MAX_INPUT_SCHEMA_BYTES)});
        let why = InputSchema::listed(Some(&big)).validator().unwrap_err();
        assert!(
            why.starts_with("the tool's listed inputSchema is 262")
                && why.ends_with("bytes; the gate keeps at most 262144"),
            "{why}"
        );
        let bad = InputSchema::listed(Some(&json!({"type": "integr"})));
        let why = bad.validator().unwrap_err();
        assert!(
            why.starts_with("the tool's listed inputSchema does not compile: "),
            "{why}"
        );
    }

    #[test]
    fn fetches_no_remote_or_file_reference() {
        for reference in ["https://example.com/s.json", "file:///etc/passwd"] {
            let schema = InputSchema::listed(Some(&json!({"$ref": reference})));
            let why = schema.validator().unwrap_err();
            assert!(why.contains("does not compile"), "{reference}: {why}");
        }
        // A reference inside the schema resolves.
        let local = InputSchema::listed(Some(&json!({
            "$defs": {"n": {"type": "integer"}},
            "properties": {"n": {"$ref": "#/$defs/n"}}
        })));
        assert!(!local.validator().unwrap().is_valid(&json!({"n": "x"})));
    }
}
