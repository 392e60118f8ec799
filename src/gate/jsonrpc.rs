//! The only JSON-RPC the gate understands: recognising `tools/list` and `tools/call` in a
//! client message, filtering `tools/list` results, and writing its own tool results. Every
//! other message is relayed byte for byte.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

/// A `tools/call` request.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// JSON-RPC id.
    pub id: Value,
    /// Tool name.
    pub name: String,
    /// Full arguments (`{}` when absent).
    pub arguments: Value,
    /// `params._meta.progressToken`, when the client asked for progress.
    pub progress_token: Option<Value>,
}

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
}

impl Rejected {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            Self::Parse(_) => -32700,
            Self::Batch => -32600,
            Self::InvalidParams(_) => -32602,
        }
    }
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
}

/// A JSON value in which no object repeats a key. Parsers disagree on which of two equal keys
/// counts (`{"name":"delete","name":"echo"}` is `delete` to some, `echo` to others), so the
/// messages the gate decides on must not have any: the gate would check one call and the
/// upstream run another.
struct UniqueKeys(Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> Visitor<'de> for UniqueKeysVisitor {
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
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let UniqueKeys(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// Parses a message the gate decides on; a repeated key anywhere refuses it.
fn parse_unique(body: &[u8]) -> Result<Value, Rejected> {
    serde_json::from_slice::<UniqueKeys>(body)
        .map(|UniqueKeys(v)| v)
        .map_err(|e| Rejected::Parse(e.to_string()))
}

/// A `tools/call` message as the gate read it, written out again. A gated call forwards this
/// rather than the client's bytes, so the upstream gets exactly the arguments that were hashed
/// and shown to the approver: a number a double cannot hold (say `100000000000000000000001`)
/// arrives as the double the approver saw, not as digits they never saw.
pub fn as_read(body: &[u8]) -> Result<Vec<u8>, Rejected> {
    let msg = parse_unique(body)?;
    Ok(serde_json::to_vec(&msg).expect("a parsed JSON value serializes"))
}

/// Classifies a client message. `tools/list` and `tools/call` are fully parsed, and refused if
/// any object in them repeats a key; so is any body that does not parse or that repeats
/// `method` (other parsers may read such messages differently).
pub fn classify(body: &[u8]) -> Result<Incoming, Rejected> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let probes: Vec<Probe> =
            serde_json::from_slice(body).map_err(|e| Rejected::Parse(e.to_string()))?;
        return if probes.iter().any(|p| is_tools(p.method.as_deref())) {
            Err(Rejected::Batch)
        } else {
            Ok(Incoming::Other)
        };
    }
    let probe: Probe = serde_json::from_slice(body).map_err(|e| Rejected::Parse(e.to_string()))?;
    match probe.method.as_deref() {
        Some("tools/list") => {
            let mut msg = parse_unique(body)?;
            let id = msg.get_mut("id").map(Value::take).unwrap_or(Value::Null);
            Ok(Incoming::ToolsList { id })
        }
        Some("tools/call") => parse_call(body).map(Incoming::ToolsCall),
        _ => Ok(Incoming::Other),
    }
}

fn is_tools(method: Option<&str>) -> bool {
    matches!(method, Some("tools/list" | "tools/call"))
}

fn parse_call(body: &[u8]) -> Result<ToolCall, Rejected> {
    let mut msg = parse_unique(body)?;
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let Some(params) = msg.get_mut("params").and_then(Value::as_object_mut) else {
        return Err(Rejected::InvalidParams("params must be an object".into()));
    };
    let Some(name) = params
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return Err(Rejected::InvalidParams(
            "params.name must be a string".into(),
        ));
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(v) => v,
    };
    let progress_token = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_number())
        .cloned();
    Ok(ToolCall {
        id,
        name,
        arguments,
        progress_token,
    })
}

/// Removes from a `tools/list` response every tool `allowed` rejects. Returns `None` when
/// `message` is not a result for `id` carrying a `tools` array (left unchanged).
pub fn filter_tools_list(
    message: &[u8],
    id: &Value,
    allowed: impl Fn(&str) -> bool,
) -> Option<Vec<u8>> {
    filter_tools(message, Some(id), allowed)
}

/// Like [`filter_tools_list`] for a response to an unknown request (a replayed stream): any
/// result whose `tools` is an array of named tools is filtered.
pub fn filter_any_tools_list(message: &[u8], allowed: impl Fn(&str) -> bool) -> Option<Vec<u8>> {
    filter_tools(message, None, allowed)
}

fn filter_tools(
    message: &[u8],
    id: Option<&Value>,
    allowed: impl Fn(&str) -> bool,
) -> Option<Vec<u8>> {
    let mut msg: Value = serde_json::from_slice(message).ok()?;
    match id {
        Some(id) if msg.get("id") != Some(id) => return None,
        None if msg.get("id").is_none_or(Value::is_null) => return None,
        _ => {}
    }
    let tools = msg.get_mut("result")?.get_mut("tools")?.as_array_mut()?;
    if id.is_none()
        && !tools
            .iter()
            .all(|t| t.get("name").is_some_and(Value::is_string))
    {
        return None;
    }
    tools.retain(|t| t.get("name").and_then(Value::as_str).is_some_and(&allowed));
    serde_json::to_vec(&msg).ok()
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

/// The id of a message, when it is a single JSON-RPC response (has `result` or `error`).
pub fn response_id(message: &[u8]) -> Option<Value> {
    #[derive(Deserialize)]
    struct Resp {
        #[serde(default)]
        id: Option<Value>,
        #[serde(default)]
        result: Option<serde::de::IgnoredAny>,
        #[serde(default)]
        error: Option<serde::de::IgnoredAny>,
    }
    let r: Resp = serde_json::from_slice(message).ok()?;
    (r.result.is_some() || r.error.is_some()).then_some(r.id?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_messages() {
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#),
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
                arguments: json!({"message": "hi"}),
                progress_token: Some(json!(5)),
            }))
        );
        let call =
            classify(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#);
        assert!(
            matches!(call, Ok(Incoming::ToolsCall(ToolCall { ref arguments, progress_token: None, .. })) if *arguments == json!({}))
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
    fn a_call_as_read_carries_exactly_the_hashed_arguments() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"to":"b\u0061nk","amount":100000000000000000000001,"n":9007199254740993}}}"#;
        let Ok(Incoming::ToolsCall(call)) = classify(body) else {
            panic!("a call")
        };
        let forwarded: Value = serde_json::from_slice(&as_read(body).unwrap()).unwrap();
        assert_eq!(forwarded["params"]["arguments"], call.arguments);
        assert_eq!(
            String::from_utf8(as_read(body).unwrap()).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"to":"bank","amount":1.0000000000000001e+23,"n":9007199254740993}}}"#
        );
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
                arguments: json!({"name": "n", "x": {"name": [1.5, -2, 18446744073709551615u64, null, true]}}),
                progress_token: None,
            }))
        );
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#),
            Err(Rejected::InvalidParams(_))
        ));
    }

    #[test]
    fn filters_tools_list_results_for_the_right_id() {
        let msg = br#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"echo"},{"name":"get-env"},{"name":"get-sum"}],"nextCursor":"n"}}"#;
        let out = filter_tools_list(msg, &json!(3), |t| t != "get-env").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["result"]["tools"],
            json!([{"name":"echo"},{"name":"get-sum"}])
        );
        assert_eq!(v["result"]["nextCursor"], json!("n"));
        assert_eq!(filter_tools_list(msg, &json!(4), |_| false), None);
        assert_eq!(
            filter_tools_list(br#"{"jsonrpc":"2.0","method":"x"}"#, &json!(3), |_| false),
            None
        );
        // Replayed streams: any tools/list-shaped response is filtered, nothing else.
        let out = filter_any_tools_list(msg, |t| t == "echo").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["tools"], json!([{"name": "echo"}]));
        let note = br#"{"jsonrpc":"2.0","method":"notifications/x","params":{"tools":[]}}"#;
        assert_eq!(filter_any_tools_list(note, |_| false), None);
        let odd = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[1,2]}}"#;
        assert_eq!(filter_any_tools_list(odd, |_| false), None);
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

    #[test]
    fn finds_response_ids() {
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Some(json!(1))
        );
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"m"}}"#),
            Some(json!("a"))
        );
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            None
        );
    }
}
