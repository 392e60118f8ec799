//! gate.json entries the gate refuses to start with: each error names the entry and field.

use crate::harness::*;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::contract::gate_config::{DEFAULT_MAX_OPEN_REQUESTS, GateConfig, GateServer};

async fn entry_error(edit: fn(&mut GateServer)) -> String {
    let api = FakeApi::start().await;
    let mut entry = server(
        "fs",
        McpProtocol::StreamableHttp,
        "http://fs.tools:8080/mcp",
        &["read_file"],
        &[],
    );
    edit(&mut entry);
    build_error(&config(vec![entry], 3600.0, 30.0), &api).unwrap_or_else(|| "built".into())
}

#[tokio::test]
async fn bad_server_entries_are_refused_naming_the_field() {
    assert_eq!(entry_error(|_| {}).await, "built");
    type Edit = fn(&mut GateServer);
    let cases: [(Edit, &str); 4] = [
        (
            |s| s.params.timeout = serde_json::Number::from_f64(0.0),
            "gate.json: servers[0].params: /servers/tools/fs/mcp: params.timeout 0.0: must be a positive number of seconds",
        ),
        (
            |s| s.params.sse_read_timeout = Some((-5).into()),
            "gate.json: servers[0].params: /servers/tools/fs/mcp: params.sse_read_timeout -5: must be a positive number of seconds",
        ),
        (
            |s| s.params.url = "not a url".into(),
            "gate.json: servers[0].params: /servers/tools/fs/mcp: params.url \"not a url\": relative URL without a base",
        ),
        (
            |s| s.route = "servers/x".into(),
            "gate.json: servers[0].route: \"servers/x\" must be a unique absolute path",
        ),
    ];
    for (edit, expected) in cases {
        assert_eq!(entry_error(edit).await, expected);
    }
}

#[tokio::test]
async fn a_cap_of_no_open_requests_is_refused_and_an_older_gate_json_gets_the_default() {
    let api = FakeApi::start().await;
    let mut capped = config(vec![], 3600.0, 30.0);
    capped.approval.max_open_requests = 0;
    let error = build_error(&capped, &api).expect("the gate does not start");
    assert_eq!(
        error,
        "gate.json: approval.max_open_requests: 0: must be at least 1 (no call could ever ask for approval)"
    );
    // The gate.json of a controller from before the cap.
    let mut older = serde_json::to_value(config(vec![], 3600.0, 30.0)).unwrap();
    older["approval"]
        .as_object_mut()
        .unwrap()
        .remove("max_open_requests");
    let older: GateConfig = serde_json::from_value(older).unwrap();
    assert_eq!(older.approval.max_open_requests, DEFAULT_MAX_OPEN_REQUESTS);
}

#[tokio::test]
async fn a_gate_json_that_still_asks_for_the_session_store_starts_without_one() {
    // The gate.json of a controller from before the session store left the gate: the field is
    // read and ignored, and /api/ is a path like any other no tool server has.
    let api = FakeApi::start().await;
    let mut older = serde_json::to_value(config(vec![], 3600.0, 30.0)).unwrap();
    older["session_store"] = serde_json::json!(true);
    let older: GateConfig = serde_json::from_value(older).unwrap();
    let gate = Gate::start(&older, &api).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for path in ["/api/sessions?user_id=alice", "/api/tasks/t1"] {
        let status = http
            .get(format!("{}{path}", gate.url))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{path}");
    }
}
