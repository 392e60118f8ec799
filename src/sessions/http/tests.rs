use std::collections::HashMap;

use axum::body::Body;
use axum::http::Request as HttpRequest;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::*;
use crate::sessions::memory::MemoryStore;
use crate::sessions::store::Quotas;

const ALICE_TOKEN: &str = "token-of-a-pod-of-team-a-agent-a";
const OTHER_TOKEN: &str = "token-of-a-pod-of-team-a-agent-b";
const UNVERIFIABLE: &str = "token-the-apiserver-cannot-check";

/// Tokens and the Agents they prove, as the apiserver would say.
struct Tokens(HashMap<&'static str, AgentKey>);

impl Authenticate for Tokens {
    async fn agent_of(&self, token: &str) -> Result<AgentKey, Refused> {
        if token == UNVERIFIABLE {
            return Err(Refused::Unverified("apiserver down".into()));
        }
        self.0
            .get(token)
            .cloned()
            .ok_or_else(|| Refused::Unauthenticated("not a pod's token".into()))
    }
}

fn agent_a() -> AgentKey {
    AgentKey::new("team-a", "agent-a")
}

struct Harness {
    api: Api<MemoryStore, Tokens>,
    notices: mpsc::Receiver<LimitNotice>,
    metrics: Arc<Metrics>,
}

fn harness(quotas: Quotas, bounds: Bounds) -> Harness {
    let tokens = Tokens(HashMap::from([
        (ALICE_TOKEN, agent_a()),
        (OTHER_TOKEN, AgentKey::new("team-a", "agent-b")),
    ]));
    let metrics = Arc::new(Metrics::default());
    let (tx, notices) = mpsc::channel(8);
    Harness {
        api: Api::new(
            Arc::new(MemoryStore::new(quotas)),
            tokens,
            bounds,
            metrics.clone(),
            Some(tx),
        ),
        notices,
        metrics,
    }
}

fn default_harness() -> Harness {
    harness(Quotas::default(), Bounds::default())
}

/// A request as kagent-adk sends it: its token, its app name and (for 0.7.4) `X-User-ID`.
fn request(method: &str, uri: &str, token: Option<&str>, body: Option<Value>) -> Request {
    let mut builder = HttpRequest::builder().method(method).uri(uri);
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    match body {
        Some(body) => builder
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
        None => builder.body(Body::empty()).unwrap(),
    }
}

async fn send(h: &Harness, request: Request) -> (StatusCode, Value) {
    let resp = h.api.serve(request).await;
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, body)
}

async fn create(h: &Harness, user: &str, id: &str) -> (StatusCode, Value) {
    send(
        h,
        request(
            "POST",
            &format!("/api/sessions?user_id={user}"),
            Some(ALICE_TOKEN),
            Some(json!({"agent_ref": "team-a/agent-a", "id": id})),
        ),
    )
    .await
}

async fn append(h: &Harness, user: &str, session: &str, id: &str) -> (StatusCode, Value) {
    send(
        h,
        request(
            "POST",
            &format!("/api/sessions/{session}/events?user_id={user}"),
            Some(ALICE_TOKEN),
            Some(json!({"id": id, "data": format!("{{\"id\":\"{id}\"}}")})),
        ),
    )
    .await
}

fn event_ids(body: &Value) -> Vec<&str> {
    body["data"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_conversation_round_trips_in_kagents_envelope() {
    let h = default_harness();
    let (status, body) = create(&h, "alice", "ctx-1").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["error"], json!(false));
    assert_eq!(body["data"]["id"], "ctx-1");
    assert_eq!(body["data"]["agent_id"], "team_a__NS__agent_a");
    for id in ["e1", "e2", "e3"] {
        assert_eq!(
            append(&h, "alice", "ctx-1", id).await.0,
            StatusCode::CREATED
        );
    }
    // 0.10.4 asks for every event, in order.
    let (status, body) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx-1?user_id=alice&order=asc&limit=-1",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(event_ids(&body), ["e1", "e2", "e3"]);
    assert_eq!(body["data"]["events"][0]["data"], "{\"id\":\"e1\"}");
    // 0.7.4 asks for its last N; a limit of 1 means all, as kagent reads it.
    let (_, body) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx-1?user_id=alice&limit=2",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(event_ids(&body), ["e2", "e3"]);
    let (_, body) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx-1?user_id=alice&limit=1",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(event_ids(&body), ["e1", "e2", "e3"]);
    let (_, body) = send(
        &h,
        request(
            "GET",
            "/api/sessions?user_id=alice",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(body["data"][0]["id"], "ctx-1");
    // An empty list leaves `data` out, as kagent's omitempty does.
    let (_, body) = send(
        &h,
        request("GET", "/api/sessions?user_id=bob", Some(ALICE_TOKEN), None),
    )
    .await;
    assert_eq!(
        body,
        json!({"error": false, "message": "Successfully listed sessions"})
    );
    let (status, _) = send(
        &h,
        request(
            "DELETE",
            "/api/sessions/ctx-1?user_id=alice",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx-1?user_id=alice",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::NOT_FOUND, json!({"error": "Session not found"}))
    );
}

#[tokio::test]
async fn tasks_are_kept_as_sent_and_read_back() {
    let h = default_harness();
    let task = json!({"id": "t1", "contextId": "ctx", "kind": "task", "status": {"state": "working"}, "history": [{"x": [1, 2, 3]}]});
    let (status, body) = send(
        &h,
        request("POST", "/api/tasks", Some(ALICE_TOKEN), Some(task.clone())),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = send(&h, request("GET", "/api/tasks/t1", Some(ALICE_TOKEN), None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"], task);
    // Another Agent does not see it.
    let (status, _) = send(&h, request("GET", "/api/tasks/t1", Some(OTHER_TOKEN), None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(
        &h,
        request("DELETE", "/api/tasks/t1", Some(ALICE_TOKEN), None),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = send(&h, request("GET", "/api/tasks/t1", Some(ALICE_TOKEN), None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for bad in [
        json!({"kind": "task"}),
        json!({"id": ""}),
        json!({"id": 7}),
        json!([1, 2]),
    ] {
        let (status, body) = send(
            &h,
            request("POST", "/api/tasks", Some(ALICE_TOKEN), Some(bad.clone())),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    // A repeated key could be read two ways: refused.
    let dup = HttpRequest::builder()
        .method("POST")
        .uri("/api/tasks")
        .header("authorization", format!("Bearer {ALICE_TOKEN}"))
        .body(Body::from(r#"{"id":"t2","id":"t3"}"#))
        .unwrap();
    assert_eq!(send(&h, dup).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_request_without_a_pods_token_is_refused_before_anything_is_read() {
    let h = default_harness();
    let (status, body) = send(&h, request("GET", "/api/sessions?user_id=a", None, None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let basic = HttpRequest::builder()
        .uri("/api/sessions?user_id=a")
        .header("authorization", "Basic YTpi")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&h, basic).await.0, StatusCode::UNAUTHORIZED);
    let twice = HttpRequest::builder()
        .uri("/api/sessions?user_id=a")
        .header("authorization", format!("Bearer {ALICE_TOKEN}"))
        .header("authorization", format!("Bearer {OTHER_TOKEN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&h, twice).await.0, StatusCode::UNAUTHORIZED);
    let (status, _) = send(
        &h,
        request("GET", "/api/sessions?user_id=a", Some("forged"), None),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Unverifiable is 503, never let through.
    let (status, _) = send(
        &h,
        request("GET", "/api/sessions?user_id=a", Some(UNVERIFIABLE), None),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let text = h.metrics.encode();
    assert!(
        text.contains(r#"hitl_sessions_auth_refusals_total{reason="unauthenticated"} 4"#),
        "{text}"
    );
    assert!(
        text.contains(r#"hitl_sessions_auth_refusals_total{reason="unverified"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn another_agents_name_or_session_gets_nothing() {
    let h = default_harness();
    assert_eq!(create(&h, "alice", "ctx-a").await.0, StatusCode::CREATED);
    assert_eq!(
        append(&h, "alice", "ctx-a", "e1").await.0,
        StatusCode::CREATED
    );
    // agent-b's pod asks for agent-a's session by its id: not found, and cannot write to it.
    let (status, _) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx-a?user_id=alice",
            Some(OTHER_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(
        &h,
        request(
            "POST",
            "/api/sessions/ctx-a/events?user_id=alice",
            Some(OTHER_TOKEN),
            Some(json!({"id": "x", "data": "{}"})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Naming agent-a from agent-b's pod is refused, in the header or the body.
    let mut named = request(
        "GET",
        "/api/sessions?user_id=alice",
        Some(OTHER_TOKEN),
        None,
    );
    named.headers_mut().insert(
        "x-agent-name",
        HeaderValue::from_static("team_a__NS__agent_a"),
    );
    assert_eq!(send(&h, named).await.0, StatusCode::FORBIDDEN);
    let (status, body) = send(
        &h,
        request(
            "POST",
            "/api/sessions?user_id=alice",
            Some(OTHER_TOKEN),
            Some(json!({"agent_ref": "team-a/agent-a", "id": "ctx-a"})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Its own name is fine.
    let mut own = request(
        "GET",
        "/api/sessions?user_id=alice",
        Some(OTHER_TOKEN),
        None,
    );
    own.headers_mut().insert(
        "x-agent-name",
        HeaderValue::from_static("team_a__NS__agent_b"),
    );
    assert_eq!(send(&h, own).await.0, StatusCode::OK);
    // agent-a's data is untouched.
    let (_, body) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx-a?user_id=alice",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(event_ids(&body), ["e1"]);
}

/// The URLs kagent-adk builds from a context id chosen by the A2A caller (it writes the id
/// into the URL unescaped), and a user id carrying URL syntax.
#[tokio::test]
async fn a_context_id_or_user_id_cannot_choose_another_users_session() {
    let h = default_harness();
    assert_eq!(
        create(&h, "alice@corp", "ctx-alice").await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        append(&h, "alice@corp", "ctx-alice", "e1").await.0,
        StatusCode::CREATED
    );
    let with_user = |method: &str, uri: &str, user: &str, body: Option<Value>| {
        let mut r = request(method, uri, Some(ALICE_TOKEN), body);
        r.headers_mut()
            .insert("x-user-id", HeaderValue::from_str(user).unwrap());
        r
    };
    // 0.7.4's get: `/api/sessions/{id}?user_id={user}&limit=-1`, X-User-ID: mallory.
    let smuggled = "/api/sessions/ctx-alice?user_id=alice@corp&?user_id=mallory&limit=-1";
    let (status, body) = send(&h, with_user("GET", smuggled, "mallory", None)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // 0.7.4's append: `/api/sessions/{id}/events?user_id={user}`.
    let smuggled = "/api/sessions/ctx-alice?user_id=alice@corp&/events?user_id=mallory";
    let (status, body) = send(
        &h,
        with_user(
            "POST",
            smuggled,
            "mallory",
            Some(json!({"id": "evil", "data": "{}"})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // The header and the parameter disagree.
    let (status, body) = send(
        &h,
        with_user(
            "GET",
            "/api/sessions/ctx-alice?user_id=alice@corp",
            "mallory",
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("disagree"),
        "{body}"
    );
    // A parameter given twice.
    let (status, _) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx-alice?user_id=mallory&user_id=alice@corp",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // URL syntax inside an id, percent-encoded into the path or a user id.
    for uri in [
        "/api/sessions/ctx-alice%3Fuser_id=alice@corp?user_id=mallory",
        "/api/sessions/ctx%23x?user_id=mallory",
        "/api/sessions/ctx-alice?user_id=alice%40corp%26x%3D1",
    ] {
        let (status, body) = send(&h, request("GET", uri, Some(ALICE_TOKEN), None)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
    }
    // No user at all.
    let (status, _) = send(
        &h,
        request("GET", "/api/sessions/ctx-alice", Some(ALICE_TOKEN), None),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Nothing was written into alice's session.
    let (_, body) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx-alice?user_id=alice@corp",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(event_ids(&body), ["e1"]);
}

#[tokio::test]
async fn a_write_past_a_quota_is_refused_with_507_counted_and_noticed() {
    let quotas = Quotas {
        events_per_session: 2,
        ..Quotas::default()
    };
    let mut h = harness(quotas, Bounds::default());
    assert_eq!(create(&h, "alice", "ctx").await.0, StatusCode::CREATED);
    assert_eq!(
        append(&h, "alice", "ctx", "e1").await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        append(&h, "alice", "ctx", "e2").await.0,
        StatusCode::CREATED
    );
    let (status, body) = append(&h, "alice", "ctx", "e3").await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("events-per-session"),
        "{body}"
    );
    let notice = h.notices.try_recv().unwrap();
    assert_eq!(notice.agent, agent_a());
    assert_eq!(notice.limit, Limit::EventsPerSession);
    let text = h.metrics.encode();
    assert!(
        text.contains(r#"hitl_sessions_limit_refusals_total{limit="events-per-session"} 1"#),
        "{text}"
    );
    // Nothing was evicted: both events are there.
    let (_, body) = send(
        &h,
        request(
            "GET",
            "/api/sessions/ctx?user_id=alice",
            Some(ALICE_TOKEN),
            None,
        ),
    )
    .await;
    assert_eq!(event_ids(&body), ["e1", "e2"]);
}

#[tokio::test]
async fn a_body_past_the_bound_is_refused_unread() {
    let h = harness(
        Quotas::default(),
        Bounds {
            max_body_bytes: 1024,
            max_in_flight_bytes: 1 << 20,
        },
    );
    assert_eq!(create(&h, "alice", "ctx").await.0, StatusCode::CREATED);
    let big = "x".repeat(2000);
    let (status, body) = send(
        &h,
        request(
            "POST",
            "/api/sessions/ctx/events?user_id=alice",
            Some(ALICE_TOKEN),
            Some(json!({"id": "e1", "data": big})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    // Without a Content-Length, the read stops at the bound too.
    let stream = futures::stream::iter(
        (0..4).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 600]))),
    );
    let chunked = HttpRequest::builder()
        .method("POST")
        .uri("/api/tasks")
        .header("authorization", format!("Bearer {ALICE_TOKEN}"))
        .body(Body::from_stream(stream))
        .unwrap();
    assert_eq!(send(&h, chunked).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    // Every reservation was given back.
    assert_eq!(h.api.budget().available(), 1 << 20);
}
