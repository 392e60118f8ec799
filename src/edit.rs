//! Edit, then approve: an approver's JSON Patch (RFC 6902) on a gated call's arguments, and the
//! checks every edit passes before anything runs (docs/approvers.md, "Edit, then approve").
//!
//! The same checks run twice: at `kubectl hitl approve --patch`, on the redacted preview the
//! approver sees (so mistakes are caught before anything is written), and in the gate, on the
//! full arguments (the only place that binds; the preview is never trusted). The patch is on the
//! arguments only: the server and the tool of an edited call are those of the original.
//!
//! A redacted value (a preview string holding `[REDACTED]`, or a key that does) may only be
//! replaced or removed whole, by an operation at its path or above it: no `test` may probe it,
//! no `move`/`copy` may carry it elsewhere, no operation may reach inside it.

use std::fmt;

use json_patch::{Patch, PatchOperation};
use serde_json::{Map, Value};

use crate::gate::redact;

/// Most operations in one edit.
pub const MAX_OPERATIONS: usize = 64;

/// Why an edit is refused: the path it is about (a JSON pointer into the arguments), if any,
/// and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EditRefusal {
    /// The JSON pointer the refusal is about.
    pub path: Option<String>,
    /// Why.
    pub reason: String,
}

impl EditRefusal {
    fn at(path: &str, reason: impl Into<String>) -> Self {
        Self {
            path: Some(path.to_owned()),
            reason: reason.into(),
        }
    }

    fn whole(reason: impl Into<String>) -> Self {
        Self {
            path: None,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for EditRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) if path.is_empty() => write!(f, "at the arguments' root: {}", self.reason),
            Some(path) => write!(f, "at {path}: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

/// Parses `text`, the JSON Patch of `spec.edit.patch`: a non-empty array of at most
/// [`MAX_OPERATIONS`] RFC 6902 operations.
pub fn parse(text: &str) -> Result<Patch, EditRefusal> {
    let patch: Patch = serde_json::from_str(text).map_err(|e| {
        EditRefusal::whole(format!(
            "the patch is not a JSON Patch (RFC 6902) array of operations: {e}"
        ))
    })?;
    if patch.0.is_empty() {
        return Err(EditRefusal::whole("the patch has no operations"));
    }
    if patch.0.len() > MAX_OPERATIONS {
        return Err(EditRefusal::whole(format!(
            "the patch has {} operations; at most {MAX_OPERATIONS} are allowed",
            patch.0.len()
        )));
    }
    Ok(patch)
}

/// Refuses an operation of `patch` that touches a redacted value of `preview` (the redacted
/// preview of the original arguments) other than by replacing or removing it whole.
pub fn check_redacted(patch: &Patch, preview: &Map<String, Value>) -> Result<(), EditRefusal> {
    let redacted = redact::redacted_paths(preview);
    for op in &patch.0 {
        let path = op.path().to_string();
        for secret in &redacted {
            let at_or_above = is_at_or_above(&path, secret);
            let inside = is_at_or_above(secret, &path) && path != *secret;
            let refused = match op {
                PatchOperation::Test(_) if at_or_above || inside => {
                    Some("a test may not probe a redacted value")
                }
                PatchOperation::Replace(_) | PatchOperation::Remove(_) | PatchOperation::Add(_)
                    if inside =>
                {
                    Some("a redacted value may only be replaced whole, not edited inside")
                }
                PatchOperation::Move(m) if is_at_or_above(&m.from.to_string(), secret) => {
                    return Err(EditRefusal::at(
                        &m.from.to_string(),
                        "a redacted value may not be moved elsewhere",
                    ));
                }
                PatchOperation::Copy(c) if is_at_or_above(&c.from.to_string(), secret) => {
                    return Err(EditRefusal::at(
                        &c.from.to_string(),
                        "a redacted value may not be copied elsewhere",
                    ));
                }
                PatchOperation::Move(_) | PatchOperation::Copy(_) if inside => {
                    Some("a redacted value may only be replaced whole, not edited inside")
                }
                _ => None,
            };
            if let Some(reason) = refused {
                return Err(EditRefusal::at(&path, reason));
            }
        }
    }
    Ok(())
}

/// Whether the JSON pointer `upper` is `lower` or one of its ancestors.
fn is_at_or_above(upper: &str, lower: &str) -> bool {
    lower == upper || (lower.starts_with(upper) && lower.as_bytes().get(upper.len()) == Some(&b'/'))
}

/// `arguments` (a call's `params.arguments`; absent is `{}`) with `patch` applied: an object,
/// or the refusal naming the operation's path.
pub fn apply(arguments: &Value, patch: &Patch) -> Result<Value, EditRefusal> {
    let mut edited = match arguments {
        Value::Null => Value::Object(Map::new()),
        Value::Object(_) => arguments.clone(),
        _ => {
            return Err(EditRefusal::whole(
                "the call's arguments are not an object; only object arguments can be edited",
            ));
        }
    };
    json_patch::patch(&mut edited, &patch.0).map_err(|e| {
        EditRefusal::at(
            &e.path.to_string(),
            format!(
                "operation {} ({}) cannot be applied: {}",
                e.operation + 1,
                op_name(&patch.0[e.operation]),
                e.kind
            ),
        )
    })?;
    if !edited.is_object() {
        return Err(EditRefusal::at(
            "",
            "the edited arguments are not an object; a tool's arguments must be one",
        ));
    }
    Ok(edited)
}

/// The RFC 6902 name of `op`.
fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

/// The paths `patch` changes (every operation but `test`), in order, each once: what the model
/// is told the approver changed (paths only, never values).
pub fn changed_paths(patch: &Patch) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for op in &patch.0 {
        let mut paths = vec![op.path().to_string()];
        if let PatchOperation::Move(m) = op {
            paths.insert(0, m.from.to_string());
        }
        if matches!(op, PatchOperation::Test(_)) {
            continue;
        }
        for path in paths {
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

/// The JSON Patch turning `original` into `edited` (for `kubectl hitl approve --edit`), as JSON
/// text; `None` when they are equal.
pub fn diff(original: &Value, edited: &Value) -> Option<String> {
    let patch = json_patch::diff(original, edited);
    (!patch.0.is_empty()).then(|| serde_json::to_string(&patch).expect("a patch serializes"))
}

#[cfg(test)]
mod tests;
