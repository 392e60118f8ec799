//! What both transports check and change in the messages they carry: the client's POSTed
//! message (its size, body headers, and the MCP 2026-07-28 routing headers that must say what
//! its body says) and the tool lists in the upstream's messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::Value;

use super::jsonrpc::{self, Arguments, Filtered, Incoming, Message, Route};
use super::memory;
use super::upstream::Upstream;
use crate::sse;

/// The longest message a client may POST, 4 MiB; a longer one gets HTTP 413 and is not read.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// The client's message body, read whole, or the answer to one the gate would not read: longer
/// than [`MAX_MESSAGE_BYTES`] (HTTP 413, read no further) or cut off (HTTP 400), with the text of
/// a JSON-RPC error.
pub async fn message_body(body: Body) -> Result<Bytes, (StatusCode, String)> {
    match Limited::new(body, MAX_MESSAGE_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "approval gate: messages may be at most {} MiB",
                MAX_MESSAGE_BYTES >> 20
            ),
        )),
        Err(e) => Err((
            StatusCode::BAD_REQUEST,
            format!("approval gate: the message could not be read: {e}"),
        )),
    }
}

/// The headers the gate reads on every request, whatever its method: the session (whose it
/// is, which grants it takes) and the protocol revision. The routing headers and the body's
/// type and encoding, read on POSTs only, are refused when repeated where they are read
/// ([`check_routing_headers`], [`check_body_headers`]).
const DECIDING_HEADERS: [&str; 2] = [super::streamable_http::SESSION_HEADER, PROTOCOL_HEADER];

/// Refuses a request that repeats a header of [`DECIDING_HEADERS`]: the gate would judge one
/// value and forward them all, and the server might read another.
pub fn check_single_headers(headers: &HeaderMap) -> Result<(), String> {
    for name in DECIDING_HEADERS {
        if headers.get_all(name).iter().nth(1).is_some() {
            return Err(format!(
                "header {name} appears more than once; send it once (the request was not forwarded)"
            ));
        }
    }
    Ok(())
}

/// Refuses a message body that another parser could decode differently from the gate, which
/// reads every message as UTF-8 JSON and forwards it as `application/json` of its own writing:
/// any `Content-Encoding`, a media type other than `application/json`, a charset other than
/// UTF-8 (a server honouring `charset=utf-7` reads `tools+AC8-call` as `tools/call`). A
/// message without a `Content-Type` is read as UTF-8 JSON, as RFC 8259 says.
pub fn check_body_headers(headers: &HeaderMap) -> Result<(), String> {
    if let Some(coding) = headers.get(header::CONTENT_ENCODING) {
        return Err(format!(
            "Content-Encoding {coding:?} is not accepted: send messages as plain UTF-8 JSON"
        ));
    }
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let Some(content_type) = types.next() else {
        return Ok(());
    };
    if types.next().is_some() {
        return Err("more than one Content-Type".into());
    }
    let text = content_type
        .to_str()
        .map_err(|_| "a Content-Type that is not ASCII".to_string())?;
    let mut parts = text.split(';');
    let media = parts.next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(format!(
            "Content-Type {text:?}: messages must be application/json"
        ));
    }
    for param in parts {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        let value = value.trim().trim_matches('"');
        if name.trim().eq_ignore_ascii_case("charset")
            && !value.eq_ignore_ascii_case("utf-8")
            && !value.eq_ignore_ascii_case("utf8")
        {
            return Err(format!(
                "Content-Type {text:?}: messages must be UTF-8 JSON (charset=utf-8)"
            ));
        }
    }
    Ok(())
}

/// The text of the error that replaces an upstream message the gate cannot read (`why`).
pub fn unreadable_text(up: &Upstream, why: &str) -> String {
    format!(
        "approval gate: upstream {} sent a message the gate cannot read unambiguously, so it \
         was not relayed: {why}",
        up.label
    )
}

/// One upstream SSE event with every tool list in its data filtered
/// ([`jsonrpc::filter_tools`]). An event the gate cannot read is never relayed: it becomes an
/// error answering `request` (the `tools/list` whose answer the stream carries) or, on a stream
/// that answers no request the gate knows of, is dropped. `None`: drop the event. Events
/// without data (comments, and the empty priming events servers send to make a stream
/// resumable) carry no message and pass.
pub fn filter_event(up: &Upstream, event: Bytes, request: Option<&Value>) -> Option<Bytes> {
    let Some(data) = sse::data(&event).filter(|d| !d.is_empty()) else {
        return Some(event);
    };
    match filter_message(up, &data) {
        Filtered::Unchanged => Some(event),
        Filtered::Rewritten(data) => Some(sse::with_data(&event, &data)),
        Filtered::Unreadable(why) => {
            tracing::warn!(server = %up.label, error = %why, "upstream event unreadable; not relayed");
            request.map(|id| {
                let error = jsonrpc::error_response(id, -32603, &unreadable_text(up, &why));
                sse::with_data(&event, &error)
            })
        }
    }
}

/// [`jsonrpc::filter_tools`] with this server's tools, for a message that may hold a tool list
/// ([`may_list_tools`]). Other messages, most answers, are not parsed. The tree of a message
/// that is parsed holds its share of the gate's memory budget while it lives; one of more than
/// [`memory::MAX_TREE_VALUES`] values, or one that finds the budget spent, is not relayed.
pub fn filter_message(up: &Upstream, message: &[u8]) -> Filtered {
    if !may_list_tools(message) {
        return Filtered::Unchanged;
    }
    let _tree = match memory::try_reserve_tree(message) {
        Ok(reservation) => reservation,
        Err(why) => return Filtered::Unreadable(why.to_string()),
    };
    jsonrpc::filter_tools(
        message,
        |t| up.policy.offers(t),
        |name, tool| {
            up.param_headers
                .learn(name, tool.get("inputSchema").unwrap_or(&Value::Null));
            up.tool_definitions
                .learn(name, tool, up.policy.governs(name));
        },
    )
}

/// Whether some parser could find a tool list in `message`: it has a `\u` escape (which could
/// spell anything), or `tools` in any case (`ſ` too, which folds to `s`; no other character
/// folds to a letter of `tools`) followed by what makes it a key, a colon (after a closing
/// quote and spaces, if any), unless that key's value is an object. Neither `tools` in running
/// text nor a key holding an object (`"tools":{"listChanged":true}`, the capability in an
/// `initialize` answer) is a list to any parser, strict or lenient; everything else that could
/// be one is parsed, and refused if it is not JSON the gate reads unambiguously. The scan stops
/// at each `l` and backslash, rarer in answers than the `t` of `"type"`, `"text"` and `"result"`.
fn may_list_tools(message: &[u8]) -> bool {
    memchr::memchr3_iter(b'l', b'L', b'\\', message).any(|i| {
        if message[i] == b'\\' {
            return message.get(i + 1) == Some(&b'u');
        }
        if i < 3 || !message[i - 3..i].eq_ignore_ascii_case(b"too") {
            return false;
        }
        let rest = match &message[i + 1..] {
            [b's' | b'S', rest @ ..] => rest,
            [0xC5, 0xBF, rest @ ..] => rest,
            _ => return false,
        };
        keys_other_than_an_object(rest)
    })
}

/// Whether `rest`, what follows `tools`, makes it a key (a closing quote, double or single, if
/// any, then a colon, with JSON whitespace around) whose value does not begin as an object.
fn keys_other_than_an_object(rest: &[u8]) -> bool {
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let rest = match rest {
        [b'"' | b'\'', rest @ ..] => rest,
        _ => rest,
    };
    let rest = &rest[rest.iter().take_while(|b| space(b)).count()..];
    let Some(rest) = rest.strip_prefix(b":") else {
        return false;
    };
    rest.iter().find(|b| !space(b)) != Some(&b'{')
}

/// [`check_routing_headers`] of a client `message` for server `up` (whose tool lists said which
/// `Mcp-Param-*` headers each tool declares): the id to answer and the text of the refusal.
pub fn check_message_headers(
    up: &Upstream,
    headers: &HeaderMap,
    message: &Message,
) -> Result<(), (Value, String)> {
    let call = match &message.incoming {
        Incoming::ToolsCall(call) => Some(call),
        _ => None,
    };
    check_routing_headers(
        headers,
        &message.route,
        call.map(|c| &c.arguments),
        || call.and_then(|c| up.param_headers.of(&c.name)),
    )
    .map_err(|why| {
        let id = match &message.incoming {
            Incoming::ToolsCall(call) => call.id.clone(),
            Incoming::ToolsList { id } => id.clone(),
            _ => Value::Null,
        };
        tracing::info!(server = %up.label, %why, "refused: a routing header disagrees with the body");
        if call.is_some() {
            up.shared.metrics.call(super::metrics::Outcome::refused);
        }
        (
            id,
            format!(
                "approval gate: {why}; the message was not forwarded (MCP headers must say \
                 what the body says)"
            ),
        )
    })
}

/// `MCP-Protocol-Version`: the revision; from 2026-07-28 on, also in every request's envelope.
pub const PROTOCOL_HEADER: &str = "mcp-protocol-version";
/// `Mcp-Method` (MCP 2026-07-28): the JSON-RPC method, mirrored from the body.
pub const METHOD_HEADER: &str = "mcp-method";
/// `Mcp-Name`: the tool or prompt name (`params.name`) or resource URI (`params.uri`).
pub const NAME_HEADER: &str = "mcp-name";
/// The prefix of `Mcp-Param-<token>`: a `tools/call` argument whose input schema property
/// carries `"x-mcp-header": "<token>"`.
pub const PARAM_HEADER_PREFIX: &str = "mcp-param-";
/// The JSON-RPC error code MCP 2026-07-28 gives a request whose headers disagree with its body.
pub const HEADER_MISMATCH: i64 = -32020;

/// An argument a tool's input schema asks clients to mirror in a header: the property at
/// `path` (a chain of `properties` keys) annotated with `"x-mcp-header": token`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    /// `mcp-param-<token>`, in lower case.
    pub header: String,
    /// The property's path from the arguments' root.
    pub path: Vec<String>,
    /// Whether the property is `"type": "integer"` (its header compares numerically).
    pub integer: bool,
}

/// The `x-mcp-header` annotations of a tool's `inputSchema`, as the 2026-07-28 clients read
/// them: on properties reached from the root through `properties` only, of type string,
/// integer or boolean. Others are ignored (a header the gate cannot tie to an argument is then
/// refused, never guessed).
pub fn param_headers(input_schema: &Value) -> Vec<ParamHeader> {
    fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<ParamHeader>) {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (name, property) in properties {
            path.push(name.clone());
            let kind = property.get("type").and_then(Value::as_str);
            if let Some(token) = property.get("x-mcp-header").and_then(Value::as_str)
                && matches!(kind, Some("string" | "integer" | "boolean"))
                && !token.is_empty()
            {
                out.push(ParamHeader {
                    header: format!("{PARAM_HEADER_PREFIX}{}", token.to_ascii_lowercase()),
                    path: path.clone(),
                    integer: kind == Some("integer"),
                });
            }
            walk(property, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(input_schema, &mut Vec::new(), &mut out);
    out
}

/// The `Mcp-Param-*` headers each tool of one server declares, as its tool lists showed them
/// through the gate (the latest list wins).
#[derive(Debug, Default)]
pub struct ParamHeaders(Mutex<HashMap<String, Arc<[ParamHeader]>>>);

impl ParamHeaders {
    /// Notes the annotations of `tool`'s `input_schema`, from a tool list the gate relayed.
    pub fn learn(&self, tool: &str, input_schema: &Value) {
        let headers: Arc<[ParamHeader]> = param_headers(input_schema).into();
        let mut map = self.0.lock().expect("param headers lock");
        if headers.is_empty() {
            map.remove(tool);
        } else {
            map.insert(tool.to_owned(), headers);
        }
    }

    /// The headers `tool` declared, if its list showed any.
    pub fn of(&self, tool: &str) -> Option<Arc<[ParamHeader]>> {
        self.0
            .lock()
            .expect("param headers lock")
            .get(tool)
            .cloned()
    }
}

/// A header value as MCP 2026-07-28 encodes it: as it is, or `=?base64?<payload>?=` for a
/// value that is not plain visible ASCII. `None`: not visible ASCII, or a payload that is not
/// canonical base64 of UTF-8.
pub fn decode_header_value(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    let Some(payload) = text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    else {
        return Some(text.to_owned());
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let bytes = engine.decode(payload).ok()?;
    // Only the canonical form: another one could decode differently elsewhere.
    if engine.encode(&bytes) != payload {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// The methods whose params `Mcp-Name` mirrors.
const NAME_BEARING: &[&str] = &["tools/call", "prompts/get", "resources/read"];

/// Refuses a message whose MCP 2026-07-28 routing headers do not say exactly what its body
/// says, so no server or intermediary routing on a header can see anything but what the gate
/// decided on (nor the gate write its own answers for another revision than the body's).
/// `route` is what the gate read of the body ([`jsonrpc::Message::route`]);
/// `arguments` are the `tools/call` arguments, with the `Mcp-Param-*` headers the tool
/// declared (`declared`, looked up only if the message has such a header). Refused, with the
/// header and the reason: a routing header sent twice; `MCP-Protocol-Version` other than the
/// version in the body's request envelope (when it has one); `Mcp-Method` other than the body's
/// method (or on a batch or a response, which have none); `Mcp-Name` other than the body's
/// name or URI (or on a method that names none); an `Mcp-Param-*` header on anything but a
/// `tools/call`, one its tool did not declare (as listed through the gate), one whose argument
/// is absent, or one that differs from its argument; and, from a client that mirrors the method
/// (`Mcp-Method`, MCP 2026-07-28 and later), a `tools/call` without a header its tool declares
/// for an argument the body has, so that it is refused before an approval is asked for rather
/// than by the server once the approval is spent. A header the tool's list has not shown
/// through the gate is left to the server. Only the request's headers are looked at, and only
/// those starting with `mcp-` are compared: the body is not read again.
pub fn check_routing_headers(
    headers: &HeaderMap,
    route: &Route,
    arguments: Option<&Arguments>,
    declared: impl FnOnce() -> Option<Arc<[ParamHeader]>>,
) -> Result<(), String> {
    let mut protocol = None;
    let mut method = None;
    let mut name = None;
    let mut params: Vec<(&str, &HeaderValue)> = Vec::new();
    for (key, value) in headers {
        let key = key.as_str();
        if !key.starts_with("mcp-") {
            continue;
        }
        let slot = match key {
            PROTOCOL_HEADER => &mut protocol,
            METHOD_HEADER => &mut method,
            NAME_HEADER => &mut name,
            _ if key.starts_with(PARAM_HEADER_PREFIX) => {
                if params.iter().any(|(k, _)| *k == key) {
                    return Err(format!("header {key} appears more than once"));
                }
                params.push((key, value));
                continue;
            }
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return Err(format!("header {key} appears more than once"));
        }
    }
    if let (Some(value), Some(body)) = (protocol, &route.protocol_version)
        && value.to_str().ok() != body.as_str()
    {
        return Err(format!(
            "header {PROTOCOL_HEADER} {value:?} does not match the body's protocol version {body}"
        ));
    }
    if let Some(value) = method {
        let Ok(value) = value.to_str() else {
            return Err(format!("header {METHOD_HEADER} is not visible ASCII"));
        };
        match &route.method {
            Some(body) if body == value => {}
            Some(body) => {
                return Err(format!(
                    "header {METHOD_HEADER} {value:?} does not match the body's method {body:?}"
                ));
            }
            None if route.batch => {
                return Err(format!(
                    "header {METHOD_HEADER} {value:?} on a batch, which has no one method"
                ));
            }
            None => {
                return Err(format!(
                    "header {METHOD_HEADER} {value:?} on a message without a method"
                ));
            }
        }
    }
    if let Some(value) = name {
        let Some(value) = decode_header_value(value) else {
            return Err(format!(
                "header {NAME_HEADER} is neither visible ASCII nor canonical =?base64?…?="
            ));
        };
        let body_method = route.method.as_deref().unwrap_or_default();
        if !NAME_BEARING.contains(&body_method) {
            return Err(format!(
                "header {NAME_HEADER} {value:?} on a message whose method ({body_method:?}) names nothing"
            ));
        }
        match &route.name {
            Some(Value::String(body)) if *body == value => {}
            Some(Value::String(body)) => {
                return Err(format!(
                    "header {NAME_HEADER} {value:?} does not match the body's {body:?}"
                ));
            }
            _ => {
                return Err(format!(
                    "header {NAME_HEADER} {value:?} but the body's {body_method} has no string name"
                ));
            }
        }
    }
    let call_arguments = match (route.method.as_deref(), arguments) {
        (Some("tools/call"), Some(arguments)) => Some(arguments),
        _ => None,
    };
    let must_mirror = method.is_some() && call_arguments.is_some();
    if params.is_empty() && !must_mirror {
        return Ok(());
    }
    let Some(arguments) = call_arguments else {
        return Err(format!(
            "header {} on a message that is not a tools/call: only a tool's arguments are mirrored",
            params[0].0
        ));
    };
    let declared = declared();
    if must_mirror {
        let missing = declared.iter().flat_map(|d| d.iter()).find(|param| {
            !params.iter().any(|(key, _)| *key == param.header)
                && arguments.at(&param.path).is_some()
        });
        if let Some(param) = missing {
            return Err(format!(
                "header {} is missing: the tool declares it for the argument {:?}, which the body has",
                param.header,
                param.path.join(".")
            ));
        }
    }
    for (key, value) in params {
        let Some(param) = declared
            .as_deref()
            .and_then(|d| d.iter().find(|p| p.header == key))
        else {
            return Err(format!(
                "header {key}: the tool's input schema, as listed through the gate, declares no \
                 such header (list the tools through the gate, then call again)"
            ));
        };
        let argument = param.path.join(".");
        let Some(at) = arguments.at(&param.path) else {
            return Err(format!(
                "header {key} is present but the body's argument {argument:?} is absent"
            ));
        };
        let Some(value) = decode_header_value(value) else {
            return Err(format!(
                "header {key} is neither visible ASCII nor canonical =?base64?…?="
            ));
        };
        if !param_matches(&at, &value, param.integer) {
            return Err(format!(
                "header {key} {value:?} does not match the body's argument {argument:?}"
            ));
        }
    }
    Ok(())
}

/// Whether a decoded `Mcp-Param-*` value is the argument `at` as a client renders it: a string
/// as it is, a boolean as `true`/`false`, a number as JSON writes it, and for an integer
/// property also any plain decimal of the same integer (`42.0` for `42`). Objects, arrays and
/// anything else never match.
fn param_matches(at: &Value, header: &str, integer: bool) -> bool {
    match at {
        Value::String(s) => s == header,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => {
            if n.to_string() == header {
                return true;
            }
            if !integer {
                return false;
            }
            // `-?digits(.0+)?` against an integral argument, compared exactly.
            let (whole, fraction) = header.split_once('.').unwrap_or((header, ""));
            let digits = whole.strip_prefix('-').unwrap_or(whole);
            let plain = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && fraction.bytes().all(|b| b == b'0')
                && (header.contains('.') <= !fraction.is_empty());
            if !plain {
                return false;
            }
            match whole.parse::<i128>() {
                Ok(h) => {
                    n.as_i64()
                        .map(i128::from)
                        .or_else(|| n.as_u64().map(i128::from))
                        .or_else(|| {
                            n.as_f64()
                                .filter(|f| f.fract() == 0.0 && f.abs() < 1.7e38)
                                .map(|f| f as i128)
                        })
                        == Some(h)
                }
                Err(_) => false,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn read(body: &str) -> Message {
        jsonrpc::read(body.as_bytes()).unwrap()
    }

    const CALL: &str = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete_file","arguments":{"path":"/tmp/x","n":42,"f":true,"o":{"deep":"d"}}}}"#;

    fn declared() -> Option<Arc<[ParamHeader]>> {
        Some(
            param_headers(&json!({"type": "object", "properties": {
                "path": {"type": "string", "x-mcp-header": "Path"},
                "n": {"type": "integer", "x-mcp-header": "N"},
                "f": {"type": "boolean", "x-mcp-header": "F"},
                "gone": {"type": "string", "x-mcp-header": "Gone"},
                "o": {"type": "object", "properties": {"deep": {"type": "string", "x-mcp-header": "Deep"}}},
            }}))
            .into(),
        )
    }

    /// The check as the transports run it on `body` with these headers.
    fn check(body: &str, pairs: &[(&str, &str)]) -> Result<(), String> {
        let message = read(body);
        let arguments = match &message.incoming {
            Incoming::ToolsCall(call) => Some(call.arguments.clone()),
            _ => None,
        };
        check_routing_headers(
            &headers(pairs),
            &message.route,
            arguments.as_ref(),
            declared,
        )
    }

    #[test]
    fn headers_that_say_what_the_body_says_pass() {
        assert_eq!(check(CALL, &[]), Ok(()));
        assert_eq!(
            check(
                CALL,
                &[
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "delete_file"),
                    ("mcp-param-path", "/tmp/x"),
                    ("Mcp-Param-N", "42"),
                    ("mcp-param-f", "true"),
                    ("mcp-param-deep", "d"),
                ]
            ),
            Ok(())
        );
        // Integers compare numerically, booleans as true/false, nested paths and base64.
        assert_eq!(
            check(
                CALL,
                &[
                    ("mcp-param-n", "42.0"),
                    ("mcp-param-f", "true"),
                    ("mcp-param-deep", "=?base64?ZA==?="),
                    ("mcp-name", "=?base64?ZGVsZXRlX2ZpbGU=?="),
                ]
            ),
            Ok(())
        );
        let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert_eq!(check(list, &[("mcp-method", "tools/list")]), Ok(()));
        let read_resource =
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}"#;
        assert_eq!(
            check(
                read_resource,
                &[("mcp-method", "resources/read"), ("mcp-name", "file:///a")]
            ),
            Ok(())
        );
        // Other mcp- headers (the protocol version, the session) are not routing headers.
        assert_eq!(check(list, &[("mcp-session-id", "s")]), Ok(()));
    }

    #[test]
    fn a_method_header_other_than_the_body_is_refused() {
        let why = check(CALL, &[("mcp-method", "tools/list")]).unwrap_err();
        assert_eq!(
            why,
            r#"header mcp-method "tools/list" does not match the body's method "tools/call""#
        );
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#;
        assert!(
            check(batch, &[("mcp-method", "ping")])
                .unwrap_err()
                .contains("batch")
        );
        let response = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        assert!(
            check(response, &[("mcp-method", "tools/call")])
                .unwrap_err()
                .contains("without a method")
        );
        assert!(
            check(
                CALL,
                &[("mcp-method", "tools/call"), ("mcp-method", "tools/call")]
            )
            .unwrap_err()
            .contains("more than once")
        );
    }

    #[test]
    fn a_protocol_version_other_than_the_envelope_is_refused() {
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert_eq!(
            check(call, &[("mcp-protocol-version", "2026-07-28")]),
            Ok(())
        );
        assert_eq!(
            check(call, &[("mcp-protocol-version", "2025-11-25")]).unwrap_err(),
            r#"header mcp-protocol-version "2025-11-25" does not match the body's protocol version "2026-07-28""#
        );
        assert!(
            check(
                call,
                &[
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-protocol-version", "2025-11-25")
                ]
            )
            .unwrap_err()
            .contains("more than once")
        );
        // Earlier revisions have no envelope: the header alone says the revision.
        let old = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert_eq!(
            check(old, &[("mcp-protocol-version", "2025-06-18")]),
            Ok(())
        );
    }

    #[test]
    fn a_name_header_other_than_the_body_is_refused() {
        assert_eq!(
            check(CALL, &[("mcp-name", "echo")]).unwrap_err(),
            r#"header mcp-name "echo" does not match the body's "delete_file""#
        );
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        assert!(
            check(ping, &[("mcp-name", "echo")])
                .unwrap_err()
                .contains("names nothing")
        );
        // Not canonical base64: refused, never guessed.
        assert!(
            check(CALL, &[("mcp-name", "=?base64?ZGVsZXRlX2ZpbGV=?=")])
                .unwrap_err()
                .contains("canonical")
        );
        assert!(
            check(CALL, &[("mcp-name", "delete_file"), ("mcp-name", "echo")])
                .unwrap_err()
                .contains("more than once")
        );
    }

    #[test]
    fn a_param_header_must_mirror_a_declared_argument() {
        assert_eq!(
            check(CALL, &[("mcp-param-path", "/etc/passwd")]).unwrap_err(),
            r#"header mcp-param-path "/etc/passwd" does not match the body's argument "path""#
        );
        assert!(check(CALL, &[("mcp-param-n", "43")]).is_err());
        assert!(check(CALL, &[("mcp-param-n", "42.5")]).is_err());
        assert!(check(CALL, &[("mcp-param-f", "1")]).is_err());
        assert!(
            check(CALL, &[("mcp-param-gone", "x")])
                .unwrap_err()
                .contains("is absent")
        );
        assert!(
            check(CALL, &[("mcp-param-other", "x")])
                .unwrap_err()
                .contains("declares no such header")
        );
        assert!(
            check(
                CALL,
                &[("mcp-param-path", "/tmp/x"), ("mcp-param-path", "/tmp/x")]
            )
            .unwrap_err()
            .contains("more than once")
        );
        let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert!(
            check(list, &[("mcp-param-path", "/tmp/x")])
                .unwrap_err()
                .contains("not a tools/call")
        );
        // A tool whose list the gate never saw declares nothing.
        let message = read(CALL);
        let Incoming::ToolsCall(call) = &message.incoming else {
            panic!("a call")
        };
        assert!(
            check_routing_headers(
                &headers(&[("mcp-param-path", "/tmp/x")]),
                &message.route,
                Some(&call.arguments),
                || None,
            )
            .is_err()
        );
    }

    #[test]
    fn a_client_that_mirrors_must_mirror_every_declared_argument_it_sends() {
        let all = [
            ("mcp-method", "tools/call"),
            ("mcp-param-path", "/tmp/x"),
            ("mcp-param-n", "42"),
            ("mcp-param-f", "true"),
            ("mcp-param-deep", "d"),
        ];
        assert_eq!(check(CALL, &all), Ok(()));
        assert_eq!(
            check(CALL, &[all[0], all[2], all[3], all[4]]).unwrap_err(),
            r#"header mcp-param-path is missing: the tool declares it for the argument "path", which the body has"#
        );
        assert!(
            check(CALL, &[all[0], all[1], all[2], all[3]])
                .unwrap_err()
                .contains("mcp-param-deep is missing")
        );
        // An argument the body does not have needs no header (`gone`); a client of an earlier
        // revision, which sends no Mcp-Method, mirrors nothing and is left to the server.
        assert_eq!(check(CALL, &[]), Ok(()));
        assert_eq!(check(CALL, &[all[1]]), Ok(()));
        // Nor can the gate ask for what no list through it declared.
        let message = read(CALL);
        let Incoming::ToolsCall(call) = &message.incoming else {
            panic!("a call")
        };
        assert_eq!(
            check_routing_headers(
                &headers(&[("mcp-method", "tools/call")]),
                &message.route,
                Some(&call.arguments),
                || None,
            ),
            Ok(())
        );
    }

    #[test]
    fn declared_param_headers_follow_properties_only() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "A"},
            "num": {"type": "number", "x-mcp-header": "Num"},
            "o": {"type": "object", "properties": {"b": {"type": "integer", "x-mcp-header": "B"}}},
        }, "items": {"x-mcp-header": "NotAProperty", "type": "string"}});
        assert_eq!(
            param_headers(&schema),
            vec![
                ParamHeader {
                    header: "mcp-param-a".into(),
                    path: vec!["a".into()],
                    integer: false
                },
                ParamHeader {
                    header: "mcp-param-b".into(),
                    path: vec!["o".into(), "b".into()],
                    integer: true
                },
            ]
        );
        let learned = ParamHeaders::default();
        learned.learn("t", &schema);
        assert_eq!(learned.of("t").unwrap().len(), 2);
        learned.learn("t", &json!({}));
        assert_eq!(learned.of("t"), None);
    }

    #[tokio::test]
    async fn a_message_is_read_whole_up_to_its_limit_and_no_further() {
        let chunks = |sizes: &[usize]| {
            let chunks: Vec<Result<Bytes, std::io::Error>> = sizes
                .iter()
                .map(|&n| Ok(Bytes::from(vec![b' '; n])))
                .collect();
            Body::from_stream(futures::stream::iter(chunks))
        };
        let whole = message_body(chunks(&[MAX_MESSAGE_BYTES - 1, 1])).await;
        assert_eq!(whole.map(|b| b.len()), Ok(MAX_MESSAGE_BYTES));
        assert_eq!(
            message_body(chunks(&[MAX_MESSAGE_BYTES, 1])).await,
            Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                "approval gate: messages may be at most 4 MiB".into()
            ))
        );
        let cut_off = futures::stream::iter(vec![
            Ok(Bytes::from_static(b"{")),
            Err(std::io::Error::other("connection reset")),
        ]);
        let (status, why) = message_body(Body::from_stream(cut_off)).await.unwrap_err();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            why.starts_with("approval gate: the message could not be read: ")
                && why.contains("connection reset"),
            "{why}"
        );
    }

    /// The answers scanned for a tool list, compared with the plain definition: a backslash
    /// followed by `u`, or `tools` in any case (or with `ſ`) followed by a colon (after a quote,
    /// double or single, and spaces, if any) and then anything but an object.
    #[test]
    fn a_message_is_parsed_when_it_may_spell_a_tool_list() {
        let keyed_other =
            regex::Regex::new(r#"^["']?[ \t\n\r]*:[ \t\n\r]*([^ \t\n\r{]|$)"#).unwrap();
        let plain = |message: &[u8]| {
            let text = String::from_utf8_lossy(message);
            let folded: String = text
                .chars()
                .map(|c| match c {
                    'ſ' => 's',
                    c => c.to_ascii_lowercase(),
                })
                .collect();
            text.contains("\\u")
                || folded.match_indices("tools").any(|(at, _)| {
                    // The same place in the text: folding kept every character but `ſ`,
                    // whose two bytes became one.
                    let before = folded[..at].chars().count();
                    let rest: String = text.chars().skip(before + 5).collect();
                    keyed_other.is_match(&rest)
                })
        };
        let cases: [&[u8]; 23] = [
            br#"{"result":{"content":[{"type":"text","text":"Echo: hello"}]},"jsonrpc":"2.0","id":2}"#,
            br#"{"result":{"capabilities":{"tools":{"listChanged":true}}},"id":1}"#,
            br#"{"result":{"capabilities":{"tools" :	{"listChanged":true}}},"id":1}"#,
            br#"{"result":{"tools":[]}}"#,
            br#"{"result":{"tools":{},"tools":[]}}"#,
            br#"{"result":{"TOOLS":[]}}"#,
            br#"{"result":{"ToOlS" : []}}"#,
            "{\"result\":{\"toolſ\":[]}}".as_bytes(),
            "{\"result\":{\"toolſ\":{}}}".as_bytes(),
            br#"{"result":{'tools':{}}}"#,
            br#"{"result":{'tools':[]}}"#,
            br#"{result:{tools:{}}}"#,
            br#"{result:{tools :[]}}"#,
            br#"{"instructions":"These tools echo. Available tools: echo"}"#,
            br#"{"result":{"tools":null}}"#,
            br#"{"result":{"\u0074ools":[]}}"#,
            br#"{"text":"all the tools: [x]"}"#,
            br#"{"text":"a \"tools\": {} b"}"#,
            br#"{"toolName":"x","tool_use":[]}"#,
            br#"{"a":"\\"}"#,
            b"tools",
            b"tools\"",
            b"",
        ];
        for case in cases {
            assert_eq!(
                may_list_tools(case),
                plain(case),
                "{}",
                String::from_utf8_lossy(case)
            );
        }
        // Every arrangement of the letters of "tools", the quotes, colon, space, brace and
        // bracket around them, and a backslash.
        let alphabet: [&[u8]; 12] = [
            b"t",
            b"O",
            b"l",
            b"s",
            "ſ".as_bytes(),
            b"\"",
            b"'",
            b":",
            b" ",
            b"{",
            b"[",
            b"\\u",
        ];
        let mut message = Vec::new();
        for n in 0..6u32 {
            for mut code in 0..alphabet.len().pow(n) {
                message.clear();
                message.extend_from_slice(b"too");
                for _ in 0..n {
                    message.extend_from_slice(alphabet[code % alphabet.len()]);
                    code /= alphabet.len();
                }
                assert_eq!(
                    may_list_tools(&message),
                    plain(&message),
                    "{}",
                    String::from_utf8_lossy(&message)
                );
            }
        }
    }
}
