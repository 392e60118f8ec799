//! What both transports check and change in the messages they carry: the client's POSTed
//! message (its size and body headers) and the tool lists in the upstream's messages.

use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use bytes::Bytes;
use serde_json::Value;

use super::jsonrpc::{self, Filtered};
use super::upstream::Upstream;
use crate::sse;

/// The longest message a client may POST, 4 MiB; a longer one gets HTTP 413 and is not read.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// The client's message body, or the answer to one the gate would not read (too long, or cut
/// off): HTTP 413 or 400 with a JSON-RPC error.
pub fn message_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, (StatusCode, String)> {
    body.map_err(|rejection| {
        let status = rejection.status();
        let why = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!(
                "approval gate: messages may be at most {} MiB",
                MAX_MESSAGE_BYTES >> 20
            )
        } else {
            format!("approval gate: the message could not be read: {rejection}")
        };
        (status, why)
    })
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

/// [`jsonrpc::filter_tools`] with this server's tools, for a message that may hold a tool list:
/// one that has `tool` in any ASCII case (every key that case-folds to `tools` has it) or a
/// `\u` escape (which could spell it). Other messages, most answers, are not parsed.
pub fn filter_message(up: &Upstream, message: &[u8]) -> Filtered {
    let may_list_tools = memchr::memchr3_iter(b't', b'T', b'\\', message).any(|i| {
        let rest = &message[i..];
        rest.get(..4)
            .is_some_and(|w| w.eq_ignore_ascii_case(b"tool"))
            || rest.get(1) == Some(&b'u')
    });
    if !may_list_tools {
        return Filtered::Unchanged;
    }
    jsonrpc::filter_tools(message, |t| up.policy.offers(t))
}
