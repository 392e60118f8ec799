//! Edit, then approve: an approver's JSON Patch (RFC 6902) on a gated call's arguments, and the
//! checks every edit passes before anything runs (docs/approvers.md, "Edit, then approve").
//!
//! The same checks run twice: at `kubectl hitl approve --patch`, on the redacted preview the
//! approver sees (so mistakes are caught before anything is written), and in the gate, on the
//! full arguments (the only place that binds; the preview is never trusted). The patch is on the
//! arguments only: the server and the tool of an edited call are those of the original. Two
//! checks run in the gate only, which alone knows what they need: the approval rule's `edits`
//! ([`check_rule`]) and the tool's listed input schema ([`check_schema`]).
//!
//! A redacted value (a preview string holding `[REDACTED]`, or a key that does) may only be
//! replaced or removed whole, by an operation at its path or above it: no `test` may probe it,
//! no `move`/`copy` may carry it elsewhere, no operation may reach inside it.

use std::fmt;

use json_patch::{Patch, PatchOperation};
use jsonschema::Validator;
use serde_json::{Map, Value};

use crate::api::agent::RuleEdits;
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

/// Refuses an edit of a call that the approval rule `rule` made wait when the rule's `edits`
/// forbid it: all edits (`allowed: false`), or an operation whose `path` (or, for `move` and
/// `copy`, `from`) is neither one of `edits.paths` nor below one.
pub fn check_rule(patch: &Patch, rule: &str, edits: &RuleEdits) -> Result<(), EditRefusal> {
    if !edits.allows() {
        return Err(EditRefusal::whole(format!("rule '{rule}' forbids edits")));
    }
    let Some(allowed) = &edits.paths else {
        return Ok(());
    };
    for op in &patch.0 {
        let from = match op {
            PatchOperation::Move(m) => Some(m.from.to_string()),
            PatchOperation::Copy(c) => Some(c.from.to_string()),
            _ => None,
        };
        for path in from.into_iter().chain([op.path().to_string()]) {
            if !allowed.iter().any(|prefix| is_at_or_above(prefix, &path)) {
                return Err(EditRefusal::at(
                    &path,
                    format!(
                        "rule '{rule}' lets approvers edit only {}",
                        allowed.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses `edited` (the edited arguments) when `schema` (the tool's listed input schema)
/// does not hold for them, naming the first failing instance path and the validator's reason.
/// The reason quotes the failing value and its keys only if no redacted value of `preview` (the
/// original arguments' redacted preview) is at, above or below that path; otherwise it names
/// only the schema keyword that failed.
pub fn check_schema(
    schema: &Validator,
    edited: &Value,
    preview: &Map<String, Value>,
) -> Result<(), EditRefusal> {
    let Some(error) = schema.iter_errors(edited).next() else {
        return Ok(());
    };
    let path = error.instance_path().as_str().to_owned();
    let near_secret = redact::redacted_paths(preview)
        .iter()
        .any(|secret| is_at_or_above(secret, &path) || is_at_or_above(&path, secret));
    let reason = if near_secret {
        format!(
            "the value fails the schema's {:?} keyword",
            error.kind().keyword()
        )
    } else {
        error.to_string()
    };
    Err(EditRefusal::at(
        &path,
        format!(
            "the edited arguments do not match the tool's input schema: {}",
            bounded(&reason)
        ),
    ))
}

/// Longest validator reason quoted in a refusal, in characters.
const MAX_REASON_CHARS: usize = 512;

/// `text`, cut to [`MAX_REASON_CHARS`] characters.
pub(crate) fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_REASON_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Checks that `pointer` is a JSON pointer (RFC 6901) into the arguments: it starts with `/`
/// and has `~` only as `~0` or `~1`.
pub fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') {
        return Err("a JSON pointer into the arguments starts with /".into());
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(
                "not a JSON pointer: ~ must be followed by 0 or 1 (~0 is ~, ~1 is /)".into(),
            );
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

/// One value an edit changes, as the approver reviews it before approving.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    /// The JSON pointer of the value.
    pub path: String,
    /// The value before the edit, compact JSON; `None` when the edit adds it.
    pub before: Option<String>,
    /// The value after the edit, compact JSON; `None` when the edit removes it.
    pub after: Option<String>,
}

/// The values `patch` changes in `original`, path by path in the order of
/// [`changed_paths`], each as it was and as `edited` (`original` with `patch` applied) has it.
pub fn changes(original: &Value, edited: &Value, patch: &Patch) -> Vec<Change> {
    let compact = |v: &Value| serde_json::to_string(v).expect("a JSON value serializes");
    changed_paths(patch)
        .into_iter()
        .map(|path| Change {
            before: original.pointer(&path).map(compact),
            after: edited.pointer(&path).map(compact),
            path,
        })
        .collect()
}

/// The JSON Patch turning `original` into `edited` (for `kubectl hitl approve --edit`), as JSON
/// text; `None` when they are equal.
pub fn diff(original: &Value, edited: &Value) -> Option<String> {
    let patch = json_patch::diff(original, edited);
    (!patch.0.is_empty()).then(|| serde_json::to_string(&patch).expect("a patch serializes"))
}

#[cfg(test)]
mod tests;
