//! The agent's session store (gate.json `session_store`): kagent 0.7.4's `/api/sessions` and
//! `/api/tasks` as the agent runtime reads them, status codes, envelopes and field names, on an
//! in-process gate; refused on a shared gate.

use crate::harness::*;
use crate::stub;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use reqwest::StatusCode;
use serde_json::{Value, json};

const AGENT: &str = "team__NS__agent_a";

async fn start_gate(session_store: bool) -> (Gate, FakeApi, String) {
    init();
    let upstream = stub::start().await;
    let api = FakeApi::start().await;
    let mut cfg = config(
        vec![server(
            "stub",
            McpProtocol::StreamableHttp,
            &upstream,
            &["echo"],
            &[],
        )],
        3600.0,
        30.0,
    );
    cfg.session_store = session_store;
    let gate = Gate::start(&cfg, &api).await;
    (gate, api, upstream)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Sends `method path` with the runtime's headers (`X-User-ID` when `user` is given,
/// `X-Agent-Name`, a bearer token) and `body`; the status and the body, as JSON when it is.
async fn send(
    gate: &Gate,
    method: reqwest::Method,
    path: &str,
    user: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Option<Value>, String) {
    let mut request = http()
        .request(method, format!("{}{path}", gate.url))
        .header("X-Agent-Name", AGENT)
        .header("Authorization", "Bearer not-looked-at");
    if let Some(user) = user {
        request = request.header("X-User-ID", user);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).ok();
    if value.is_some() {
        assert_eq!(content_type.as_deref(), Some("application/json"));
    }
    (status, value, text)
}

fn keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

#[tokio::test]
async fn sessions_and_events_in_kagents_shapes() {
    let (gate, _api, _upstream) = start_gate(true).await;
    use reqwest::Method;

    // What get_session asks first: an unknown session is 404, which the runtime reads as None.
    let (status, body, _) = send(
        &gate,
        Method::GET,
        "/api/sessions/s1?user_id=alice&limit=-1",
        Some("alice"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body.unwrap(), json!({"error": "Session not found"}));

    // create_session: the body's user_id is not the user; the query or header is.
    let (status, body, _) = send(
        &gate,
        Method::POST,
        "/api/sessions",
        Some("alice"),
        Some(json!({"user_id": "mallory", "agent_ref": AGENT, "id": "s1", "name": "hello"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let body = body.unwrap();
    assert_eq!(keys(&body), ["error", "data", "message"]);
    assert_eq!(body["error"], json!(false));
    assert_eq!(body["message"], json!("Successfully created session"));
    let session = &body["data"];
    assert_eq!(
        keys(session),
        [
            "id",
            "name",
            "user_id",
            "created_at",
            "updated_at",
            "deleted_at",
            "agent_id"
        ]
    );
    assert_eq!(session["id"], json!("s1"));
    assert_eq!(session["name"], json!("hello"));
    assert_eq!(session["user_id"], json!("alice"));
    assert_eq!(session["agent_id"], json!(AGENT));
    assert_eq!(session["deleted_at"], Value::Null);
    session["created_at"]
        .as_str()
        .unwrap()
        .parse::<jiff::Timestamp>()
        .unwrap();

    // append_event: `data` is the ADK event's JSON as a string, and comes back the same.
    let events: Vec<String> = (1..=3)
        .map(|i| {
            json!({"id": format!("e{i}"), "author": "user", "invocationId": "inv",
                "content": {"role": "user", "parts": [{"text": format!("message \"{i}\"")}]},
                "actions": {"stateDelta": {"n": i}}, "timestamp": 1.8e9 + f64::from(i)})
            .to_string()
        })
        .collect();
    for (i, data) in events.iter().enumerate() {
        let (status, body, _) = send(
            &gate,
            Method::POST,
            "/api/sessions/s1/events?user_id=alice",
            Some("alice"),
            Some(json!({"id": format!("e{}", i + 1), "data": data})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
        let body = body.unwrap();
        assert_eq!(
            body["message"],
            json!("Event added to session successfully")
        );
        assert_eq!(
            keys(&body["data"]),
            [
                "id",
                "session_id",
                "user_id",
                "created_at",
                "updated_at",
                "deleted_at",
                "data"
            ]
        );
        assert_eq!(body["data"]["data"], json!(data));
    }

    // get_session: {session, events}, events in the order stored; a limit keeps the last.
    let (status, body, _) = send(
        &gate,
        Method::GET,
        "/api/sessions/s1?user_id=alice&limit=-1",
        Some("alice"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let body = body.unwrap();
    assert_eq!(body["message"], json!("Successfully retrieved session"));
    assert_eq!(keys(&body["data"]), ["session", "events"]);
    assert_eq!(body["data"]["session"]["id"], json!("s1"));
    let got: Vec<&str> = body["data"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"].as_str().unwrap())
        .collect();
    assert_eq!(got, events);
    let (_, body, _) = send(
        &gate,
        Method::GET,
        "/api/sessions/s1?user_id=alice&limit=2",
        Some("alice"),
        None,
    )
    .await;
    let ids: Vec<&str> = body.as_ref().unwrap()["data"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["e2", "e3"]);
    let (status, body, _) = send(
        &gate,
        Method::GET,
        "/api/sessions/s1?user_id=alice&limit=two",
        Some("alice"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.unwrap()["error"]
            .as_str()
            .unwrap()
            .starts_with("Failed to parse limit")
    );

    // Another user sees nothing of Alice's, and cannot write to her session.
    let (status, _, _) = send(
        &gate,
        Method::GET,
        "/api/sessions/s1?user_id=bob&limit=-1",
        Some("bob"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = send(
        &gate,
        Method::POST,
        "/api/sessions/s1/events?user_id=bob",
        Some("bob"),
        Some(json!({"id": "x", "data": "{}"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // list_sessions: an empty list leaves `data` out, as kagent does.
    let (status, body, _) = send(
        &gate,
        Method::GET,
        "/api/sessions?user_id=bob",
        Some("bob"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body.unwrap(),
        json!({"error": false, "message": "Successfully listed sessions"})
    );
    let (_, body, _) = send(
        &gate,
        Method::GET,
        "/api/sessions?user_id=alice",
        Some("alice"),
        None,
    )
    .await;
    let listed = body.unwrap()["data"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], json!("s1"));

    // A session of another agent is refused 400, as kagent refuses an agent it does not know.
    let (status, body, _) = send(
        &gate,
        Method::POST,
        "/api/sessions",
        Some("alice"),
        Some(json!({"user_id": "alice", "agent_ref": "team__NS__agent_b"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.unwrap()["error"]
            .as_str()
            .unwrap()
            .starts_with("Agent ref is invalid, please check the agent ref team__NS__agent_b")
    );
    let (status, body, _) = send(
        &gate,
        Method::POST,
        "/api/sessions",
        Some("alice"),
        Some(json!({"user_id": "alice"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body.unwrap(), json!({"error": "agent_ref is required"}));

    // An id the client chose, percent-encoded in the path as httpx writes it.
    let (status, _, _) = send(
        &gate,
        Method::POST,
        "/api/sessions",
        Some("alice"),
        Some(json!({"agent_ref": AGENT, "id": "ctx a/é"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body, _) = send(
        &gate,
        Method::POST,
        "/api/sessions/ctx%20a%2F%C3%A9/events?user_id=alice",
        Some("alice"),
        Some(json!({"id": "e1", "data": "{}"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body.unwrap()["data"]["session_id"], json!("ctx a/é"));

    // delete_session: 200 with `{}`; then it is gone.
    let (status, body, _) = send(
        &gate,
        Method::DELETE,
        "/api/sessions/s1?user_id=alice",
        Some("alice"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body.unwrap(),
        json!({"error": false, "data": {}, "message": "Session deleted successfully"})
    );
    let (status, _, _) = send(
        &gate,
        Method::GET,
        "/api/sessions/s1?user_id=alice&limit=-1",
        Some("alice"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn tasks_in_kagents_shapes() {
    let (gate, _api, _upstream) = start_gate(true).await;
    use reqwest::Method;
    let task = json!({"id": "t1", "contextId": "s1", "kind": "task",
        "status": {"state": "working", "message": null, "timestamp": null},
        "history": [{"role": "user", "parts": [{"kind": "text", "text": "hi"}],
            "messageId": "m1", "kind": "message"}],
        "artifacts": null, "metadata": null});
    let (status, body, _) = send(&gate, Method::POST, "/api/tasks", None, Some(task.clone())).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        body.unwrap(),
        json!({"error": false, "data": task, "message": "Successfully created task"})
    );
    let (status, body, _) = send(&gate, Method::GET, "/api/tasks/t1", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body.unwrap(),
        json!({"error": false, "data": task, "message": "Successfully retrieved task"})
    );
    let (status, _, text) = send(&gate, Method::DELETE, "/api/tasks/t1", None, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(text, "");
    let (status, body, _) = send(&gate, Method::GET, "/api/tasks/t1", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body.unwrap(), json!({"error": "Task not found"}));
    let (status, body, _) = send(
        &gate,
        Method::POST,
        "/api/tasks",
        None,
        Some(json!(["not", "a", "task"])),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.unwrap()["error"]
            .as_str()
            .unwrap()
            .starts_with("Invalid request body")
    );
}

#[tokio::test]
async fn other_paths_and_methods_and_a_gate_without_the_store() {
    use reqwest::Method;
    let (gate, _api, _upstream) = start_gate(true).await;
    let (status, body, _) = send(&gate, Method::GET, "/api/agents", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.unwrap()["error"].is_string());
    let (status, _, _) = send(&gate, Method::PUT, "/api/sessions/s1", None, None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    // MCP routes are untouched; a path that is neither MCP nor /api/ is 404 as before.
    let (status, _, text) = send(&gate, Method::GET, "/other", None, None).await;
    assert_eq!((status, text.as_str()), (StatusCode::NOT_FOUND, ""));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let response = http()
        .post(gate.route("stub"))
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // Without `session_store` the gate has no /api/.
    let (plain, _api2, _up2) = start_gate(false).await;
    let (status, _, text) = send(
        &plain,
        Method::POST,
        "/api/sessions",
        Some("alice"),
        Some(json!({"agent_ref": AGENT})),
    )
    .await;
    assert_eq!((status, text.as_str()), (StatusCode::NOT_FOUND, ""));
}

#[tokio::test]
async fn the_store_is_refused_on_a_shared_gate() {
    init();
    let api = FakeApi::start().await;
    let mut shared = shared_config(vec![], 3600.0, 30.0);
    shared.session_store = true;
    assert_eq!(
        build_error(&shared, &api).as_deref(),
        Some(
            "gate.json: session_store: true on a shared gate: only an Agent's gate serves its agent's session store"
        )
    );
    let mut on = config(vec![], 3600.0, 30.0);
    on.session_store = true;
    assert_eq!(build_error(&on, &api), None);
    // gate.json leaves the switch out when it is off, and reads its absence as off.
    let off = serde_json::to_value(config(vec![], 3600.0, 30.0)).unwrap();
    assert!(off.get("session_store").is_none());
    let on = serde_json::to_value(&on).unwrap();
    assert_eq!(on["session_store"], json!(true));
}
