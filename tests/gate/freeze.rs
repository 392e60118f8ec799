//! The freeze switch at the gate (issue 12, part 4), with the real MCP server and client from
//! npm and an in-process fake apiserver; the gate's view of the freeze is fed by the test (the
//! watch of the Agent itself is tested on the real apiserver by tests/e2e/freeze.sh).

use crate::harness::*;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use serde_json::json;
use tokio::sync::watch;

const FROZEN: &str = "Agent agent-a is frozen (hitl.kagent.dev/freeze: incident 42)";

struct Env {
    _everything: Everything,
    counter: Counter,
    api: FakeApi,
    gate: Gate,
    freeze: watch::Sender<FreezeState>,
}

impl Env {
    /// A gate with `get-sum` gated and `echo` not, its Agent in state `freeze`.
    async fn start(freeze: FreezeState) -> Self {
        init();
        let everything = Everything::start("streamableHttp").await;
        let counter = Counter::start(format!("http://127.0.0.1:{}", everything.port)).await;
        let api = FakeApi::start().await;
        let cfg = config(
            vec![server(
                "everything",
                McpProtocol::StreamableHttp,
                &format!("{}/mcp", counter.url),
                &["echo", "get-sum"],
                &["get-sum"],
            )],
            3600.0,
            30.0,
        );
        let (freeze, view) = watch::channel(freeze);
        let gate = Gate::start_with_freeze(&cfg, &api, FreezeWatch::new(view)).await;
        Self {
            _everything: everything,
            counter,
            api,
            gate,
            freeze,
        }
    }
}

#[tokio::test]
async fn a_frozen_agents_gated_calls_are_refused_without_asking_and_others_run() {
    require_peers();
    let env = Env::start(FreezeState::Frozen(FROZEN.into())).await;
    let out = client(
        &env.gate.route("everything"),
        "streamable",
        json!([
            call("get-sum", json!({"a": 1, "b": 2})),
            call("echo", json!({"message": "still here"})),
        ]),
    )
    .await;
    let (text, is_error) = result_text(&out[0]);
    assert!(is_error);
    assert!(
        text.starts_with("NOT executed: tool 'get-sum' needs approval") && text.contains(FROZEN),
        "{text}"
    );
    assert!(
        text.contains("nothing refused now runs by itself"),
        "{text}"
    );
    assert_eq!(
        result_text(&out[1]),
        ("Echo: still here".to_string(), false)
    );
    assert_eq!(env.counter.count("get-sum"), 0);
    assert_eq!(env.counter.count("echo"), 1);
    assert!(
        env.api.objects().is_empty(),
        "no approval is asked while frozen"
    );
    let metrics = env.gate.metrics().await;
    assert!(
        metrics.contains(r#"hitl_gate_tool_calls_total{outcome="frozen"} 1"#),
        "{metrics}"
    );

    // Lifted: the same call asks for approval again.
    env.freeze.send(FreezeState::Clear).unwrap();
    let url = env.gate.route("everything");
    let waiting = tokio::spawn(async move {
        client(
            &url,
            "streamable",
            json!([call("get-sum", json!({"a": 1, "b": 2}))]),
        )
        .await
    });
    let name = env.api.first_request_name().await;
    env.api
        .decide(&name, "Approve", "alice", "after the incident");
    let out = waiting.await.unwrap();
    assert_eq!(
        result_text(&out[0]),
        ("The sum of 1 and 2 is 3.".to_string(), false)
    );
    assert_eq!(env.counter.count("get-sum"), 1);
}

#[tokio::test]
async fn a_freeze_refuses_a_waiting_call_at_once_and_a_later_approval_runs_nothing() {
    require_peers();
    let env = Env::start(FreezeState::Clear).await;
    let url = env.gate.route("everything");
    let waiting = tokio::spawn(async move {
        client(
            &url,
            "streamable",
            json!([call("get-sum", json!({"a": 5, "b": 5}))]),
        )
        .await
    });
    let name = env.api.first_request_name().await;
    env.freeze.send(FreezeState::Frozen(FROZEN.into())).unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("the waiting call ends at once, not at its wait timeout")
        .unwrap();
    let (text, is_error) = result_text(&out[0]);
    assert!(is_error);
    assert!(
        text.starts_with(&format!(
            "NOT executed: tool 'get-sum' was not forwarded (ApprovalRequest {name})"
        )) && text.contains(FROZEN),
        "{text}"
    );
    // An approval given during the freeze: the request stays unconsumed, nothing runs.
    env.api
        .decide(&name, "Approve", "alice", "during the incident");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(env.counter.count("get-sum"), 0);
    let request = &env.api.objects()[0];
    assert!(request["status"]["consumedAt"].is_null(), "{request}");

    // A retry while frozen finds the approval but does not use it.
    let out = client(
        &env.gate.route("everything"),
        "streamable",
        json!([call("get-sum", json!({"a": 5, "b": 5}))]),
    )
    .await;
    assert!(result_text(&out[0]).0.contains(FROZEN));
    assert_eq!(env.counter.count("get-sum"), 0);
    let metrics = env.gate.metrics().await;
    assert!(
        metrics.contains(r#"hitl_gate_tool_calls_total{outcome="frozen"} 2"#),
        "{metrics}"
    );
}
