//! A bench reference, not part of the product: the least an HTTP/1.1 relay built on the gate's
//! own HTTP stack does. hyper's server on one side and hyper's client connections (kept and
//! reused) on the other, on a current-thread tokio runtime like the gate's, `TCP_NODELAY` both
//! ways, hop-by-hop headers dropped; bodies are streamed as they come and nothing in them is
//! read or checked. `tests/bench/ungated.sh` runs it next to the gate, so that what the gate's
//! checks cost can be told from what the HTTP stack costs (docs/performance.md).
//!
//! Usage: `bare_relay LISTEN_PORT UPSTREAM_HOST:PORT`; it listens on 127.0.0.1 and relays
//! every request, whatever its path, to the same path upstream.

use std::cell::RefCell;
use std::rc::Rc;

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// Connections to the upstream, free or busy; a request takes a free one or opens one.
type Connections = Rc<RefCell<Vec<SendRequest<Incoming>>>>;

/// The headers a relay must not pass on (RFC 9110, 7.6.1).
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

async fn connect(upstream: &str) -> std::io::Result<SendRequest<Incoming>> {
    let tcp = TcpStream::connect(upstream).await?;
    tcp.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(std::io::Error::other)?;
    tokio::task::spawn_local(connection);
    Ok(sender)
}

async fn relay(
    connections: Connections,
    upstream: Rc<str>,
    host: HeaderValue,
    mut request: Request<Incoming>,
) -> Result<Response<Incoming>, Box<dyn std::error::Error + Send + Sync>> {
    for name in &HOP_BY_HOP {
        request.headers_mut().remove(name);
    }
    request.headers_mut().insert(header::HOST, host);
    let free = {
        let mut connections = connections.borrow_mut();
        connections.retain(|c| !c.is_closed());
        let at = connections.iter().position(SendRequest::is_ready);
        at.map(|at| connections.swap_remove(at))
    };
    let mut sender = match free {
        Some(sender) => sender,
        None => connect(&upstream).await?,
    };
    let response = sender.send_request(request).await;
    connections.borrow_mut().push(sender);
    let mut response = response?;
    for name in &HOP_BY_HOP {
        response.headers_mut().remove(name);
    }
    Ok(response)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(port), Some(upstream)) = (args.next(), args.next()) else {
        return Err("usage: bare_relay LISTEN_PORT UPSTREAM_HOST:PORT".into());
    };
    let port: u16 = port.parse()?;
    let host = HeaderValue::from_str(&upstream)?;
    let upstream: Rc<str> = upstream.into();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&runtime, async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let connections = Connections::default();
        loop {
            let (tcp, _) = listener.accept().await?;
            tcp.set_nodelay(true)?;
            let (connections, upstream, host) =
                (connections.clone(), upstream.clone(), host.clone());
            let service = service_fn(move |request| {
                relay(connections.clone(), upstream.clone(), host.clone(), request)
            });
            tokio::task::spawn_local(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service),
            );
        }
    })
}
