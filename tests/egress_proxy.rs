//! The operator's HTTP clients (tool discovery, notifiers, Slack replies) never use a proxy
//! from the environment: a proxy would see every credential they send. A test binary of its
//! own, with a single test, because it sets `HTTP_PROXY` and friends, which is sound only
//! while no other thread reads or writes the environment.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hitl_operator::api::approval_notifier::ChannelType;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::controller::discovery::list_tools;
use hitl_operator::egress;
use hitl_operator::egress::destination::{Destinations, RestrictedClient};
use hitl_operator::notify::send;
use serde_json::json;

/// A proxy on loopback counting the connections it gets, answering each with `proxied`.
fn proxy() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\n\r\nproxied",
            );
        }
    });
    (url, connections)
}

#[test]
#[allow(
    unsafe_code,
    reason = "setting the environment is unsafe once threads run"
)]
fn the_operators_clients_ignore_the_proxy_of_the_environment() {
    let (proxy_url, connections) = proxy();
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
    ] {
        // SAFETY: this binary's only test, and nothing else runs yet that could read the
        // environment: the proxy's thread only accepts, and the runtime starts below.
        unsafe { std::env::set_var(name, &proxy_url) };
    }
    for name in ["NO_PROXY", "no_proxy"] {
        // SAFETY: as above.
        unsafe { std::env::remove_var(name) };
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // The target answers `direct`; through the proxy, the answer would be `proxied`.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(|| async { "direct" });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

        // The proxy works: a client with reqwest's defaults goes through it.
        hitl_operator::tls::install_provider();
        let answer = reqwest::get(format!("{target}/x")).await.unwrap();
        assert_eq!(answer.text().await.unwrap(), "proxied");
        assert_eq!(connections.load(Ordering::SeqCst), 1);

        // Discovery's and the Slack replies' client.
        let answer = egress::client()
            .get(format!("{target}/x"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.text().await.unwrap(), "direct");
        // Discovery itself (the target is no MCP server: it fails, but not at the proxy).
        let listed = list_tools(
            &egress::client(),
            &format!("{target}/mcp"),
            McpProtocol::StreamableHttp,
            &BTreeMap::from([("X-Api-Key".to_owned(), "k-123".to_owned())]),
            Duration::from_secs(5),
        )
        .await;
        assert!(listed.is_err());
        // The notifiers' client.
        let notifiers =
            RestrictedClient::new(Destinations::new(vec!["127.0.0.0/8".parse().unwrap()]));
        send::post(
            &notifiers,
            ChannelType::Webhook,
            &format!("{target}/hook"),
            &json!({}),
        )
        .await
        .unwrap();
    });
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "only the control client reached the proxy"
    );
}
