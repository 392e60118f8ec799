//! The upstream side of the gate: each tool server's connections, headers and limits, and how
//! upstream answers are relayed back.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Uri, header};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use http_body_util::{Either, Full};
use hyper::body::{Body as _, Incoming};

use super::approval::Approvals;
use super::callers::Callers;
use super::continuation::Continuations;
use super::messages::ParamHeaders;
use super::metrics::Metrics;
use super::policy::ServerPolicy;
use super::pool::{Connector, Pool, SendError};
use super::resume::{self, Resumable};
use super::tool_definitions::ToolDefinitions;
use crate::contract::binding_key::BindingKey;
use crate::contract::gate_config::GateServer;

/// An upstream response, its body still to be read.
pub type UpstreamResponse = Response<UpstreamBody>;

/// The body of an upstream response: as it comes, or read whole by the gate already (an
/// error answer it looked into: [`super::resume`]).
pub type UpstreamBody = Either<Incoming, Full<Bytes>>;

/// A body the gate read whole, as an upstream response's.
pub fn full_body(bytes: Bytes) -> UpstreamBody {
    Either::Right(Full::new(bytes))
}

/// What every route shares: how to connect to upstreams, approvals and metrics.
#[derive(Clone)]
pub struct Shared {
    /// Makes upstream connections.
    pub connector: Connector,
    /// Keys the hash that binds an approval to a call's arguments.
    pub key: BindingKey,
    /// ApprovalRequests of the agent.
    pub approvals: Approvals,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The callers of a shared gate (gate.json `callers`); `None` on an Agent's gate.
    pub callers: Option<Arc<Callers>>,
}

/// One tool server behind the gate.
pub struct Upstream {
    /// Identity and configuration of the server.
    pub server: GateServer,
    /// What its tool calls may do: offered tools, approval rules, `requireApproval`.
    pub policy: ServerPolicy,
    /// The upstream URL (for joining and comparing origins).
    pub url: reqwest::Url,
    /// The same URL as the request target.
    pub uri: Uri,
    /// Headers from `params.headers`, added to every upstream request.
    pub headers: HeaderMap,
    /// Open connections to the server.
    pool: Pool,
    /// `params.timeout`: how long the upstream may take to answer a request (and to send the
    /// next chunk of a JSON body).
    pub timeout: Option<Duration>,
    /// `params.sse_read_timeout`: how long an upstream event stream may stay silent.
    pub sse_read_timeout: Option<Duration>,
    /// `namespace/name`, for logs.
    pub label: String,
    /// The agent's name.
    pub agent: String,
    /// Shared state.
    pub shared: Shared,
    /// The `Mcp-Param-*` headers its tools declare, from the tool lists the gate relayed.
    pub param_headers: ParamHeaders,
    /// Its tools' annotations and definition digests, from the tool lists the gate relayed.
    pub tool_definitions: ToolDefinitions,
    /// Approved calls that may go on after an `input_required` answer.
    pub continuations: Continuations,
    /// The client sessions the gate carries across the server's restarts.
    pub resumable: Resumable,
}

/// Headers never relayed in either direction (hop-by-hop, or recomputed); `Content-Length`
/// last, as a body relayed unchanged keeps it.
static HOP_BY_HOP: [HeaderName; 10] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::HOST,
    header::ACCEPT_ENCODING,
    header::CONTENT_LENGTH,
];

fn hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

/// Removes the headers that the message's `Connection` header names: they concern only the
/// connection the message came on (RFC 9110, 7.6.1), so the gate neither relays them nor
/// decides on them. Called on every client request before the gate reads it and on every
/// upstream answer as it arrives, so what the gate checks is what goes on. Tokens that are no
/// header name are ignored; `Connection` itself is among [`HOP_BY_HOP`].
pub fn drop_connection_options(headers: &mut HeaderMap) {
    let mut named = Vec::new();
    for value in headers.get_all(header::CONNECTION) {
        for token in value.as_bytes().split(|&b| b == b',') {
            let token = token.trim_ascii();
            if token.is_empty()
                || token.eq_ignore_ascii_case(b"keep-alive")
                || token.eq_ignore_ascii_case(b"close")
            {
                continue;
            }
            if let Ok(name) = HeaderName::from_bytes(token) {
                named.push(name);
            }
        }
    }
    for name in named {
        headers.remove(name);
    }
}

/// Headers of the client's request that describe its body: the gate forwards a body of its own
/// writing, never the client's, so it never forwards these either.
fn describes_body(name: &HeaderName) -> bool {
    name == header::CONTENT_TYPE || name == header::CONTENT_ENCODING
}

/// Headers carrying a caller's credential: a shared gate never forwards them (its callers'
/// tokens are for the gate; the upstream gets only the server's configured headers).
pub fn is_credential(name: &HeaderName) -> bool {
    name == header::AUTHORIZATION || name == header::PROXY_AUTHORIZATION
}

/// The most redirects the gate follows for one request (as many as reqwest did).
const MAX_REDIRECTS: usize = 10;

/// Why an upstream request got no (whole) answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Connecting, sending or reading the response head failed.
    #[error("unreachable: {}", chain(.0))]
    Unreachable(SendError),
    /// The upstream redirected more than [`MAX_REDIRECTS`] times, or to another origin.
    #[error("{0}")]
    Redirect(&'static str),
    /// No response head within `params.timeout`.
    #[error("did not answer within {}s (params.timeout)", .0.as_secs_f64())]
    TimedOut(Duration),
    /// The response body broke off or went silent too long.
    #[error("answer broke off: {0}")]
    Body(#[from] io::Error),
    /// A body the gate reads whole was longer than [`MAX_BODY_BYTES`].
    #[error("sent an answer longer than {} MiB, the gate's limit", MAX_BODY_BYTES >> 20)]
    TooLarge,
    /// The answer holds a message other parsers could read differently from the gate.
    #[error("sent an answer the gate cannot read unambiguously: {0}")]
    Unreadable(String),
    /// The upstream forgot the client's session (it restarted) and the gate could not begin a
    /// new one ([`super::resume`]): the request was not taken.
    #[error("lost the MCP session (restarted?) and the gate could not begin a new one: {0}")]
    SessionLost(String),
}

/// An error and its sources, `: `-separated. The client's errors never hold the request's
/// URL (which may carry credentials, a token in the query); the server's `namespace/name`
/// identifies it in the log.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

impl UpstreamError {
    /// What the caller is told about upstream `label` (details stay in the log, never the URL).
    pub fn tell(&self, label: &str) -> String {
        match self {
            Self::Unreachable(_) => format!("upstream {label} unreachable"),
            Self::SessionLost(why) => format!(
                "upstream {label} lost the MCP session (restarted?) and the gate could not begin a new one: {why}"
            ),
            Self::Redirect(_)
            | Self::TimedOut(_)
            | Self::Body(_)
            | Self::TooLarge
            | Self::Unreadable(_) => format!("upstream {label} {self}"),
        }
    }

    /// Whether the request may have reached the upstream (anything but a failed connect), so
    /// the call may have run.
    pub fn may_have_reached(&self) -> bool {
        match self {
            Self::Unreachable(e) => !matches!(e, SendError::Connect(_)),
            Self::SessionLost(_) => false,
            Self::Redirect(_)
            | Self::TimedOut(_)
            | Self::Body(_)
            | Self::TooLarge
            | Self::Unreadable(_) => true,
        }
    }

    /// The HTTP status the gate answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TimedOut(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::Unreachable(_)
            | Self::Redirect(_)
            | Self::Body(_)
            | Self::TooLarge
            | Self::Unreadable(_)
            | Self::SessionLost(_) => StatusCode::BAD_GATEWAY,
        }
    }
}

/// `params.<field>` as a positive duration, or an error naming the route and field.
fn seconds(
    route: &str,
    field: &str,
    value: Option<&serde_json::Number>,
) -> Result<Option<Duration>, String> {
    value
        .map(|n| {
            n.as_f64()
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    format!("{route}: params.{field} {n}: must be a positive number of seconds")
                })
        })
        .transpose()
}

impl Upstream {
    /// Builds the upstream of `server`. Errors name the bad URL, header or timeout.
    pub fn new(
        server: GateServer,
        policy: ServerPolicy,
        agent: &str,
        shared: Shared,
    ) -> Result<Self, String> {
        let url = reqwest::Url::parse(&server.params.url)
            .map_err(|e| format!("{}: params.url {:?}: {e}", server.route, server.params.url))?;
        let uri = target(&url)
            .map_err(|e| format!("{}: params.url {:?}: {e}", server.route, server.params.url))?;
        let mut headers = HeaderMap::new();
        for (k, v) in &server.params.headers {
            let name = HeaderName::try_from(k.as_str())
                .map_err(|e| format!("{}: header {k:?}: {e}", server.route))?;
            let value = HeaderValue::try_from(v.as_str())
                .map_err(|e| format!("{}: header {k:?}: {e}", server.route))?;
            headers.insert(name, value);
        }
        Ok(Self {
            label: format!("{}/{}", server.namespace, server.name),
            agent: agent.to_string(),
            timeout: seconds(&server.route, "timeout", server.params.timeout.as_ref())?,
            sse_read_timeout: seconds(
                &server.route,
                "sse_read_timeout",
                server.params.sse_read_timeout.as_ref(),
            )?,
            pool: Pool::new(shared.connector.clone(), &uri),
            tool_definitions: ToolDefinitions::new(
                server.trust_tool_annotations,
                server.accepted_tools.clone(),
            ),
            server,
            policy,
            url,
            uri,
            headers,
            shared,
            param_headers: ParamHeaders::default(),
            continuations: Continuations::default(),
            resumable: Resumable::default(),
        })
    }

    /// Sends a request upstream ([`Self::send_as_is`]); a request naming a client session the
    /// gate carries goes to the upstream session serving it, and is sent again, once, on a new
    /// upstream session if the upstream forgot it ([`super::resume`]).
    pub async fn send(
        &self,
        method: Method,
        uri: Uri,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let Some(session) = self.resumable.of(client_headers) else {
            return self.send_as_is(method, uri, client_headers, body).await;
        };
        let serving = session.upstream();
        let on = session.on(client_headers, &serving);
        let headers = on.as_ref().unwrap_or(client_headers);
        let resp = self
            .send_as_is(method.clone(), uri.clone(), headers, body.clone())
            .await?;
        if !resume::may_have_forgotten(&method, &resp) {
            return Ok(session.answer(resp));
        }
        // Boxed: only an answer that may say the upstream forgot the session takes this path.
        let request = resume::Request {
            method,
            uri,
            headers: client_headers,
            body,
        };
        Box::pin(resume::after_failure(
            self, &session, request, serving, resp,
        ))
        .await
    }

    /// Sends a request upstream as it is: the client's headers minus hop-by-hop ones, minus
    /// those describing the client's body, minus any the gate configures and, on a shared gate,
    /// minus the caller's credentials ([`is_credential`]), then the configured ones. A
    /// non-empty `body` is a message the gate wrote, so it goes with the gate's own
    /// `Content-Type: application/json`. Redirects within the upstream's origin are followed
    /// (see [`Self::follow`]). The response head must come within `params.timeout`, when set,
    /// redirects included.
    pub async fn send_as_is(
        &self,
        method: Method,
        uri: Uri,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let started = Instant::now();
        let exchange = self.exchange(method, uri, client_headers, body);
        let resp = match self.timeout {
            Some(limit) => match tokio::time::timeout(limit, exchange).await {
                Ok(resp) => resp,
                Err(_) => Err(UpstreamError::TimedOut(limit)),
            },
            None => exchange.await,
        };
        self.shared.metrics.upstream(started.elapsed());
        resp
    }

    /// [`Self::send_as_is`] without its time limit.
    async fn exchange(
        &self,
        method: Method,
        uri: Uri,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let resp = self
            .round_trip(method.clone(), uri.clone(), client_headers, body.clone())
            .await?;
        if !resp.status().is_redirection() {
            return Ok(resp);
        }
        // Boxed: a redirect is rare, and its state would otherwise enlarge every request's.
        Box::pin(self.follow(resp, method, uri, client_headers, body)).await
    }

    /// Follows the redirects that `resp` starts, as reqwest did (at most [`MAX_REDIRECTS`];
    /// `301`, `302` and `303` turn the request into a `GET` without body, a `HEAD` staying one;
    /// `307` and `308` repeat it), but only within the origin of `params.url`: the request
    /// carries the configured headers (credentials, often), so a redirect to another origin is
    /// an error. A redirect without a usable `Location` is the answer.
    async fn follow(
        &self,
        mut resp: UpstreamResponse,
        mut method: Method,
        uri: Uri,
        client_headers: &HeaderMap,
        mut body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let Ok(mut current) = reqwest::Url::parse(&uri.to_string()) else {
            return Ok(resp);
        };
        for _ in 0..MAX_REDIRECTS {
            let status = resp.status();
            let next = match status {
                StatusCode::MOVED_PERMANENTLY
                | StatusCode::FOUND
                | StatusCode::SEE_OTHER
                | StatusCode::TEMPORARY_REDIRECT
                | StatusCode::PERMANENT_REDIRECT => resp
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| current.join(l).ok())
                    .filter(|u| matches!(u.scheme(), "http" | "https"))
                    .and_then(|u| Some((target(&u).ok()?, u))),
                _ => None,
            };
            let Some((next_uri, next)) = next else {
                return Ok(resp);
            };
            if matches!(
                status,
                StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND | StatusCode::SEE_OTHER
            ) {
                body = Bytes::new();
                if method != Method::HEAD {
                    method = Method::GET;
                }
            }
            if next.origin() != self.url.origin() {
                return Err(UpstreamError::Redirect(
                    "redirected to another origin; the gate follows redirects only within the \
                     origin of params.url",
                ));
            }
            current = next;
            resp = self
                .round_trip(method.clone(), next_uri, client_headers, body.clone())
                .await?;
            if !resp.status().is_redirection() {
                return Ok(resp);
            }
        }
        Err(UpstreamError::Redirect("redirected more than 10 times"))
    }

    /// One request to the upstream and its response, redirects not followed.
    async fn round_trip(
        &self,
        method: Method,
        uri: Uri,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let request = self.request(method, uri, client_headers, body);
        let mut resp = self
            .pool
            .send(request)
            .await
            .map_err(UpstreamError::Unreachable)?;
        drop_connection_options(resp.headers_mut());
        Ok(resp.map(Either::Left))
    }

    /// The upstream request: see [`Self::send`].
    fn request(
        &self,
        method: Method,
        uri: Uri,
        client_headers: &HeaderMap,
        body: Bytes,
    ) -> axum::http::Request<Full<Bytes>> {
        let has_body = !body.is_empty();
        let mut request = axum::http::Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.reserve(client_headers.len() + self.headers.len() + 1);
        let shared = self.shared.callers.is_some();
        for (k, v) in client_headers {
            let dropped = hop_by_hop(k)
                || describes_body(k)
                || self.headers.contains_key(k)
                || (shared && is_credential(k));
            if !dropped {
                headers.append(k.clone(), v.clone());
            }
        }
        for (k, v) in &self.headers {
            headers.append(k.clone(), v.clone());
        }
        if has_body {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        request
    }

    /// The body of an upstream response as a stream that fails, and ends, when the upstream
    /// stays silent longer than `params.sse_read_timeout` (event streams) or `params.timeout`
    /// (other bodies) between two chunks.
    pub fn body(
        &self,
        resp: UpstreamResponse,
    ) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
        let limit = self.idle_limit(resp.headers());
        idle_limited(data(resp.into_body()), limit)
    }

    fn idle_limit(&self, headers: &HeaderMap) -> Option<Duration> {
        if is_event_stream(headers) {
            self.sse_read_timeout
        } else {
            self.timeout
        }
    }

    /// The whole body of an upstream response, within the same limits as [`Self::body`] and
    /// [`read_all`]'s.
    pub async fn read_body(&self, resp: UpstreamResponse) -> Result<Vec<u8>, UpstreamError> {
        read_all(self.body(resp)).await
    }

    /// The head of an upstream response and its whole body, read as [`Self::read_body`] does.
    pub async fn read_answer(
        &self,
        resp: UpstreamResponse,
    ) -> Result<(axum::http::response::Parts, Bytes), UpstreamError> {
        let limit = self.idle_limit(resp.headers());
        let (parts, body) = resp.into_parts();
        let body = read_all(idle_limited(data(body), limit)).await?;
        Ok((parts, body.into()))
    }

    /// Relays an upstream response unchanged (status, headers, streamed body).
    pub fn relay(&self, resp: UpstreamResponse) -> Response<Body> {
        let (head, body) = self.split(resp, &HOP_BY_HOP[..HOP_BY_HOP.len() - 1]);
        head.body(Body::from_stream(body))
            .expect("upstream response parts are valid")
    }

    /// The status and headers of an upstream response for a body the gate may change (so
    /// without `Content-Length`), and its body stream.
    pub fn relay_parts(
        &self,
        resp: UpstreamResponse,
    ) -> (
        axum::http::response::Builder,
        impl Stream<Item = io::Result<Bytes>> + Send + 'static,
    ) {
        self.split(resp, &HOP_BY_HOP)
    }

    /// The head of an upstream response without the headers `dropped`, and its body. The
    /// headers are moved, not copied.
    fn split(
        &self,
        resp: UpstreamResponse,
        dropped: &[HeaderName],
    ) -> (
        axum::http::response::Builder,
        impl Stream<Item = io::Result<Bytes>> + Send + 'static,
    ) {
        let (parts, body) = resp.into_parts();
        let mut headers = parts.headers;
        let limit = self.idle_limit(&headers);
        for name in dropped {
            headers.remove(name);
        }
        let mut builder = Response::builder().status(parts.status);
        if let Some(h) = builder.headers_mut() {
            *h = headers;
        }
        (builder, idle_limited(data(body), limit))
    }
}

/// `url` as a request target.
fn target(url: &reqwest::Url) -> Result<Uri, axum::http::uri::InvalidUri> {
    Uri::try_from(url.as_str())
}

/// The data of an upstream body, chunk by chunk (trailers are dropped).
fn data(mut body: UpstreamBody) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    futures::stream::poll_fn(move |cx| {
        loop {
            return match std::task::ready!(Pin::new(&mut body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => std::task::Poll::Ready(Some(Ok(data))),
                    Err(_trailers) => continue,
                },
                Some(Err(e)) => std::task::Poll::Ready(Some(Err(io::Error::other(e)))),
                None => std::task::Poll::Ready(None),
            };
        }
    })
}

/// The longest upstream JSON answer, 16 MiB: the gate reads every JSON answer to a message
/// whole, to filter any tool list in it. Event streams are relayed event by event, each limited
/// by [`sse::MAX_EVENT_BYTES`].
///
/// [`sse::MAX_EVENT_BYTES`]: crate::sse::MAX_EVENT_BYTES
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// Every chunk of `body`, joined; [`UpstreamError::TooLarge`] once longer than
/// [`MAX_BODY_BYTES`].
pub async fn read_all(
    body: impl Stream<Item = io::Result<Bytes>>,
) -> Result<Vec<u8>, UpstreamError> {
    let mut bytes = Vec::new();
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(UpstreamError::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// `body` as a stream that fails, and ends, when no chunk comes for `limit`.
fn idle_limited(
    body: impl Stream<Item = io::Result<Bytes>> + Send + 'static,
    limit: Option<Duration>,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    let Some(limit) = limit else {
        return body.left_stream();
    };
    futures::stream::unfold(Some(body.boxed()), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout(limit, body.next()).await {
            Ok(Some(chunk)) => Some((chunk, Some(body))),
            Ok(None) => None,
            Err(_) => {
                let why = format!("stopped sending for {}s", limit.as_secs_f64());
                Some((Err(io::Error::new(io::ErrorKind::TimedOut, why)), None))
            }
        }
    })
    .right_stream()
}

/// Whether a response is an SSE stream.
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    // Media types are case-insensitive (RFC 9110 §8.3.1).
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_are_recognised_whatever_the_case() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(value),
            );
            is_event_stream(&headers)
        };
        assert!(with("text/event-stream"));
        assert!(with("Text/Event-Stream; charset=utf-8"));
        assert!(with(" text/event-stream ;x=1"));
        assert!(!with("text/event-streamx"));
        assert!(!with("application/json"));
        assert!(!is_event_stream(&HeaderMap::new()));
    }

    #[test]
    fn headers_named_by_connection_are_dropped() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Hop ,,\tx-other"),
            ("connection", "Close, content-type, not a name"),
            ("x-hop", "1"),
            ("x-other", "2"),
            ("content-type", "text/event-stream"),
            ("keep-alive", "timeout=5"),
            ("x-kept", "3"),
            ("mcp-session-id", "s"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        drop_connection_options(&mut headers);
        let mut left: Vec<_> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(
            left,
            ["connection", "keep-alive", "mcp-session-id", "x-kept"]
        );

        let mut plain = HeaderMap::new();
        plain.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        plain.insert("x-kept", HeaderValue::from_static("1"));
        let before = plain.clone();
        drop_connection_options(&mut plain);
        assert_eq!(plain, before);
    }

    fn chunk(s: &'static str) -> io::Result<Bytes> {
        Ok(Bytes::from_static(s.as_bytes()))
    }

    async fn collect(stream: impl Stream<Item = io::Result<Bytes>>) -> Vec<Result<Bytes, String>> {
        stream.map(|r| r.map_err(|e| e.to_string())).collect().await
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_silent_for_longer_than_the_limit_fails_and_ends() {
        let silent = futures::stream::iter([chunk("a")]).chain(futures::stream::pending());
        let got = collect(idle_limited(silent, Some(Duration::from_secs(5)))).await;
        assert_eq!(
            got,
            [
                Ok(Bytes::from("a")),
                Err("stopped sending for 5s".to_string())
            ]
        );
    }

    #[tokio::test]
    async fn a_body_read_whole_stops_at_the_limit() {
        let mib = Bytes::from(vec![b'x'; 1 << 20]);
        let body = |n: usize| futures::stream::iter((0..n).map(|_| Ok(mib.clone())));
        let limit = MAX_BODY_BYTES >> 20;
        assert_eq!(read_all(body(limit)).await.unwrap().len(), MAX_BODY_BYTES);
        let err = read_all(body(limit + 1)).await.unwrap_err();
        assert!(matches!(err, UpstreamError::TooLarge), "{err}");
        assert_eq!(
            err.tell("tools/s"),
            "upstream tools/s sent an answer longer than 16 MiB, the gate's limit"
        );
        assert_eq!(err.status(), StatusCode::BAD_GATEWAY);
    }

    #[tokio::test(start_paused = true)]
    async fn gaps_under_the_limit_and_no_limit_pass_everything() {
        let slow = || {
            futures::stream::iter([chunk("a"), chunk("b")]).then(|c| async {
                tokio::time::sleep(Duration::from_secs(4)).await;
                c
            })
        };
        let expected = [Ok(Bytes::from("a")), Ok(Bytes::from("b"))];
        assert_eq!(
            collect(idle_limited(slow(), Some(Duration::from_secs(5)))).await,
            expected
        );
        assert_eq!(collect(idle_limited(slow(), None)).await, expected);
    }
}
