//! Gate tests against an in-process Rust MCP stub that answers with plain JSON (the
//! everything server answers with SSE): JSON `tools/list` filtering, refusal of unlisted
//! tools, rejection of ambiguous messages, and session/header passthrough.

use crate::harness::*;
use crate::stub;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::gate::messages::MAX_MESSAGE_BYTES;
use serde_json::{Value, json};

async fn post(url: &str, body: &str) -> reqwest::Response {
    post_with(url, body, &[]).await
}

/// [`post`] with the headers `extra` too.
async fn post_with(url: &str, body: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", "client-session");
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    request.body(body.to_string()).send().await.unwrap()
}

/// A gate in front of one Streamable HTTP server, `stub` at `upstream`, offering `echo`
/// without approval.
async fn echo_gate(upstream: &str, api: &FakeApi) -> Gate {
    let stub = server(
        "stub",
        McpProtocol::StreamableHttp,
        upstream,
        &["echo"],
        &[],
    );
    Gate::start(&config(vec![stub], 3600.0, 1.0), api).await
}

#[tokio::test]
async fn json_responses_are_filtered_and_relayed() {
    init();
    let upstream = stub::start().await;
    let api = FakeApi::start().await;
    let gate = echo_gate(&upstream, &api).await;
    let url = gate.route("stub");

    let resp = post(&url, r#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#).await;
    assert_eq!(resp.headers()["mcp-session-id"], "client-session");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v["result"]["tools"],
        json!([{"name": "echo", "inputSchema": {"type": "object"}}])
    );

    let resp = post(&url, r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"n":9007199254740993}}}"#).await;
    let text = resp.text().await.unwrap();
    assert_eq!(
        text,
        r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"{\"n\":9007199254740993}"}]}}"#
    );

    let v: Value = post(
        &url,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"hidden"}}"#,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(v["result"]["isError"], true);

    // A (resumed) GET stream replaying a tools/list response is filtered too.
    let replay = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        replay.starts_with("id: 1\nevent: message\ndata: "),
        "{replay}"
    );
    assert!(
        replay.contains(r#""name":"echo""#) && !replay.contains("hidden"),
        "{replay}"
    );

    // Ambiguous or batched tool messages are rejected, never forwarded.
    let resp = post(&url, r#"{"jsonrpc":"2.0","id":4,"method":"ping","method":"tools/call","params":{"name":"hidden"}}"#).await;
    assert_eq!(resp.status(), 400);
    // A repeated key in a tool call: some parsers read the first, some the last.
    let resp = post(&url, r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"hidden","name":"echo"}}"#).await;
    assert_eq!(resp.status(), 400);
    let error: Value = resp.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("parse error: duplicate key \"name\"")
    );
    let resp = post(
        &url,
        r#"[{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"hidden"}}]"#,
    )
    .await;
    assert_eq!(resp.status(), 400);
    // Only POST carries messages; a PUT with a tool call is refused, not relayed.
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .put(&url)
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"hidden"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert!(api.requests().is_empty());
}

/// A gate (waiting `wait` seconds for decisions) for the stub behind a counting proxy,
/// offering `tools` and gating `gated`; the proxy and the fake apiserver.
async fn counted_gate(tools: &[&str], gated: &[&str], wait: f64) -> (Gate, Counter, FakeApi) {
    let stub_url = stub::start().await;
    let counter = Counter::start(stub_url.trim_end_matches("/mcp").to_string()).await;
    let api = FakeApi::start().await;
    let cfg = config(
        vec![server(
            "stub",
            McpProtocol::StreamableHttp,
            &format!("{}/mcp", counter.url),
            tools,
            gated,
        )],
        3600.0,
        wait,
    );
    (Gate::start(&cfg, &api).await, counter, api)
}

#[tokio::test]
async fn keys_equal_ignoring_case_never_reach_the_upstream() {
    init();
    let (gate, counter, api) = counted_gate(&["echo", "delete"], &["delete"], 1.0).await;
    let url = gate.route("stub");
    // What Go's encoding/json (mcp-go servers) reads as a call of the gated `delete`, or as
    // other arguments than the gate hashed and showed.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","params":{"name":"delete"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call","params":{"name":"delete"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"delete"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"ParamS":{"name":"delete"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Arguments":{"path":"/etc"}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"keep":true,"\u212aeep":false}}}"#,
    ] {
        let resp = post(&url, body).await;
        assert_eq!(resp.status(), 400, "{body}");
        let error: Value = resp.json().await.unwrap();
        assert!(error["error"]["message"].is_string(), "{error}");
    }
    assert_eq!(counter.seen(), vec![], "nothing reached the upstream");
    assert!(api.requests().is_empty());
}

#[tokio::test]
async fn a_message_over_the_size_limit_is_refused_unread() {
    init();
    let (gate, counter, api) = counted_gate(&["echo", "delete"], &["delete"], 1.0).await;
    let filler = "x".repeat(MAX_MESSAGE_BYTES);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"delete","arguments":{{"data":"{filler}"}}}}}}"#
    );
    let resp = post(&gate.route("stub"), &body).await;
    assert_eq!(resp.status(), 413);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(
        error["error"]["message"],
        "approval gate: messages may be at most 4 MiB"
    );
    assert_eq!(counter.seen(), vec![], "nothing reached the upstream");
    assert!(api.requests().is_empty(), "no ApprovalRequest");
}

#[tokio::test]
async fn only_messages_the_gate_wrote_reach_the_upstream() {
    init();
    let (gate, counter, api) = counted_gate(&["echo", "delete"], &["delete"], 1.0).await;
    let url = gate.route("stub");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let send = |content_type: &'static [&'static str],
                encoding: Option<&'static str>,
                body: &'static str| {
        let mut request = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .body(body);
        for t in content_type {
            request = request.header("content-type", *t);
        }
        if let Some(e) = encoding {
            request = request.header("content-encoding", e);
        }
        request.send()
    };
    // In UTF-7, `tools+AC8-call` is `tools/call`: a server decoding by the declared charset
    // runs a tool the gate never saw called.
    let utf7 = r#"{"jsonrpc":"2.0","id":1,"method":"tools+AC8-call","params":{"name":"delete"}}"#;
    for (types, encoding, why) in [
        (
            &["application/json; charset=utf-7"][..],
            None,
            "charset=utf-8",
        ),
        (
            &["application/json;charset=\"UTF-16\""],
            None,
            "charset=utf-8",
        ),
        (&["text/plain"], None, "must be application/json"),
        (
            &["application/json", "application/json; charset=utf-7"],
            None,
            "more than one Content-Type",
        ),
        (&["application/json"], Some("gzip"), "Content-Encoding"),
        (&["application/json"], Some("identity"), "Content-Encoding"),
    ] {
        let resp = send(types, encoding, utf7).await.unwrap();
        assert_eq!(resp.status(), 415, "{types:?} {encoding:?}");
        let error: Value = resp.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{message}");
    }
    assert_eq!(counter.seen(), vec![], "nothing reached the upstream");

    // What is accepted goes upstream as the gate wrote it, with its own Content-Type.
    let ping = r#"{ "jsonrpc":"2.0", "id":1.0, "method":"ping", "params":{"s":"caf\u00e9"} }"#;
    let resp = send(&["Application/JSON ; charset=\"UTF-8\""], None, ping)
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"n":1E2,"s":"\u0041"}}}"#;
    let answer: Value = send(&[], None, call).await.unwrap().json().await.unwrap();
    // The stub echoes the arguments byte for byte as they reached it.
    assert_eq!(
        result_text(&answer),
        (r#"{"n":100.0,"s":"A"}"#.to_string(), false)
    );
    let bodies: Vec<(Option<String>, String)> = counter
        .bodies()
        .into_iter()
        .map(|(t, b)| (t, String::from_utf8(b.to_vec()).unwrap()))
        .collect();
    let json = Some("application/json".to_string());
    assert_eq!(
        bodies,
        [
            (json.clone(), r#"{"jsonrpc":"2.0","id":1.0,"method":"ping","params":{"s":"café"}}"#.to_string()),
            (json, r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"n":100.0,"s":"A"}}}"#.to_string()),
        ]
    );
    assert!(api.requests().is_empty());
}

#[tokio::test]
async fn a_tools_list_answered_under_another_id_form_is_still_filtered() {
    init();
    let (gate, _counter, _api) = counted_gate(&["echo", "delete"], &["delete"], 1.0).await;
    let url = gate.route("stub");
    // The stub offers `echo` and `hidden`; the gate offers only `echo`. Answered with `1.0`
    // or `"1"` for the request's `1`, as JSON or as an event: never the whole list.
    for params in [
        json!({"answer_id": 1.0}),
        json!({"answer_id": "1"}),
        json!({"answer_id": null}),
        json!({"answer_id": 1.0, "answer_sse": true}),
        json!({"answer_id": 2, "answer_sse": true}),
    ] {
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
        let resp = post(&url, &list.to_string()).await;
        assert_eq!(resp.status(), 200, "{params}");
        let body = resp.text().await.unwrap();
        assert!(body.contains(r#""name":"echo""#), "{params}: {body}");
        assert!(!body.contains("hidden"), "{params}: {body}");
    }
    // A result a case-insensitive client (Go) reads and the gate would not see: refused.
    for params in [
        json!({"result_key": "Result"}),
        json!({"result_key": "Result", "answer_sse": true}),
    ] {
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
        let resp = post(&url, &list.to_string()).await;
        let body = resp.text().await.unwrap();
        assert!(!body.contains("hidden"), "{params}: {body}");
        let answer: Value =
            serde_json::from_str(body.trim_start_matches("event: message\ndata: ").trim()).unwrap();
        assert_eq!(answer["id"], 1, "{body}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cannot read unambiguously"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_tool_list_answered_on_another_requests_stream_is_filtered() {
    init();
    let (gate, _counter, _api) = counted_gate(&["echo", "delete"], &["delete"], 1.0).await;
    let url = gate.route("stub");
    // The stub answers a ping, or an ungated call, with its whole tool list (under the id of a
    // tools/list the client may have pending on another stream), as JSON or as an event.
    let ping =
        |params: Value| json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": params});
    let call = |sse: bool| {
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"answer_tools": true}, "answer_sse": sse, "answer_id": 1}})
    };
    for message in [
        ping(json!({"answer_tools": true, "answer_id": 1})),
        ping(json!({"answer_tools": true, "answer_id": 1, "answer_sse": true})),
        call(false),
        call(true),
    ] {
        let resp = post(&url, &message.to_string()).await;
        assert_eq!(resp.status(), 200, "{message}");
        let body = resp.text().await.unwrap();
        assert!(body.contains(r#""name":"echo""#), "{message}: {body}");
        assert!(!body.contains("hidden"), "{message}: {body}");
    }
}

#[tokio::test]
async fn answers_in_small_chunks_are_filtered_or_passed_on_byte_for_byte() {
    init();
    let (gate, counter, _api) = counted_gate(&["echo", "delete"], &["delete"], 1.0).await;
    let call = |arguments: Value| {
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "echo", "arguments": arguments, "answer_sse": true, "answer_chunk_bytes": 3}})
        .to_string()
    };
    // A tool list cut into 3-byte chunks, with a pause in the middle of the event: filtered.
    let resp = post(&gate.route("stub"), &call(json!({"answer_tools": true}))).await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.contains(r#""name":"echo""#), "{body}");
    assert!(!body.contains("hidden"), "{body}");
    // Answers holding no tool list, one of them with `"tools"` inside a string (so it is read,
    // and left as it is), reach the client exactly as the server sent them.
    for arguments in [
        json!({"message": "x"}),
        json!({"note": r#"{"tools":[{"name":"hidden"}]}"#}),
    ] {
        let message = call(arguments);
        let direct = post(&format!("{}/mcp", counter.url), &message).await;
        let direct = direct.bytes().await.unwrap();
        let gated = post(&gate.route("stub"), &message).await;
        assert_eq!(gated.status(), 200);
        assert_eq!(gated.bytes().await.unwrap(), direct, "{message}");
    }
}

#[tokio::test]
async fn an_approved_call_the_upstream_rejects_reports_the_spent_approval() {
    init();
    let upstream = stub::start().await;
    let api = FakeApi::start().await;
    let cfg = config(
        vec![server(
            "stub",
            McpProtocol::StreamableHttp,
            &upstream,
            &["echo"],
            &["echo"],
        )],
        3600.0,
        30.0,
    );
    let gate = Gate::start(&cfg, &api).await;
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"m": 1}, "_meta": {"progressToken": "p1"}}});
    let pending = tokio::spawn(
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(gate.route("stub"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", "expired")
            .body(call.to_string())
            .send(),
    );
    let name = api.first_request_name().await;
    api.decide(&name, "Approve", "alice", "ok");
    let resp = pending.await.unwrap().unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let body = resp.text().await.unwrap();
    // Progress first, then the result: an error naming the spent approval.
    let progress = body.find("notifications/progress").expect("progress");
    let result = body.find(r#""isError":true"#).expect("an error result");
    assert!(progress < result, "{body}");
    assert!(
        body.contains(&format!(
            "was approved (ApprovalRequest {name}) but the upstream server failed: HTTP 404"
        )),
        "{body}"
    );
}

#[tokio::test]
async fn a_caller_that_leaves_before_the_decision_runs_nothing() {
    init();
    let (gate, counter, api) = counted_gate(&["echo"], &["echo"], 30.0).await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"m":"bye"},"_meta":{"progressToken":1}}}"#;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let send = || {
        http.post(gate.route("stub"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // The caller reads the first progress notification, then hangs up.
    let mut resp = send().await.unwrap();
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
    drop(resp);
    let name = api.objects()[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let api2 = api.clone();
    let watched = name.clone();
    // Once the gate has noticed and stopped waiting, approve.
    eventually("the gate to stop waiting", || {
        logs()
            .contains("client went away while waiting; not forwarded")
            .then_some(())
    })
    .await;
    api.decide(&name, "Approve", "alice", "ok");
    assert_eq!(counter.count("echo"), 0, "nobody was waiting: nothing ran");
    assert!(api2.objects()[0]["status"].get("consumedAt").is_none());
    assert_eq!(api2.watches(&watched), 1);
    // The caller retries: the approval is still unused and runs the call once.
    let text = send().await.unwrap().text().await.unwrap();
    assert!(text.contains(r#"{\"m\":\"bye\"}"#), "{text}");
    assert_eq!(counter.count("echo"), 1);
}

#[tokio::test]
async fn an_approved_call_runs_with_exactly_the_arguments_the_approver_saw() {
    init();
    let upstream = stub::start().await;
    let api = FakeApi::start().await;
    let gated = server(
        "stub",
        McpProtocol::StreamableHttp,
        &upstream,
        &["echo"],
        &["echo"],
    );
    let gate = Gate::start(&config(vec![gated], 3600.0, 30.0), &api).await;
    // More digits than a double holds: the gate reads 1.0000000000000001e23.
    let call = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"amount":100000000000000000000001, "to" : "b\u0061nk"}}}"#;
    let url = gate.route("stub");
    let pending =
        tokio::spawn(async move { post(&url, call).await.json::<Value>().await.unwrap() });
    let name = api.first_request_name().await;
    let shown = api.objects()[0]["spec"]["argumentsPreview"].clone();
    api.decide(&name, "Approve", "alice", "ok");
    let (ran, is_error) = result_text(&pending.await.unwrap());
    assert!(!is_error, "{ran}");
    // The upstream got the call as the gate read, hashed and showed it, not the client's digits.
    assert_eq!(ran, r#"{"amount":1.0000000000000001e+23,"to":"bank"}"#);
    assert_eq!(serde_json::from_str::<Value>(&ran).unwrap(), shown);
}

/// Issue 10, item 4: without the admission policies (and the CRD rule), an identity that may
/// create requests could create one already approved, or approve as the requester. Neither
/// runs the call.
#[tokio::test]
async fn an_approval_not_added_by_someone_else_after_creation_never_runs_the_call() {
    init();
    let stub_url = stub::start().await;
    let counter = Counter::start(stub_url.trim_end_matches("/mcp").to_string()).await;
    let api = FakeApi::start().await;
    let cfg = |wait: f64| {
        config(
            vec![server(
                "stub",
                McpProtocol::StreamableHttp,
                &format!("{}/mcp", counter.url),
                &["echo"],
                &["echo"],
            )],
            3600.0,
            wait,
        )
    };
    // One gate that answers Pending at once, one that waits for the decision.
    let gate = Gate::start(&cfg(0.5), &api).await;
    let waiting_gate = Gate::start(&cfg(30.0), &api).await;
    let call = |args: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{args}}}}}"#
        )
    };
    let first = call(r#"{"m":"created approved"}"#);
    let (text, _) = result_text(
        &post(&gate.route("stub"), &first)
            .await
            .json()
            .await
            .unwrap(),
    );
    assert!(text.contains("Pending"), "{text}");
    let name = api.first_request_name().await;
    // The request under that name is now one that was created with an Approve in it.
    api.recreate_with_decision(&name, "Approve", "mallory");
    let (text, is_error) = result_text(
        &post(&gate.route("stub"), &first)
            .await
            .json()
            .await
            .unwrap(),
    );
    assert!(is_error && text.starts_with("NOT executed"), "{text}");
    assert_eq!(
        counter.count("echo"),
        0,
        "a pre-approved request ran the call"
    );
    let objects = api.objects();
    let planted = objects
        .iter()
        .find(|o| o["metadata"]["name"] == name.as_str())
        .unwrap();
    assert!(
        planted.get("status").is_none(),
        "the gate consumed it: {planted}"
    );
    assert!(
        logs().contains("the approval was written by whoever created the request"),
        "the refusal is logged"
    );

    // The requester approving its own request does not count either.
    let second = call(r#"{"m":"self approved"}"#);
    let url = waiting_gate.route("stub");
    let body = second.clone();
    let waiting = tokio::spawn(async move { post(&url, &body).await.json::<Value>().await });
    let name = eventually("the second request", || {
        api.objects()
            .iter()
            .filter(|o| o["spec"]["argumentsPreview"]["m"] == "self approved")
            .find_map(|o| o["metadata"]["name"].as_str().map(String::from))
    })
    .await;
    api.decide(
        &name,
        "Approve",
        "system:serviceaccount:team:agent-a",
        "mine",
    );
    let (text, is_error) = result_text(&waiting.await.unwrap().unwrap());
    assert!(is_error, "{text}");
    assert!(
        text.contains("does not accept ApprovalRequest")
            && text.contains("approved by its own requester"),
        "{text}"
    );
    assert_eq!(counter.count("echo"), 0);
}

/// A server entry for the stub whose upstream gets `timeout` seconds to answer.
fn stub_with_timeout(
    upstream: &str,
    gated: &[&str],
    timeout: f64,
) -> hitl_operator::contract::gate_config::GateServer {
    let mut server = server(
        "stub",
        McpProtocol::StreamableHttp,
        upstream,
        &["echo"],
        gated,
    );
    server.params.timeout = serde_json::Number::from_f64(timeout);
    server
}

#[tokio::test]
async fn an_upstream_slower_than_its_timeout_gets_an_outcome_unknown_result() {
    init();
    let upstream = stub::start().await;
    let api = FakeApi::start().await;
    let cfg = config(vec![stub_with_timeout(&upstream, &[], 0.2)], 3600.0, 1.0);
    let gate = Gate::start(&cfg, &api).await;
    let url = gate.route("stub");

    let fast: Value = post(&url, r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"delay_ms":0}}}"#)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(fast["result"]["content"][0]["text"], r#"{"delay_ms":0}"#);

    let slow: Value = post(&url, r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"delay_ms":5000}}}"#)
        .await
        .json()
        .await
        .unwrap();
    let (text, is_error) = result_text(&slow);
    assert!(is_error, "{slow}");
    assert_eq!(
        text,
        "Outcome UNKNOWN: tool 'echo' was sent to its server, but upstream tools/stub did not \
         answer within 0.2s (params.timeout). It may or may not have run: check its effects \
         before calling it again."
    );
    assert!(
        gate.metrics()
            .await
            .contains(r#"hitl_gate_tool_calls_total{outcome="error"} 1"#)
    );
    // Other requests get a JSON-RPC error answering them, naming the timeout; a notification
    // (nothing waits for its answer) gets HTTP 504 with the same error.
    let resp = post(
        &url,
        r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"delay_ms":5000}}"#,
    )
    .await;
    assert_eq!(resp.status(), 200);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["id"], 3);
    assert_eq!(
        error["error"]["message"],
        "approval gate: upstream tools/stub did not answer within 0.2s (params.timeout)"
    );
    let resp = post(
        &url,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"delay_ms":5000}}"#,
    )
    .await;
    assert_eq!(resp.status(), 504);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(
        error["error"]["message"],
        "approval gate: upstream tools/stub did not answer within 0.2s (params.timeout)"
    );
}

#[tokio::test]
async fn an_approved_call_whose_upstream_times_out_says_it_may_have_run() {
    init();
    let upstream = stub::start().await;
    let api = FakeApi::start().await;
    let cfg = config(
        vec![stub_with_timeout(&upstream, &["echo"], 0.2)],
        3600.0,
        30.0,
    );
    let gate = Gate::start(&cfg, &api).await;
    let call = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"delay_ms":5000}}}"#;
    let url = gate.route("stub");
    let pending =
        tokio::spawn(async move { post(&url, call).await.json::<Value>().await.unwrap() });
    let name = api.first_request_name().await;
    api.decide(&name, "Approve", "alice", "ok");
    let answer = pending.await.unwrap();
    let (text, is_error) = result_text(&answer);
    assert!(is_error, "{answer}");
    assert_eq!(
        text,
        format!(
            "Outcome UNKNOWN: tool 'echo' was approved (ApprovalRequest {name}) and sent to its \
             server, but upstream tools/stub did not answer within 0.2s (params.timeout). It may \
             or may not have run: check its effects before calling it again. The approval is used \
             up; calling it again asks for a new one."
        )
    );
    assert!(api.objects()[0]["status"]["consumedAt"].is_string());
}

/// A legacy SSE upstream that sends one `endpoint` event (`endpoint` as given) and closes.
async fn sse_upstream(endpoint: &'static str) -> String {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sse", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/sse",
        get(move || async move {
            (
                [("content-type", "text/event-stream")],
                format!("event: endpoint\ndata: {endpoint}\n\n"),
            )
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn read_legacy_stream(gate: &Gate, name: &str) -> Result<String, reqwest::Error> {
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(gate.route(name))
        .header("accept", "text/event-stream")
        .send()
        .await?;
    // A guard against hanging, not a timing assertion.
    tokio::time::timeout(std::time::Duration::from_secs(30), resp.text())
        .await
        .expect("the stream ends with the upstream's")
}

#[tokio::test]
async fn legacy_endpoints_are_rewritten_and_confined_to_the_upstream_origin() {
    init();
    let api = FakeApi::start().await;
    let same = sse_upstream("/message?sessionId=abc").await;
    let foreign = sse_upstream("http://127.0.0.1:1/message?sessionId=abc").await;
    let cfg = config(
        vec![
            server("legacy-ok", McpProtocol::Sse, &same, &["echo"], &[]),
            server("legacy-foreign", McpProtocol::Sse, &foreign, &["echo"], &[]),
        ],
        3600.0,
        1.0,
    );
    let gate = Gate::start(&cfg, &api).await;
    let text = read_legacy_stream(&gate, "legacy-ok").await.unwrap();
    assert!(
        text.starts_with("event: endpoint\ndata: /servers/tools/legacy-ok/mcp/messages?session="),
        "{text}"
    );
    assert!(!text.contains("sessionId=abc"), "{text}");
    // An endpoint on another origin is never handed out: the stream is cut.
    let cut = read_legacy_stream(&gate, "legacy-foreign").await;
    assert!(
        cut.as_ref().map_or(true, |t| !t.contains("endpoint")),
        "{cut:?}"
    );
    // Messages for unknown sessions are refused.
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{}/messages?session=nope", gate.route("legacy-ok")))
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

/// An upstream at `/old` that redirects (`307`) to `/mcp`, which answers a message with the
/// configured header it got, and at `/away` redirects to another origin.
async fn redirecting_upstream() -> String {
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post as route_post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let redirect = |to: &'static str| {
        move || async move { (StatusCode::TEMPORARY_REDIRECT, [("location", to)]) }
    };
    let app = axum::Router::new()
        .route("/old", route_post(redirect("/mcp")))
        .route("/away", route_post(redirect("http://127.0.0.1:1/mcp")))
        .route(
            "/mcp",
            route_post(|headers: HeaderMap, body: String| async move {
                let message: Value = serde_json::from_str(&body).unwrap();
                let token = headers["x-upstream-token"].to_str().unwrap().to_string();
                axum::Json(
                    json!({"jsonrpc": "2.0", "id": message["id"], "result": {"token": token}}),
                )
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn redirects_are_followed_within_the_upstream_origin_only() {
    init();
    let base = redirecting_upstream().await;
    let api = FakeApi::start().await;
    let entry = |name: &str, path: &str| {
        server(
            name,
            McpProtocol::StreamableHttp,
            &format!("{base}{path}"),
            &["echo"],
            &[],
        )
    };
    let cfg = config(
        vec![entry("old", "/old"), entry("away", "/away")],
        3600.0,
        1.0,
    );
    let gate = Gate::start(&cfg, &api).await;
    let ping = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;

    // Same origin: the message and the configured headers go to where the server points.
    let resp = post(&gate.route("old"), ping).await;
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "id": 7, "result": {"token": "configured"}})
    );

    // Another origin: never followed, and the caller is told why, in an answer to its request.
    let resp = post(&gate.route("away"), ping).await;
    assert_eq!(resp.status(), 200);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["id"], 7);
    assert_eq!(
        error["error"]["message"],
        "approval gate: upstream tools/away redirected to another origin; the gate follows \
         redirects only within the origin of params.url"
    );
}

/// An upstream that answers every message with the names of the request headers it got, its
/// `Connection` header naming `X-Hop`, which it sends too, as it does `X-Kept`.
async fn header_reporting_upstream() -> String {
    use axum::http::HeaderMap;
    use axum::routing::post as route_post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/mcp",
        route_post(|headers: HeaderMap, body: String| async move {
            let message: Value = serde_json::from_str(&body).unwrap();
            let names: Vec<&str> = headers.keys().map(|name| name.as_str()).collect();
            (
                [
                    ("connection", "keep-alive, X-Hop"),
                    ("x-hop", "upstream"),
                    ("x-kept", "upstream"),
                ],
                axum::Json(json!({"jsonrpc": "2.0", "id": message["id"], "result": names})),
            )
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn headers_a_connection_header_names_are_not_relayed_either_way() {
    init();
    let upstream = header_reporting_upstream().await;
    let api = FakeApi::start().await;
    let gate = echo_gate(&upstream, &api).await;
    let ping = |url: String| async move {
        let hop_headers = [
            ("connection", "keep-alive, X-Client-Hop"),
            ("x-client-hop", "client"),
            ("x-client-end", "client"),
        ];
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let resp = post_with(&url, ping, &hop_headers).await;
        let kept = resp.headers().contains_key("x-kept");
        let hop = resp.headers().contains_key("x-hop");
        let seen: Value = resp.json().await.unwrap();
        let seen = |name: &str| seen["result"].as_array().unwrap().contains(&json!(name));
        (kept, hop, seen("x-client-end"), seen("x-client-hop"))
    };
    // Straight to the upstream, both named headers travel: the gate is what drops them.
    assert_eq!(ping(upstream.clone()).await, (true, true, true, true));
    assert_eq!(ping(gate.route("stub")).await, (true, false, true, false));
}

/// A POST of `body` to `url` in MCP session `session` (none: without `Mcp-Session-Id`).
async fn post_in(url: &str, session: Option<&str>, body: &str) -> reqwest::Response {
    let mut request = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request.body(body.to_string()).send().await.unwrap()
}

/// Issue 41: a grant for one MCP session covers the calls of a session that began through
/// this gate (the upstream assigned its id in answer to an `initialize` the gate relayed),
/// not a client that sends the id of a session the gate never saw begin, and not the session
/// after the client deleted it. Those calls wait for a person as usual.
#[tokio::test]
async fn a_session_grant_covers_only_a_session_begun_through_the_gate() {
    init();
    let upstream = stub::start().await;
    let api = FakeApi::start().await;
    let gated = server(
        "stub",
        McpProtocol::StreamableHttp,
        &upstream,
        &["echo"],
        &["echo"],
    );
    let mut cfg = config(vec![gated], 3600.0, 0.5);
    cfg.approval.grant_max_ttl_seconds = Some(86400.0);
    let gate = Gate::start(&cfg, &api).await;
    let url = gate.route("stub");

    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let resp = post_in(&url, None, initialize).await;
    assert!(resp.status().is_success());
    let begun = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    // An id no initialize through this gate was answered with: made up, or taken from a
    // session that began elsewhere (another gate, or this one before a restart).
    let forged = format!("{begun}-forged");
    api.add_grant(session_grant("for-begun", "stub", "echo", &begun));
    api.add_grant(session_grant("for-forged", "stub", "echo", &forged));
    let call = |n: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{n}}}}}}}"#
        )
    };
    let answer =
        |resp: reqwest::Response| async move { result_text(&resp.json::<Value>().await.unwrap()) };

    // The session that began here: the grant lets the call run at once.
    let (text, is_error) = answer(post_in(&url, Some(&begun), &call(1)).await).await;
    assert!(!is_error, "{text}");
    assert_eq!(text, r#"{"n":1}"#);
    assert_eq!(api.grant("for-begun")["status"]["uses"], 1);

    // The forged id: its grant does not cover the call, which waits for a person.
    let (text, is_error) = answer(post_in(&url, Some(&forged), &call(2)).await).await;
    assert!(is_error && text.contains("Pending"), "{text}");
    assert!(
        api.grant("for-forged").get("status").is_none(),
        "never used"
    );
    let requests = api.objects();
    let asked: Vec<&Value> = requests
        .iter()
        .filter(|r| r["spec"]["context"]["sessionId"] == json!(forged))
        .collect();
    assert_eq!(asked.len(), 1);
    assert!(asked[0]["spec"].get("grant").is_none());

    // The client deletes its session: its grant covers nothing any more.
    let deleted = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .delete(&url)
        .header("mcp-session-id", &begun)
        .send()
        .await
        .unwrap();
    // The stub does not take DELETE (405): the gate forgets the session whatever the answer.
    assert_eq!(deleted.status(), 405);
    let (text, is_error) = answer(post_in(&url, Some(&begun), &call(3)).await).await;
    assert!(is_error && text.contains("Pending"), "{text}");
    assert_eq!(api.grant("for-begun")["status"]["uses"], 1);
}

/// What the gate answers a call of the gated `delete` with `path`: (text, isError).
async fn ask_delete(gate: &Gate, path: &str) -> (String, bool) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "delete", "arguments": {"path": path}}});
    let answer: Value = post(&gate.route("stub"), &body.to_string())
        .await
        .json()
        .await
        .unwrap();
    result_text(&answer)
}

/// The request a Pending answer names.
fn pending_request(text: &str) -> String {
    let rest = text
        .split_once("Pending: ApprovalRequest ")
        .unwrap_or_else(|| panic!("not pending: {text}"))
        .1;
    rest.split(' ').next().unwrap().to_string()
}

#[tokio::test]
async fn at_its_cap_of_open_requests_an_agent_gets_no_new_request_but_keeps_its_pending_ones() {
    init();
    let stub_url = stub::start().await;
    let counter = Counter::start(stub_url.trim_end_matches("/mcp").to_string()).await;
    let api = FakeApi::start().await;
    let mut cfg = config(
        vec![server(
            "stub",
            McpProtocol::StreamableHttp,
            &format!("{}/mcp", counter.url),
            &["delete"],
            &["delete"],
        )],
        3600.0,
        0.2,
    );
    cfg.approval.max_open_requests = 2;
    // Two replicas of the agent's gate: the cap is the agent's, counted from the apiserver.
    let first = Gate::start(&cfg, &api).await;
    let second = Gate::start(&cfg, &api).await;

    let (text, _) = ask_delete(&first, "/data/1").await;
    let one = pending_request(&text);
    let (text, _) = ask_delete(&second, "/data/2").await;
    let two = pending_request(&text);

    // A third distinct call: two are open, the cap is 2. No request, nothing run.
    let (text, is_error) = ask_delete(&first, "/data/3").await;
    assert!(is_error, "{text}");
    assert!(
        text.starts_with(
            "NOT executed: tool 'delete' needs a human approval, but this agent already has 2 open approval requests in namespace team"
        ),
        "{text}"
    );
    assert!(
        text.contains("may have at most 2 (approval.maxOpenRequests)"),
        "{text}"
    );
    assert!(text.contains("kubectl hitl list -n team"), "{text}");
    assert_eq!(api.objects().len(), 2);
    assert_eq!(counter.count("delete"), 0);
    let metrics = first.metrics().await;
    assert!(
        metrics.contains("hitl_gate_open_request_cap_reached_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"hitl_gate_tool_calls_total{outcome="refused"} 1"#),
        "{metrics}"
    );

    // Calls that are already pending keep their requests, on either replica.
    for gate in [&first, &second] {
        let (text, is_error) = ask_delete(gate, "/data/1").await;
        assert!(is_error);
        assert_eq!(pending_request(&text), one);
    }
    assert_eq!(api.objects().len(), 2);

    // A decision frees a place (as the watch shows it): the third call gets its request.
    api.decide(&two, "Deny", "alice", "not now");
    let mut third = None;
    for _ in 0..50 {
        let (text, _) = ask_delete(&first, "/data/3").await;
        if text.contains("Pending: ApprovalRequest") {
            third = Some(pending_request(&text));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let third = third.expect("a place after the denial");
    assert!(third != one && third != two);
    assert_eq!(api.objects().len(), 3);
    assert_eq!(counter.count("delete"), 0);
}
