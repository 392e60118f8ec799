//! A tool's risk as its MCP server describes it: the `annotations` of a `tools/list` entry
//! (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`, `title`), the MCP
//! defaults for hints the server leaves out, whether the server is trusted to assert them, and
//! a digest of the tool's whole definition.
//!
//! MCP says clients must treat annotations as untrusted unless the server is trusted. So an
//! untrusted server's hints are shown to approvers and may make a rule ask for approval or
//! deny, but a rule that allows a call sees only the defaults (docs/policies.md, "Tool
//! annotations").

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::api::approval_request::ToolAnnotations;
use crate::gate::hash::canonical_json;

/// Longest `title` kept on a request, in characters.
pub const MAX_TITLE_CHARS: usize = 256;

/// The four hints, each as asserted or, when left out (or not a bool), the MCP default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hints {
    /// `readOnlyHint` (default false).
    pub read_only: bool,
    /// `destructiveHint` (default true).
    pub destructive: bool,
    /// `idempotentHint` (default false).
    pub idempotent: bool,
    /// `openWorldHint` (default true).
    pub open_world: bool,
}

impl Hints {
    /// What MCP says to assume of a tool that asserts nothing.
    pub const DEFAULTS: Hints = Hints {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };

    /// The hints of `annotations` as a request records them, the defaults filled in.
    pub fn of(annotations: &ToolAnnotations) -> Self {
        let d = Self::DEFAULTS;
        Self {
            read_only: annotations.read_only_hint.unwrap_or(d.read_only),
            destructive: annotations.destructive_hint.unwrap_or(d.destructive),
            idempotent: annotations.idempotent_hint.unwrap_or(d.idempotent),
            open_world: annotations.open_world_hint.unwrap_or(d.open_world),
        }
    }
}

/// What conditions see of the called tool's annotations (the CEL variable `annotations`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolFacts {
    /// The hints, defaults filled in.
    pub hints: Hints,
    /// Whether the server is trusted to assert them.
    pub trusted: bool,
    /// Whether the gate saw the tool in a list (else the hints are the defaults).
    pub listed: bool,
}

impl ToolFacts {
    /// A tool the gate saw no list entry for: the defaults.
    pub fn unlisted(trusted: bool) -> Self {
        Self {
            hints: Hints::DEFAULTS,
            trusted,
            listed: false,
        }
    }

    /// The facts of a tool whose listed annotations are `annotations` (`None`: not listed).
    pub fn of(annotations: Option<&ToolAnnotations>, trusted: bool) -> Self {
        match annotations {
            None => Self::unlisted(trusted),
            Some(a) => Self {
                hints: Hints::of(a),
                trusted,
                listed: true,
            },
        }
    }

    /// What a rule that would let the call through (an Allow rule, a grant) may see: the
    /// hints as asserted only when the server is trusted, else the defaults.
    pub fn for_allowing(self) -> Self {
        if self.trusted {
            self
        } else {
            Self {
                hints: Hints::DEFAULTS,
                ..self
            }
        }
    }
}

/// The annotations of one `tools/list` entry as a request records them, with the digest of
/// its definition; `None` when the definition cannot be canonicalized (never for JSON the
/// gate parsed).
pub fn listed(tool: &Map<String, Value>, trusted: bool) -> Option<ToolAnnotations> {
    let annotations = tool.get("annotations").and_then(Value::as_object);
    let hint = |name: &str| {
        annotations
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
    };
    let title = annotations
        .and_then(|a| a.get("title"))
        .or_else(|| tool.get("title"))
        .and_then(Value::as_str)
        .map(|t| t.chars().take(MAX_TITLE_CHARS).collect());
    Some(ToolAnnotations {
        title,
        read_only_hint: hint("readOnlyHint"),
        destructive_hint: hint("destructiveHint"),
        idempotent_hint: hint("idempotentHint"),
        open_world_hint: hint("openWorldHint"),
        trusted,
        definition_sha256: definition_sha256(tool)?,
        definition_change: None,
    })
}

/// SHA-256 (lowercase hex) of the RFC 8785 canonical JSON of the tool's `name`,
/// `description`, `inputSchema` and `annotations` (those it has): any change to what a model
/// or a rule reads of the tool changes it.
pub fn definition_sha256(tool: &Map<String, Value>) -> Option<String> {
    let definition: Map<String, Value> = ["name", "description", "inputSchema", "annotations"]
        .into_iter()
        .filter_map(|key| tool.get(key).map(|v| (key.to_owned(), v.clone())))
        .collect();
    let canonical = canonical_json(&Value::Object(definition)).ok()?;
    Some(hex::encode(Sha256::digest(canonical.as_bytes())))
}

/// The parts of a tool's definition a change is reported by (the name is the tool's key).
pub const DEFINITION_PARTS: [&str; 3] = ["description", "inputSchema", "annotations"];

/// The SHA-256 of each part of a listed definition ([`DEFINITION_PARTS`]; `None`: absent), to
/// say which parts a later definition changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartDigests([Option<[u8; 32]>; 3]);

impl PartDigests {
    /// The digests of `tool`'s parts.
    pub fn of(tool: &Map<String, Value>) -> Self {
        Self(DEFINITION_PARTS.map(|part| {
            let value = tool.get(part)?;
            let canonical = canonical_json(value).ok()?;
            Some(Sha256::digest(canonical.as_bytes()).into())
        }))
    }

    /// The parts whose digests differ from `other`'s, in [`DEFINITION_PARTS`] order.
    pub fn differing(&self, other: &Self) -> Vec<String> {
        DEFINITION_PARTS
            .iter()
            .zip(self.0.iter().zip(&other.0))
            .filter(|(_, (a, b))| a != b)
            .map(|(part, _)| (*part).to_owned())
            .collect()
    }
}

/// Short words for approvers: what the hints say, and `(untrusted)` after a hint that lowers
/// the risk an untrusted server asserted. Empty when the request has no annotations.
pub fn badges(annotations: Option<&ToolAnnotations>) -> Vec<String> {
    let Some(a) = annotations else {
        return Vec::new();
    };
    let hints = Hints::of(a);
    let vouched = |lowers: bool, word: &str| {
        if lowers && !a.trusted {
            format!("{word} (untrusted)")
        } else {
            word.to_owned()
        }
    };
    let mut out = Vec::new();
    if hints.read_only {
        out.push(vouched(true, "read-only"));
    } else if hints.destructive {
        out.push("destructive".to_owned());
    } else {
        out.push(vouched(true, "non-destructive"));
    }
    if hints.idempotent {
        out.push(vouched(true, "idempotent"));
    }
    if hints.open_world {
        out.push("open-world".to_owned());
    }
    if a.definition_change.is_some() {
        out.push("definition changed".to_owned());
    }
    out
}

/// One line for approvers: the badges, who asserted them, the title and the definition digest.
pub fn summary(annotations: &ToolAnnotations) -> String {
    let who = if annotations.trusted {
        "asserted by a trusted server"
    } else {
        "asserted by an untrusted server"
    };
    let title = annotations
        .title
        .as_deref()
        .map(|t| format!("; title {t:?}"))
        .unwrap_or_default();
    let change = annotations
        .definition_change
        .as_ref()
        .map(|change| {
            let what = match change.changed.as_slice() {
                [] => "the definition".to_owned(),
                parts => parts.join(", "),
            };
            match &change.accepted_sha256 {
                Some(accepted) => format!("; {what} changed since accepted as sha256 {accepted}"),
                None => "; never accepted, while other tools of the server were".to_owned(),
            }
        })
        .unwrap_or_default();
    format!(
        "{} ({who}{title}; definition sha256 {}{change})",
        badges(Some(annotations)).join(", "),
        annotations.definition_sha256
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(value: Value) -> Map<String, Value> {
        value.as_object().expect("an object").clone()
    }

    #[test]
    fn defaults_fill_what_the_server_leaves_out() {
        let a = listed(&tool(json!({"name": "t"})), false).unwrap();
        assert_eq!(Hints::of(&a), Hints::DEFAULTS);
        assert_eq!(
            Hints::DEFAULTS,
            Hints {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: true
            }
        );
        let a = listed(
            &tool(
                json!({"name": "t", "annotations": {"readOnlyHint": true, "openWorldHint": "no"}}),
            ),
            false,
        )
        .unwrap();
        assert_eq!(a.read_only_hint, Some(true));
        assert_eq!(
            a.open_world_hint, None,
            "a hint that is not a bool is not asserted"
        );
        assert!(Hints::of(&a).read_only && Hints::of(&a).destructive);
    }

    #[test]
    fn the_digest_covers_the_definition_and_nothing_else() {
        let base = json!({"name": "t", "description": "d", "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true}});
        let digest = definition_sha256(&tool(base.clone())).unwrap();
        assert_eq!(digest.len(), 64);
        // Key order and fields outside the definition do not count.
        let reordered = json!({"annotations": {"readOnlyHint": true}, "inputSchema": {"type": "object"},
            "description": "d", "name": "t", "_meta": {"x": 1}, "icons": []});
        assert_eq!(definition_sha256(&tool(reordered)).unwrap(), digest);
        for (key, changed) in [
            ("description", json!("d, and also delete everything")),
            (
                "inputSchema",
                json!({"type": "object", "properties": {"p": {}}}),
            ),
            ("annotations", json!({"readOnlyHint": false})),
            ("name", json!("u")),
        ] {
            let mut other = base.clone();
            other[key] = changed;
            assert_ne!(definition_sha256(&tool(other)).unwrap(), digest, "{key}");
        }
    }

    #[test]
    fn untrusted_hints_never_reach_a_rule_that_allows() {
        let a = listed(
            &tool(json!({"name": "t", "annotations": {"readOnlyHint": true, "destructiveHint": false}})),
            false,
        )
        .unwrap();
        let facts = ToolFacts::of(Some(&a), false);
        assert!(facts.hints.read_only, "restricting rules see the assertion");
        assert_eq!(facts.for_allowing().hints, Hints::DEFAULTS);
        let trusted = ToolFacts::of(Some(&a), true);
        assert_eq!(trusted.for_allowing(), trusted);
        assert!(!ToolFacts::of(None, true).listed);
    }

    #[test]
    fn badges_say_who_vouches_for_a_lower_risk() {
        let of = |hints: Value, trusted| {
            badges(Some(
                &listed(&tool(json!({"name": "t", "annotations": hints})), trusted).unwrap(),
            ))
        };
        assert_eq!(of(json!({}), false), ["destructive", "open-world"]);
        assert_eq!(
            of(json!({"readOnlyHint": true, "openWorldHint": false}), false),
            ["read-only (untrusted)"]
        );
        assert_eq!(
            of(json!({"readOnlyHint": true, "openWorldHint": false}), true),
            ["read-only"]
        );
        assert_eq!(
            of(
                json!({"destructiveHint": false, "idempotentHint": true, "openWorldHint": false}),
                true
            ),
            ["non-destructive", "idempotent"]
        );
        assert!(badges(None).is_empty());
    }
}
