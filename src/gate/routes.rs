//! The gate's MCP routes: each request goes to its tool server's handler by an exact match of
//! its path, with no general router in between. The routes are a few fixed paths (one per
//! server, two for an HTTP+SSE server), and a router's per-request work (its path lookup, the
//! URL-parameter and matched-path extensions, a boxed clone of the route's service, the boxing
//! of its futures) cost as much as some of the gate's own checks.
//!
//! A request repeating a header the gate decides on is refused here (400), before anything
//! else ([`super::messages::check_single_headers`]). On a shared gate every request is
//! authenticated here first, before its route is looked up
//! or its body read ([`super::callers`]): a refused one gets 401, 403 or 503; an accepted one
//! goes on without its `Authorization` and `Proxy-Authorization` headers, carrying its verified
//! caller (`Arc<Caller>`) in its extensions for the transports.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::{HeaderValue, Method, Response, StatusCode, header};
use futures::future::BoxFuture;
use serde_json::Value;
use tower::Service;

use super::callers::Callers;
use super::http_sse::{self, SseRoute};
use super::jsonrpc;
use super::memory;
use super::messages::check_single_headers;
use super::streamable_http;
use super::upstream::{Upstream, drop_connection_options, is_credential};

/// What a route leads to.
enum Target {
    /// A Streamable HTTP server: every method.
    Streamable(Arc<Upstream>),
    /// An HTTP+SSE server's event stream: GET (and HEAD).
    SseStream(Arc<SseRoute>),
    /// An HTTP+SSE server's messages: POST.
    SseMessages(Arc<SseRoute>),
}

/// The gate's MCP service: the routes of every server, by path. Serve it with
/// `axum::serve`. Each transport reads a message body itself, within
/// [`super::messages::MAX_MESSAGE_BYTES`] ([`super::messages::message_body`]).
#[derive(Clone)]
pub struct McpRoutes {
    routes: Arc<HashMap<String, Target>>,
    /// A shared gate's callers, who must authenticate every request.
    callers: Option<Arc<Callers>>,
}

impl std::fmt::Debug for McpRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRoutes").finish_non_exhaustive()
    }
}

/// Builds [`McpRoutes`], a route at a time.
pub struct McpRoutesBuilder {
    routes: HashMap<String, Target>,
    callers: Option<Arc<Callers>>,
}

impl McpRoutesBuilder {
    /// No routes yet; `callers` set for a shared gate, whose requests must authenticate.
    pub fn new(callers: Option<Arc<Callers>>) -> Self {
        Self {
            routes: HashMap::new(),
            callers,
        }
    }

    /// Whether `path` is taken already.
    pub fn has(&self, path: &str) -> bool {
        self.routes.contains_key(path)
    }

    /// A Streamable HTTP server on `path`.
    pub fn streamable(&mut self, path: &str, up: Arc<Upstream>) {
        self.routes.insert(path.to_owned(), Target::Streamable(up));
    }

    /// An HTTP+SSE server: its event stream on `path`, its messages on `<path>/messages`.
    pub fn sse(&mut self, path: &str, route: Arc<SseRoute>) {
        self.routes.insert(
            format!("{path}/messages"),
            Target::SseMessages(route.clone()),
        );
        self.routes
            .insert(path.to_owned(), Target::SseStream(route));
    }

    /// The routes as a service.
    pub fn build(self) -> McpRoutes {
        McpRoutes {
            routes: Arc::new(self.routes),
            callers: self.callers,
        }
    }
}

/// An empty answer with `status`.
fn status(status: StatusCode) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = status;
    resp
}

/// HTTP 405 naming the methods the route takes.
fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut resp = status(StatusCode::METHOD_NOT_ALLOWED);
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// HTTP 400 with a JSON-RPC error (`-32600`, invalid request) saying `why`.
fn repeated_header(why: &str) -> Response<Body> {
    let body = jsonrpc::error_response(&Value::Null, -32600, &format!("approval gate: {why}"));
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

impl Service<Request> for McpRoutes {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        drop_connection_options(request.headers_mut());
        let routes = self.routes.clone();
        let callers = self.callers.clone();
        Box::pin(async move {
            if let Err(why) = check_single_headers(request.headers()) {
                tracing::info!(%why, "refused: a repeated header");
                return Ok(repeated_header(&why));
            }
            if let Some(callers) = callers {
                match callers.authenticate(request.headers()).await {
                    Ok(caller) => {
                        let headers = request.headers_mut();
                        let credentials: Vec<_> = headers
                            .keys()
                            .filter(|k| is_credential(k))
                            .cloned()
                            .collect();
                        for name in credentials {
                            headers.remove(name);
                        }
                        request.extensions_mut().insert(caller);
                    }
                    Err(refused) => return Ok(refused.response()),
                }
            }
            // A message's bytes, and what the gate makes of them, are held within its memory
            // budget until the answer is sent: a POST that finds it spent is refused (503).
            let mut reservation = if request.method() == Method::POST {
                match memory::reserve_message(request.headers()).await {
                    Some(reservation) => Some(reservation),
                    None => {
                        tracing::warn!("refused: the gate's memory budget is spent");
                        return Ok(memory::busy());
                    }
                }
            } else {
                None
            };
            let method = request.method().clone();
            let resp = match routes.get(request.uri().path()) {
                None => status(StatusCode::NOT_FOUND),
                Some(Target::Streamable(up)) => {
                    streamable_http::streamable(State(up.clone()), request).await
                }
                Some(Target::SseStream(route)) => {
                    if method == Method::GET || method == Method::HEAD {
                        Handler::<_, Arc<SseRoute>>::call(http_sse::open, request, route.clone())
                            .await
                    } else {
                        not_allowed("GET,HEAD")
                    }
                }
                Some(Target::SseMessages(route)) => {
                    if method == Method::POST {
                        // Its POST is answered (202) before a call held for approval is: the
                        // handler holds the message's share as long as it holds the message.
                        if let Some(reservation) = reservation.take() {
                            request
                                .extensions_mut()
                                .insert(memory::MessageShare(Arc::new(reservation)));
                        }
                        Handler::<_, Arc<SseRoute>>::call(http_sse::message, request, route.clone())
                            .await
                    } else {
                        not_allowed("POST")
                    }
                }
            };
            Ok(match reservation {
                Some(reservation) => memory::holding(resp, reservation),
                None => resp,
            })
        })
    }
}

impl<L: axum::serve::Listener> Service<axum::serve::IncomingStream<'_, L>> for McpRoutes {
    type Response = Self;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: axum::serve::IncomingStream<'_, L>) -> Self::Future {
        std::future::ready(Ok(self.clone()))
    }
}
