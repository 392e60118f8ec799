//! Offline admission: validates objects of our kinds the way kube-apiserver would (structural
//! schema, then the CRD's CEL rules via kube-cel) and words problems the way it does.

pub mod schema;

use std::collections::BTreeMap;
use std::fmt;

use std::sync::LazyLock;

use kube::core::cel::{CompiledSchema, Validator, compile_schema};
use serde_json::Value;

use crate::api;

/// What is wrong with one field, apiserver style.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Field path such as `spec.declarative.tools[0].mcpServer`.
    pub path: String,
    /// The rest of the message, such as `Required value`.
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.detail)
        } else {
            write!(f, "{}: {}", self.path, self.detail)
        }
    }
}

/// A value as the apiserver quotes it in messages.
fn quoted(value: &Value) -> String {
    match value {
        Value::String(text) => format!("{text:?}"),
        other => other.to_string(),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl FieldError {
    fn new(path: &str, detail: String) -> Self {
        Self {
            path: path.to_owned(),
            detail,
        }
    }

    /// `Required value`.
    pub fn required(path: &str) -> Self {
        Self::new(path, "Required value".into())
    }

    /// `Invalid value: <value>: <why>`, or `Invalid value: <why>` without a value.
    pub fn invalid(path: &str, value: Option<&Value>, why: String) -> Self {
        match value {
            Some(value) => Self::new(path, format!("Invalid value: {}: {why}", quoted(value))),
            None => Self::new(path, format!("Invalid value: {why}")),
        }
    }

    /// A value of the wrong JSON type.
    pub fn invalid_type(path: &str, value: &Value, expected: &str) -> Self {
        let actual = json_type(value);
        Self::new(
            path,
            format!(
                "Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\""
            ),
        )
    }

    /// `Unsupported value: <value>: supported values: ...`.
    pub fn unsupported(path: &str, value: &Value, allowed: &[Value]) -> Self {
        let allowed: Vec<String> = allowed.iter().map(quoted).collect();
        Self::new(
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                quoted(value),
                allowed.join(", ")
            ),
        )
    }

    /// `Too long: may not be more than N bytes`.
    pub fn too_long(path: &str, max: u64) -> Self {
        Self::new(path, format!("Too long: may not be more than {max} bytes"))
    }

    /// `Too many: N: must have at most M items`.
    pub fn too_many(path: &str, actual: usize, max: u64) -> Self {
        Self::new(
            path,
            format!("Too many: {actual}: must have at most {max} items"),
        )
    }

    /// `Duplicate value: <value>`.
    pub fn duplicate(path: &str, value: &Value) -> Self {
        Self::new(path, format!("Duplicate value: {}", quoted(value)))
    }

    /// A field the schema does not declare (strict field validation).
    pub fn unknown(path: &str) -> Self {
        Self::new(path, format!("Invalid value: unknown field \"{path}\""))
    }
}

/// An object the apiserver would refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// Kind of the object.
    pub kind: String,
    /// Name of the object.
    pub name: String,
    /// Every problem found.
    pub errors: Vec<FieldError>,
}

impl Invalid {
    /// One line per problem, each in the apiserver's `The Kind "name" is invalid: ...` form.
    pub fn lines(&self) -> Vec<String> {
        self.errors
            .iter()
            .map(|error| format!("The {} {:?} is invalid: {error}", self.kind, self.name))
            .collect()
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let errors: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        match errors.as_slice() {
            [one] => write!(f, "The {} {:?} is invalid: {one}", self.kind, self.name),
            many => write!(
                f,
                "The {} {:?} is invalid: [{}]",
                self.kind,
                self.name,
                many.join(", ")
            ),
        }
    }
}

/// The `openAPIV3Schema` of each of our kinds, by kind, with its CEL rules compiled.
pub struct Schemas {
    by_kind: BTreeMap<String, (Value, CompiledSchema)>,
    validator: Validator,
}

static SHARED: LazyLock<Schemas> = LazyLock::new(Schemas::build);

impl Schemas {
    /// The schemas of this build's CRDs, compiled once per process.
    pub fn shared() -> &'static Self {
        &SHARED
    }

    fn build() -> Self {
        let by_kind = api::crds()
            .into_iter()
            .map(|crd| {
                let schema = crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .map(|s| serde_json::to_value(s).expect("schemas serialize"))
                    .expect("every CRD has a schema");
                let compiled = compile_schema(&schema);
                (crd.spec.names.kind, (schema, compiled))
            })
            .collect();
        Self {
            by_kind,
            validator: Validator::new(),
        }
    }
}

/// A DNS-1123 subdomain as the apiserver checks one (custom resource and ServiceAccount
/// names): at most 253 characters, dot-separated runs of lower-case letters, digits and '-',
/// each alphanumeric at both ends.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(dns1123_run)
}

/// A DNS-1123 label (a namespace's name): one such run of at most 63 characters.
pub fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && dns1123_run(name)
}

fn dns1123_run(label: &str) -> bool {
    !label.is_empty()
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// The object without apiVersion, kind and metadata, which the CRD schema does not cover.
fn without_envelope(object: &Value) -> Value {
    let mut body = object.clone();
    if let Some(map) = body.as_object_mut() {
        for envelope in ["apiVersion", "kind", "metadata"] {
            map.remove(envelope);
        }
    }
    body
}

/// Adds to `body` what rules at the root may read of `object`'s metadata, as in the apiserver:
/// its name and generateName.
fn with_rule_metadata(body: &mut Value, object: &Value) {
    let mut metadata = serde_json::Map::new();
    for field in ["name", "generateName"] {
        if let Some(value) = object.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.to_owned(), value.clone());
        }
    }
    if let Some(map) = body.as_object_mut() {
        map.insert("metadata".to_owned(), Value::Object(metadata));
    }
}

impl Schemas {
    /// Whether `kind` (in group kagent.dev) is one of ours.
    pub fn knows(&self, kind: &str) -> bool {
        self.by_kind.contains_key(kind)
    }

    /// Validates a create (`old` = None) or update of one of our kinds. Structural problems
    /// are reported first; CEL rules run only on a structurally valid object, as in the
    /// apiserver where a malformed object never reaches them.
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Result<(), Invalid> {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some((schema, compiled)) = self.by_kind.get(kind) else {
            return Ok(());
        };
        let mut errors = Vec::new();
        if name.is_empty() {
            errors.push(FieldError::new(
                "metadata.name",
                "Required value: name or generateName is required".into(),
            ));
        } else if !is_dns1123_subdomain(name) {
            errors.push(FieldError::invalid(
                "metadata.name",
                Some(&Value::String(name.to_owned())),
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into(),
            ));
        }
        let mut body = without_envelope(object);
        schema::apply_defaults(schema, &mut body);
        schema::check(schema, &body, "", &mut errors);
        if errors.is_empty() {
            let old_body = old.map(|old| {
                let mut body = without_envelope(old);
                schema::apply_defaults(schema, &mut body);
                with_rule_metadata(&mut body, old);
                body
            });
            with_rule_metadata(&mut body, object);
            if let Err(failures) =
                self.validator
                    .validate_compiled(compiled, &body, old_body.as_ref())
            {
                errors.extend(failures.into_vec().into_iter().map(|failure| {
                    // A rule at the root with a fieldPath (".spec.x") is reported from the
                    // root: the apiserver prints it without the leading dot. One at the root
                    // without a fieldPath (a ToolGate's name) has no path: `<nil>`.
                    let path = failure.field_path.trim_start_matches('.');
                    FieldError::new(
                        if path.is_empty() { "<nil>" } else { path },
                        format!("Invalid value: {}", failure.message),
                    )
                }));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Invalid {
                kind: kind.to_owned(),
                name: name.to_owned(),
                errors,
            })
        }
    }
}
