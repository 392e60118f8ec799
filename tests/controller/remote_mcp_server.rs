//! RemoteMCPServer reconciler: lists tools from MCP stubs served on 127.0.0.1 (Streamable HTTP
//! and legacy SSE), writing the status through the mock API server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use hitl_operator::api::RemoteMCPServer;
use hitl_operator::controller::remote_mcp_server::reconcile;
use hitl_operator::tool_risk;
use http::Method;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::harness::*;

const STATUS: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/remotemcpservers/fs/status?&force=true&fieldManager=hitl-operator";
const TOKEN: &str = "/api/v1/namespaces/ns/secrets/token";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events?";

/// Tools served in two pages, to exercise pagination.
fn page(cursor: Option<&str>) -> Value {
    match cursor {
        None => json!({
            "tools": [{"name": "read_file", "description": "Read a file", "inputSchema": {"type": "object"}}],
            "nextCursor": "2",
        }),
        Some(_) => json!({
            "tools": [{"name": "delete_file", "description": "Delete a file", "inputSchema": {"type": "object"},
                "annotations": {"destructiveHint": true, "title": "Delete"}}],
        }),
    }
}

fn answer(message: &Value) -> Option<Value> {
    let id = message.get("id")?.clone();
    let result = match message["method"].as_str()? {
        "initialize" => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stub", "version": "1"},
        }),
        "tools/list" => page(message["params"]["cursor"].as_str()),
        _ => {
            return Some(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}}),
            );
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

type Seen = Arc<Mutex<Vec<String>>>;

/// Streamable HTTP: JSON answers on POST; no standalone SSE stream.
async fn streamable(State(seen): State<Seen>, headers: HeaderMap, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).unwrap();
    seen.lock().unwrap().push(format!(
        "{} auth={}",
        message["method"].as_str().unwrap_or_default(),
        headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    ));
    match answer(&message) {
        Some(reply) => (
            [
                ("content-type", "application/json"),
                ("mcp-session-id", "s1"),
            ],
            reply.to_string(),
        )
            .into_response(),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

#[derive(Clone)]
struct SseState {
    seen: Seen,
    outbox: Arc<Mutex<Option<mpsc::UnboundedSender<Value>>>>,
}

/// Legacy SSE: the stream announces the POST endpoint, answers arrive on the stream.
async fn sse_stream(State(state): State<SseState>) -> impl IntoResponse {
    let (sender, receiver) = mpsc::unbounded_channel::<Value>();
    *state.outbox.lock().unwrap() = Some(sender);
    let first = futures::stream::once(async {
        Ok::<_, std::convert::Infallible>(
            Event::default()
                .event("endpoint")
                .data("/messages?session=1"),
        )
    });
    let rest = futures::stream::unfold(receiver, |mut receiver| async move {
        let message = receiver.recv().await?;
        Some((
            Ok(Event::default().event("message").data(message.to_string())),
            receiver,
        ))
    });
    Sse::new(first.chain(rest))
}

async fn sse_post(
    State(state): State<SseState>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    body: String,
) -> StatusCode {
    assert_eq!(query.get("session").map(String::as_str), Some("1"));
    let message: Value = serde_json::from_str(&body).unwrap();
    state
        .seen
        .lock()
        .unwrap()
        .push(message["method"].as_str().unwrap_or_default().to_string());
    if let Some(reply) = answer(&message) {
        let outbox = state.outbox.lock().unwrap();
        outbox.as_ref().expect("stream open").send(reply).unwrap();
    }
    StatusCode::ACCEPTED
}

async fn serve(router: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// The Streamable HTTP stub on `/mcp` (JSON answers, no GET stream), recording into `seen`.
async fn serve_streamable(seen: Seen) -> std::net::SocketAddr {
    serve(
        Router::new()
            .route(
                "/mcp",
                post(streamable)
                    .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                    .delete(|| async { StatusCode::OK }),
            )
            .with_state(seen),
    )
    .await
}

fn server(url: &str, protocol: &str) -> RemoteMCPServer {
    yaml(&format!(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {{name: fs, namespace: ns, generation: 4}}
spec:
  url: "{url}"
  protocol: {protocol}
  timeout: 10s
  headersFrom:
    - name: Authorization
      valueFrom: {{type: Secret, name: token, key: token}}
"#
    ))
}

/// One reconcile of `server` that reads its header Secret, lists its tools and writes its
/// status and an Event: the result and the requests sent.
async fn discover(server: &RemoteMCPServer) -> (hitl_operator::Result<Action>, Vec<Recorded>) {
    let script = vec![
        expect(Method::GET, TOKEN, token_secret()),
        expect(Method::PATCH, STATUS, serde_json::to_value(server).unwrap()),
        expect(Method::POST, EVENTS, event_created()),
    ];
    run_script(script, |client| {
        reconcile(
            Arc::new(server.clone()),
            Cache::default().context(client, at(0)),
        )
    })
    .await
}

fn token_secret() -> Value {
    let encoded = serde_json::to_value(k8s_openapi::ByteString(b"Bearer abc".to_vec())).unwrap();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token", "namespace": "ns"}, "data": {"token": encoded}})
}

fn discovered(body: &Value) -> Vec<(String, String)> {
    body["status"]["discoveredTools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["description"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Each listed tool's `definitionSha256`.
fn digests(body: &Value) -> Vec<Value> {
    body["status"]["discoveredTools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["definitionSha256"].clone())
        .collect()
}

/// The digests a gate computes of the tools served (`tool_risk::definition_sha256`), in
/// [`expected_tools`]' order.
fn expected_digests() -> Vec<Value> {
    let digest = |page: Value| {
        json!(tool_risk::definition_sha256(page["tools"][0].as_object().unwrap()).unwrap())
    };
    vec![digest(page(Some("2"))), digest(page(None))]
}

fn expected_tools() -> Vec<(String, String)> {
    vec![
        ("delete_file".into(), "Delete a file".into()),
        ("read_file".into(), "Read a file".into()),
    ]
}

#[tokio::test]
async fn lists_tools_over_streamable_http_with_secret_headers() {
    let seen = Seen::default();
    let addr = serve_streamable(seen.clone()).await;
    let server = server(&format!("http://{addr}/mcp"), "STREAMABLE_HTTP");
    let (result, requests) = discover(&server).await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(300)));
    let body = &requests[1].body;
    assert_eq!(discovered(body), expected_tools());
    assert_eq!(digests(body), expected_digests());
    assert_eq!(
        conditions(body),
        vec![
            ("Accepted".into(), "True".into(), "Reconciled".into()),
            (
                "ToolDefinitionsAccepted".into(),
                "Unknown".into(),
                "NoneAccepted".into()
            )
        ]
    );
    assert_eq!(condition_message(body, "Accepted"), "2 tools discovered");
    assert_eq!(requests[2].body["reason"], "ToolsDiscovered");
    assert_eq!(requests[2].body["type"], "Normal");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0], "initialize auth=Bearer abc");
    assert!(
        seen.contains(&"tools/list auth=Bearer abc".to_string()),
        "{seen:?}"
    );
}

#[tokio::test]
async fn lists_tools_over_legacy_sse() {
    let state = SseState {
        seen: Seen::default(),
        outbox: Arc::default(),
    };
    let addr = serve(
        Router::new()
            .route("/sse", get(sse_stream))
            .route("/messages", post(sse_post))
            .with_state(state.clone()),
    )
    .await;
    let server = server(&format!("http://{addr}/sse"), "SSE");
    let (result, requests) = discover(&server).await;
    result.unwrap();
    assert_eq!(discovered(&requests[1].body), expected_tools());
    assert_eq!(digests(&requests[1].body), expected_digests());
    assert_eq!(
        *state.seen.lock().unwrap(),
        vec![
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/list"
        ]
    );
}

#[tokio::test]
async fn unreachable_server_is_reported_and_retried_with_backoff() {
    // Bind and drop a listener: nothing answers on that port.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut server = server(&format!("http://{addr}/mcp"), "STREAMABLE_HTTP");
    server.spec.headers_from.clear();
    let script = vec![
        expect(
            Method::PATCH,
            STATUS,
            serde_json::to_value(&server).unwrap(),
        ),
        expect(Method::POST, EVENTS, event_created()),
    ];
    let (result, requests) = run_script(script, |client| {
        reconcile(
            Arc::new(server.clone()),
            Cache::default().context(client, at(0)),
        )
    })
    .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    let body = &requests[0].body;
    assert_eq!(
        conditions(body),
        vec![(
            "Accepted".into(),
            "False".into(),
            "ToolDiscoveryFailed".into()
        )]
    );
    let message = condition_message(body, "Accepted");
    assert!(
        message.starts_with(&format!(
            "RemoteMCPServer ns/fs: listing tools: connecting to http://{addr}/mcp: "
        )),
        "{message}"
    );
    // Said once as an Event, with the same root cause.
    let event = &requests[1].body;
    assert_eq!(
        (&event["type"], &event["reason"], &event["note"]),
        (
            &json!("Warning"),
            &json!("ToolDiscoveryFailed"),
            &json!(message)
        )
    );

    // Failing the same way again changes nothing in the status: no write, no Event.
    server.status = Some(serde_json::from_value(body["status"].clone()).unwrap());
    let (result, requests) = run_script(Vec::new(), |client| {
        reconcile(
            Arc::new(server.clone()),
            Cache::default().context(client, at(30)),
        )
    })
    .await;
    assert!(result.is_ok());
    assert!(requests.is_empty());
}

#[tokio::test]
async fn definitions_not_accepted_make_the_condition_false_and_a_warning() {
    let addr = serve_streamable(Seen::default()).await;
    let [delete_file, read_file] = expected_digests().try_into().unwrap();
    let mut server = server(&format!("http://{addr}/mcp"), "STREAMABLE_HTTP");
    let accept = |pairs: &[(&str, &Value)]| {
        pairs
            .iter()
            .map(|(name, digest)| {
                serde_json::from_value(json!({"name": name, "definitionSha256": digest})).unwrap()
            })
            .collect::<Vec<_>>()
    };
    // Both as listed: True.
    server.spec.accepted_tool_definitions =
        accept(&[("read_file", &read_file), ("delete_file", &delete_file)]);
    let (_, requests) = discover(&server).await;
    let body = &requests[1].body;
    assert_eq!(
        conditions(body)[1],
        (
            "ToolDefinitionsAccepted".into(),
            "True".into(),
            "Accepted".into()
        )
    );
    // delete_file accepted with another definition, read_file never: False, a Warning that
    // names both and says how to accept.
    server.spec.accepted_tool_definitions = accept(&[("delete_file", &json!("0".repeat(64)))]);
    let script = vec![
        expect(Method::GET, TOKEN, token_secret()),
        expect(
            Method::PATCH,
            STATUS,
            serde_json::to_value(&server).unwrap(),
        ),
        expect(Method::POST, EVENTS, event_created()),
        expect(Method::POST, EVENTS, event_created()),
    ];
    let (result, requests) = run_script(script, |client| {
        reconcile(
            Arc::new(server.clone()),
            Cache::default().context(client, at(0)),
        )
    })
    .await;
    result.unwrap();
    let body = &requests[1].body;
    assert_eq!(
        conditions(body)[1],
        (
            "ToolDefinitionsAccepted".into(),
            "False".into(),
            "DefinitionChanged".into()
        )
    );
    let message = condition_message(body, "ToolDefinitionsAccepted");
    let listed = &delete_file.as_str().unwrap()[..12];
    for part in [
        format!("delete_file (accepted sha256 000000000000, listed {listed})"),
        "read_file (never accepted)".to_owned(),
        "`kubectl hitl accept-tools remotemcpserver/fs -n ns`".to_owned(),
    ] {
        assert!(message.contains(&part), "{part} not in {message}");
    }
    let warning = &requests[3].body;
    assert_eq!(
        (&warning["type"], &warning["reason"], &warning["note"]),
        (
            &json!("Warning"),
            &json!("ToolDefinitionChanged"),
            &json!(message)
        )
    );
}

/// A server at `url` whose `headersFrom` puts the token Secret's value in `X-Api-Key`, a header
/// reqwest would carry across origins (it drops only Authorization, Cookie and
/// Proxy-Authorization).
fn server_with_api_key(url: &str, protocol: &str) -> RemoteMCPServer {
    let mut server = server(url, protocol);
    server.spec.headers_from[0].name = "X-Api-Key".into();
    server
}

fn api_key(headers: &HeaderMap) -> String {
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_the_other_origin_gets_nothing() {
    // The other origin records every request it gets, with its X-Api-Key.
    let reached = Seen::default();
    let other = serve(Router::new().fallback({
        let reached = reached.clone();
        move |uri: http::Uri, headers: HeaderMap| async move {
            reached
                .lock()
                .unwrap()
                .push(format!("{} key={}", uri.path(), api_key(&headers)));
            StatusCode::OK
        }
    }))
    .await;
    // The configured server answers everything with a 307 there.
    let asked = Seen::default();
    let origin = serve(Router::new().fallback({
        let asked = asked.clone();
        move |uri: http::Uri, headers: HeaderMap| async move {
            asked
                .lock()
                .unwrap()
                .push(format!("{} key={}", uri.path(), api_key(&headers)));
            (
                StatusCode::TEMPORARY_REDIRECT,
                [("location", format!("http://{other}{}", uri.path()))],
            )
        }
    }))
    .await;
    for (protocol, path) in [("STREAMABLE_HTTP", "/mcp"), ("SSE", "/sse")] {
        let server = server_with_api_key(&format!("http://{origin}{path}"), protocol);
        let (result, requests) = discover(&server).await;
        result.unwrap();
        assert_eq!(
            conditions(&requests[1].body),
            vec![(
                "Accepted".into(),
                "False".into(),
                "ToolDiscoveryFailed".into()
            )],
            "{protocol}"
        );
        let message = condition_message(&requests[1].body, "Accepted");
        assert!(
            message.contains(&format!(
                "redirected to another origin (from http://{origin} to http://{other})"
            )),
            "{protocol}: {message}"
        );
        assert_eq!(
            asked.lock().unwrap().pop(),
            Some(format!("{path} key=Bearer abc")),
            "{protocol}: the configured origin got the header"
        );
    }
    assert!(
        reached.lock().unwrap().is_empty(),
        "no request, so no X-Api-Key, reached the other origin: {:?}",
        reached.lock().unwrap()
    );
}

#[tokio::test]
async fn a_redirect_within_the_origin_is_followed_with_the_secret_headers() {
    let seen = Seen::default();
    let keyed = |State(seen): State<Seen>, headers: HeaderMap, body: String| async move {
        seen.lock()
            .unwrap()
            .push(format!("key={}", api_key(&headers)));
        streamable(State(seen), headers, body).await
    };
    let addr = serve(
        Router::new()
            .route(
                "/old",
                post(|| async { (StatusCode::TEMPORARY_REDIRECT, [("location", "/mcp")]) }),
            )
            .route(
                "/mcp",
                post(keyed)
                    .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                    .delete(|| async { StatusCode::OK }),
            )
            .with_state(seen.clone()),
    )
    .await;
    let server = server_with_api_key(&format!("http://{addr}/old"), "STREAMABLE_HTTP");
    let (result, requests) = discover(&server).await;
    result.unwrap();
    assert_eq!(discovered(&requests[1].body), expected_tools());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen[..2],
        ["key=Bearer abc", "initialize auth="],
        "{seen:?}"
    );
    assert!(seen.contains(&"tools/list auth=".to_string()), "{seen:?}");
    assert!(
        seen.iter()
            .filter(|s| s.starts_with("key="))
            .all(|s| s == "key=Bearer abc"),
        "{seen:?}"
    );
}
