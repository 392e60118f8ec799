//! End-to-end tests of the approval gate with the real MCP server and client from npm
//! (`@modelcontextprotocol/server-everything`, `@modelcontextprotocol/sdk`) and an in-process
//! fake apiserver. They fail when tests/mcp-peers/node_modules is missing: `make test` installs
//! it, and a test that did not run never reports a pass.

use crate::harness::*;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::contract::gate_config::GateConfig;
use serde_json::{Value, json};

const STREAMABLE: McpProtocol = McpProtocol::StreamableHttp;

/// The everything server behind a counting proxy, and the two gate entries used by most
/// tests: `everything` (get-sum gated) and `everything-b` (echo gated, get-sum not).
struct Env {
    _everything: Everything,
    counter: Counter,
    api: FakeApi,
    gate: Gate,
}

impl Env {
    async fn start(timeout: f64, wait: f64) -> Self {
        init();
        let everything = Everything::start("streamableHttp").await;
        let counter = Counter::start(format!("http://127.0.0.1:{}", everything.port)).await;
        let upstream = format!("{}/mcp", counter.url);
        let api = FakeApi::start().await;
        let cfg = config(
            vec![
                server(
                    "everything",
                    STREAMABLE,
                    &upstream,
                    &[
                        "echo",
                        "get-sum",
                        "trigger-long-running-operation",
                        "trigger-sampling-request",
                    ],
                    &["get-sum"],
                ),
                server(
                    "everything-b",
                    STREAMABLE,
                    &upstream,
                    &["echo", "get-sum"],
                    &["echo"],
                ),
            ],
            timeout,
            wait,
        );
        let gate = Gate::start(&cfg, &api).await;
        Self {
            _everything: everything,
            counter,
            api,
            gate,
        }
    }

    fn url(&self, server: &str) -> String {
        self.gate.route(server)
    }

    /// The single request's name, once it exists.
    async fn request_name(&self) -> String {
        let api = self.api.clone();
        eventually("an ApprovalRequest", move || {
            api.objects()
                .first()
                .and_then(|o| o["metadata"]["name"].as_str().map(String::from))
        })
        .await
    }
}

#[tokio::test]
async fn ungated_calls_pass_through_and_lists_are_filtered() {
    require_peers();
    let env = Env::start(3600.0, 5.0).await;
    let out = client(
        &env.url("everything"),
        "streamable",
        json!([
            {"op": "list"},
            call("echo", json!({"message": "hi"})),
            {"op": "call", "name": "trigger-long-running-operation", "args": {"duration": 1, "steps": 2}, "progress": true},
            {"op": "terminate"},
        ]),
    )
    .await;
    // DELETE with the session id reached the upstream and succeeded.
    assert!(out[3].get("error").is_none(), "{}", out[3]);
    let session = out[3]["session"]
        .as_str()
        .expect("a session id")
        .to_string();
    let seen = env.counter.seen();
    assert!(
        seen.iter()
            .any(|(m, _, s)| m == "DELETE" && s.as_deref() == Some(session.as_str())),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(m, _, s)| m == "GET" && s.as_deref() == Some(session.as_str())),
        "standalone GET stream: {seen:?}"
    );
    // Configured upstream headers are always sent, and the client cannot override them.
    assert!(
        seen.iter().all(|(_, token, _)| token == "configured"),
        "{seen:?}"
    );
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(env.url("everything"))
        .header("x-upstream-token", "from-client")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert!(
        resp.status().is_client_error(),
        "no session: the upstream refuses"
    );
    assert_eq!(env.counter.seen().last().unwrap().1, "configured");
    assert_eq!(
        out[0]["tools"],
        json!(["echo", "get-sum", "trigger-long-running-operation"])
    );
    assert_eq!(result_text(&out[1]), ("Echo: hi".to_string(), false));
    assert!(!result_text(&out[2]).1, "{}", out[2]);
    // Upstream progress notifications stream through the gate.
    assert_eq!(
        out[2]["progress"].as_array().unwrap().len(),
        2,
        "{}",
        out[2]
    );
    assert_eq!(env.counter.count("echo"), 1);
    assert_eq!(env.counter.count("trigger-long-running-operation"), 1);
    assert!(
        env.api.requests().is_empty(),
        "ungated calls never touch the apiserver"
    );
    // The other route filters differently.
    let out = client(
        &env.url("everything-b"),
        "streamable",
        json!([{"op": "list"}]),
    )
    .await;
    assert_eq!(out[0]["tools"], json!(["echo", "get-sum"]));
    let metrics = env.gate.metrics().await;
    assert!(
        metrics.contains(r#"hitl_gate_tool_calls_total{outcome="forwarded"} 2"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn unlisted_tools_are_refused_and_never_forwarded() {
    require_peers();
    let env = Env::start(3600.0, 5.0).await;
    let out = client(
        &env.url("everything"),
        "streamable",
        json!([call("get-env", json!({}))]),
    )
    .await;
    let (text, is_error) = result_text(&out[0]);
    assert!(is_error);
    assert_eq!(
        text,
        "NOT executed: tool 'get-env' is not available on this server."
    );
    assert_eq!(env.counter.count("get-env"), 0);
    assert!(
        env.gate
            .metrics()
            .await
            .contains(r#"hitl_gate_tool_calls_total{outcome="refused"} 1"#)
    );
}

#[tokio::test]
async fn approve_runs_the_call_exactly_once_with_progress() {
    require_peers();
    let env = Env::start(3600.0, 30.0).await;
    let url = env.url("everything");
    let call_task = tokio::spawn(async move {
        client(
            &url,
            "streamable",
            json!([{"op": "call", "name": "get-sum", "args": {"a": 2, "b": 3}, "progress": true}]),
        )
        .await
    });
    let name = env.request_name().await;
    assert_eq!(env.counter.count("get-sum"), 0, "held until approved");
    env.api.decide(&name, "Approve", "alice", "fine");
    let out = call_task.await.unwrap();
    assert_eq!(
        result_text(&out[0]),
        ("The sum of 2 and 3 is 5.".to_string(), false)
    );
    assert_eq!(env.counter.count("get-sum"), 1);
    let progress = out[0]["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "progress notifications while waiting");
    assert!(progress[0]["message"].as_str().unwrap().contains(&name));
    let obj = &env.api.objects()[0];
    assert_eq!(obj["status"]["phase"], "Executed");
    assert_eq!(obj["status"]["consumedBy"], "gate-pod-0");
    assert_eq!(
        obj["spec"]["toolServer"],
        json!({"kind": "RemoteMCPServer", "name": "everything", "namespace": "tools"})
    );
    assert_eq!(obj["metadata"]["labels"]["kagent.dev/tool"], "get-sum");
    assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "agent-uid");
    let metrics = env.gate.metrics().await;
    assert!(
        metrics.contains(r#"hitl_gate_tool_calls_total{outcome="approved"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("hitl_gate_approval_wait_seconds_count 1"));
}

#[tokio::test]
async fn deny_is_not_executed_and_says_who_and_why() {
    require_peers();
    let env = Env::start(3600.0, 30.0).await;
    let url = env.url("everything");
    let call_task = tokio::spawn(async move {
        client(
            &url,
            "streamable",
            json!([call("get-sum", json!({"a": 1, "b": 1}))]),
        )
        .await
    });
    let name = env.request_name().await;
    env.api.decide(&name, "Deny", "bob", "not today");
    let out = call_task.await.unwrap();
    let (text, is_error) = result_text(&out[0]);
    assert!(is_error);
    assert!(
        text.starts_with("NOT executed: tool 'get-sum' was denied by bob"),
        "{text}"
    );
    assert!(text.contains("Reason: not today") && text.contains(&name));
    assert_eq!(env.counter.count("get-sum"), 0);
}

#[tokio::test]
async fn an_undecided_request_expires_and_is_not_executed() {
    require_peers();
    let env = Env::start(1.0, 30.0).await;
    let out = client(
        &env.url("everything"),
        "streamable",
        json!([call("get-sum", json!({"a": 1, "b": 2}))]),
    )
    .await;
    let (text, is_error) = result_text(&out[0]);
    assert!(is_error);
    assert!(
        text.contains("expired at") && text.starts_with("NOT executed"),
        "{text}"
    );
    // A decision after expiry revives nothing: retrying asks anew instead of running.
    let name = env.request_name().await;
    env.api.decide(&name, "Approve", "alice", "late");
    let out = client(
        &env.url("everything"),
        "streamable",
        json!([call("get-sum", json!({"a": 1, "b": 2}))]),
    )
    .await;
    assert!(result_text(&out[0]).1);
    assert_eq!(env.counter.count("get-sum"), 0);
}

#[tokio::test]
async fn pending_then_retry_after_approval_runs_once() {
    require_peers();
    let env = Env::start(3600.0, 0.3).await;
    let url = env.url("everything");
    let args = json!({"a": 40, "b": 2});
    let out = client(&url, "streamable", json!([call("get-sum", args.clone())])).await;
    let (text, is_error) = result_text(&out[0]);
    assert!(is_error);
    let name = env.request_name().await;
    assert!(text.starts_with("NOT executed yet"), "{text}");
    assert!(
        text.contains(&format!("kubectl hitl approve {name} -n team")),
        "{text}"
    );
    assert!(text.contains(&format!(
        "kubectl patch approvalrequest {name} -n team --type merge"
    )));
    // Retrying while pending shares the same request.
    let out = client(&url, "streamable", json!([call("get-sum", args.clone())])).await;
    assert!(result_text(&out[0]).0.contains(&name));
    assert_eq!(env.api.objects().len(), 1);
    env.api.decide(&name, "Approve", "alice", "ok");
    let out = client(
        &url,
        "streamable",
        json!([call("get-sum", args.clone()), call("get-sum", args.clone())]),
    )
    .await;
    assert_eq!(
        result_text(&out[0]),
        ("The sum of 40 and 2 is 42.".to_string(), false)
    );
    // The approval is used up: the next identical call needs a new one.
    let (text, is_error) = result_text(&out[1]);
    assert!(is_error && text.starts_with("NOT executed yet"), "{text}");
    assert!(!text.contains(&name));
    assert_eq!(env.counter.count("get-sum"), 1);
    assert_eq!(env.api.objects().len(), 2);
}

#[tokio::test]
async fn concurrent_identical_calls_share_one_request_and_run_once() {
    require_peers();
    let env = Env::start(3600.0, 30.0).await;
    let args = json!({"a": 5, "b": 5});
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let url = env.url("everything");
            let ops = json!([call("get-sum", args.clone())]);
            tokio::spawn(async move { client(&url, "streamable", ops).await })
        })
        .collect();
    let name = env.request_name().await;
    let api = env.api.clone();
    let watched = name.clone();
    eventually("both calls waiting", move || {
        (api.watches(&watched) >= 2).then_some(())
    })
    .await;
    env.api.decide(&name, "Approve", "alice", "once");
    let mut texts = Vec::new();
    for t in tasks {
        texts.push(result_text(&t.await.unwrap()[0]));
    }
    texts.sort();
    assert_eq!(env.api.objects().len(), 1, "one shared request");
    assert!(
        texts[0]
            .0
            .contains("already used by another identical call")
            && texts[0].1,
        "{texts:?}"
    );
    assert_eq!(texts[1], ("The sum of 5 and 5 is 10.".to_string(), false));
    assert_eq!(env.counter.count("get-sum"), 1);
}

#[tokio::test]
async fn approval_is_keyed_by_server_and_tool() {
    require_peers();
    let env = Env::start(3600.0, 0.2).await;
    // get-sum is gated on `everything` but not on `everything-b`; echo the other way round.
    let out = client(
        &env.url("everything-b"),
        "streamable",
        json!([
            call("get-sum", json!({"a": 1, "b": 1})),
            call("echo", json!({"message": "x"}))
        ]),
    )
    .await;
    assert_eq!(
        result_text(&out[0]),
        ("The sum of 1 and 1 is 2.".to_string(), false)
    );
    assert!(result_text(&out[1]).0.starts_with("NOT executed yet"));
    let objects = env.api.objects();
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["spec"]["toolServer"]["name"], "everything-b");
    assert_eq!(objects[0]["spec"]["toolName"], "echo");
    assert_eq!(env.counter.count("echo"), 0);
    // An approval for echo on everything-b does not let echo on everything-b run with other
    // arguments.
    env.api.decide(
        objects[0]["metadata"]["name"].as_str().unwrap(),
        "Approve",
        "alice",
        "ok",
    );
    let out = client(
        &env.url("everything-b"),
        "streamable",
        json!([call("echo", json!({"message": "other"}))]),
    )
    .await;
    assert!(result_text(&out[0]).1);
    assert_eq!(env.counter.count("echo"), 0);
}

#[tokio::test]
async fn apiserver_errors_mean_not_executed() {
    require_peers();
    let env = Env::start(3600.0, 5.0).await;
    for code in [500, 403] {
        env.api.fail_with(Some(code));
        let out = client(
            &env.url("everything"),
            "streamable",
            json!([call("get-sum", json!({"a": 1, "b": 2}))]),
        )
        .await;
        let (text, is_error) = result_text(&out[0]);
        assert!(is_error);
        assert!(
            text.starts_with("NOT executed: the approval gate could not run tool 'get-sum'"),
            "{text}"
        );
    }
    assert_eq!(env.counter.count("get-sum"), 0);
    assert!(
        env.gate
            .metrics()
            .await
            .contains(r#"hitl_gate_tool_calls_total{outcome="error"} 2"#)
    );
}

#[tokio::test]
async fn upstream_down_is_an_error_and_nothing_runs() {
    require_peers();
    init();
    let api = FakeApi::start().await;
    // Port 1 (tcpmux) is never served here: connections are refused. The URL carries a
    // credential, which must never reach the logs.
    let dead = "http://127.0.0.1:1/mcp?token=url-canary-5d1".to_string();
    let cfg = config(
        vec![server(
            "dead",
            STREAMABLE,
            &dead,
            &["echo", "get-sum"],
            &["get-sum"],
        )],
        3600.0,
        5.0,
    );
    let gate = Gate::start(&cfg, &api).await;
    let client_http = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |body: Value| {
        client_http
            .post(gate.route("dead"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    // The SDK client cannot even initialize; speak JSON-RPC directly.
    let resp = post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "x"}}})).await.unwrap();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["result"]["isError"], true);
    assert!(
        v["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("upstream tools/dead unreachable")
    );
    // Approved, consumed, then the upstream is down: an error, and the approval is spent.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get-sum", "arguments": {"a": 1, "b": 2}}});
    let pending = tokio::spawn(post(call.clone()));
    let name = api.first_request_name().await;
    api.decide(&name, "Approve", "alice", "ok");
    let v: Value = pending.await.unwrap().unwrap().json().await.unwrap();
    assert_eq!(v["result"]["isError"], true);
    assert!(
        v["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("upstream server failed"),
        "{v}"
    );
    // Other requests get a JSON-RPC error answering them (a client that drops an HTTP error on
    // a POST would leave the request waiting); a notification, which nothing waits for, a 502.
    let resp = post(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["id"], 3, "{v}");
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream tools/dead unreachable"),
        "{v}"
    );
    let resp = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    assert!(
        logs().contains("upstream request failed"),
        "failures are logged"
    );
    assert!(
        !logs().contains("url-canary-5d1"),
        "the upstream URL is never logged"
    );
}

#[tokio::test]
async fn secrets_never_reach_the_apiserver_or_logs() {
    require_peers();
    let env = Env::start(3600.0, 30.0).await;
    let url = env.url("everything-b");
    let args = json!({"message": "hello", "password": "canary-pw-123", "note": "sk-canary-0123456789abcdef"});
    let call_task =
        tokio::spawn(async move { client(&url, "streamable", json!([call("echo", args)])).await });
    let name = env.request_name().await;
    env.api.decide(&name, "Approve", "alice", "ok");
    let out = call_task.await.unwrap();
    assert_eq!(result_text(&out[0]), ("Echo: hello".to_string(), false));
    let sent: String = env
        .api
        .requests()
        .iter()
        .map(|(m, u, b)| format!("{m} {u} {b}\n"))
        .collect();
    assert!(sent.contains("[REDACTED]"), "{sent}");
    assert!(
        sent.contains("NOTE: 2 values were redacted (at /password, /note); the approved call runs with the real values. Run 'echo'"),
        "{sent}"
    );
    for canary in ["canary-pw-123", "sk-canary"] {
        assert!(!sent.contains(canary), "{canary} reached the apiserver");
        assert!(!logs().contains(canary), "{canary} reached the logs");
    }
    assert!(
        logs().contains("created ApprovalRequest"),
        "logs are captured"
    );
}

/// server-everything over legacy SSE behind a counting proxy, a fake apiserver, and the gate
/// config offering `tools` (gating `gated`) on route `legacy`.
async fn legacy_everything(
    tools: &[&str],
    gated: &[&str],
) -> (Everything, Counter, FakeApi, GateConfig) {
    let everything = Everything::start("sse").await;
    let counter = Counter::start(format!("http://127.0.0.1:{}", everything.port)).await;
    let api = FakeApi::start().await;
    let cfg = config(
        vec![server(
            "legacy",
            McpProtocol::Sse,
            &format!("{}/sse", counter.url),
            tools,
            gated,
        )],
        3600.0,
        30.0,
    );
    (everything, counter, api, cfg)
}

#[tokio::test]
async fn legacy_sse_servers_are_proxied_and_gated() {
    require_peers();
    init();
    let (_everything, counter, api, cfg) =
        legacy_everything(&["echo", "get-sum"], &["get-sum"]).await;
    let gate = Gate::start(&cfg, &api).await;
    let url = gate.route("legacy");
    let task = tokio::spawn(async move {
        client(
            &url,
            "sse",
            json!([
                {"op": "list"},
                call("echo", json!({"message": "old"})),
                call("get-env", json!({})),
                {"op": "call", "name": "get-sum", "args": {"a": 7, "b": 8}, "progress": true},
            ]),
        )
        .await
    });
    let name = api.first_request_name().await;
    assert_eq!(counter.count("get-sum"), 0);
    api.decide(&name, "Approve", "alice", "ok");
    let out = task.await.unwrap();
    assert_eq!(out[0]["tools"], json!(["echo", "get-sum"]));
    assert_eq!(result_text(&out[1]), ("Echo: old".to_string(), false));
    let (text, is_error) = result_text(&out[2]);
    assert!(is_error && text.contains("not available"), "{text}");
    assert_eq!(
        result_text(&out[3]),
        ("The sum of 7 and 8 is 15.".to_string(), false)
    );
    assert!(!out[3]["progress"].as_array().unwrap().is_empty());
    assert_eq!(counter.count("echo"), 1);
    assert_eq!(counter.count("get-env"), 0);
    assert_eq!(counter.count("get-sum"), 1);
}

/// Edit, then approve on both transports: the call runs once with the approver's edit, and the
/// model's result says which value was changed, as a text item after the tool's own. On legacy
/// SSE the answer comes on the event stream, where the gate adds the note it expected before it
/// forwarded the call.
#[tokio::test]
async fn an_edited_call_runs_edited_and_its_result_says_so_on_both_transports() {
    require_peers();
    init();
    for transport in ["sse", "streamable"] {
        let (_everything, counter, api, gate, url) = if transport == "sse" {
            let (everything, counter, api, cfg) =
                legacy_everything(&["echo", "get-sum"], &["get-sum"]).await;
            let gate = Gate::start(&cfg, &api).await;
            let url = gate.route("legacy");
            (everything, counter, api, gate, url)
        } else {
            let env = Env::start(3600.0, 30.0).await;
            let url = env.url("everything");
            (env._everything, env.counter, env.api, env.gate, url)
        };
        let task = tokio::spawn(async move {
            client(
                &url,
                transport,
                json!([{"op": "list"}, call("get-sum", json!({"a": 7, "b": 8}))]),
            )
            .await
        });
        let name = api.first_request_name().await;
        api.edit_and_approve(
            &name,
            r#"[{"op":"replace","path":"/b","value":10}]"#,
            "alice",
        );
        let out = task.await.unwrap();
        let content = out[1]["result"]["content"].as_array().unwrap();
        assert_eq!(content.len(), 2, "{transport}: {}", out[1]);
        assert_eq!(
            content[0]["text"], "The sum of 7 and 10 is 17.",
            "{transport}"
        );
        let note = content[1]["text"].as_str().unwrap();
        assert!(
            note.contains("edited by the approver alice") && note.contains("changed: /b."),
            "{transport}: the note names the editor and the path (never the value): {note}"
        );
        assert_eq!(counter.count("get-sum"), 1, "{transport}: once");
        let request = &api.objects()[0];
        assert_eq!(request["status"]["phase"], "Executed", "{transport}");
        assert!(
            request["status"]["editedArgumentsSha256"].is_string(),
            "{transport}: {request}"
        );
        drop(gate);
    }
}

/// Issue 41 on the legacy transport: a call's MCP session is the event stream it came for,
/// whose id the gate gave when it opened it (the `session` of its message endpoint), so a
/// grant for that session covers the stream's later calls and no other stream's.
#[tokio::test]
async fn a_legacy_session_grant_covers_its_own_stream_only() {
    require_peers();
    init();
    let (_everything, counter, api, mut cfg) = legacy_everything(&["get-sum"], &["get-sum"]).await;
    cfg.approval.wait_timeout_seconds = 1.0;
    cfg.approval.grant_max_ttl_seconds = Some(86400.0);
    let gate = Gate::start(&cfg, &api).await;
    let url = gate.route("legacy");
    let sum = |a: i64| json!({"op": "call", "name": "get-sum", "args": {"a": a, "b": 1}});
    let first = tokio::spawn({
        let url = url.clone();
        async move { client(&url, "sse", json!([sum(1), sum(2)])).await }
    });
    // The first call asks a person; its request names the stream's session. Granting that
    // session while the call waits lets the stream's next call run without asking.
    let request = eventually("the first request", || api.objects().into_iter().next()).await;
    let session = request["spec"]["context"]["sessionId"]
        .as_str()
        .expect("a legacy call records its session")
        .to_string();
    api.add_grant(session_grant("this-stream", "legacy", "get-sum", &session));
    let out = first.await.unwrap();
    let (text, is_error) = result_text(&out[0]);
    assert!(is_error && text.contains("Pending"), "{text}");
    assert_eq!(
        result_text(&out[1]),
        ("The sum of 2 and 1 is 3.".to_string(), false)
    );
    assert_eq!(api.grant("this-stream")["status"]["uses"], 1);
    // Another stream is another session: its call waits for a person.
    let out = client(&url, "sse", json!([sum(3)])).await;
    let (text, is_error) = result_text(&out[0]);
    assert!(is_error && text.contains("Pending"), "{text}");
    assert_eq!(api.grant("this-stream")["status"]["uses"], 1);
    assert_eq!(counter.count("get-sum"), 1);
}

#[tokio::test]
async fn a_charset_other_than_utf8_never_reaches_the_server() {
    require_peers();
    init();
    let (_everything, counter, api, cfg) = legacy_everything(&["echo"], &[]).await;
    let gate = Gate::start(&cfg, &api).await;
    // In UTF-7 `tools+AC8-call` is `tools/call`: the gate would see an unknown method and the
    // server, decoding by the declared charset, would run get-env, a tool not offered.
    let smuggled = r#"{"jsonrpc":"2.0","id":99,"method":"tools+AC8-call","params":{"name":"get-env","arguments":{}}}"#;
    let out = client(
        &gate.route("legacy"),
        "sse",
        json!([
            {"op": "raw", "body": smuggled, "contentType": "application/json; charset=utf-7"},
            call("echo", json!({"message": "still here"})),
        ]),
    )
    .await;
    assert_eq!(out[0]["status"], 415, "{}", out[0]);
    assert!(
        out[0]["text"].as_str().unwrap().contains("charset=utf-8"),
        "{}",
        out[0]
    );
    assert_eq!(
        out[0]["errors"],
        json!([]),
        "no answer to a call never made"
    );
    assert_eq!(
        result_text(&out[1]),
        ("Echo: still here".to_string(), false)
    );
    assert!(
        counter
            .bodies()
            .iter()
            .all(|(_, body)| !String::from_utf8_lossy(body).contains("AC8")),
        "the smuggled message never reached the server"
    );
}

#[tokio::test]
async fn upstream_connections_are_reused() {
    require_peers();
    let env = Env::start(3600.0, 5.0).await;
    let calls: Vec<Value> = (0..10)
        .map(|i| call("echo", json!({"message": format!("m{i}")})))
        .collect();
    let out = client(&env.url("everything"), "streamable", Value::Array(calls)).await;
    assert_eq!(out.len(), 10);
    let requests = env.counter.seen().len();
    // initialize, initialized, the GET stream and 10 calls: far more requests than connections
    // (the GET stream holds one connection, the POSTs share the pool).
    assert!(requests >= 13, "{requests}");
    assert!(
        env.counter.connections() <= 3,
        "{} connections for {requests} requests",
        env.counter.connections()
    );
}

#[tokio::test]
async fn server_to_client_requests_flow_through() {
    require_peers();
    let env = Env::start(3600.0, 5.0).await;
    let out = client_with(
        &env.url("everything"),
        "streamable",
        json!([
            {"op": "list"},
            call("trigger-sampling-request", json!({"prompt": "hello model"})),
        ]),
        json!({"sampling": true}),
    )
    .await;
    assert!(
        out[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("trigger-sampling-request")),
        "{}",
        out[0]
    );
    // The server asked the client for a sampling (a request from server to client) inside
    // the call's response stream; the client's answer went back through the gate.
    let (text, is_error) = result_text(&out[1]);
    assert!(!is_error, "{text}");
    assert!(
        text.contains("sampled: Resource trigger-sampling-request context: hello model"),
        "{text}"
    );
    assert_eq!(env.counter.count("trigger-sampling-request"), 1);
}
