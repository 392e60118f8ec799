//! A minimal in-process MCP server (Streamable HTTP, JSON responses): `initialize`, `ping`,
//! `tools/list` (tools `echo` and `hidden`) and `tools/call` (echoes its arguments, byte for
//! byte as they arrived); it answers
//! after `delay_ms` milliseconds when the params or the arguments hold that field, with the id
//! `answer_id` instead of the request's, the result under the key `result_key` instead of
//! `result`, as an SSE event when `answer_sse` is true (in pieces of `answer_chunk_bytes` bytes,
//! each a chunk of its own, with a pause halfway, when that is set), and with its tool list
//! whatever the request when `answer_tools` is true (in the params or the arguments); its GET
//! stream replays one `tools/list` response, as a resumed stream would; session `expired`
//! gets 404. `initialize` begins a new session, `stub-session-N`, as a real server assigns one;
//! other answers carry the client's session (`stub-session` without one). Used by the benchmark
//! as a fast upstream and by tests of JSON (non-SSE) responses.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

/// Starts the stub on 127.0.0.1 and returns its `/mcp` URL.
pub async fn start() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = Router::new().route("/mcp", post(handle).get(replay));
    tokio::spawn(async move {
        axum::serve(
            listener.tap_io(|s| {
                let _ = s.set_nodelay(true);
            }),
            app,
        )
        .await
        .unwrap()
    });
    url
}

use axum::serve::ListenerExt;

const TOOLS: &str = r#"{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"hidden","inputSchema":{"type":"object"}}]}"#;

async fn replay() -> Response {
    let event = format!(
        "id: 1\nevent: message\ndata: {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{TOOLS}}}\n\n"
    );
    ([("content-type", "text/event-stream")], event).into_response()
}

async fn handle(headers: HeaderMap, body: Bytes) -> Response {
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if headers
        .get("mcp-session-id")
        .is_some_and(|v| v == "expired")
    {
        return (StatusCode::NOT_FOUND, "session not found").into_response();
    }
    let params = &msg["params"];
    if let Some(ms) = params["delay_ms"]
        .as_u64()
        .or(params["arguments"]["delay_ms"].as_u64())
    {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    let id = msg["id"].clone();
    let result = match msg["method"].as_str() {
        Some("initialize") => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stub", "version": "1.0.0"}
        }),
        Some("ping") => json!({}),
        Some("tools/list") => serde_json::from_str(TOOLS).unwrap(),
        Some("tools/call") => {
            #[derive(serde::Deserialize)]
            struct Call<'a> {
                #[serde(borrow)]
                params: Params<'a>,
            }
            #[derive(serde::Deserialize)]
            struct Params<'a> {
                #[serde(borrow)]
                arguments: Option<&'a serde_json::value::RawValue>,
            }
            let call: Call = serde_json::from_slice(&body).unwrap();
            let arguments = call.params.arguments.map_or("null", |a| a.get());
            json!({"content": [{"type": "text", "text": arguments}]})
        }
        _ => return StatusCode::ACCEPTED.into_response(),
    };
    static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let session = if msg["method"] == "initialize" {
        let n = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("stub-session-{n}")
    } else {
        headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("stub-session")
            .to_string()
    };
    let result = if params["answer_tools"] == true || params["arguments"]["answer_tools"] == true {
        serde_json::from_str(TOOLS).unwrap()
    } else {
        result
    };
    let id = params.get("answer_id").cloned().unwrap_or(id);
    let key = params["result_key"].as_str().unwrap_or("result");
    let answer = serde_json::to_string(&json!({"jsonrpc": "2.0", "id": id, key: result})).unwrap();
    let (content_type, body) = if params["answer_sse"] == true {
        (
            "text/event-stream",
            format!("event: message\ndata: {answer}\n\n"),
        )
    } else {
        ("application/json", answer)
    };
    let body = match params["answer_chunk_bytes"].as_u64() {
        Some(n) => in_pieces(body.into_bytes(), n as usize),
        None => Body::from(body),
    };
    (
        [
            ("content-type", content_type),
            ("mcp-session-id", session.as_str()),
        ],
        body,
    )
        .into_response()
}

/// `body` as a stream of `n`-byte chunks, pausing 20 ms before the middle one.
fn in_pieces(body: Vec<u8>, n: usize) -> Body {
    let pieces: Vec<Bytes> = body.chunks(n).map(Bytes::copy_from_slice).collect();
    let middle = pieces.len() / 2;
    let stream =
        futures::stream::iter(pieces.into_iter().enumerate()).then(move |(i, piece)| async move {
            if i == middle {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Ok::<_, std::io::Error>(piece)
        });
    Body::from_stream(stream)
}
