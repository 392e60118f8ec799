//! The annotations and definition digest of each tool of one server, and the input schema of
//! each tool whose calls may wait for an approval (and so be edited), as the tool lists the
//! gate relayed showed them (the latest list wins). Read for gated calls, and for calls whose
//! rules read `annotations`; the ungated path never looks here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::input_schema::InputSchema;
use crate::api::approval_request::ToolAnnotations;
use crate::tool_risk::{self, ToolFacts};

/// The tools of one server the gate saw listed.
#[derive(Debug)]
pub struct ToolDefinitions {
    /// Whether the server is trusted to assert its tools' annotations.
    trusted: bool,
    listed: Mutex<HashMap<String, Arc<ToolAnnotations>>>,
    /// Input schemas of the tools whose calls may be edited.
    schemas: Mutex<HashMap<String, Arc<InputSchema>>>,
}

impl ToolDefinitions {
    /// An empty record for a server, `trusted` or not.
    pub fn new(trusted: bool) -> Self {
        Self {
            trusted,
            listed: Mutex::default(),
            schemas: Mutex::default(),
        }
    }

    /// Notes the annotations and digest of a listed `tool` entry named `name`, and its input
    /// schema when its calls may be edited (`editable`: they may wait for an approval). The
    /// schema is kept as listed, not compiled ([`InputSchema`]).
    pub fn learn(&self, name: &str, tool: &Map<String, Value>, editable: bool) {
        if editable {
            let schema = InputSchema::listed(tool.get("inputSchema"));
            let mut schemas = self.schemas.lock().expect("input schemas lock");
            if !schemas.get(name).is_some_and(|s| s.same_as(&schema)) {
                schemas.insert(name.to_owned(), Arc::new(schema));
            }
        }
        let mut listed = self.listed.lock().expect("tool definitions lock");
        match tool_risk::listed(tool, self.trusted) {
            Some(annotations) => {
                let known = listed.get(name).is_some_and(|a| **a == annotations);
                if !known {
                    listed.insert(name.to_owned(), Arc::new(annotations));
                }
            }
            None => {
                listed.remove(name);
            }
        }
    }

    /// What the requests of `tool`'s calls record: `None` if no list showed it.
    pub fn annotations(&self, tool: &str) -> Option<Arc<ToolAnnotations>> {
        self.listed
            .lock()
            .expect("tool definitions lock")
            .get(tool)
            .cloned()
    }

    /// The input schema `tool`'s list showed: `None` if no list showed the tool.
    pub fn input_schema(&self, tool: &str) -> Option<Arc<InputSchema>> {
        self.schemas
            .lock()
            .expect("input schemas lock")
            .get(tool)
            .cloned()
    }

    /// What conditions see of `tool`.
    pub fn facts(&self, tool: &str) -> ToolFacts {
        ToolFacts::of(self.annotations(tool).as_deref(), self.trusted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_latest_list_wins_and_trust_is_the_servers() {
        let defs = ToolDefinitions::new(false);
        assert!(!defs.facts("t").listed);
        let first = json!({"name": "t", "annotations": {"readOnlyHint": true}});
        defs.learn("t", first.as_object().unwrap(), false);
        let a = defs.annotations("t").unwrap();
        assert_eq!((a.read_only_hint, a.trusted), (Some(true), false));
        let second = json!({"name": "t", "annotations": {"destructiveHint": true}});
        defs.learn("t", second.as_object().unwrap(), false);
        let b = defs.annotations("t").unwrap();
        assert_eq!(b.read_only_hint, None);
        assert_ne!(a.definition_sha256, b.definition_sha256);
        assert!(defs.facts("t").listed && defs.facts("t").hints.destructive);
        assert!(
            defs.input_schema("t").is_none(),
            "kept for a tool not editable"
        );
    }

    #[test]
    fn input_schemas_are_kept_for_editable_tools_and_compiled_once() {
        let defs = ToolDefinitions::new(false);
        assert!(defs.input_schema("t").is_none());
        let entry = json!({"name": "t", "inputSchema": {"type": "object"}});
        defs.learn("t", entry.as_object().unwrap(), true);
        let first = defs.input_schema("t").unwrap();
        first.validator().unwrap();
        // The same list again keeps the compiled schema; a changed one replaces it.
        defs.learn("t", entry.as_object().unwrap(), true);
        assert!(Arc::ptr_eq(&first, &defs.input_schema("t").unwrap()));
        let changed = json!({"name": "t", "inputSchema": {"type": "object", "required": ["a"]}});
        defs.learn("t", changed.as_object().unwrap(), true);
        let second = defs.input_schema("t").unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(!second.validator().unwrap().is_valid(&json!({})));
    }
}
