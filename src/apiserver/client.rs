//! The Kubernetes client of the gate and the controller: kube's, with TCP_NODELAY on its
//! connections.
//!
//! kube's default connector leaves Nagle's algorithm on. A request whose TLS records leave in
//! two writes then waits for the apiserver's delayed ACK (40 ms on Linux) before its second
//! segment goes out: on the real control plane that was most of the time between a decision
//! and the gated call running, and of every controller write
//! (docs/performance-history.md#apiserver-client). The stack is kube's
//! documented `Client::new` one: base URI, authentication and extra headers from the
//! kubeconfig or the in-cluster config. Instead of kube's read timeout, TCP keepalive finds a
//! dead apiserver connection within about a minute (watches end on the server's timeout).

use std::time::Duration;

use http::Request;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ConfigExt};
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

use super::request_kind::RequestKind;
use crate::Result;

/// How long a connection may stay silent before TCP keepalive probes look for a dead peer.
const KEEPALIVE: Duration = Duration::from_secs(30);
/// Interval between keepalive probes, and how many may go unanswered.
const KEEPALIVE_PROBES: (Duration, u32) = (Duration::from_secs(10), 3);

/// A client for the inferred configuration (in-cluster, or `KUBECONFIG`) whose connections
/// set TCP_NODELAY and TCP keepalive.
pub async fn nodelay_client() -> Result<Client> {
    counted_client(|_| {}).await
}

/// [`nodelay_client`], which hands `count` the kind of every request it sends.
pub async fn counted_client(
    count: impl Fn(RequestKind) + Clone + Send + Sync + 'static,
) -> Result<Client> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_keepalive(Some(KEEPALIVE));
    http.set_keepalive_interval(Some(KEEPALIVE_PROBES.0));
    http.set_keepalive_retries(Some(KEEPALIVE_PROBES.1));
    http.set_connect_timeout(config.connect_timeout);
    let https = config.rustls_https_connector_with_connector(http)?;
    let service = ServiceBuilder::new()
        .map_request(move |request: Request<Body>| {
            count(RequestKind::of(&request));
            request
        })
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(HttpClient::builder(TokioExecutor::new()).build(https));
    Ok(Client::new(service, config.default_namespace))
}
