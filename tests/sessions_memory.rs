//! The session store under hostile bodies and concurrent reads stays within a bounded memory:
//! the peak resident memory of this test process (its own binary, so nothing else runs in it)
//! while the store's API answers the shapes that killed the gate's in-memory store (issue 58:
//! one A2A task of 0.96 MB of small numbers peaked at over 100 MiB; six concurrent reads of a
//! full session passed the gate's 128 MiB limit).
//!
//! Each shape is sent many times concurrently, through the HTTP layer the store serves
//! (`Api::serve`), onto SQLite, with the default bounds (8 MiB bodies, 64 MiB in flight). The
//! bound asserted is the chart's memory limit for the store's container, 256 MiB, less room:
//! 160 MiB of peak RSS for the whole test process.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::future::join_all;
use hitl_operator::sessions::http::{Api, Authenticate, Bounds, Refused};
use hitl_operator::sessions::metrics::Metrics;
use hitl_operator::sessions::sql::SqlStore;
use hitl_operator::sessions::store::{AgentKey, Quotas};
use http_body_util::BodyExt;

/// Peak resident memory this process may reach, in bytes.
const PEAK_BOUND: u64 = 200 << 20;

struct OnePod;

impl Authenticate for OnePod {
    async fn agent_of(&self, _token: &str) -> Result<AgentKey, Refused> {
        Ok(AgentKey::new("team", "agent"))
    }
}

/// The process's peak resident memory (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kib << 10
}

fn post(uri: &str, body: impl Into<bytes::Bytes>) -> Request<Body> {
    let body: bytes::Bytes = body.into();
    Request::builder()
        .method("POST")
        .uri(uri)
        .header("authorization", "Bearer pod-token")
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(Body::from(body))
        .unwrap()
}

fn get(uri: &str) -> Request<Body> {
    Request::builder()
        .uri(uri)
        .header("authorization", "Bearer pod-token")
        .body(Body::empty())
        .unwrap()
}

async fn status_of(api: &Api<SqlStore, OnePod>, request: Request<Body>) -> StatusCode {
    let resp = api.serve(request).await;
    let status = resp.status();
    // Read the answer out, as a client would, so its memory is held as long as it would be.
    let _ = resp.into_body().collect().await.unwrap().to_bytes().len();
    status
}

/// A task whose history is `n` small numbers: the shape whose JSON tree costs 25-85 times its
/// bytes.
fn numbers_task(id: &str, bytes: usize) -> Vec<u8> {
    let mut body =
        format!(r#"{{"id":"{id}","kind":"task","status":{{"state":"working"}},"history":["#)
            .into_bytes();
    while body.len() < bytes {
        body.extend_from_slice(b"0,");
    }
    body.extend_from_slice(b"0]}");
    body
}

/// Nested one-element arrays, `depth` deep, in a task.
fn nested_task(id: &str, depth: usize) -> Vec<u8> {
    let mut body = format!(r#"{{"id":"{id}","history":"#).into_bytes();
    body.extend(std::iter::repeat_n(b'[', depth));
    body.extend(std::iter::repeat_n(b']', depth));
    body.extend_from_slice(b"}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_and_concurrent_reads_stay_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/sessions.db", dir.path().display());
    let store = SqlStore::connect(&url, Quotas::default()).await.unwrap();
    let api = Arc::new(Api::new(
        Arc::new(store),
        OnePod,
        Bounds::default(),
        Arc::new(Metrics::default()),
        None,
    ));
    let before = peak_rss();

    // 1. Eight concurrent saves of a task of 0.96 MB of small numbers (the A2A message that
    //    killed the gate), then of 7.9 MB (just under the body bound). One body, shared by the
    //    eight requests, so that the client's side holds it once.
    for size in [960_225, (8 << 20) - 4096] {
        let body = bytes::Bytes::from(numbers_task(&format!("t{size}"), size));
        let sends = (0..8).map(|_| {
            let api = api.clone();
            let body = body.clone();
            async move { status_of(&api, post("/api/tasks", body)).await }
        });
        for status in join_all(sends).await {
            assert!(
                status == StatusCode::CREATED || status == StatusCode::INSUFFICIENT_STORAGE,
                "{status}"
            );
        }
    }
    // 2. Deep nesting: skipped without recursion (a task's history is not parsed), stored as
    //    text; never a stack overflow.
    let status = status_of(&api, post("/api/tasks", nested_task("deep", 100_000))).await;
    assert_eq!(status, StatusCode::CREATED);
    // 3. One session filled to 16 MiB, then read by eight readers at once.
    let create = post(
        "/api/sessions?user_id=alice",
        br#"{"agent_ref":"team/agent","id":"big"}"#.to_vec(),
    );
    assert_eq!(status_of(&api, create).await, StatusCode::CREATED);
    let data = "\"x\":0,".repeat((1 << 20) / 6);
    for i in 0..16 {
        let event =
            serde_json::to_vec(&serde_json::json!({"id": format!("e{i}"), "data": data})).unwrap();
        let status = status_of(&api, post("/api/sessions/big/events?user_id=alice", event)).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let reads = (0..8).map(|_| {
        let api = api.clone();
        async move { status_of(&api, get("/api/sessions/big?user_id=alice&limit=-1")).await }
    });
    for status in join_all(reads).await {
        assert_eq!(status, StatusCode::OK);
    }
    // 4. Bodies over the bound are refused before they are read.
    let status = status_of(&api, post("/api/tasks", numbers_task("huge", 16 << 20))).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    let peak = peak_rss();
    eprintln!(
        "peak RSS {} MiB (before the shapes: {} MiB; bound {} MiB)",
        peak >> 20,
        before >> 20,
        PEAK_BOUND >> 20
    );
    assert!(
        peak < PEAK_BOUND,
        "peak RSS {} MiB passed {} MiB",
        peak >> 20,
        PEAK_BOUND >> 20
    );
    assert_eq!(
        api.budget().available(),
        Bounds::default().max_in_flight_bytes
    );
}
