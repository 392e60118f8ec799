//! Tool risk at the gate, with the real MCP server and client from npm: the `echo` tool of
//! `@modelcontextprotocol/server-everything` lists `readOnlyHint: true, destructiveHint: false,
//! idempotentHint: true, openWorldHint: false`. Its requests carry those hints and who asserted
//! them; an Allow rule on `annotations.readOnlyHint` lets it through only when the server is
//! trusted (docs/policies.md, "Tool annotations").

use crate::harness::*;
use hitl_operator::api::agent::RuleAction;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::contract::gate_config::GateRule;
use serde_json::json;

/// A gate before the everything server where `echo` needs approval, unless the rule
/// `read-only` (Allow when `annotations.readOnlyHint`) lets it through; `trusted` says whether
/// the server's annotations are trusted.
async fn start(trusted: bool) -> (Everything, Counter, FakeApi, Gate) {
    init();
    let everything = Everything::start("streamableHttp").await;
    let counter = Counter::start(format!("http://127.0.0.1:{}", everything.port)).await;
    let api = FakeApi::start().await;
    let mut entry = server(
        "everything",
        McpProtocol::StreamableHttp,
        &format!("{}/mcp", counter.url),
        &["echo", "get-sum"],
        &["echo", "get-sum"],
    );
    entry.trust_tool_annotations = trusted;
    entry.rules = vec![GateRule {
        name: "read-only".into(),
        tool: "echo".into(),
        when: Some("annotations.readOnlyHint && annotations.listed".into()),
        action: RuleAction::Allow,
        required_approvals: 1,
        edits: None,
        escalation: None,
    }];
    let gate = Gate::start(&config(vec![entry], 3600.0, 30.0), &api).await;
    (everything, counter, api, gate)
}

#[tokio::test]
async fn untrusted_hints_are_shown_on_the_request_and_do_not_allow() {
    require_peers();
    let (_everything, counter, api, gate) = start(false).await;
    let url = gate.route("everything");
    let task = tokio::spawn(async move {
        client(
            &url,
            "streamable",
            json!([{"op": "list"}, call("echo", json!({"message": "hi"}))]),
        )
        .await
    });
    let api_ = api.clone();
    let name = eventually("an ApprovalRequest", move || {
        api_.objects()
            .first()
            .and_then(|o| o["metadata"]["name"].as_str().map(String::from))
    })
    .await;
    assert_eq!(
        counter.count("echo"),
        0,
        "an untrusted readOnlyHint allows nothing"
    );
    let annotations = api.objects()[0]["spec"]["toolAnnotations"].clone();
    assert_eq!(annotations["readOnlyHint"], true, "{annotations}");
    assert_eq!(annotations["destructiveHint"], false);
    assert_eq!(annotations["idempotentHint"], true);
    assert_eq!(annotations["openWorldHint"], false);
    assert_eq!(annotations["trusted"], false);
    let digest = annotations["definitionSha256"].as_str().unwrap();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{digest}"
    );
    api.decide(&name, "Approve", "alice", "fine");
    let out = task.await.unwrap();
    assert_eq!(result_text(&out[1]), ("Echo: hi".to_string(), false));
    assert_eq!(counter.count("echo"), 1);
}

#[tokio::test]
async fn trusted_read_only_hints_allow_and_other_tools_still_ask() {
    require_peers();
    let (_everything, counter, api, gate) = start(true).await;
    let url = gate.route("everything");
    let out = client(
        &url,
        "streamable",
        json!([{"op": "list"}, call("echo", json!({"message": "hi"}))]),
    )
    .await;
    assert_eq!(result_text(&out[1]), ("Echo: hi".to_string(), false));
    assert_eq!(counter.count("echo"), 1);
    assert!(api.objects().is_empty(), "no request for an allowed call");
    // get-sum asserts nothing the rule reads; it asks, and its request says who vouches.
    let url = gate.route("everything");
    let task = tokio::spawn(async move {
        client(
            &url,
            "streamable",
            json!([{"op": "list"}, call("get-sum", json!({"a": 1, "b": 2}))]),
        )
        .await
    });
    let api_ = api.clone();
    let name = eventually("an ApprovalRequest", move || {
        api_.objects()
            .first()
            .and_then(|o| o["metadata"]["name"].as_str().map(String::from))
    })
    .await;
    let annotations = api.objects()[0]["spec"]["toolAnnotations"].clone();
    assert_eq!(annotations["trusted"], true, "{annotations}");
    api.decide(&name, "Deny", "alice", "no");
    let _ = task.await.unwrap();
    assert_eq!(counter.count("get-sum"), 0);
}

#[tokio::test]
async fn a_call_before_any_list_sees_the_defaults() {
    require_peers();
    let (_everything, counter, api, gate) = start(true).await;
    let url = gate.route("everything");
    let task = tokio::spawn(async move {
        client(
            &url,
            "streamable",
            json!([call("echo", json!({"message": "unlisted"}))]),
        )
        .await
    });
    let api_ = api.clone();
    let name = eventually("an ApprovalRequest", move || {
        api_.objects()
            .first()
            .and_then(|o| o["metadata"]["name"].as_str().map(String::from))
    })
    .await;
    assert_eq!(
        counter.count("echo"),
        0,
        "no list seen: readOnlyHint is false"
    );
    assert!(api.objects()[0]["spec"].get("toolAnnotations").is_none());
    api.decide(&name, "Deny", "alice", "no");
    let _ = task.await.unwrap();
}
