//! A client's MCP session carried across its upstream's restart (Streamable HTTP).
//!
//! A tool server that restarts forgets its sessions: the next request of a client naming one is
//! answered 404 (the MCP specification), or 400 with an error naming the session (the
//! TypeScript SDK's example servers and `server-everything`: "Bad Request: No valid session ID
//! provided"). Many clients never recover from that (kagent-adk keeps the dead session, or
//! hangs the turn: docs/gate.md). The gate sits between them, so it carries the session:
//!
//! - it remembers, per client session, the client's own `initialize` message and protocol
//!   version ([`Resumable::begin`]), and which upstream session serves it now; the client's
//!   id is the one the upstream gave first and never changes;
//! - a request on a session the upstream forgot ([`forgot_session`]) makes the gate begin a
//!   new upstream session (`initialize` with the client's message, then
//!   `notifications/initialized`), map the client's session to it, and send that request
//!   again, once: the upstream did not take it. A second failure is relayed as it came;
//! - every later request goes to the new upstream session, and every answer names the
//!   client's id ([`ResumableSession::answer`]);
//! - when the new `initialize` fails, the request gets [`UpstreamError::SessionLost`] (an
//!   error naming the server) and the next request tries again.
//!
//! Everything the gate binds to the client's session (session grants, the caller on a shared
//! gate, continuations) stays bound to the client's id. A gated call is resent inside the one
//! forward that follows its approval ([`super::call`]): one approval, one run.
//!
//! Memory is bounded like the session ledger's ([`super::sessions`]): at most
//! [`MAX_RESUMABLE`] sessions per server, [`MAX_RESUMABLE_PER_CALLER`] of one caller of a
//! shared gate, least recently used forgotten first, each `initialize` at most
//! [`MAX_INITIALIZE_BYTES`] (a longer one is not remembered, and its session not carried).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use super::caller_quota::CallerQuota;
use super::memory;
use super::messages::{METHOD_HEADER, NAME_HEADER, PARAM_HEADER_PREFIX, PROTOCOL_HEADER};
use super::metrics::Resumed;
use super::sessions::MAX_SESSION_ID_BYTES;
use super::upstream::{Upstream, UpstreamError, UpstreamResponse, full_body, is_event_stream};
use crate::sse;

/// Header carrying the MCP session id.
const SESSION_HEADER: &str = "mcp-session-id";

/// Most client sessions remembered per server.
pub const MAX_RESUMABLE: usize = 1024;

/// Most client sessions remembered per server for one caller of a shared gate.
pub const MAX_RESUMABLE_PER_CALLER: usize = 256;

/// Longest client `initialize` message remembered: a client's is a few hundred bytes.
pub const MAX_INITIALIZE_BYTES: usize = 4096;

/// The `notifications/initialized` the gate sends on a new upstream session.
const INITIALIZED: &[u8] = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// One client session the gate can carry onto a new upstream session.
pub struct ResumableSession {
    /// The client's session id: the one the upstream gave first.
    client: HeaderValue,
    /// The client's `initialize` message, as the gate read and forwarded it.
    initialize: Bytes,
    /// The `Mcp-Protocol-Version` header of the client's `initialize`, if it sent one.
    protocol: Option<HeaderValue>,
    /// The upstream session serving it now.
    upstream: Mutex<HeaderValue>,
    /// Held while a new upstream session begins, so concurrent requests begin one, not many.
    renewing: tokio::sync::Mutex<()>,
}

impl ResumableSession {
    /// The upstream session serving the client's now.
    pub fn upstream(&self) -> HeaderValue {
        self.upstream
            .lock()
            .expect("resumable session lock")
            .clone()
    }

    /// `headers` naming the upstream session `upstream` instead of the client's.
    pub fn on(&self, headers: &HeaderMap, upstream: &HeaderValue) -> Option<HeaderMap> {
        (*upstream != self.client).then(|| {
            let mut headers = headers.clone();
            headers.insert(SESSION_HEADER, upstream.clone());
            headers
        })
    }

    /// An upstream answer as the client must see it: naming the client's session.
    pub fn answer(&self, mut resp: UpstreamResponse) -> UpstreamResponse {
        if let Some(id) = resp.headers_mut().get_mut(SESSION_HEADER) {
            id.clone_from(&self.client);
        }
        resp
    }
}

/// The client sessions of one server that the gate can carry, by client id.
pub struct Resumable {
    capacity: usize,
    per_caller: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    order: CallerQuota<String, Option<String>>,
    sessions: HashMap<String, Arc<ResumableSession>>,
}

impl Default for Resumable {
    fn default() -> Self {
        Self::new(MAX_RESUMABLE, MAX_RESUMABLE_PER_CALLER)
    }
}

impl Resumable {
    /// At most `capacity` sessions, `per_caller` of one caller of a shared gate.
    pub fn new(capacity: usize, per_caller: usize) -> Self {
        Self {
            capacity,
            per_caller,
            inner: Mutex::new(Inner {
                order: CallerQuota::new(capacity),
                sessions: HashMap::new(),
            }),
        }
    }

    /// Remembers the session `id` the upstream gave in its answer to the client's `initialize`
    /// message `initialize` (sent with the protocol header `protocol`), begun by `caller` on a
    /// shared gate. An id no grant can name, or a message longer than
    /// [`MAX_INITIALIZE_BYTES`], is not remembered.
    pub fn begin(
        &self,
        id: &HeaderValue,
        initialize: Bytes,
        protocol: Option<HeaderValue>,
        caller: Option<&str>,
    ) {
        let Ok(key) = id.to_str() else { return };
        if key.is_empty()
            || key.len() > MAX_SESSION_ID_BYTES
            || initialize.len() > MAX_INITIALIZE_BYTES
        {
            return;
        }
        let session = Arc::new(ResumableSession {
            client: id.clone(),
            initialize,
            protocol,
            upstream: Mutex::new(id.clone()),
            renewing: tokio::sync::Mutex::new(()),
        });
        let quota = if caller.is_some() {
            self.per_caller
        } else {
            self.capacity
        };
        let mut inner = self.inner.lock().expect("resumable lock");
        let forgotten = inner
            .order
            .touch(key.to_string(), caller.map(String::from), quota);
        for old in forgotten {
            inner.sessions.remove(&old);
        }
        inner.sessions.insert(key.to_string(), session);
    }

    /// The session the client's request `headers` name, if the gate can carry it (it becomes
    /// the most recently used).
    pub fn of(&self, headers: &HeaderMap) -> Option<Arc<ResumableSession>> {
        let id = headers.get(SESSION_HEADER)?.to_str().ok()?;
        let mut inner = self.inner.lock().expect("resumable lock");
        let session = inner.sessions.get(id)?.clone();
        inner.order.refresh(id).then_some(session)
    }

    /// Forgets the client's session `id` (it deleted it).
    pub fn end(&self, id: &str) {
        let mut inner = self.inner.lock().expect("resumable lock");
        inner.order.forget(&id.to_string());
        inner.sessions.remove(id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap();
        assert_eq!(inner.order.len(), inner.sessions.len());
        inner.sessions.len()
    }
}

/// Whether an upstream answer (`status`, and its body when it is not an event stream) says the
/// upstream does not know the session the request named: 404 (the MCP specification), or 400
/// whose JSON-RPC error names a session or an uninitialized server (the TypeScript SDK's
/// `server-everything` and example servers: "Bad Request: No valid session ID provided",
/// its transport: "Bad Request: Server not initialized").
pub fn forgot_session(status: StatusCode, body: &[u8]) -> bool {
    match status {
        StatusCode::NOT_FOUND => true,
        StatusCode::BAD_REQUEST => serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_ascii_lowercase))
            .is_some_and(|m| m.contains("session") || m.contains("not initialized")),
        _ => false,
    }
}

/// Whether the upstream's answer `resp` to a request (`method`) may say it forgot the session
/// the request named: 404 or 400, not an event stream, and not to a `DELETE` (never sent
/// again: the session it ends is gone either way). Anything else is relayed as it came.
pub fn may_have_forgotten(method: &Method, resp: &UpstreamResponse) -> bool {
    matches!(
        resp.status(),
        StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST
    ) && method != Method::DELETE
        && !is_event_stream(resp.headers())
}

/// A client's request the gate may send again on a new upstream session.
pub struct Request<'a> {
    /// Its method.
    pub method: Method,
    /// Where it goes.
    pub uri: axum::http::Uri,
    /// The client's headers (naming the client's session).
    pub headers: &'a HeaderMap,
    /// The message, as the gate wrote it.
    pub body: Bytes,
}

/// What follows an answer `resp` that [`may_have_forgotten`] the client's `session` to its
/// `request`, sent to the upstream session `serving` it ([`Upstream::send`]): when the
/// upstream did forget it, the gate begins a new one and sends the request again, once (see
/// the module); otherwise the answer is relayed as it came.
pub async fn after_failure(
    up: &Upstream,
    session: &ResumableSession,
    request: Request<'_>,
    serving: HeaderValue,
    resp: UpstreamResponse,
) -> Result<UpstreamResponse, UpstreamError> {
    let status = resp.status();
    let (parts, answer) = up.read_answer(resp).await?;
    if !forgot_session(status, &answer) {
        let resp = UpstreamResponse::from_parts(parts, full_body(answer));
        return Ok(session.answer(resp));
    }
    tracing::info!(server = %up.label, status = status.as_u16(),
        "the upstream forgot the client's MCP session (restarted?); beginning a new one");
    let renewed = renew(up, session, request.headers, &serving)
        .await
        .map_err(UpstreamError::SessionLost)?;
    let resend = resent(request.headers, &renewed);
    let resp = up
        .send_as_is(request.method, request.uri, &resend, request.body)
        .await?;
    Ok(session.answer(resp))
}

/// The upstream session that serves `session` once the one that served it (`forgotten`) is
/// gone: a new one this call begins (counted in the metrics, as is a failure to), or the one a
/// concurrent request began meanwhile.
async fn renew(
    up: &Upstream,
    session: &ResumableSession,
    headers: &HeaderMap,
    forgotten: &HeaderValue,
) -> Result<HeaderValue, String> {
    let _renewing = session.renewing.lock().await;
    let serving = session.upstream();
    if serving != *forgotten {
        return Ok(serving);
    }
    let begun = begin(up, session, headers).await;
    let outcome = match &begun {
        Ok(id) => {
            tracing::info!(server = %up.label, "the client's MCP session goes on on a new upstream session");
            *session.upstream.lock().expect("resumable session lock") = id.clone();
            Resumed::resumed
        }
        Err(why) => {
            tracing::warn!(server = %up.label, %why, "no new upstream session for the client's");
            Resumed::failed
        }
    };
    up.shared.metrics.session_resumed(&up.label, outcome);
    begun
}

/// Begins a new upstream session for `session`: `initialize` with the client's message, then
/// `notifications/initialized`; its id, or why there is none.
async fn begin(
    up: &Upstream,
    session: &ResumableSession,
    headers: &HeaderMap,
) -> Result<HeaderValue, String> {
    let mut opening = opening_headers(headers, session.protocol.as_ref());
    let resp = up
        .send_as_is(
            Method::POST,
            up.uri.clone(),
            &opening,
            session.initialize.clone(),
        )
        .await
        .map_err(|e| e.tell(&up.label))?;
    if !resp.status().is_success() {
        return Err(format!(
            "upstream {} answered the gate's new initialize with HTTP {}",
            up.label,
            resp.status()
        ));
    }
    let id = resp.headers().get(SESSION_HEADER).cloned();
    let result = initialize_result(up, resp).await?;
    let Some(id) = id else {
        return Err(format!(
            "upstream {} began no session (no Mcp-Session-Id) on the gate's new initialize",
            up.label
        ));
    };
    opening.insert(SESSION_HEADER, id.clone());
    if let Some(version) = result["protocolVersion"]
        .as_str()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        opening.insert(PROTOCOL_HEADER, version);
    }
    let resp = up
        .send_as_is(
            Method::POST,
            up.uri.clone(),
            &opening,
            Bytes::from_static(INITIALIZED),
        )
        .await
        .map_err(|e| e.tell(&up.label))?;
    let status = resp.status();
    // The answer to a notification has no message; read it so the connection is free again.
    let _ = up.read_body(resp).await;
    if !status.is_success() {
        return Err(format!(
            "upstream {} answered notifications/initialized on its new session with HTTP {status}",
            up.label
        ));
    }
    Ok(id)
}

/// The client's request `headers` as sent again on the new upstream session `renewed`: without
/// a `Last-Event-ID`, which named an event of the forgotten session.
fn resent(headers: &HeaderMap, renewed: &HeaderValue) -> HeaderMap {
    let mut resent = headers.clone();
    resent.insert(SESSION_HEADER, renewed.clone());
    resent.remove("last-event-id");
    resent
}

/// The headers of the gate's `initialize` on a new upstream session: the client's request's,
/// without its session, without the headers that mirror another message's body, with the
/// protocol header of the client's own `initialize` and an `Accept` of both answer types.
fn opening_headers(client: &HeaderMap, protocol: Option<&HeaderValue>) -> HeaderMap {
    let mut headers = client.clone();
    let mirrored: Vec<_> = headers
        .keys()
        .filter(|k| {
            let k = k.as_str();
            k == SESSION_HEADER
                || k == PROTOCOL_HEADER
                || k == METHOD_HEADER
                || k == NAME_HEADER
                || k == "last-event-id"
                || k.starts_with(PARAM_HEADER_PREFIX)
        })
        .cloned()
        .collect();
    for name in mirrored {
        headers.remove(name);
    }
    if let Some(protocol) = protocol {
        headers.insert(PROTOCOL_HEADER, protocol.clone());
    }
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers
}

/// The `result` of the upstream's answer to the gate's `initialize` (JSON, or the first
/// response on an event stream), or why there is none.
async fn initialize_result(up: &Upstream, resp: UpstreamResponse) -> Result<Value, String> {
    let read_failed = |e: UpstreamError| e.tell(&up.label);
    let message = if is_event_stream(resp.headers()) {
        let mut events = std::pin::pin!(memory::upstream_events(up.body(resp)));
        let mut found = None;
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| read_failed(UpstreamError::Body(e)))?;
            let Some(data) = sse::data(&event) else {
                continue;
            };
            if let Ok(message) = serde_json::from_slice::<Value>(&data)
                && (message.get("result").is_some() || message.get("error").is_some())
            {
                found = Some(message);
                break;
            }
        }
        found.ok_or_else(|| {
            format!(
                "upstream {} ended its answer to the gate's new initialize without one",
                up.label
            )
        })?
    } else {
        let body = up.read_body(resp).await.map_err(read_failed)?;
        serde_json::from_slice::<Value>(&body).map_err(|e| {
            format!(
                "upstream {} answered the gate's new initialize with no JSON-RPC message: {e}",
                up.label
            )
        })?
    };
    match message.get("result") {
        Some(result) if result.is_object() => Ok(result.clone()),
        _ => Err(format!(
            "upstream {} refused the gate's new initialize: {}",
            up.label,
            message["error"]["message"].as_str().unwrap_or("no result")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(s: &'static str) -> HeaderValue {
        HeaderValue::from_static(s)
    }

    #[test]
    fn forgotten_sessions_are_told_from_other_refusals() {
        let nf = StatusCode::NOT_FOUND;
        let bad = StatusCode::BAD_REQUEST;
        // The specification's answer, whatever its body.
        assert!(forgot_session(nf, b""));
        assert!(forgot_session(
            nf,
            br#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}"#
        ));
        // server-everything (TypeScript SDK) and the SDK transport's own.
        assert!(forgot_session(
            bad,
            br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#
        ));
        assert!(forgot_session(
            bad,
            br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}"#
        ));
        // The Python SDK's.
        assert!(forgot_session(
            bad,
            br#"{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}"#
        ));
        // A 400 about something else, or without a readable error, is the answer.
        assert!(!forgot_session(
            bad,
            br#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params"},"id":1}"#
        ));
        assert!(!forgot_session(bad, b"Bad Request: session"));
        assert!(!forgot_session(bad, b""));
        for other in [
            StatusCode::OK,
            StatusCode::ACCEPTED,
            StatusCode::UNAUTHORIZED,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::BAD_GATEWAY,
        ] {
            assert!(
                !forgot_session(other, br#"{"error":{"message":"Session not found"}}"#),
                "{other}"
            );
        }
    }

    #[test]
    fn a_session_maps_to_its_upstream_and_answers_name_the_clients_id() {
        let resumable = Resumable::new(8, 8);
        resumable.begin(&value("c1"), Bytes::from_static(b"{}"), None, None);
        let mut request = HeaderMap::new();
        request.insert(SESSION_HEADER, value("c1"));
        request.insert("x-other", value("1"));
        let session = resumable.of(&request).unwrap();
        // Served by the upstream session it began with: the request goes unchanged.
        assert!(session.on(&request, &session.upstream()).is_none());
        *session.upstream.lock().unwrap() = value("u2");
        let sent = session.on(&request, &session.upstream()).unwrap();
        assert_eq!(sent[SESSION_HEADER], "u2");
        assert_eq!(sent["x-other"], "1");
        let mut resp = UpstreamResponse::new(full_body(Bytes::new()));
        resp.headers_mut().insert(SESSION_HEADER, value("u2"));
        assert_eq!(session.answer(resp).headers()[SESSION_HEADER], "c1");
        // An answer naming no session names none.
        let resp = UpstreamResponse::new(full_body(Bytes::new()));
        assert!(session.answer(resp).headers().get(SESSION_HEADER).is_none());
        // Unknown and deleted sessions are not carried.
        request.insert(SESSION_HEADER, value("c2"));
        assert!(resumable.of(&request).is_none());
        resumable.end("c1");
        request.insert(SESSION_HEADER, value("c1"));
        assert!(resumable.of(&request).is_none());
        assert_eq!(resumable.len(), 0);
    }

    #[test]
    fn what_cannot_be_resent_is_not_remembered() {
        let resumable = Resumable::new(8, 8);
        let long = Bytes::from(vec![b' '; MAX_INITIALIZE_BYTES + 1]);
        resumable.begin(&value("c1"), long, None, None);
        let id = HeaderValue::from_str(&"x".repeat(MAX_SESSION_ID_BYTES + 1)).unwrap();
        resumable.begin(&id, Bytes::from_static(b"{}"), None, None);
        resumable.begin(&value(""), Bytes::from_static(b"{}"), None, None);
        assert_eq!(resumable.len(), 0);
    }

    #[test]
    fn the_least_recently_used_go_first_and_a_caller_holds_its_quota() {
        let resumable = Resumable::new(3, 2);
        let named = |id: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(SESSION_HEADER, value(id));
            h
        };
        for id in ["a", "b", "c"] {
            resumable.begin(&value(id), Bytes::from_static(b"{}"), None, None);
        }
        assert!(resumable.of(&named("a")).is_some());
        resumable.begin(&value("d"), Bytes::from_static(b"{}"), None, None);
        assert!(resumable.of(&named("b")).is_none(), "b was the oldest");
        assert_eq!(resumable.len(), 3);
        let shared = Resumable::new(8, 2);
        shared.begin(&value("a1"), Bytes::new(), None, Some("alice"));
        for id in ["b1", "b2", "b3"] {
            shared.begin(&value(id), Bytes::new(), None, Some("bob"));
        }
        assert!(shared.of(&named("a1")).is_some());
        assert!(shared.of(&named("b1")).is_none());
        assert_eq!(shared.len(), 3);
    }

    #[test]
    fn a_request_sent_again_names_the_new_session_and_no_old_event() {
        let mut client = HeaderMap::new();
        client.insert(SESSION_HEADER, value("c1"));
        client.insert("last-event-id", value("old-7"));
        client.insert(PROTOCOL_HEADER, value("2025-06-18"));
        let resent = resent(&client, &value("u2"));
        assert_eq!(resent[SESSION_HEADER], "u2");
        assert!(resent.get("last-event-id").is_none());
        assert_eq!(resent[PROTOCOL_HEADER], "2025-06-18");
    }

    #[test]
    fn the_new_initialize_carries_the_clients_protocol_and_no_session() {
        let mut client = HeaderMap::new();
        for (k, v) in [
            (SESSION_HEADER, "c1"),
            (PROTOCOL_HEADER, "2025-06-18"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
            ("mcp-param-path", "/x"),
            ("last-event-id", "7"),
            ("accept", "text/event-stream"),
            ("x-kept", "1"),
        ] {
            client.insert(k, value(v));
        }
        let opening = opening_headers(&client, Some(&value("2025-03-26")));
        let mut names: Vec<_> = opening.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["accept", PROTOCOL_HEADER, "x-kept"]);
        assert_eq!(opening[PROTOCOL_HEADER], "2025-03-26");
        assert_eq!(opening["accept"], "application/json, text/event-stream");
        let opening = opening_headers(&client, None);
        assert!(opening.get(PROTOCOL_HEADER).is_none());
    }
}
