//! The Streamable HTTP transport (MCP 2025-03-26 on, `protocol: STREAMABLE_HTTP` servers): one
//! route per tool server, relaying bytes to the upstream and stepping in only for `tools/list`
//! (filtered) and `tools/call` (checked, maybe held for approval: [`super::call`]). The
//! HTTP+SSE transport is in [`super::http_sse`].

use std::io;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri, header};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::arrived::arrived_first;
use super::call::{self, Reply, STREAM_QUEUE, Transport};
use super::callers;
use super::continuation::Watch;
use super::jsonrpc::{self, Filtered, Incoming, Rejected, ToolCall};
use super::memory;
use super::messages::{
    HEADER_MISMATCH, check_body_headers, check_message_headers, filter_event, filter_message,
    message_body, unreadable_text,
};
use super::metrics::Outcome;
use super::outcome;
use super::sessions;
use super::upstream::{Upstream, UpstreamError, UpstreamResponse, is_event_stream, read_all};
use crate::api::approval_request::Caller;
use crate::sse;

/// Header carrying the MCP session id.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Header carrying the negotiated MCP protocol revision.
const PROTOCOL_HEADER: &str = "mcp-protocol-version";

/// Streamable HTTP handler: every method on the server's route.
pub async fn streamable(State(up): State<Arc<Upstream>>, request: Request) -> Response<Body> {
    // The request's own headers, moved out rather than copied; the body is read (within the
    // route's limit) only for a POST that passed the header checks.
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let method = parts.method.clone();
    // On a shared gate: the verified caller, whose sessions alone it may use.
    let caller = parts.extensions.remove::<Arc<Caller>>();
    if let Some(refused) = foreign_session(&up, &headers, caller.as_deref()) {
        return refused;
    }
    if method != Method::POST {
        // Only POST carries messages; other methods are relayed without a body, and methods
        // MCP does not use are refused so no message can slip past the checks.
        if !matches!(
            method,
            Method::GET | Method::DELETE | Method::HEAD | Method::OPTIONS
        ) {
            return Response::builder()
                .status(StatusCode::METHOD_NOT_ALLOWED)
                .header(header::ALLOW, "GET, POST, DELETE")
                .body(Body::empty())
                .expect("static response parts are valid");
        }
        let is_get = method == Method::GET;
        if method == Method::DELETE
            && let Some(id) = session_id(&headers)
        {
            // The client ends its session: a grant for it covers nothing from now on, whatever
            // the upstream answers.
            sessions::ledger().end(&up.server.namespace, &up.server.name, id);
        }
        let is_delete = method == Method::DELETE;
        let sent = up
            .send(method, up.uri.clone(), &headers, Bytes::new())
            .await;
        if is_delete && let Some(id) = session_id(&headers) {
            // Sent to the upstream session serving it: the client's session is not carried on.
            up.resumable.end(id);
        }
        return match sent {
            // A GET stream may replay earlier responses (Last-Event-ID): filter tool lists.
            Ok(resp) if is_get => relay_filtered(resp, None, None, up.clone(), None).await,
            Ok(resp) => up.relay(resp),
            Err(e) => upstream_failed(&up, &e, None),
        };
    }
    if let Err(why) = check_body_headers(&headers) {
        return error_status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &Value::Null,
            -32600,
            &format!("approval gate: {why}"),
        );
    }
    let body = match message_body(body).await {
        Ok(body) => body,
        Err((status, why)) => return error_status(status, &Value::Null, -32600, &why),
    };
    let message = match jsonrpc::read(&body) {
        Ok(message) => message,
        Err(rejected) => return rejected_response(&rejected),
    };
    // MCP 2026-07-28 headers mirroring the body must say what the gate read in it.
    if let Err((id, why)) = check_message_headers(&up, &headers, &message) {
        return error_status(StatusCode::BAD_REQUEST, &id, HEADER_MISMATCH, &why);
    }
    // From here on only the message as the gate wrote it is forwarded.
    let body = message.body;
    let request = message.request_id;
    match message.incoming {
        Incoming::Other => match up.send(method, up.uri.clone(), &headers, body).await {
            Ok(resp) => relay_filtered(resp, None, request.clone(), up.clone(), None).await,
            Err(e) => upstream_failed(&up, &e, request.as_ref()),
        },
        Incoming::Initialize => {
            if let Some(refused) = session_over_budget(&up, caller.as_deref()) {
                return refused;
            }
            match up
                .send(method, up.uri.clone(), &headers, body.clone())
                .await
            {
                Ok(resp) => {
                    note_begun(&up, &resp, caller.as_deref(), body, &headers);
                    relay_filtered(resp, None, request.clone(), up.clone(), None).await
                }
                Err(e) => upstream_failed(&up, &e, request.as_ref()),
            }
        }
        Incoming::ToolsList { id } => match up.send(method, up.uri.clone(), &headers, body).await {
            Ok(resp) => relay_filtered(resp, Some(id), request.clone(), up.clone(), None).await,
            Err(e) => upstream_failed(&up, &e, request.as_ref()),
        },
        Incoming::ToolsCall(call) => {
            let post = StreamablePost {
                up,
                headers,
                caller,
            };
            call::tools_call(post, call, body).await
        }
    }
}

/// On a shared gate, the refusal of a request naming an MCP session that `caller` did not
/// begin at this gate (another caller's, one begun before a restart or forgotten, a made-up
/// one): HTTP 404, as MCP answers a session the server does not know, so the client begins a
/// new one. `None` on an Agent's gate, and for requests naming no session.
fn foreign_session(
    up: &Upstream,
    headers: &HeaderMap,
    caller: Option<&Caller>,
) -> Option<Response<Body>> {
    let caller = caller?;
    let id = headers.get(SESSION_HEADER)?;
    let ours = id.to_str().is_ok_and(|id| {
        sessions::ledger().began(
            &up.server.namespace,
            &up.server.name,
            id,
            Some(&caller.username),
        )
    });
    if ours {
        return None;
    }
    tracing::info!(server = %up.label, caller = %caller.username, "refused: an MCP session this caller did not begin here");
    Some(error_status(
        StatusCode::NOT_FOUND,
        &Value::Null,
        callers::UNKNOWN_SESSION,
        "approval gate: unknown MCP session: it did not begin at this gate for this caller; begin a new session (initialize)",
    ))
}

/// On a shared gate, the refusal (HTTP 429) of a new session (an `initialize`, an HTTP+SSE
/// stream) of a caller over `callers.max_calls_per_minute`: each counts as a call, so that no
/// caller fills the session ledger. `None` when it is within its budget, and on an Agent's gate.
pub fn session_over_budget(up: &Upstream, caller: Option<&Caller>) -> Option<Response<Body>> {
    let (callers, caller) = (up.shared.callers.as_ref()?, caller?);
    let why = callers
        .admit_session(&caller.username, std::time::Instant::now())
        .err()?;
    tracing::info!(server = %up.label, caller = %caller.username, "refused: a new session over the caller's rate limit");
    Some(error_status(
        StatusCode::TOO_MANY_REQUESTS,
        &Value::Null,
        callers::RATE_LIMITED,
        &why,
    ))
}

/// Records the session an upstream assigned in a successful answer to an `initialize` (its
/// `Mcp-Session-Id`, visible ASCII as MCP requires) as begun at this gate, by `caller` on a
/// shared gate, and as one the gate carries across the upstream's restart with the client's
/// `initialize` message and `headers` ([`super::resume`]).
fn note_begun(
    up: &Upstream,
    resp: &UpstreamResponse,
    caller: Option<&Caller>,
    initialize: Bytes,
    headers: &HeaderMap,
) {
    if !resp.status().is_success() {
        return;
    }
    let Some(value) = resp.headers().get(SESSION_HEADER) else {
        return;
    };
    if value.as_bytes().iter().all(u8::is_ascii_graphic)
        && let Ok(id) = value.to_str()
    {
        let caller = caller.map(|c| c.username.as_str());
        sessions::ledger().begin(&up.server.namespace, &up.server.name, id, caller);
        let protocol = headers.get(PROTOCOL_HEADER).cloned();
        up.resumable.begin(value, initialize, protocol, caller);
    }
}

fn protocol(headers: &HeaderMap) -> Option<&str> {
    headers.get(PROTOCOL_HEADER).and_then(|v| v.to_str().ok())
}

/// A JSON-RPC response as an HTTP 200 `application/json` answer.
fn json_response(body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("static response parts are valid")
}

/// An HTTP error carrying a JSON-RPC error for request `id` (null when the message was not
/// read).
fn error_status(status: StatusCode, id: &Value, code: i64, message: &str) -> Response<Body> {
    let mut resp = json_response(jsonrpc::error_response(id, code, message));
    *resp.status_mut() = status;
    resp
}

fn rejected_response(rejected: &Rejected) -> Response<Body> {
    error_status(
        StatusCode::BAD_REQUEST,
        &Value::Null,
        rejected.code(),
        &rejected.to_string(),
    )
}

/// The answer to a client message the upstream did not take. A request (`request`: its id) gets
/// a JSON-RPC error answering it, in an HTTP 200: a client matches the error to the request
/// waiting for it and tells its caller, where some drop an HTTP error on a POST and leave the
/// request waiting (the MCP Python SDK 1.12 in kagent-adk 0.7.4 waits out its SSE read timeout,
/// 300 s, seen on a real node: docs/gate.md). Anything else (a notification, a response, a
/// batch, a GET) gets the HTTP error the failure calls for, carrying the same error.
fn upstream_failed(up: &Upstream, e: &UpstreamError, request: Option<&Value>) -> Response<Body> {
    tracing::warn!(server = %up.label, error = %e, "upstream request failed");
    let message = format!("approval gate: {}", e.tell(&up.label));
    match request {
        Some(id) => json_response(jsonrpc::error_response(id, -32603, &message)),
        None => error_status(e.status(), &Value::Null, -32603, &message),
    }
}

/// Relays an upstream answer with the tools the server may not offer removed from every tool
/// list in it, whether it came as JSON or as an SSE stream, and whatever request it answers: a
/// server may answer a `tools/list` on another request's stream. `request` is the id of the
/// `tools/list` this POST carried, if it did; a message the gate cannot read is replaced by an
/// error answering it (HTTP 502 for a JSON answer), or dropped. Bodies without a message
/// (`202 Accepted`) pass as they are; JSON answers are read whole, up to
/// [`super::upstream::MAX_BODY_BYTES`]. `watch` sees every message before it is relayed.
/// `answering` is the id of the request this POST carried, if any: an event stream cut for
/// the gate's memory budget ends with an error answering it.
async fn relay_filtered(
    resp: UpstreamResponse,
    request: Option<Value>,
    answering: Option<Value>,
    up: Arc<Upstream>,
    watch: Option<Watch>,
) -> Response<Body> {
    let sse = is_event_stream(resp.headers());
    let reservation = if sse {
        None
    } else {
        match memory::reserve_answer(resp.headers()).await {
            Ok(reservation) => Some(reservation),
            Err(why) => {
                return upstream_failed(&up, &UpstreamError::Unreadable(why.to_string()), None);
            }
        }
    };
    let (builder, body) = up.relay_parts(resp);
    if sse {
        let stream = filter_sse(arrived_first(body).await, up, request, answering, watch);
        return builder
            .body(Body::from_stream(stream))
            .expect("upstream response parts are valid");
    }
    let bytes = match read_all(body).await {
        Ok(bytes) => bytes,
        Err(e) => return upstream_failed(&up, &e, None),
    };
    let bytes = match &watch {
        Some(watch) => {
            watch.see(&bytes);
            watch.amend(&bytes).unwrap_or(bytes)
        }
        None => bytes,
    };
    let out = match filter_message(&up, &bytes) {
        Filtered::Unchanged => bytes,
        Filtered::Rewritten(out) => out,
        Filtered::Unreadable(why) => {
            tracing::warn!(server = %up.label, error = %why, "upstream answer unreadable; not relayed");
            return error_status(
                StatusCode::BAD_GATEWAY,
                request.as_ref().unwrap_or(&Value::Null),
                -32603,
                &unreadable_text(&up, &why),
            );
        }
    };
    let resp = builder
        .body(Body::from(out))
        .expect("upstream response parts are valid");
    match reservation {
        Some(reservation) => memory::holding(resp, reservation),
        None => resp,
    }
}

/// An upstream event stream with the tool lists in it filtered (see [`filter_event`]); other
/// events pass as the exact bytes received. An error (an event past
/// [`sse::MAX_EVENT_BYTES`], a silent or broken upstream) is logged and ends the stream.
/// `watch` sees the data of every event before it is relayed. Each event is held within the
/// gate's memory budget ([`memory::upstream_events`]); a stream cut for it ends, when it
/// answers a request (`answering`: its id), with an error answering that request, so that the
/// client is not left waiting.
fn filter_sse(
    upstream: impl Stream<Item = io::Result<Bytes>> + Send + 'static,
    up: Arc<Upstream>,
    request: Option<Value>,
    answering: Option<Value>,
    watch: Option<Watch>,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    memory::upstream_events(upstream).filter_map(move |event| {
        std::future::ready(match event {
            Ok(event) => {
                let mut amended = None;
                if let Some(watch) = &watch
                    && let Some(data) = sse::data(&event)
                {
                    watch.see(&data);
                    amended = watch.amend(&data).map(|data| sse::message(&data));
                }
                let event = amended.unwrap_or(event);
                filter_event(&up, event, request.as_ref()).map(Ok)
            }
            Err(e) => {
                tracing::warn!(server = %up.label, error = %e, "upstream event stream cut off");
                match &answering {
                    Some(id) if is_over_budget(&e) => {
                        let why = format!("approval gate: upstream {}: {e}", up.label);
                        Some(Ok(sse::message(&jsonrpc::error_response(id, -32603, &why))))
                    }
                    _ => Some(Err(e)),
                }
            }
        })
    })
}

/// Whether `e` cut a stream for the gate's memory budget ([`sse::OverBudget`]).
fn is_over_budget(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<sse::OverBudget>())
}

/// The MCP session id the client sent, if any.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok())
}

/// Relays an upstream body into a client's queue chunk by chunk, waiting while the queue is
/// full, so the upstream is read no faster than the client reads. A failure becomes the event
/// `lost` makes of it, which ends the relay, as does a client that went away.
async fn relay_into(
    body: impl Stream<Item = io::Result<Bytes>>,
    tx: &mpsc::Sender<Bytes>,
    lost: impl Fn(UpstreamError) -> Bytes,
) {
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        let (event, last) = match chunk {
            Ok(chunk) => (chunk, false),
            Err(e) => (lost(UpstreamError::Body(e)), true),
        };
        if tx.send(event).await.is_err() || last {
            break;
        }
    }
}

/// A `tools/call` POSTed to a Streamable HTTP route: answered in the response to the POST, as
/// JSON or, for a held call whose client asked for progress and takes an event stream, as SSE.
struct StreamablePost {
    up: Arc<Upstream>,
    headers: HeaderMap,
    caller: Option<Arc<Caller>>,
}

impl Transport for StreamablePost {
    fn upstream(&self) -> &Arc<Upstream> {
        &self.up
    }

    fn session(&self) -> Option<&str> {
        session_id(&self.headers)
    }

    fn caller(&self) -> Option<&Caller> {
        self.caller.as_deref()
    }

    fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    fn endpoint(&self) -> &Uri {
        &self.up.uri
    }

    fn protocol(&self) -> Option<&str> {
        protocol(&self.headers)
    }

    async fn refuse(&self, error: Vec<u8>) -> Response<Body> {
        json_response(error)
    }

    async fn forward(&self, call: &ToolCall, body: Bytes) -> Response<Body> {
        let up = &self.up;
        let metrics = &up.shared.metrics;
        match up
            .send(Method::POST, up.uri.clone(), &self.headers, body)
            .await
        {
            Ok(resp) => {
                metrics.call(Outcome::forwarded);
                relay_filtered(resp, None, Some(call.id.clone()), up.clone(), None).await
            }
            Err(e) => {
                tracing::warn!(server = %up.label, tool = %call.name, error = %e, "upstream failed");
                metrics.call(Outcome::error);
                let why = e.tell(&up.label);
                let text = if e.may_have_reached() {
                    outcome::upstream_lost(&call.name, None, &why)
                } else {
                    outcome::error(&call.name, &why)
                };
                json_response(jsonrpc::tool_error(&call.id, &text, self.protocol()))
            }
        }
    }

    async fn relay(&self, resp: UpstreamResponse, watch: Option<Watch>) -> Response<Body> {
        let answering = watch.as_ref().map(|w| w.id().clone());
        relay_filtered(resp, None, answering, self.up.clone(), watch).await
    }

    /// An event stream if the client asked for progress and takes one (`Accept`); otherwise
    /// the answer waits for the decision.
    fn reply(&self, call: &ToolCall) -> Reply {
        let streaming = call.progress_token.is_some()
            && self
                .headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("text/event-stream"));
        if !streaming {
            return Reply::Response;
        }
        let (queue, mut rx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
        let stream = futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx).map(|o| o.map(Ok::<_, std::io::Error>))
        });
        let response = Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(stream))
            .expect("static response parts are valid");
        Reply::Stream { queue, response }
    }

    /// The upstream's answer, as JSON or an event stream, as events on the client's stream,
    /// with its tool lists filtered.
    async fn relay_to_stream(
        &self,
        resp: UpstreamResponse,
        queue: &mpsc::Sender<Bytes>,
        lost: impl Fn(UpstreamError) -> Bytes + Send + Sync,
        watch: Watch,
    ) {
        let up = &self.up;
        if is_event_stream(resp.headers()) {
            let events = filter_sse(up.body(resp), up.clone(), None, None, Some(watch));
            relay_into(events, queue, lost).await;
        } else {
            let _reservation = match memory::reserve_answer(resp.headers()).await {
                Ok(reservation) => reservation,
                Err(why) => {
                    let _ = queue
                        .send(lost(UpstreamError::Unreadable(why.to_string())))
                        .await;
                    return;
                }
            };
            let body = up.read_body(resp).await.map(|body| {
                watch.see(&body);
                watch.amend(&body).unwrap_or(body)
            });
            let event = match body {
                Ok(body) => match filter_message(up, &body) {
                    Filtered::Unchanged => sse::message(&body),
                    Filtered::Rewritten(body) => sse::message(&body),
                    Filtered::Unreadable(why) => lost(UpstreamError::Unreadable(why)),
                },
                Err(e) => lost(e),
            };
            let _ = queue.send(event).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_client_that_does_not_read_holds_the_upstream_back() {
        let read = Arc::new(AtomicUsize::new(0));
        let counted = read.clone();
        let body = futures::stream::iter(0..1000).map(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(Bytes::from_static(b"data: x\n\n"))
        });
        let (tx, mut rx) = mpsc::channel(STREAM_QUEUE);
        let relay = tokio::spawn(async move { relay_into(body, &tx, |_| Bytes::new()).await });
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        // A full queue and the chunk waiting for room: nothing more is read upstream.
        assert_eq!(read.load(Ordering::SeqCst), STREAM_QUEUE + 1);
        let mut relayed = 0;
        while rx.recv().await.is_some() {
            relayed += 1;
        }
        assert_eq!(relayed, 1000);
        relay.await.unwrap();
    }
}
