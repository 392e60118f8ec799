//! The JSON-RPC the gate understands: reading every client message (and refusing any that
//! another parser could read differently), recognising `tools/list` and `tools/call` in it,
//! filtering `tools/list` results, and writing its own tool results. A client message goes
//! upstream only as the gate wrote it out again after reading it, never as the client's bytes.

use std::collections::HashMap;

use bytes::Bytes;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

mod reader;

pub use reader::{Message, read};

use super::memory::{NoTree, Tree};

/// A `tools/call` request.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// JSON-RPC id.
    pub id: Value,
    /// Tool name.
    pub name: String,
    /// Full arguments (`{}` when absent or null).
    pub arguments: Arguments,
    /// `params._meta.progressToken`, when the client asked for progress.
    pub progress_token: Option<Value>,
    /// `params.requestState`: the server's state, echoed by a client retrying a call whose
    /// answer was `input_required` (MCP 2026-07-28).
    /// (Boxed: few calls carry one.)
    pub request_state: Option<Box<Value>>,
    /// Whether `params` has `inputResponses`: the client's answers in such a retry.
    pub input_responses: bool,
}

/// The arguments of a `tools/call` as the gate wrote them into the message it forwards. They
/// are checked with the rest of the message as it is read (no key repeated, none equal to
/// another ignoring case), and become a tree ([`Tree`]) only when something decides on them —
/// a rule's condition, the hash and preview of a call held for approval — and only for as long
/// as it decides, within the gate's memory budget ([`super::memory`]). An ungated call of a
/// tool without rules forwards them without building a tree.
#[derive(Clone, Debug, PartialEq)]
pub struct Arguments {
    /// The JSON the gate wrote, a slice of the message it forwards.
    written: Bytes,
}

impl Arguments {
    /// Arguments as the gate wrote them (`written`: JSON of its own writing).
    fn written(written: Bytes) -> Self {
        Self { written }
    }

    /// Absent or null arguments: `{}`.
    fn empty() -> Self {
        Self::written(Bytes::from_static(b"{}"))
    }

    /// The arguments as the gate wrote them (and forwards them).
    pub fn json(&self) -> &[u8] {
        &self.written
    }

    /// The arguments as a tree, holding the worst size of that tree from the gate's memory
    /// budget while it lives; refused when they hold more than
    /// [`super::memory::MAX_TREE_VALUES`] values, or when the budget stays spent.
    pub async fn tree(&self) -> Result<Tree, NoTree> {
        Tree::of(&self.written).await
    }

    /// The argument at `path` (a chain of object keys), if present and not null, found
    /// without building a tree of the rest: a string, number or boolean as it is; an object or
    /// an array as an empty one (what a header mirroring it can never match).
    pub fn at(&self, path: &[String]) -> Option<Value> {
        let mut at: &[u8] = &self.written;
        for key in path {
            let raw = field(at, key).expect("the gate's own JSON parses")?;
            at = raw_bytes(at, raw);
        }
        match at.first() {
            Some(b'{') => Some(Value::Object(Map::new())),
            Some(b'[') => Some(Value::Array(Vec::new())),
            _ => Some(serde_json::from_slice(at).expect("the gate's own JSON parses"))
                .filter(|v: &Value| !v.is_null()),
        }
    }
}

/// The slice of `json` that `raw`, borrowed from it, is.
fn raw_bytes<'a>(json: &'a [u8], raw: &serde_json::value::RawValue) -> &'a [u8] {
    let start = raw.get().as_ptr() as usize - json.as_ptr() as usize;
    &json[start..start + raw.get().len()]
}

/// The value of `key` in `json` as written there, found without building a tree: `None` when
/// `json` is not an object or has no such key (the last one, if it repeats it); an error when
/// it is not JSON.
pub fn field<'a>(
    json: &'a [u8],
    key: &str,
) -> Result<Option<&'a serde_json::value::RawValue>, serde_json::Error> {
    let mut parser = serde_json::Deserializer::from_slice(json);
    let found = Lookup(key).deserialize(&mut parser)?;
    parser.end()?;
    Ok(found)
}

/// Finds the value of one key of an object without building the object: `None` when the JSON
/// is not an object or has no such key.
struct Lookup<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for Lookup<'_> {
    type Value = Option<&'de serde_json::value::RawValue>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Lookup<'_> {
    type Value = Option<&'de serde_json::value::RawValue>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.0 {
                found = Some(map.next_value::<&'de serde_json::value::RawValue>()?);
            } else {
                map.next_value::<de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

impl From<Value> for Arguments {
    fn from(value: Value) -> Self {
        Self::written(
            serde_json::to_vec(&value)
                .expect("a Value is written as JSON")
                .into(),
        )
    }
}

impl ToolCall {
    /// Whether this call continues an earlier round of the same call that needed input: it
    /// carries `requestState` or `inputResponses`.
    pub fn continues(&self) -> bool {
        self.request_state.is_some() || self.input_responses
    }
}

/// What the MCP 2026-07-28 routing headers of a client message may mirror of its body
/// ([`super::messages::check_routing_headers`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Route {
    /// The method, when the body is one message whose `method` is a string.
    pub method: Option<String>,
    /// The param `Mcp-Name` mirrors for that method, when present: `name` of `tools/call` and
    /// `prompts/get`, `uri` of `resources/read`.
    pub name: Option<Value>,
    /// The protocol version of the request envelope (`params._meta`'s
    /// `io.modelcontextprotocol/protocolVersion`, MCP 2026-07-28), when present.
    pub protocol_version: Option<Value>,
    /// Whether the body is a batch.
    pub batch: bool,
}

/// The key of `params._meta` that carries the protocol version of a 2026-07-28 request.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// What a client message is, as far as the gate cares.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// `tools/call`: checked, possibly held for approval.
    ToolsCall(ToolCall),
    /// `tools/list` with this id: its result is filtered.
    ToolsList {
        /// JSON-RPC id.
        id: Value,
    },
    /// `initialize`: relayed unchanged, and the session id its answer assigns is noted
    /// ([`super::sessions`]).
    Initialize,
    /// Anything else (responses, notifications, other requests): relayed unchanged.
    Other,
}

/// Why a client message is refused before reaching the upstream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// Not a JSON-RPC message the gate can read unambiguously (so it is not forwarded).
    #[error("parse error: {0}")]
    Parse(String),
    /// A batch holding `tools/list` or `tools/call`.
    #[error(
        "JSON-RPC batches containing tools/list or tools/call are not supported by the approval gate"
    )]
    Batch,
    /// A `tools/call` without a string tool name or with a non-object params.
    #[error("invalid tools/call params: {0}")]
    InvalidParams(String),
    /// Not a JSON-RPC message (not an object, a method that is not a string), or one with a
    /// protocol field written in another case.
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl Rejected {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            Self::Parse(_) => -32700,
            Self::Batch | Self::Invalid(_) => -32600,
            Self::InvalidParams(_) => -32602,
        }
    }
}

/// A JSON value in which no object repeats a key, nor, with `fold`, holds two keys that are
/// equal under Unicode simple case folding. Parsers disagree on which of two equal keys counts
/// (`{"name":"delete","name":"echo"}` is `delete` to some, `echo` to others), and Go's
/// `encoding/json` (mcp-go, and so kagent's own tool servers) matches keys to fields ignoring
/// case, folding `ſ` to `s` and the Kelvin sign `K` to `k`, the last key winning: to it
/// `{"name":"echo","Name":"delete"}` calls `delete`. So the messages the gate decides on must
/// not hold any such pair: the gate would check one call and the upstream run another.
#[derive(Clone, Copy)]
struct UniqueKeys {
    /// Also refuse keys that are equal ignoring case (client messages).
    fold: bool,
}

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        // The keys that case folding changes, by their folded form. A key that folding leaves
        // as it is is its own folded form, so `object` already holds it under that form.
        let mut folded: HashMap<String, String> = HashMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            if self.fold {
                let changed = case_folded(&key);
                let form = changed.as_deref().unwrap_or(&key);
                // An earlier key that folds to the same form: one that folding changed, or,
                // when folding changes this key, one that is that form itself.
                let other = match folded.get(form) {
                    Some(other) => Some(other.as_str()),
                    None if changed.is_some() && object.contains_key(form) => Some(form),
                    None => None,
                };
                if let Some(other) = other {
                    return Err(de::Error::custom(format_args!(
                        "duplicate key {key:?}: equal to {other:?} ignoring case"
                    )));
                }
                if let Some(form) = changed {
                    folded.insert(form, key.clone());
                }
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// `key` under Unicode simple case folding (CaseFolding.txt statuses C and S), or `None` when
/// folding leaves it as it is. Two keys are equal ignoring case when their folded forms are
/// equal; every pair of keys that Go's `strings.EqualFold` and `encoding/json` take as equal
/// (`K`, `k` and the Kelvin sign; `S`, `s` and `ſ`; `ß` and `ẞ`) is, and simple folding maps
/// no character to more than one, as Go does not (`ß` is not `ss`).
fn case_folded(key: &str) -> Option<String> {
    // Lowercase ASCII folds to itself: the usual key costs one pass over its bytes.
    if key.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase()) {
        return None;
    }
    let form: String = key.chars().map(fold_char).collect();
    (form != key).then_some(form)
}

fn fold_char(c: char) -> char {
    unicode_case_mapping::case_folded(c)
        .and_then(|f| char::from_u32(f.get()))
        .unwrap_or(c)
}

/// Parses a message the gate decides on; a repeated key anywhere refuses it, and so, with
/// `fold`, do two keys of one object that are equal ignoring case.
fn parse_unique(body: &[u8], fold: bool) -> Result<Value, Rejected> {
    let mut json = serde_json::Deserializer::from_slice(body);
    UniqueKeys { fold }
        .deserialize(&mut json)
        // As `serde_json::from_slice`: nothing but whitespace may follow the value.
        .and_then(|value| json.end().map(|()| value))
        .map_err(|e| Rejected::Parse(e.to_string()))
}

/// The fields of a JSON-RPC message, and of the params of the requests the gate decides on,
/// that a case-insensitive parser would also find under another case (`"METHOD"`, `"Name"`).
const MESSAGE_FIELDS: &[&str] = &["jsonrpc", "id", "method", "params", "result", "error"];
const PARAMS_FIELDS: &[&str] = &["name", "arguments", "_meta"];

/// Refuses an object holding a key that is one of `fields` ignoring case but not exactly: the
/// gate would not see that field, and Go's `encoding/json` would.
fn exact_fields(object: &Map<String, Value>, fields: &[&str]) -> Result<(), String> {
    for key in object.keys() {
        if let Some(field) = case_folded(key).and_then(|f| fields.iter().find(|n| **n == f)) {
            return Err(format!("key {key:?} is {field:?} in another case"));
        }
    }
    Ok(())
}

/// What the gate makes of a server message on a stream that may carry tool lists.
#[derive(Debug, PartialEq)]
pub enum Filtered {
    /// No tool list in it: relayed as it came.
    Unchanged,
    /// Its tool lists filtered, written out by the gate.
    Rewritten(Vec<u8>),
    /// A message another parser could read differently from the gate (why): never relayed.
    Unreadable(String),
}

/// The fields of a `tools/list` result, and of a tool, that must be written exactly.
const RESULT_FIELDS: &[&str] = &["tools"];
const TOOL_FIELDS: &[&str] = &["name"];

/// Filters every `tools/list`-shaped result in a server message (a `result` whose `tools` is
/// an array; in a batch, each one), keeping only the entries that are objects named by a
/// string `allowed` accepts. Whatever the id: the gate does not match the answer to its
/// request (`"id":1.0` answers `"id":1` for many clients), so a tool list it cannot match is
/// filtered all the same. A message that is not JSON, repeats a key, or writes `result`,
/// `tools` or a tool's `name` in another case is [`Filtered::Unreadable`]: the gate might
/// see no tool list where the client sees one. `learn` is given the name and entry of every
/// tool kept (so the gate knows which `Mcp-Param-*` headers it declares, and its annotations).
pub fn filter_tools(
    message: &[u8],
    allowed: impl Fn(&str) -> bool,
    mut learn: impl FnMut(&str, &serde_json::Map<String, Value>),
) -> Filtered {
    let mut msg = match parse_unique(message, false) {
        Ok(msg) => msg,
        Err(e) => return Filtered::Unreadable(e.to_string()),
    };
    let mut rewritten = false;
    let messages = match &mut msg {
        Value::Array(batch) => batch.iter_mut().collect(),
        one => vec![one],
    };
    for one in messages {
        match filter_one(one, &allowed, &mut learn) {
            Ok(filtered) => rewritten |= filtered,
            Err(why) => return Filtered::Unreadable(why),
        }
    }
    if rewritten {
        Filtered::Rewritten(serde_json::to_vec(&msg).expect("JSON values serialize"))
    } else {
        Filtered::Unchanged
    }
}

/// Filters the tool list of one message, if it is tools/list-shaped (then `true`).
fn filter_one(
    msg: &mut Value,
    allowed: &impl Fn(&str) -> bool,
    learn: &mut impl FnMut(&str, &serde_json::Map<String, Value>),
) -> Result<bool, String> {
    let Some(object) = msg.as_object_mut() else {
        return Ok(false);
    };
    exact_fields(object, MESSAGE_FIELDS)?;
    let Some(result) = object.get_mut("result").and_then(Value::as_object_mut) else {
        return Ok(false);
    };
    exact_fields(result, RESULT_FIELDS)?;
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return Ok(false);
    };
    for tool in tools.iter().filter_map(Value::as_object) {
        exact_fields(tool, TOOL_FIELDS)?;
    }
    tools.retain(|t| t.get("name").and_then(Value::as_str).is_some_and(allowed));
    for tool in tools.iter().filter_map(Value::as_object) {
        if let Some(name) = tool.get("name").and_then(Value::as_str) {
            learn(name, tool);
        }
    }
    Ok(true)
}

/// The first MCP protocol revision whose results carry `resultType`.
const RESULT_TYPE_SINCE: &str = "2026-07-28";

/// A `tools/call` result with `isError: true` and `text`, for request `id`. `protocol` is the
/// client's `MCP-Protocol-Version`; revisions from 2026-07-28 on get `resultType`.
pub fn tool_error(id: &Value, text: &str, protocol: Option<&str>) -> Vec<u8> {
    let mut result = json!({"content": [{"type": "text", "text": text}], "isError": true});
    if protocol.is_some_and(|p| p >= RESULT_TYPE_SINCE) {
        result["resultType"] = json!("complete");
    }
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
        .expect("JSON values serialize")
}

/// A JSON-RPC error response.
pub fn error_response(id: &Value, code: i64, message: &str) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    )
    .expect("JSON values serialize")
}

/// A `notifications/progress` message.
pub fn progress(token: &Value, progress: u64, message: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": token, "progress": progress, "message": message}
    }))
    .expect("JSON values serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments as a tree, outside the gate's budget.
    pub(super) fn parsed(arguments: &Arguments) -> Value {
        serde_json::from_slice(arguments.json()).unwrap()
    }

    fn classify(body: &[u8]) -> Result<Incoming, Rejected> {
        read(body).map(|m| m.incoming)
    }

    #[test]
    fn classifies_messages() {
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#),
            Ok(Incoming::Initialize)
        );
        // In a batch it is not one the gate notes (MCP does not batch initialize).
        assert_eq!(
            classify(br#"[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}]"#),
            Ok(Incoming::Other)
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Incoming::Other)
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":"x","result":{}}"#),
            Ok(Incoming::Other)
        );
        assert_eq!(
            classify(br#" {"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"c"}}"#),
            Ok(Incoming::ToolsList { id: json!(7) })
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":"c1","method":"tools\/call","params":{"name":"echo","arguments":{"message":"hi"},"_meta":{"progressToken":5}}}"#),
            Ok(Incoming::ToolsCall(ToolCall {
                id: json!("c1"),
                name: "echo".into(),
                arguments: json!({"message": "hi"}).into(),
                progress_token: Some(json!(5)),
                request_state: None,
                input_responses: false,
            }))
        );
        let call =
            classify(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#);
        assert!(
            matches!(call, Ok(Incoming::ToolsCall(ToolCall { ref arguments, progress_token: None, .. })) if parsed(arguments) == json!({}))
        );
    }

    #[test]
    fn ambiguous_or_invalid_messages_are_rejected() {
        assert!(matches!(classify(b"not json"), Err(Rejected::Parse(_))));
        assert!(matches!(
            classify(br#"{"method":"tools/list","method":"tools/call","params":{"name":"x"}}"#),
            Err(Rejected::Parse(_))
        ));
        assert_eq!(
            classify(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}]"#),
            Err(Rejected::Batch)
        );
        assert_eq!(
            classify(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            Ok(Incoming::Other)
        );
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":3}}"#),
            Err(Rejected::InvalidParams(_))
        ));
    }

    #[test]
    fn only_a_single_request_has_a_request_id() {
        let id = |body: &[u8]| read(body).unwrap().request_id;
        assert_eq!(
            id(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#),
            Some(json!(7))
        );
        assert_eq!(
            id(br#"{"jsonrpc":"2.0","id":"a","method":"initialize","params":{}}"#),
            Some(json!("a"))
        );
        for none in [
            &br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#[..],
            br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        ] {
            assert_eq!(id(none), None, "{}", String::from_utf8_lossy(none));
        }
    }

    #[test]
    fn a_calls_arguments_are_kept_as_written() {
        let call = |body: &[u8]| match read(body) {
            Ok(Message {
                incoming: Incoming::ToolsCall(call),
                ..
            }) => call,
            other => panic!("a call: {other:?}"),
        };
        let read = call(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi","n":[1,{"k":null}]}}}"#,
        );
        assert_eq!(
            &*read.arguments.written,
            br#"{"message":"hi","n":[1,{"k":null}]}"#
        );
        assert_eq!(
            parsed(&read.arguments),
            json!({"message": "hi", "n": [1, {"k": null}]})
        );
        for absent in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":null}}"#,
        ] {
            assert_eq!(parsed(&call(absent).arguments), json!({}));
        }
    }

    #[test]
    fn an_argument_is_found_without_a_tree() {
        let args: Arguments = json!({"a": {"b": "x", "n": 7, "t": true, "z": null, "o": {"k": 1}, "l": [1]}, "s": "top"}).into();
        let at = |path: &[&str]| args.at(&path.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(at(&["s"]), Some(json!("top")));
        assert_eq!(at(&["a", "b"]), Some(json!("x")));
        assert_eq!(at(&["a", "n"]), Some(json!(7)));
        assert_eq!(at(&["a", "t"]), Some(json!(true)));
        assert_eq!(at(&["a", "o"]), Some(json!({})));
        assert_eq!(at(&["a", "l"]), Some(json!([])));
        for absent in [
            &["a", "z"][..],
            &["a", "missing"],
            &["s", "deeper"],
            &["a", "l", "0"],
        ] {
            assert_eq!(at(absent), None, "{absent:?}");
        }
    }

    #[tokio::test]
    async fn a_tree_of_the_arguments_is_refused_past_the_limit_of_values() {
        use super::super::memory::MAX_TREE_VALUES;
        let zeros = |n: usize| -> Arguments { json!({"l": vec![0; n - 2]}).into() };
        let tree = zeros(MAX_TREE_VALUES).tree().await.unwrap();
        assert_eq!(
            tree.value()["l"].as_array().unwrap().len(),
            MAX_TREE_VALUES - 2
        );
        let refused = zeros(MAX_TREE_VALUES + 1).tree().await.unwrap_err();
        assert_eq!(refused, NoTree::TooManyValues);
    }

    #[test]
    fn a_call_as_read_carries_exactly_the_hashed_arguments() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"to":"b\u0061nk","amount":100000000000000000000001,"n":9007199254740993}}}"#;
        let Ok(Message {
            incoming: Incoming::ToolsCall(call),
            body: forwarded,
            ..
        }) = read(body)
        else {
            panic!("a call")
        };
        let parsed: Value = serde_json::from_slice(&forwarded).unwrap();
        assert_eq!(
            parsed["params"]["arguments"],
            super::tests::parsed(&call.arguments)
        );
        assert_eq!(
            String::from_utf8(forwarded.to_vec()).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"to":"bank","amount":1.0000000000000001e+23,"n":9007199254740993}}}"#
        );
    }

    #[test]
    fn every_message_is_forwarded_as_the_gate_wrote_it() {
        // Escapes, spacing and number forms another parser might read differently are gone;
        // what is left is UTF-8 JSON that means the same to any parser.
        for (body, written) in [
            (
                r#" { "jsonrpc" : "2.0", "id" : 1.0, "method" : "tools\u002flist" } "#,
                r#"{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"s":"\u00e9\ud83d\ude00","n":1E2}}"#,
                r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"s":"é😀","n":100.0}}"#,
            ),
            (
                r#"[{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","method":"ping","id":2}]"#,
                r#"[{"jsonrpc":"2.0","id":"a","result":{}},{"jsonrpc":"2.0","method":"ping","id":2}]"#,
            ),
        ] {
            assert_eq!(
                String::from_utf8(read(body.as_bytes()).unwrap().body.to_vec()).unwrap(),
                written
            );
        }
        // What is not UTF-8 JSON is refused, not passed on: a byte-order mark, UTF-16, bytes
        // that are not UTF-8 in a string, a lone surrogate, anything after the value.
        for body in [
            &b"\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}"[..],
            b"{\x00\"\x00j\x00\"\x00:\x001\x00}\x00",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\xff\"}",
            br#"{"jsonrpc":"2.0","method":"ping","params":{"s":"\ud800"}}"#,
            br#"{"jsonrpc":"2.0","method":"ping"} {"jsonrpc":"2.0","method":"tools/call"}"#,
            br#""tools/call""#,
        ] {
            assert!(read(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn a_repeated_key_anywhere_in_a_tool_message_refuses_it() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete","name":"echo"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"arguments":{"a":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"p":{"path":"/etc","path":"/tmp"}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"l":[{"a":1,"a":2}]}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"params":{"name":"delete"}}"#,
        ] {
            let got = classify(body.as_bytes());
            assert!(
                matches!(&got, Err(Rejected::Parse(m)) if m.starts_with("duplicate key")),
                "{body}: {got:?}"
            );
        }
        // The same key in different objects is fine, and values come through unchanged.
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"name":"n","x":{"name":[1.5,-2,18446744073709551615,null,true]}}}}"#),
            Ok(Incoming::ToolsCall(ToolCall {
                id: json!(1),
                name: "echo".into(),
                arguments: json!({"name": "n", "x": {"name": [1.5, -2, 18446744073709551615u64, null, true]}}).into(),
                progress_token: None,
                request_state: None,
                input_responses: false,
            }))
        );
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#),
            Err(Rejected::InvalidParams(_))
        ));
    }

    #[test]
    fn keys_equal_ignoring_case_refuse_any_message() {
        for (body, other) in [
            // Go's encoding/json takes the last of two keys it matches to one field.
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call","params":{"name":"delete"}}"#,
                "method",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"delete"}}"#,
                "name",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"Arguments":{"a":1}}}"#,
                "arguments",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"path":"/tmp","PATH":"/etc"}}}"#,
                "path",
            ),
            // Unicode simple folding: the Kelvin sign is k, the long s is s.
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"key":1,"\u212aey":2}}}"#,
                "key",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"ſize":1,"Size":2}}}"#,
                "ſize",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"l":[{"σ":1,"Σ":2}]}}}"#,
                "σ",
            ),
            // Any message, not only tool messages; inside batches too.
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"a","NAME":"b"}}}"#,
                "name",
            ),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":1,"X":2}}]"#,
                "x",
            ),
        ] {
            let got = classify(body.as_bytes());
            assert!(
                matches!(&got, Err(Rejected::Parse(m)) if m.starts_with("duplicate key") && m.contains(&format!("equal to {other:?} ignoring case"))),
                "{body}: {got:?}"
            );
        }
    }

    #[test]
    fn a_protocol_field_in_another_case_refuses_the_message() {
        for (body, key) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","params":{"name":"delete"}}"#,
                "METHOD",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","ParamS":{"name":"delete"}}"#,
                "ParamS",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","paramſ":{}}"#,
                "paramſ",
            ),
            (r#"{"jsonrpc":"2.0","Id":1,"method":"tools/list"}"#, "Id"),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"delete"}}"#,
                "Name",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Arguments":{"path":"/"}}}"#,
                "Arguments",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_META":{}}}"#,
                "_META",
            ),
            (
                r#"[{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"name":"delete"}}]"#,
                "Method",
            ),
        ] {
            let got = classify(body.as_bytes());
            assert!(
                matches!(&got, Err(Rejected::Invalid(m)) if m.starts_with(&format!("key {key:?} is "))),
                "{body}: {got:?}"
            );
        }
        // Keys that merely differ from a field, other case only inside arguments, and keys
        // that full case folding (not Go's) would equate are all fine.
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"Name":"n","METHOD":1,"ß":1,"ss":2},"names":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"Tools":[]}}"#,
        ] {
            assert!(classify(body.as_bytes()).is_ok(), "{body}");
        }
    }

    #[test]
    fn folding_is_unicode_simple_case_folding() {
        assert_eq!(case_folded("method"), None);
        assert_eq!(case_folded("METHOD").as_deref(), Some("method"));
        assert_eq!(case_folded("\u{212A}ey").as_deref(), Some("key"));
        assert_eq!(case_folded("ſ").as_deref(), Some("s"));
        assert_eq!(case_folded("ẞ").as_deref(), Some("ß"));
        assert_eq!(case_folded("ß"), None);
        assert_eq!(case_folded("ς").as_deref(), Some("σ"));
        // The duplicate check relies on a folded form folding to itself.
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            assert_eq!(fold_char(fold_char(c)), fold_char(c), "{c:?}");
        }
    }

    fn filtered(message: &str) -> Filtered {
        filter_tools(message.as_bytes(), |t| t == "echo", |_, _| {})
    }

    fn rewritten(message: &str) -> Value {
        match filtered(message) {
            Filtered::Rewritten(out) => serde_json::from_slice(&out).unwrap(),
            other => panic!("{message}: {other:?}"),
        }
    }

    #[test]
    fn filters_every_tools_list_result_whatever_its_id() {
        let v = rewritten(
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"echo"},{"name":"get-env"}],"nextCursor":"n"}}"#,
        );
        assert_eq!(v["result"]["tools"], json!([{"name": "echo"}]));
        assert_eq!(v["result"]["nextCursor"], json!("n"));
        // An id in another form than the request's, no id, a batch: filtered all the same.
        for message in [
            r#"{"jsonrpc":"2.0","id":1.0,"result":{"tools":[{"name":"echo"},{"name":"get-env"}]}}"#,
            r#"{"jsonrpc":"2.0","id":"1","result":{"tools":[{"name":"echo"},{"name":"get-env"}]}}"#,
            r#"{"jsonrpc":"2.0","result":{"tools":[{"name":"echo"},{"name":"get-env"}]}}"#,
        ] {
            assert_eq!(
                rewritten(message)["result"]["tools"],
                json!([{"name": "echo"}])
            );
        }
        let v = rewritten(
            r#"[{"jsonrpc":"2.0","id":9,"result":{}},{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get-env"}]}}]"#,
        );
        assert_eq!(v[1]["result"]["tools"], json!([]));
        // Entries that are not named tools are dropped, not kept.
        let v = rewritten(
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[1,"echo",{"name":7},{"title":"x"},{"name":"echo"}]}}"#,
        );
        assert_eq!(v["result"]["tools"], json!([{"name": "echo"}]));
        // No tool list: left alone.
        for message in [
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"tools":[{"name":"get-env"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":"none"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":{"b":1,"B":2}}}"#,
            r#""text""#,
        ] {
            assert_eq!(filtered(message), Filtered::Unchanged, "{message}");
        }
    }

    #[test]
    fn a_server_message_the_gate_cannot_read_is_never_relayed() {
        for message in [
            // Not JSON to the gate, JSON to lenient parsers (Python's json reads NaN).
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get-env"}]},"n":NaN}"#,
            // Repeated keys: the gate and the client may read different ones.
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get-env"}]},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","name":"get-env"}]}}"#,
            // Fields a case-insensitive parser (Go) reads and the gate would not.
            r#"{"jsonrpc":"2.0","id":1,"Result":{"tools":[{"name":"get-env"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"TOOLS":[{"name":"get-env"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","Name":"get-env"}]}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"result":{"ToolS":[]}}]"#,
        ] {
            assert!(
                matches!(filtered(message), Filtered::Unreadable(_)),
                "{message}"
            );
        }
    }

    #[test]
    fn writes_tool_errors() {
        let v: Value =
            serde_json::from_slice(&tool_error(&json!(9), "NOT executed", None)).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":9,"result":{"content":[{"type":"text","text":"NOT executed"}],"isError":true}})
        );
        let v: Value =
            serde_json::from_slice(&tool_error(&json!(9), "x", Some("2026-07-28"))).unwrap();
        assert_eq!(v["result"]["resultType"], json!("complete"));
        let v: Value =
            serde_json::from_slice(&tool_error(&json!(9), "x", Some("2025-11-25"))).unwrap();
        assert!(v["result"].get("resultType").is_none());
    }
}
