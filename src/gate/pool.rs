//! The gate's connections to one tool server: HTTP/1.1 connections kept open and reused for
//! its requests. Every request of a server goes to the origin of its `params.url` (redirects
//! and the HTTP+SSE transport's endpoint are held to it), so the connections need no key, and a
//! request finds a free one by a scan of the few the server has, under a lock held for no
//! await. A connection is handed back as soon as the response head has come; until the
//! response body has been read it is busy and passed over.
//!
//! A connection is reused only while the server surely still keeps it: a request written as the
//! server closes the connection would fail as "may have run", and could not be sent again. A
//! server that says how long it keeps an idle connection (`Keep-Alive: timeout=N`) gets no
//! request on one N − 1 s after the head of its last answer came (the server's clock starts
//! later, once it has written the answer); one that does not say, 4 s after: Node's and
//! uvicorn's servers, behind most MCP servers, close idle connections after 5 s, mostly without
//! saying so.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Request, Response, Uri, header, uri::PathAndQuery};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::time::Instant;
use tower::ServiceExt;

/// Makes the TCP (and, for `https`, TLS) connections to tool servers.
pub type Connector = HttpsConnector<HttpConnector>;

/// The longest a free connection is kept open for the next request, whatever the server says.
pub const MAX_IDLE: Duration = Duration::from_secs(90);

/// How long a free connection is kept open for the next request when the server does not say
/// how long it keeps it: a second less than Node's and uvicorn's 5 s.
pub const UNANNOUNCED_IDLE: Duration = Duration::from_secs(4);

/// How long before the end of a server's `Keep-Alive: timeout` a connection is no longer used.
const CLOSING_MARGIN: Duration = Duration::from_secs(1);

/// The most connections kept open to one server; a connection beyond them is closed once its
/// response has been read.
pub const MAX_KEPT: usize = 256;

/// Why a request got no response head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be made: the request never left the gate.
    #[error("cannot connect")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The connection failed while the request was sent or answered: the request may have
    /// reached the server.
    #[error(transparent)]
    Exchange(hyper::Error),
}

/// An open connection, when the head of its last answer came, and for how long after that it
/// may take the next.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    used: Instant,
    kept_for: Duration,
}

/// What a connection is to the next request.
#[derive(Debug, PartialEq)]
enum State {
    /// Open and not reading a response: the next request may go on it.
    Free,
    /// Still reading a response: kept, passed over.
    Busy,
    /// Closed, or free for as long as it is kept since its last answer: dropped (which closes
    /// it).
    Done,
}

impl State {
    fn of(closed: bool, ready: bool, idle: Duration, kept_for: Duration) -> Self {
        match (closed, ready) {
            (true, _) => Self::Done,
            (false, false) => Self::Busy,
            (false, true) if idle >= kept_for => Self::Done,
            (false, true) => Self::Free,
        }
    }
}

/// How long after an answer a connection may take the next request, from the answer: its
/// `Keep-Alive: timeout` less [`CLOSING_MARGIN`] and at most [`MAX_IDLE`], or
/// [`UNANNOUNCED_IDLE`] if it gives none.
fn kept_for(answer: &HeaderMap) -> Duration {
    let timeout = answer
        .get("keep-alive")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            value.split(',').find_map(|parameter| {
                let (name, seconds) = parameter.split_once('=')?;
                name.trim().eq_ignore_ascii_case("timeout").then_some(())?;
                seconds.trim().parse().ok().map(Duration::from_secs)
            })
        });
    match timeout {
        Some(timeout) => timeout.saturating_sub(CLOSING_MARGIN).min(MAX_IDLE),
        None => UNANNOUNCED_IDLE,
    }
}

impl Connection {
    fn state(&self, now: Instant) -> State {
        State::of(
            self.sender.is_closed(),
            self.sender.is_ready(),
            now.duration_since(self.used),
            self.kept_for,
        )
    }
}

/// The connections to one tool server.
pub struct Pool {
    connector: Connector,
    /// The server's origin, which every connection is made to.
    origin: Uri,
    /// The `Host` of every request, from the origin (worked out once, not per request).
    host: Option<HeaderValue>,
    connections: Arc<Mutex<Vec<Connection>>>,
}

impl Pool {
    /// A pool of connections to the origin of `url` (an absolute `http` or `https` URI).
    pub fn new(connector: Connector, url: &Uri) -> Self {
        let mut origin = axum::http::uri::Parts::default();
        origin.scheme = url.scheme().cloned();
        origin.authority = url.authority().cloned();
        origin.path_and_query = Some(PathAndQuery::from_static("/"));
        Self {
            connector,
            origin: Uri::from_parts(origin).unwrap_or_else(|_| url.clone()),
            host: host(url),
            connections: Arc::default(),
        }
    }

    /// Sends `request`, whose URI is an absolute one on the server's origin, on a free
    /// connection or a new one. A request that a reused connection closed before sending
    /// (the server ended it while it was idle) is sent again on another; one that may have
    /// been sent never is.
    pub async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, SendError> {
        to_origin_form(&mut request, self.host.as_ref());
        loop {
            let (mut connection, reused) = match self.free() {
                Some(connection) => (connection, true),
                None => (self.connect().await?, false),
            };
            match connection.sender.try_send_request(request).await {
                Ok(response) => {
                    connection.used = Instant::now();
                    connection.kept_for = kept_for(response.headers());
                    self.keep(connection);
                    return Ok(response);
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(SendError::Exchange(failed.into_error())),
                },
            }
        }
    }

    /// Takes a free connection, dropping those closed or idle too long on the way.
    fn free(&self) -> Option<Connection> {
        let now = Instant::now();
        let mut connections = self.connections.lock().expect("pool lock");
        connections.retain(|c| c.state(now) != State::Done);
        let at = connections
            .iter()
            .position(|c| c.state(now) == State::Free)?;
        Some(connections.swap_remove(at))
    }

    /// Keeps `connection` for later requests, unless [`MAX_KEPT`] are kept already.
    fn keep(&self, connection: Connection) {
        let mut connections = self.connections.lock().expect("pool lock");
        if connections.len() < MAX_KEPT {
            connections.push(connection);
        }
    }

    /// A new connection, its I/O driven by a task of its own; the first also starts the task
    /// that drops the connections no longer kept.
    async fn connect(&self) -> Result<Connection, SendError> {
        let io = self
            .connector
            .clone()
            .oneshot(self.origin.clone())
            .await
            .map_err(SendError::Connect)?;
        let (sender, connection) = http1::handshake(io)
            .await
            .map_err(|e| SendError::Connect(e.into()))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        if Arc::weak_count(&self.connections) == 0 {
            tokio::spawn(close_idle(Arc::downgrade(&self.connections)));
        }
        Ok(Connection {
            sender,
            used: Instant::now(),
            kept_for: UNANNOUNCED_IDLE,
        })
    }
}

/// Every [`UNANNOUNCED_IDLE`], drops the connections that are closed or were free for as long as
/// they are kept, until the pool is gone.
async fn close_idle(connections: Weak<Mutex<Vec<Connection>>>) {
    let mut every = tokio::time::interval(UNANNOUNCED_IDLE);
    every.tick().await;
    loop {
        every.tick().await;
        let Some(connections) = connections.upgrade() else {
            return;
        };
        let now = Instant::now();
        connections
            .lock()
            .expect("pool lock")
            .retain(|c| c.state(now) != State::Done);
    }
}

/// Makes the request's URI the path and query alone, as HTTP/1.1 sends it to a server, and
/// sets `Host` to `host` (see [`host`]) unless the request has one.
fn to_origin_form(request: &mut Request<Full<Bytes>>, host: Option<&HeaderValue>) {
    let path = match request.uri().path_and_query() {
        Some(path) if path.as_str() != "/" => Uri::from(path.clone()),
        _ => Uri::from_static("/"),
    };
    if let Some(host) = host
        && !request.headers().contains_key(header::HOST)
    {
        request.headers_mut().insert(header::HOST, host.clone());
    }
    *request.uri_mut() = path;
}

/// The `Host` of `uri`: its host, and its port unless the scheme's default.
fn host(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    match (uri.port_u16(), uri.scheme_str()) {
        (None, _) | (Some(80), Some("http")) | (Some(443), Some("https")) => {
            HeaderValue::from_str(host).ok()
        }
        (Some(port), _) => HeaderValue::try_from(format!("{host}:{port}")).ok(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    /// A server on loopback, on threads of its own, answering every request with `okok`, the
    /// second half 50 ms after the first (until then the answer is being read and its
    /// connection busy), its head `head_after` the request and with the header lines
    /// `extra_head`; with `close`, it closes each connection 20 ms after its first answer.
    /// Counts the connections it accepted.
    fn server(
        close: bool,
        extra_head: &'static str,
        head_after: Duration,
    ) -> (Uri, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url: Uri = format!("http://{}/mcp", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut request = Vec::new();
                    let mut buf = [0; 1024];
                    loop {
                        let n = stream.read(&mut buf).unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                        if request.windows(4).any(|w| w == b"\r\n\r\n") {
                            request.clear();
                            std::thread::sleep(head_after);
                            let head = format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: 4\r\n{extra_head}\r\nok"
                            );
                            stream.write_all(head.as_bytes()).unwrap();
                            std::thread::sleep(Duration::from_millis(50));
                            stream.write_all(b"ok").unwrap();
                            if close {
                                std::thread::sleep(Duration::from_millis(20));
                                return;
                            }
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    fn pool(url: &Uri) -> Pool {
        Pool::new(crate::gate::server::connector().unwrap(), url)
    }

    fn get(url: &Uri) -> Request<Full<Bytes>> {
        Request::get(url.clone()).body(Full::default()).unwrap()
    }

    async fn text(response: Response<Incoming>) -> Bytes {
        response.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_answer_has_been_read() {
        let (url, accepted) = server(false, "keep-alive: timeout=5\r\n", Duration::ZERO);
        let pool = pool(&url);
        for _ in 0..3 {
            assert_eq!(text(pool.send(get(&url)).await.unwrap()).await, "okok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        // Two answers not yet read: the second request needs a second connection; then
        // either serves the next.
        let first = pool.send(get(&url)).await.unwrap();
        let second = pool.send(get(&url)).await.unwrap();
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(text(first).await, "okok");
        assert_eq!(text(second).await, "okok");
        assert_eq!(text(pool.send(get(&url)).await.unwrap()).await, "okok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(pool.connections.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_used_again() {
        let (url, accepted) = server(true, "", Duration::ZERO);
        let pool = pool(&url);
        for n in 1..=3 {
            assert_eq!(text(pool.send(get(&url)).await.unwrap()).await, "okok");
            // The server closes the connection while it is free.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(accepted.load(Ordering::SeqCst), n);
        }
    }

    #[tokio::test]
    async fn a_connection_is_not_reused_when_the_server_is_about_to_close_it() {
        // The server keeps idle connections for a second: the next request takes a new one.
        let (url, accepted) = server(false, "Keep-Alive: timeout=1\r\n", Duration::ZERO);
        let pool = pool(&url);
        for n in 1..=2 {
            assert_eq!(text(pool.send(get(&url)).await.unwrap()).await, "okok");
            assert_eq!(accepted.load(Ordering::SeqCst), n);
        }
    }

    #[tokio::test]
    async fn a_slow_answer_leaves_its_connection_to_the_next_request() {
        // Kept for a second after the answer came, though the request went out longer ago.
        let slow = Duration::from_millis(1200);
        let (url, accepted) = server(false, "Keep-Alive: timeout=2\r\n", slow);
        let pool = pool(&url);
        for _ in 0..2 {
            assert_eq!(text(pool.send(get(&url)).await.unwrap()).await, "okok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_connection_is_kept_for_less_than_the_servers_keep_alive_timeout() {
        let kept = |value: &'static str| {
            let mut answer = HeaderMap::new();
            answer.insert("keep-alive", HeaderValue::from_static(value));
            kept_for(&answer)
        };
        let seconds = Duration::from_secs;
        assert_eq!(kept("timeout=5"), seconds(4));
        assert_eq!(kept("max=100, Timeout = 10"), seconds(9));
        assert_eq!(kept("timeout=1"), Duration::ZERO);
        assert_eq!(kept("timeout=0"), Duration::ZERO);
        assert_eq!(kept("timeout=600"), MAX_IDLE);
        assert_eq!(kept("timeout=soon"), UNANNOUNCED_IDLE);
        assert_eq!(kept("max=5"), UNANNOUNCED_IDLE);
        assert_eq!(kept_for(&HeaderMap::new()), UNANNOUNCED_IDLE);
    }

    #[tokio::test]
    async fn the_request_goes_to_the_path_with_the_host_of_the_url() {
        let origin_form = |request: &mut Request<Full<Bytes>>| {
            let host = host(request.uri());
            to_origin_form(request, host.as_ref());
        };
        let mut request = get(&"http://example.test:8080/a/b?c=d".parse().unwrap());
        origin_form(&mut request);
        assert_eq!(request.uri(), "/a/b?c=d");
        assert_eq!(request.headers()[header::HOST], "example.test:8080");
        for (url, host) in [
            ("http://example.test:80", "example.test"),
            ("https://example.test:443/", "example.test"),
            ("https://[::1]:8443/", "[::1]:8443"),
        ] {
            let mut request = get(&url.parse().unwrap());
            origin_form(&mut request);
            assert_eq!(request.uri(), "/");
            assert_eq!(request.headers()[header::HOST], host);
        }
        let mut request = get(&"http://example.test/".parse().unwrap());
        request
            .headers_mut()
            .insert(header::HOST, HeaderValue::from_static("configured"));
        origin_form(&mut request);
        assert_eq!(request.headers()[header::HOST], "configured");
    }

    #[test]
    fn a_connection_free_for_as_long_as_it_is_kept_is_closed() {
        let second = Duration::from_secs(1);
        let kept = second * 4;
        assert_eq!(State::of(false, true, kept - second, kept), State::Free);
        assert_eq!(State::of(false, true, kept, kept), State::Done);
        assert_eq!(
            State::of(false, true, Duration::ZERO, Duration::ZERO),
            State::Done
        );
        assert_eq!(State::of(false, false, kept * 10, kept), State::Busy);
        assert_eq!(State::of(true, true, Duration::ZERO, kept), State::Done);
        assert_eq!(State::of(true, false, Duration::ZERO, kept), State::Done);
    }
}
