//! The HTTP+SSE transport (MCP 2024-11-05, servers with `protocol: SSE`). The client opens the
//! event stream with GET on the server's route; the gate opens the upstream stream and rewrites
//! its `endpoint` event to `<route>/messages?session=<id>`. The client's POSTs there are relayed
//! to the upstream endpoint (same origin as the upstream URL only). Because answers travel on
//! the event stream, the gate writes its own answers (refusals, progress) into that stream and
//! filters `tools/list` results on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri, header};
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::call::{self, Reply, STREAM_QUEUE, Transport};
use super::continuation::Watch;
use super::edit_note::PendingNotes;
use super::jsonrpc::{self, Incoming, ToolCall};
use super::memory::{self, MessageShare};
use super::messages::{check_body_headers, check_message_headers, filter_event, message_body};
use super::metrics::Outcome;
use super::sessions;
use super::streamable_http;
use super::upstream::{Upstream, UpstreamError, UpstreamResponse};
use crate::api::approval_request::Caller;
use crate::sse;

/// One client's event stream.
struct Session {
    /// Where the upstream wants this session's messages.
    post_uri: Uri,
    /// Who opened it, on a shared gate: only its messages are taken.
    caller: Option<String>,
    /// Writes gate-made events into the client's stream.
    inject: mpsc::Sender<Bytes>,
    /// Notes for answers still to come on the stream (an edited call's).
    notes: Arc<PendingNotes>,
}

/// The SSE sessions of one upstream.
pub struct SseRoute {
    /// The upstream.
    pub up: Arc<Upstream>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    counter: AtomicU64,
}

impl SseRoute {
    /// Routes for the SSE upstream `up`.
    pub fn new(up: Arc<Upstream>) -> Self {
        Self {
            up,
            sessions: Mutex::default(),
            counter: AtomicU64::new(0),
        }
    }

    fn new_session_id(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let seed = format!(
            "{n}:{:?}:{}",
            std::time::SystemTime::now(),
            std::process::id()
        );
        hex::encode(&Sha256::digest(seed.as_bytes())[..16])
    }

    fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions
            .lock()
            .expect("sessions lock")
            .get(id)
            .cloned()
    }
}

/// Removes a session when its stream ends.
struct SessionGuard {
    route: Arc<SseRoute>,
    id: String,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.route
            .sessions
            .lock()
            .expect("sessions lock")
            .remove(&self.id);
        let server = &self.route.up.server;
        sessions::ledger().end(&server.namespace, &server.name, &self.id);
    }
}

/// GET on the route: open the upstream event stream and relay it; on a shared gate the
/// session is the verified `caller`'s.
pub async fn open(
    State(route): State<Arc<SseRoute>>,
    caller: Option<Extension<Arc<Caller>>>,
    headers: HeaderMap,
) -> Response<Body> {
    let up = &route.up;
    if let Some(refused) =
        streamable_http::session_over_budget(up, caller.as_deref().map(Arc::as_ref))
    {
        return refused;
    }
    let caller = caller.map(|Extension(c)| c.username.clone());
    let resp = match up
        .send(Method::GET, up.uri.clone(), &headers, Bytes::new())
        .await
    {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return up.relay(r),
        Err(e) => {
            tracing::warn!(server = %up.label, error = %e, "upstream SSE stream failed");
            return Response::builder()
                .status(e.status())
                .body(Body::from(format!("approval gate: {}", e.tell(&up.label))))
                .expect("static response parts are valid");
        }
    };
    let id = route.new_session_id();
    let (inject, injected) = mpsc::channel::<Bytes>(STREAM_QUEUE);
    let guard = SessionGuard {
        route: route.clone(),
        id: id.clone(),
    };
    let endpoint = format!("{}/messages?session={id}", up.server.route);
    let notes = Arc::new(PendingNotes::default());
    let upstream_events = memory::upstream_events(up.body(resp)).filter_map(move |ev| {
        // Keep the guard alive as long as the stream.
        let _ = &guard;
        std::future::ready(rewrite_event(
            &route,
            &id,
            &endpoint,
            &inject,
            &notes,
            caller.as_deref(),
            ev,
        ))
    });
    let injected = futures::stream::unfold(injected, |mut rx| async move {
        rx.recv().await.map(|b| (Some(Ok(b)), rx))
    });
    // The client's stream ends when the upstream's does (`None` marks that end).
    let upstream_events = upstream_events
        .map(Some)
        .chain(futures::stream::once(async { None }));
    let merged = futures::stream::select(upstream_events, injected)
        .take_while(|item| std::future::ready(item.is_some()))
        .filter_map(std::future::ready);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(merged))
        .expect("static response parts are valid")
}

/// Rewrites the `endpoint` event (registering the session), adds a waiting note to the
/// answer it is for (`notes`), and filters tool lists (see [`filter_event`]); `None` drops the
/// event.
fn rewrite_event(
    route: &Arc<SseRoute>,
    id: &str,
    endpoint: &str,
    inject: &mpsc::Sender<Bytes>,
    notes: &Arc<PendingNotes>,
    caller: Option<&str>,
    ev: std::io::Result<Bytes>,
) -> Option<std::io::Result<Bytes>> {
    let ev = match ev {
        Ok(ev) => ev,
        Err(e) => return Some(Err(e)),
    };
    let Some(data) = sse::data(&ev) else {
        return Some(Ok(ev));
    };
    if sse::event_type(&ev) == b"endpoint" {
        let target = std::str::from_utf8(&data)
            .ok()
            .and_then(|d| route.up.url.join(d.trim()).ok())
            .filter(|u| u.origin() == route.up.url.origin())
            .and_then(|u| Uri::try_from(u.as_str()).ok());
        let Some(post_uri) = target else {
            tracing::warn!(server = %route.up.label, "upstream endpoint is not on the upstream's origin; closing");
            return Some(Err(std::io::Error::other("upstream endpoint rejected")));
        };
        route.sessions.lock().expect("sessions lock").insert(
            id.to_string(),
            Arc::new(Session {
                post_uri,
                caller: caller.map(String::from),
                inject: inject.clone(),
                notes: notes.clone(),
            }),
        );
        let server = &route.up.server;
        sessions::ledger().begin(&server.namespace, &server.name, id, caller);
        return Some(Ok(sse::with_data(&ev, endpoint.as_bytes())));
    }
    if let Some(amended) = notes.amend(&data) {
        return Some(Ok(sse::with_data(&ev, &amended)));
    }
    // Every tool list on the stream is filtered, whichever request it answers.
    filter_event(&route.up, ev, None).map(Ok)
}

/// Query of the gate's message endpoint.
#[derive(Deserialize)]
pub struct MessageQuery {
    session: String,
}

/// POST of a client message for an SSE session; on a shared gate only the session's own
/// caller's messages are taken, anyone else's is refused as for an unknown session.
pub async fn message(
    State(route): State<Arc<SseRoute>>,
    Query(q): Query<MessageQuery>,
    caller: Option<Extension<Arc<Caller>>>,
    share: Option<Extension<MessageShare>>,
    headers: HeaderMap,
    body: Body,
) -> Response<Body> {
    let caller = caller.map(|Extension(c)| c);
    let Some(session) = route
        .session(&q.session)
        .filter(|s| s.caller.as_deref() == caller.as_ref().map(|c| c.username.as_str()))
    else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("unknown session"))
            .expect("static response parts are valid");
    };
    if let Err(why) = check_body_headers(&headers) {
        return Response::builder()
            .status(StatusCode::UNSUPPORTED_MEDIA_TYPE)
            .body(Body::from(format!("approval gate: {why}")))
            .expect("static response parts are valid");
    }
    let body = match message_body(body).await {
        Ok(body) => body,
        Err((status, why)) => {
            return Response::builder()
                .status(status)
                .body(Body::from(why))
                .expect("static response parts are valid");
        }
    };
    let message = match jsonrpc::read(&body) {
        Ok(message) => message,
        Err(rejected) => {
            return Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .body(Body::from(rejected.to_string()))
                .expect("static response parts are valid");
        }
    };
    if let Err((_, why)) = check_message_headers(&route.up, &headers, &message) {
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body(Body::from(why))
            .expect("static response parts are valid");
    }
    // From here on only the message as the gate wrote it is forwarded.
    let body = message.body;
    let post = SsePost {
        route,
        session,
        id: q.session,
        headers,
        caller,
        _share: share.map(|Extension(share)| share),
    };
    match message.incoming {
        Incoming::Other | Incoming::Initialize | Incoming::ToolsList { .. } => {
            post.send(body).await
        }
        Incoming::ToolsCall(call) => call::tools_call(post, call, body).await,
    }
}

/// An answer accepting a message whose answer, if any, comes on the event stream.
fn accepted() -> Response<Body> {
    Response::builder()
        .status(StatusCode::ACCEPTED)
        .body(Body::from("Accepted"))
        .expect("static response parts are valid")
}

/// A message POSTed to an SSE session's message endpoint. The gate's own answers to a
/// `tools/call` (refusals, progress, errors) go into the session's event stream.
struct SsePost {
    route: Arc<SseRoute>,
    session: Arc<Session>,
    /// The gate's id for the session, which began at this gate: a call's MCP session.
    id: String,
    headers: HeaderMap,
    /// The session's caller, on a shared gate.
    caller: Option<Arc<Caller>>,
    /// The message's share of the gate's memory budget, held as long as the message: past the
    /// POST's answer (202) for a call held for approval.
    _share: Option<MessageShare>,
}

impl SsePost {
    /// Relays the message to the session's upstream endpoint, and the upstream's answer back.
    async fn send(&self, body: Bytes) -> Response<Body> {
        let up = &self.route.up;
        match up
            .send(
                Method::POST,
                self.session.post_uri.clone(),
                &self.headers,
                body,
            )
            .await
        {
            Ok(resp) => self.relay(resp, None).await,
            Err(e) => {
                tracing::warn!(server = %up.label, error = %e, "upstream message failed");
                Response::builder()
                    .status(e.status())
                    .body(Body::from(format!("approval gate: {}", e.tell(&up.label))))
                    .expect("static response parts are valid")
            }
        }
    }
}

impl Transport for SsePost {
    fn upstream(&self) -> &Arc<Upstream> {
        &self.route.up
    }

    fn session(&self) -> Option<&str> {
        Some(&self.id)
    }

    fn caller(&self) -> Option<&Caller> {
        self.caller.as_deref()
    }

    fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    fn endpoint(&self) -> &Uri {
        &self.session.post_uri
    }

    /// None: the HTTP+SSE transport (2024-11-05) has no protocol header.
    fn protocol(&self) -> Option<&str> {
        None
    }

    /// The session's: answers come on its event stream.
    fn pending_notes(&self) -> Option<&PendingNotes> {
        Some(&self.session.notes)
    }

    async fn refuse(&self, error: Vec<u8>) -> Response<Body> {
        let _ = self.session.inject.send(sse::message(&error)).await;
        accepted()
    }

    async fn forward(&self, _: &ToolCall, body: Bytes) -> Response<Body> {
        let resp = self.send(body).await;
        self.route
            .up
            .shared
            .metrics
            .call(if resp.status().is_success() {
                Outcome::forwarded
            } else {
                Outcome::error
            });
        resp
    }

    /// The upstream's answer to the POST as it is (`202 Accepted`; its answer to a call comes
    /// on the session's stream). Nothing to watch: the HTTP+SSE transport (2024-11-05) has no
    /// `input_required` answers.
    async fn relay(&self, resp: UpstreamResponse, _: Option<Watch>) -> Response<Body> {
        self.route.up.relay(resp)
    }

    /// Always the session's stream: the POST is accepted at once.
    fn reply(&self, _: &ToolCall) -> Reply {
        Reply::Stream {
            queue: self.session.inject.clone(),
            response: accepted(),
        }
    }

    /// Nothing to write: the upstream answers on the session's stream, which the gate relays.
    async fn relay_to_stream(
        &self,
        _: UpstreamResponse,
        _: &mpsc::Sender<Bytes>,
        _: impl Fn(UpstreamError) -> Bytes + Send + Sync,
        _: Watch,
    ) {
    }
}
