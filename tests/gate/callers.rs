//! A shared gate (a ToolGate's, gate.json `callers`) knows who calls: every request bears a
//! token the apiserver verifies for the gate's audience (the fake apiserver's TokenReviews),
//! the caller's credential never reaches the upstream, and requests, grants, sessions and
//! call budgets are each caller's.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use futures::StreamExt;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::gate::callers::{
    FORBIDDEN, RATE_LIMITED, UNAUTHENTICATED, UNKNOWN_SESSION, UNVERIFIED,
};
use hitl_operator::gate::sessions::MAX_SESSIONS;
use hitl_test_kit::fake::APISERVER_AUDIENCE;
use serde_json::{Value, json};

use crate::harness::*;
use crate::stub;

const BOT_A: &str = "system:serviceaccount:apps:bot-a";
const BOT_B: &str = "system:serviceaccount:apps:bot-b";
const BOT_C: &str = "system:serviceaccount:apps:bot-c";

/// POSTs `body` to `url` bearing `token` (none: no Authorization header), in MCP session
/// `session`.
async fn post_as(
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> reqwest::Response {
    let mut request = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request.body(body.to_string()).send().await.unwrap()
}

fn echo(n: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"echo","arguments":{{"path":"/tmp/x"}}}}}}"#
    )
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// The fake apiserver with tokens `a` (bot-a) and `b` (bot-b) for the gate's audience, `k8s`
/// (bot-a) for the apiserver's only, and `both` (bot-b) for both.
async fn api_with_tokens() -> FakeApi {
    let api = FakeApi::start().await;
    api.add_token("a", BOT_A, &["system:serviceaccounts"], &[GATE_AUDIENCE]);
    api.add_token("b", BOT_B, &["system:serviceaccounts"], &[GATE_AUDIENCE]);
    api.add_token(
        "k8s",
        BOT_A,
        &["system:serviceaccounts"],
        &[APISERVER_AUDIENCE],
    );
    api.add_token(
        "both",
        BOT_B,
        &["system:serviceaccounts"],
        &[APISERVER_AUDIENCE, GATE_AUDIENCE],
    );
    api
}

/// A shared gate in front of the stub (behind a counting proxy), offering `echo`, gating it
/// when `gated`; `change` adjusts its configuration.
async fn shared_gate(
    api: &FakeApi,
    gated: bool,
    change: impl FnOnce(&mut hitl_operator::contract::gate_config::GateConfig),
) -> (Gate, Counter) {
    let upstream = stub::start().await;
    let counter = Counter::start(upstream.trim_end_matches("/mcp").to_string()).await;
    let mut stub = server(
        "stub",
        McpProtocol::StreamableHttp,
        &format!("{}/mcp", counter.url),
        &["echo"],
        if gated { &["echo"] } else { &[] },
    );
    stub.params
        .headers
        .insert("Authorization".into(), "Bearer upstream-credential".into());
    let mut cfg = shared_config(vec![stub], 3600.0, 0.3);
    change(&mut cfg);
    (Gate::start(&cfg, api).await, counter)
}

/// The status, `WWW-Authenticate` and JSON body of a refusal.
async fn refusal(resp: reqwest::Response) -> (u16, Option<String>, Value) {
    let status = resp.status().as_u16();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (status, challenge, resp.json().await.unwrap())
}

#[tokio::test]
async fn requests_without_a_token_for_the_gate_are_refused_and_nothing_is_forwarded() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, true, |c| {
        c.callers.as_mut().unwrap().users = vec![BOT_A.into(), BOT_B.into()];
    })
    .await;
    let url = gate.route("stub");

    let (status, challenge, body) = refusal(post_as(&url, None, None, &echo(1)).await).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge.as_deref(),
        Some(r#"Bearer error="invalid_token""#)
    );
    assert_eq!(
        body,
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": UNAUTHENTICATED,
            "message": "approval gate: no Authorization header: a shared gate needs `Authorization: Bearer <token>` with a Kubernetes token for its audience"}})
    );
    assert_eq!(api.token_reviews(), 0, "no token, nothing to review");

    // A token the apiserver accepts, but made for the apiserver, not for the gate.
    let (status, challenge, body) = refusal(post_as(&url, Some("k8s"), None, &echo(2)).await).await;
    assert_eq!((status, challenge.is_some()), (401, true));
    assert_eq!(body["error"]["code"], UNAUTHENTICATED);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("approval gate: the apiserver does not accept the token: "),
        "{message}"
    );
    // A token nobody made.
    let (status, _, _) = refusal(post_as(&url, Some("forged"), None, &echo(3)).await).await;
    assert_eq!(status, 401);

    // A token of the gate's audience whose caller the allow-list does not name.
    api.add_token(
        "m",
        "system:serviceaccount:apps:mallory",
        &[],
        &[GATE_AUDIENCE],
    );
    let (status, challenge, body) = refusal(post_as(&url, Some("m"), None, &echo(4)).await).await;
    assert_eq!((status, challenge), (403, None));
    assert_eq!(
        body["error"],
        json!({"code": FORBIDDEN, "message": "approval gate: caller system:serviceaccount:apps:mallory is not allowed to use this gate (callers.users and callers.groups name neither it nor a group of it)"})
    );

    // Other methods and paths are refused the same way.
    let get = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 401);

    assert!(counter.seen().is_empty(), "nothing reached the upstream");
    assert!(api.objects().is_empty(), "no ApprovalRequest was created");
}

#[tokio::test]
async fn a_verified_call_is_forwarded_without_the_callers_credential() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, false, |_| {}).await;
    let url = gate.route("stub");
    for (n, token) in [(1, "a"), (2, "a"), (3, "both")] {
        let resp = post_as(&url, Some(token), None, &echo(n)).await;
        assert_eq!(resp.status(), 200);
        let (text, is_error) = result_text(&resp.json().await.unwrap());
        assert!(!is_error, "{text}");
    }
    assert_eq!(counter.count("echo"), 3);
    // The upstream got the server's configured credential, once per request, never a caller's.
    assert_eq!(
        counter.credentials(),
        vec!["authorization: Bearer upstream-credential"; 3]
    );
    // bot-a's second request was answered from the cache.
    assert_eq!(api.token_reviews(), 2);
}

#[tokio::test]
async fn a_failing_token_review_refuses_the_request() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, false, |_| {}).await;
    let url = gate.route("stub");
    api.fail_token_reviews(Some(500));
    let (status, challenge, body) = refusal(post_as(&url, Some("a"), None, &echo(1)).await).await;
    assert_eq!((status, challenge), (503, None));
    assert_eq!(body["error"]["code"], UNVERIFIED);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "approval gate: cannot verify the caller's token: the apiserver's TokenReview failed"
        ),
        "{message}"
    );
    assert!(counter.seen().is_empty());
    // The failure was not remembered: once the apiserver answers, the caller is verified.
    api.fail_token_reviews(None);
    assert_eq!(post_as(&url, Some("a"), None, &echo(2)).await.status(), 200);
    assert_eq!(counter.count("echo"), 1);
}

/// The ApprovalRequests stored, as (caller's username, name).
fn requests_by_caller(api: &FakeApi) -> Vec<(String, String)> {
    let mut requests: Vec<(String, String)> = api
        .objects()
        .iter()
        .map(|r| {
            assert_eq!(
                r["spec"]["agentRef"],
                json!({"name": "shared", "kind": "ToolGate"})
            );
            assert_eq!(
                r["spec"]["requestedBy"],
                "system:serviceaccount:team:shared-gate"
            );
            (
                r["spec"]["caller"]["username"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                r["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    requests.sort();
    requests
}

#[tokio::test]
async fn identical_gated_calls_of_two_callers_are_two_requests_each_with_its_caller() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, true, |_| {}).await;
    let url = gate.route("stub");
    for token in ["a", "b", "a"] {
        let answer: Value = post_as(&url, Some(token), None, &echo(1))
            .await
            .json()
            .await
            .unwrap();
        let (text, is_error) = result_text(&answer);
        assert!(is_error && text.contains("Pending"), "{text}");
    }
    let requests = requests_by_caller(&api);
    assert_eq!(requests.len(), 2, "bot-a's repeat shares its request");
    assert_eq!(
        requests.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>(),
        [BOT_A, BOT_B]
    );
    assert_ne!(requests[0].1, requests[1].1);
    let a = api
        .objects()
        .into_iter()
        .find(|r| r["spec"]["caller"]["username"] == BOT_A)
        .unwrap();
    assert_eq!(
        a["spec"]["caller"],
        json!({"username": BOT_A, "uid": format!("uid-{BOT_A}"), "groups": ["system:serviceaccounts"]})
    );
    assert_eq!(
        a["metadata"]["labels"]["kagent.dev/caller-hash"]
            .as_str()
            .unwrap()
            .len(),
        16
    );
    // bot-a approving its own request does not run it: the gate does not trust that request
    // and asks anew.
    api.decide(&requests[0].1, "Approve", BOT_A, "mine");
    let answer: Value = post_as(&url, Some("a"), None, &echo(1))
        .await
        .json()
        .await
        .unwrap();
    let (text, is_error) = result_text(&answer);
    assert!(is_error && text.contains("Pending"), "{text}");
    assert!(!text.contains(&requests[0].1), "{text}");
    assert_eq!(counter.count("echo"), 0);
    // alice approving bot-b's request runs bot-b's call only.
    api.decide(&requests[1].1, "Approve", "alice", "ok");
    let answer: Value = post_as(&url, Some("a"), None, &echo(1))
        .await
        .json()
        .await
        .unwrap();
    assert!(result_text(&answer).1, "bot-b's approval is not bot-a's");
    let answer: Value = post_as(&url, Some("b"), None, &echo(1))
        .await
        .json()
        .await
        .unwrap();
    let (text, is_error) = result_text(&answer);
    assert!(!is_error, "{text}");
    assert_eq!(counter.count("echo"), 1);
}

/// An ApprovalGrant by alice, for an hour, of `echo` on `tools/stub` to the gate named
/// `agent_ref`, for `caller` only when given.
fn grant(name: &str, agent_ref: Value, caller: Option<&str>) -> Value {
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
    let mut grant = json!({
        "apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalGrant",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"agentRef": agent_ref,
            "toolServer": {"kind": "RemoteMCPServer", "name": "stub", "namespace": "tools"},
            "toolName": "echo", "expiresAt": expires, "reason": "test", "grantedBy": "alice"},
    });
    if let Some(caller) = caller {
        grant["spec"]["caller"] = json!(caller);
    }
    grant
}

#[tokio::test]
async fn a_grant_for_one_caller_does_not_cover_another() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, true, |c| {
        c.approval.grant_max_ttl_seconds = Some(86400.0);
    })
    .await;
    let url = gate.route("stub");
    // An Agent's grant (the same name, no kind) and one for bot-a's calls only.
    api.add_grant(grant("agents", json!({"name": "shared"}), None));
    api.add_grant(grant(
        "for-a",
        json!({"name": "shared", "kind": "ToolGate"}),
        Some(BOT_A),
    ));
    let answer: Value = post_as(&url, Some("b"), None, &echo(1))
        .await
        .json()
        .await
        .unwrap();
    let (text, is_error) = result_text(&answer);
    assert!(is_error && text.contains("Pending"), "{text}");
    let answer: Value = post_as(&url, Some("a"), None, &echo(2))
        .await
        .json()
        .await
        .unwrap();
    let (text, is_error) = result_text(&answer);
    assert!(!is_error, "{text}");
    assert_eq!(counter.count("echo"), 1);
    assert_eq!(api.grant("for-a")["status"]["uses"], 1);
    assert!(api.grant("agents").get("status").is_none(), "never used");
    let granted = api
        .objects()
        .into_iter()
        .find(|r| r["spec"].get("grant").is_some())
        .unwrap();
    assert_eq!(granted["spec"]["caller"]["username"], BOT_A);
}

#[tokio::test]
async fn a_session_begun_by_one_caller_is_refused_to_another() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, false, |_| {}).await;
    let url = gate.route("stub");
    let begun = post_as(&url, Some("a"), None, INITIALIZE).await;
    assert_eq!(begun.status(), 200);
    let session = begun.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let before = counter.seen().len();

    let (status, _, body) = refusal(post_as(&url, Some("b"), Some(&session), &echo(1)).await).await;
    assert_eq!(status, 404);
    assert_eq!(
        body["error"],
        json!({"code": UNKNOWN_SESSION, "message": "approval gate: unknown MCP session: it did not begin at this gate for this caller; begin a new session (initialize)"})
    );
    let deleted = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .delete(&url)
        .header("authorization", "Bearer b")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 404, "bot-b cannot end bot-a's session");
    // A session id the gate never saw begin is refused too.
    let made_up = post_as(&url, Some("a"), Some("made-up"), &echo(2)).await;
    assert_eq!(made_up.status(), 404);
    assert_eq!(counter.seen().len(), before, "nothing forwarded");

    let resp = post_as(&url, Some("a"), Some(&session), &echo(3)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(counter.count("echo"), 1);
}

/// Issue 54: a caller beginning sessions without end (each `initialize` with its own valid
/// token) forgets only its own: another caller's session stays known, and its calls go on.
#[tokio::test]
async fn a_caller_beginning_sessions_without_end_never_evicts_another_callers() {
    init();
    let api = api_with_tokens().await;
    api.add_token("c", BOT_C, &["system:serviceaccounts"], &[GATE_AUDIENCE]);
    let (gate, counter) = shared_gate(&api, false, |_| {}).await;
    let url = gate.route("stub");
    let begun = post_as(&url, Some("a"), None, INITIALIZE).await;
    assert_eq!(begun.status(), 200);
    let session = begun.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let flood = (0..MAX_SESSIONS + 4).map(|_| {
        client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("authorization", "Bearer c")
            .body(INITIALIZE)
            .send()
    });
    let answers: Vec<_> = futures::stream::iter(flood)
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(answers.iter().all(|a| a.as_ref().unwrap().status() == 200));

    let resp = post_as(&url, Some("a"), Some(&session), &echo(1)).await;
    assert_eq!(resp.status(), 200, "bot-a's session survived bot-c's flood");
    assert_eq!(counter.count("echo"), 1);
}

/// Issue 54: each new session counts against `callers.maxCallsPerMinute`, like a call.
#[tokio::test]
async fn each_new_session_counts_against_the_callers_rate() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, false, |c| {
        c.callers.as_mut().unwrap().max_calls_per_minute = Some(2);
    })
    .await;
    let url = gate.route("stub");
    for _ in 0..2 {
        assert_eq!(
            post_as(&url, Some("a"), None, INITIALIZE).await.status(),
            200
        );
    }
    let forwarded = counter.seen().len();
    let (status, _, body) = refusal(post_as(&url, Some("a"), None, INITIALIZE).await).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["code"], RATE_LIMITED);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("approval gate: caller {BOT_A} is over its limit of 2 calls per minute (callers.max_calls_per_minute, which counts each new session too); the session was not begun; retry in ")),
        "{message}"
    );
    assert_eq!(counter.seen().len(), forwarded, "not forwarded");
    // bot-b's budget is its own.
    assert_eq!(
        post_as(&url, Some("b"), None, INITIALIZE).await.status(),
        200
    );
}

/// Issue 54: a request naming more than one `Mcp-Session-Id` is refused and not forwarded, on
/// a shared gate and on an Agent's; so is any other repeated header the gate decides on.
#[tokio::test]
async fn a_repeated_session_header_is_refused_and_never_forwarded() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, false, |_| {}).await;
    let url = gate.route("stub");
    let begun = post_as(&url, Some("a"), None, INITIALIZE).await;
    let session = begun.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let forwarded = counter.seen().len();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for (header, first, second) in [
        ("mcp-session-id", session.as_str(), "someone-elses"),
        ("mcp-protocol-version", "2025-06-18", "2026-07-28"),
    ] {
        let resp = client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("authorization", "Bearer a")
            .header("mcp-session-id", &session)
            .header(header, first)
            .header(header, second)
            .body(echo(1))
            .send()
            .await
            .unwrap();
        let (status, _, body) = refusal(resp).await;
        assert_eq!(status, 400, "{header}");
        assert_eq!(
            body["error"],
            json!({"code": -32600, "message": format!("approval gate: header {header} appears more than once; send it once (the request was not forwarded)")})
        );
    }
    assert_eq!(counter.seen().len(), forwarded, "nothing forwarded");
    assert_eq!(counter.count("echo"), 0);
    // Once, it goes through.
    let resp = post_as(&url, Some("a"), Some(&session), &echo(2)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(counter.count("echo"), 1);
}

#[tokio::test]
async fn each_caller_is_held_to_its_calls_per_minute() {
    init();
    let api = api_with_tokens().await;
    let (gate, counter) = shared_gate(&api, false, |c| {
        c.callers.as_mut().unwrap().max_calls_per_minute = Some(2);
    })
    .await;
    let url = gate.route("stub");
    for n in 1..=2 {
        assert!(
            !result_text(
                &post_as(&url, Some("a"), None, &echo(n))
                    .await
                    .json()
                    .await
                    .unwrap()
            )
            .1
        );
    }
    let resp = post_as(&url, Some("a"), None, &echo(3)).await;
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["id"], 3);
    assert_eq!(answer["error"]["code"], RATE_LIMITED);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("approval gate: caller {BOT_A} is over its limit of 2 tools/call per minute (callers.max_calls_per_minute); the call was not forwarded; retry in ")),
        "{message}"
    );
    assert_eq!(counter.count("echo"), 2);
    // Other messages are not counted, and bot-b has a budget of its own.
    let ping = r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#;
    assert_eq!(post_as(&url, Some("a"), None, ping).await.status(), 200);
    assert!(
        !result_text(
            &post_as(&url, Some("b"), None, &echo(4))
                .await
                .json()
                .await
                .unwrap()
        )
        .1
    );
    assert_eq!(counter.count("echo"), 3);
}

#[tokio::test]
async fn a_shared_gate_needs_callers_and_an_agents_gate_may_not_have_them() {
    init();
    let api = FakeApi::start().await;
    let stub = server(
        "stub",
        McpProtocol::StreamableHttp,
        "http://127.0.0.1:1/mcp",
        &["echo"],
        &[],
    );
    let mut cfg = shared_config(vec![stub.clone()], 3600.0, 1.0);
    cfg.callers = None;
    assert_eq!(
        build_error(&cfg, &api).as_deref(),
        Some(
            "gate.json: callers: absent: a ToolGate's shared gate must verify who calls (callers.audiences)"
        )
    );
    let mut cfg = config(vec![stub.clone()], 3600.0, 1.0);
    cfg.callers = shared_config(vec![], 1.0, 1.0).callers;
    assert!(
        build_error(&cfg, &api)
            .unwrap()
            .contains("only a ToolGate's shared gate has callers")
    );
    let mut cfg = shared_config(vec![stub], 3600.0, 1.0);
    cfg.callers.as_mut().unwrap().audiences.clear();
    assert!(
        build_error(&cfg, &api)
            .unwrap()
            .contains("callers.audiences")
    );
}

/// A legacy HTTP+SSE server: its stream announces `/messages`, where it takes every POST
/// (counted) with 202.
async fn sse_upstream() -> (String, Arc<Mutex<usize>>) {
    let posts = Arc::new(Mutex::new(0));
    let counted = posts.clone();
    let app = Router::new()
        .route(
            "/sse",
            get(|| async {
                let first = futures::stream::once(async {
                    Ok::<_, std::io::Error>(Bytes::from("event: endpoint\ndata: /messages\n\n"))
                });
                let stream = futures::StreamExt::chain(first, futures::stream::pending());
                (
                    [("content-type", "text/event-stream")],
                    Body::from_stream(stream),
                )
            }),
        )
        .route(
            "/messages",
            post(move || {
                let counted = counted.clone();
                async move {
                    *counted.lock().unwrap() += 1;
                    StatusCode::ACCEPTED.into_response()
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sse", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, posts)
}

#[tokio::test]
async fn a_legacy_sse_session_takes_only_its_callers_messages() {
    init();
    let api = api_with_tokens().await;
    let (upstream, posts) = sse_upstream().await;
    let legacy = server("legacy", McpProtocol::Sse, &upstream, &["echo"], &[]);
    let gate = Gate::start(&shared_config(vec![legacy], 3600.0, 1.0), &api).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let route = gate.route("legacy");
    assert_eq!(http.get(&route).send().await.unwrap().status(), 401);
    let mut stream = http
        .get(&route)
        .header("authorization", "Bearer a")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    while !seen.contains("\n\n") {
        seen.push_str(&String::from_utf8_lossy(
            &stream.chunk().await.unwrap().unwrap(),
        ));
    }
    let endpoint = seen
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap()
        .to_string();
    assert!(
        endpoint.starts_with("/servers/tools/legacy/mcp/messages?session="),
        "{endpoint}"
    );
    let messages = format!("{}{endpoint}", gate.url);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let as_b = post_as(&messages, Some("b"), None, ping).await;
    assert_eq!(as_b.status(), 404);
    assert_eq!(*posts.lock().unwrap(), 0);
    let as_a = post_as(&messages, Some("a"), None, ping).await;
    assert_eq!(as_a.status(), 202);
    assert_eq!(*posts.lock().unwrap(), 1);
}
