//! The MCP proxy: one route per tool server, relaying bytes to the upstream and stepping in
//! only for `tools/list` (filtered) and `tools/call` (checked, maybe held for approval).
//! Streamable HTTP is handled here; the legacy HTTP+SSE transport is in [`super::legacy`].

use std::io;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri, header};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::approval::{Asked, FREEZE_BOUND, GatedCall, Resolution};
use super::arrived::arrived_first;
use super::decision::CallKey;
use super::hash;
use super::jsonrpc::{self, Filtered, Incoming, Rejected, ToolCall};
use super::metrics::Outcome;
use super::outcome;
use super::policy::{PolicyCall, PolicyVerdict};
use super::redact;
use super::sessions;
use super::upstream::{Upstream, UpstreamError, UpstreamResponse, is_event_stream, read_all};
use crate::Error;
use crate::api::approval_request::CallContext;
use crate::condition::Activation;
use crate::sse;

/// Header carrying the MCP session id.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Header carrying the negotiated MCP protocol revision.
const PROTOCOL_HEADER: &str = "mcp-protocol-version";

/// Events the gate queues for a client's event stream that it writes itself (a gated call's
/// progress and answer, the legacy transport's injected answers). A full queue holds the
/// writer back (the upstream is read no faster than the client reads); a progress
/// notification that finds it full is dropped, as progress is advisory.
pub const STREAM_QUEUE: usize = 16;

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

/// Streamable HTTP handler: every method on the server's route.
pub async fn streamable(State(up): State<Arc<Upstream>>, request: Request) -> Response<Body> {
    // The request's own headers, moved out rather than copied; the body is read (within the
    // route's limit) only for a POST that passed the header checks.
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let method = parts.method.clone();
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
        return match up
            .send(method, up.uri.clone(), &headers, Bytes::new())
            .await
        {
            // A GET stream may replay earlier responses (Last-Event-ID): filter tool lists.
            Ok(resp) if is_get => relay_filtered(resp, None, up.clone()).await,
            Ok(resp) => up.relay(resp),
            Err(e) => upstream_failed(&up, &e),
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
    let body = Bytes::from_request(Request::from_parts(parts, body), &()).await;
    let body = match message_body(body) {
        Ok(body) => body,
        Err((status, why)) => return error_status(status, &Value::Null, -32600, &why),
    };
    let message = match jsonrpc::read(&body) {
        Ok(message) => message,
        Err(rejected) => return rejected_response(&rejected),
    };
    // From here on only the message as the gate wrote it is forwarded.
    let body = Bytes::from(message.body);
    match message.incoming {
        Incoming::Other => match up.send(method, up.uri.clone(), &headers, body).await {
            Ok(resp) => relay_filtered(resp, None, up.clone()).await,
            Err(e) => upstream_failed(&up, &e),
        },
        Incoming::Initialize => match up.send(method, up.uri.clone(), &headers, body).await {
            Ok(resp) => {
                note_begun(&up, &resp);
                relay_filtered(resp, None, up.clone()).await
            }
            Err(e) => upstream_failed(&up, &e),
        },
        Incoming::ToolsList { id } => match up.send(method, up.uri.clone(), &headers, body).await {
            Ok(resp) => relay_filtered(resp, Some(id), up.clone()).await,
            Err(e) => upstream_failed(&up, &e),
        },
        Incoming::ToolsCall(call) => tools_call(up, headers, body, call).await,
    }
}

/// Records the session an upstream assigned in a successful answer to an `initialize` (its
/// `Mcp-Session-Id`, visible ASCII as MCP requires) as begun at this gate.
fn note_begun(up: &Upstream, resp: &UpstreamResponse) {
    if !resp.status().is_success() {
        return;
    }
    let Some(id) = resp.headers().get(SESSION_HEADER) else {
        return;
    };
    if id.as_bytes().iter().all(u8::is_ascii_graphic)
        && let Ok(id) = id.to_str()
    {
        sessions::ledger().begin(&up.server.namespace, &up.server.name, id);
    }
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

fn upstream_failed(up: &Upstream, e: &UpstreamError) -> Response<Body> {
    tracing::warn!(server = %up.label, error = %e, "upstream request failed");
    let mut resp = json_response(jsonrpc::error_response(
        &Value::Null,
        -32603,
        &format!("approval gate: {}", e.tell(&up.label)),
    ));
    *resp.status_mut() = e.status();
    resp
}

/// Relays an upstream answer with the tools the server may not offer removed from every tool
/// list in it, whether it came as JSON or as an SSE stream, and whatever request it answers: a
/// server may answer a `tools/list` on another request's stream. `request` is the id of the
/// `tools/list` this POST carried, if it did; a message the gate cannot read is replaced by an
/// error answering it (HTTP 502 for a JSON answer), or dropped. Bodies without a message
/// (`202 Accepted`) pass as they are; JSON answers are read whole, up to
/// [`super::upstream::MAX_BODY_BYTES`].
async fn relay_filtered(
    resp: UpstreamResponse,
    request: Option<Value>,
    up: Arc<Upstream>,
) -> Response<Body> {
    let sse = is_event_stream(resp.headers());
    let (builder, body) = up.relay_parts(resp);
    if sse {
        let stream = filter_sse(arrived_first(body).await, up, request);
        return builder
            .body(Body::from_stream(stream))
            .expect("upstream response parts are valid");
    }
    let bytes = match read_all(body).await {
        Ok(bytes) => bytes,
        Err(e) => return upstream_failed(&up, &e),
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
    builder
        .body(Body::from(out))
        .expect("upstream response parts are valid")
}

fn unreadable_text(up: &Upstream, why: &str) -> String {
    format!(
        "approval gate: upstream {} sent a message the gate cannot read unambiguously, so it \
         was not relayed: {why}",
        up.label
    )
}

/// An upstream event stream with the tool lists in it filtered (see [`filter_event`]); other
/// events pass as the exact bytes received. An error (an event past
/// [`sse::MAX_EVENT_BYTES`], a silent or broken upstream) is logged and ends the stream.
fn filter_sse(
    upstream: impl Stream<Item = io::Result<Bytes>> + Send + 'static,
    up: Arc<Upstream>,
    request: Option<Value>,
) -> impl Stream<Item = io::Result<Bytes>> + Send {
    sse::events(upstream).filter_map(move |event| {
        std::future::ready(match event {
            Ok(event) => filter_event(&up, event, request.as_ref()).map(Ok),
            Err(e) => {
                tracing::warn!(server = %up.label, error = %e, "upstream event stream cut off");
                Some(Err(e))
            }
        })
    })
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
fn filter_message(up: &Upstream, message: &[u8]) -> Filtered {
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

/// A `tools/call`: refused if the tool is not offered, forwarded if it needs no approval,
/// otherwise held until its ApprovalRequest resolves.
async fn tools_call(
    up: Arc<Upstream>,
    headers: HeaderMap,
    body: Bytes,
    call: ToolCall,
) -> Response<Body> {
    let metrics = up.shared.metrics.clone();
    let proto = protocol(&headers).map(str::to_owned);
    let asked = match screen(&up, session_id(&headers), &call, body.len()).await {
        Screened::Refused(text) => {
            return json_response(jsonrpc::tool_error(&call.id, &text, proto.as_deref()));
        }
        Screened::Ask(asked) => asked,
        Screened::Forward => {
            return match up.send(Method::POST, up.uri.clone(), &headers, body).await {
                Ok(resp) => {
                    metrics.call(Outcome::forwarded);
                    relay_filtered(resp, None, up.clone()).await
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
                    json_response(jsonrpc::tool_error(&call.id, &text, proto.as_deref()))
                }
            };
        }
    };
    let streaming = call.progress_token.is_some()
        && headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
    if !streaming {
        // Boxed: the wait for an approval holds much state, which would otherwise be part of
        // (and moved with) the future of every call, gated or not.
        let outgoing = Outgoing {
            uri: up.uri.clone(),
            headers: &headers,
            body,
        };
        let gated = Box::pin(gated(
            &up,
            outgoing,
            session_id(&headers),
            &call,
            asked,
            &|_| {},
        ));
        return match gated.await {
            GatedResult::Forwarded(resp, _) => relay_filtered(resp, None, up.clone()).await,
            GatedResult::Refused(text) => {
                json_response(jsonrpc::tool_error(&call.id, &text, proto.as_deref()))
            }
        };
    }
    // Progress wanted: answer with an SSE stream carrying progress notifications, then the
    // result. If the client goes away before a decision, the wait stops and nothing runs.
    let (tx, mut rx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
    tokio::spawn(async move {
        let token = call.progress_token.clone().unwrap_or(Value::Null);
        let count = std::sync::atomic::AtomicU64::new(0);
        let ptx = tx.clone();
        let progress = move |msg: &str| {
            let n = count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let _ = ptx.try_send(sse::message(&jsonrpc::progress(&token, n, msg)));
        };
        let result = tokio::select! {
            r = gated(
                &up,
                Outgoing { uri: up.uri.clone(), headers: &headers, body },
                session_id(&headers),
                &call,
                asked,
                &progress,
            ) => r,
            _ = tx.closed() => {
                tracing::info!(server = %up.label, tool = %call.name, "client went away while waiting; not forwarded");
                return;
            }
        };
        let refusal = match result {
            GatedResult::Forwarded(resp, request) if !resp.status().is_success() => {
                let why = format!("HTTP {}", resp.status());
                Some(outcome::upstream_failed_after_approval(
                    &call.name, &request, &why,
                ))
            }
            GatedResult::Forwarded(resp, request) => {
                let lost = |e: UpstreamError| {
                    let why = e.tell(&up.label);
                    let text = outcome::upstream_lost(&call.name, Some(&request), &why);
                    sse::message(&jsonrpc::tool_error(&call.id, &text, proto.as_deref()))
                };
                if is_event_stream(resp.headers()) {
                    relay_into(filter_sse(up.body(resp), up.clone(), None), &tx, lost).await;
                } else {
                    let event = match up.read_body(resp).await {
                        Ok(body) => match filter_message(&up, &body) {
                            Filtered::Unchanged => sse::message(&body),
                            Filtered::Rewritten(body) => sse::message(&body),
                            Filtered::Unreadable(why) => lost(UpstreamError::Unreadable(why)),
                        },
                        Err(e) => lost(e),
                    };
                    let _ = tx.send(event).await;
                }
                None
            }
            GatedResult::Refused(text) => Some(text),
        };
        if let Some(text) = refusal {
            let error = jsonrpc::tool_error(&call.id, &text, proto.as_deref());
            let _ = tx.send(sse::message(&error)).await;
        }
    });
    let stream = futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| o.map(Ok::<_, std::io::Error>))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("static response parts are valid")
}

/// What the gate's policy lets a `tools/call` do; refusals are already logged and counted.
pub enum Screened {
    /// Not forwarded: the text for the caller.
    Refused(String),
    /// Forwarded without approval.
    Forward,
    /// Held for an approval.
    Ask(Asked),
}

/// Applies the server's policy ([`super::policy`]) to `call` of MCP session `session`, whose
/// message as the gate read it is `message_bytes` long, before anything is forwarded or asked;
/// then the Agent's freeze to a call of a tool the policy governs (in `requireApproval` or
/// named by a rule), unless a Deny rule refused it already.
pub async fn screen(
    up: &Upstream,
    session: Option<&str>,
    call: &ToolCall,
    message_bytes: usize,
) -> Screened {
    let verdict = up.policy.decide(&PolicyCall {
        tool: &call.name,
        args: &call.arguments,
        message_bytes,
        session,
    });
    let metrics = &up.shared.metrics;
    let governed = !matches!(
        verdict,
        PolicyVerdict::NotOffered | PolicyVerdict::Deny { .. }
    ) && up.policy.governs(&call.name);
    if governed && let Some(why) = up.shared.approvals.freeze().refusal(FREEZE_BOUND).await {
        tracing::info!(server = %up.label, tool = %call.name, %why, "refused: agent frozen");
        metrics.call(Outcome::frozen);
        return Screened::Refused(outcome::frozen(&call.name, &why));
    }
    match verdict {
        PolicyVerdict::NotOffered => {
            tracing::info!(server = %up.label, tool = %call.name, "refused: tool not offered");
            metrics.call(Outcome::refused);
            Screened::Refused(outcome::unknown_tool(&call.name))
        }
        PolicyVerdict::Deny { rule } => {
            tracing::info!(server = %up.label, tool = %call.name, %rule, "refused by an approval rule");
            metrics.call(Outcome::denied_by_rule);
            Screened::Refused(outcome::denied_by_rule(&call.name, &rule))
        }
        PolicyVerdict::Forward { .. } => Screened::Forward,
        PolicyVerdict::RequireApproval {
            rule,
            required_approvals,
            unevaluated,
        } => {
            if let (Some(rule), Some(why)) = (&rule, &unevaluated) {
                tracing::info!(server = %up.label, tool = %call.name, %rule, %why,
                    "the rule's condition could not be evaluated; asking for approval");
            }
            Screened::Ask(Asked {
                rule,
                required_approvals,
            })
        }
    }
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

/// The end of a gated call.
pub enum GatedResult {
    /// Approved and forwarded: the upstream's answer, and the request that approved it.
    Forwarded(UpstreamResponse, String),
    /// Not forwarded: the text for the caller.
    Refused(String),
}

/// A gated call's message as the gate forwards it, once approved.
pub struct Outgoing<'a> {
    /// Where: the upstream's URL, or the legacy session's endpoint.
    pub uri: Uri,
    /// The client's headers ([`Upstream::send`] drops what it must).
    pub headers: &'a HeaderMap,
    /// The call as the gate read it ([`jsonrpc::Message::body`]), so it carries the arguments
    /// that were hashed and shown.
    pub body: Bytes,
}

/// Runs the approval of a gated call and forwards it (`outgoing`) if (and only if) this gate
/// consumed an approval for exactly these arguments. `session` is the call's MCP session (the
/// client's `Mcp-Session-Id`; the gate's own id on the legacy transport); `asked` says which
/// approval rule asked and how many approvals it needs.
pub async fn gated(
    up: &Upstream,
    outgoing: Outgoing<'_>,
    session: Option<&str>,
    call: &ToolCall,
    asked: Asked,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> GatedResult {
    let metrics = &up.shared.metrics;
    let digest = match hash::digest(&up.shared.key, &call.arguments) {
        Ok(d) => d,
        Err(e) => {
            metrics.call(Outcome::error);
            return GatedResult::Refused(outcome::error(
                &call.name,
                &format!("arguments cannot be canonicalized: {e}"),
            ));
        }
    };
    let gated_call = GatedCall {
        key: CallKey {
            agent: up.agent.clone(),
            server_kind: up.server.kind,
            server_namespace: up.server.namespace.clone(),
            server_name: up.server.name.clone(),
            tool: call.name.clone(),
            binding: digest.binding.clone(),
            required_approvals: asked.required_approvals,
        },
        digest,
        preview: redact::preview(&call.arguments),
        rule: asked.rule,
        context: CallContext {
            session_id: session.map(|s| s.chars().take(256).collect()),
            task_id: None,
            call_id: Some(match &call.id {
                Value::String(s) => s.chars().take(256).collect(),
                other => other.to_string().chars().take(256).collect(),
            }),
        },
    };
    let facts = up.shared.approvals.grants_enabled().then(|| {
        Activation::new(&up.policy.facts(&PolicyCall {
            tool: &call.name,
            args: &call.arguments,
            message_bytes: outgoing.body.len(),
            session,
        }))
    });
    let (name, kind) = match approve(up, &gated_call, facts.as_ref(), &call.name, progress).await {
        Ok(approved) => approved,
        Err(refused) => return GatedResult::Refused(refused),
    };
    let Outgoing { uri, headers, body } = outgoing;
    match up.send(Method::POST, uri, headers, body).await {
        Ok(resp) => {
            tracing::info!(server = %up.label, tool = %call.name, request = %name, outcome = ?kind, "approved call forwarded");
            metrics.call(kind);
            GatedResult::Forwarded(resp, name)
        }
        Err(e) => {
            tracing::warn!(server = %up.label, tool = %call.name, request = %name, error = %e, "upstream failed after approval");
            metrics.call(Outcome::error);
            let why = e.tell(&up.label);
            GatedResult::Refused(if e.may_have_reached() {
                outcome::upstream_lost(&call.name, Some(&name), &why)
            } else {
                outcome::upstream_failed_after_approval(&call.name, &name, &why)
            })
        }
    }
}

/// Resolves the approval of `gated_call` (a grant, with the call's `facts`, or a person): the
/// name of the request this gate consumed and how it was approved, or the text refusing the
/// call.
async fn approve(
    up: &Upstream,
    gated_call: &GatedCall,
    facts: Option<&Activation>,
    tool: &str,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<(String, Outcome), String> {
    let metrics = &up.shared.metrics;
    let approvals = &up.shared.approvals;
    let started = Instant::now();
    let resolution = approvals.resolve(gated_call, facts, progress).await;
    metrics.approval_wait(started.elapsed());
    match resolution {
        Ok(Resolution::Approved { name }) => Ok((name, Outcome::approved)),
        Ok(Resolution::Granted { name }) => Ok((name, Outcome::granted)),
        Ok(other) => {
            let (text, kind) = outcome::refusal_text(tool, approvals.namespace(), &other)
                .expect("only Approved has no refusal text");
            tracing::info!(server = %up.label, tool, outcome = ?kind, args_hash = %gated_call.key.binding, "gated call not forwarded");
            metrics.call(kind);
            Err(text)
        }
        Err(Error::OpenRequestCap { open, cap }) => {
            tracing::warn!(server = %up.label, tool, open, cap, args_hash = %gated_call.key.binding,
                "refused: the agent is at its cap of open ApprovalRequests");
            metrics.open_request_cap_reached();
            metrics.call(Outcome::refused);
            Err(outcome::open_request_cap(
                tool,
                approvals.namespace(),
                open,
                cap,
            ))
        }
        Err(e) => {
            tracing::warn!(server = %up.label, tool, reason = e.reason(), error = %e, "approval failed; not forwarded");
            metrics.call(Outcome::error);
            Err(outcome::error(tool, &format!("{} ({})", e, e.reason())))
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
