//! Approval rules at the gate, end to end: the real npm MCP client and the recorder MCP server
//! (read_file, write_file, delete_file; it records every call it runs) behind the gate, and the
//! in-process fake apiserver. docs/policies.md describes the semantics.

use crate::harness::*;
use hitl_operator::api::agent::RuleAction;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::contract::gate_config::GateRule;
use serde_json::{Value, json};

const FILE_TOOLS: [&str; 3] = ["read_file", "write_file", "delete_file"];

fn rule(name: &str, tool: &str, when: &str, action: RuleAction) -> GateRule {
    GateRule {
        name: name.into(),
        tool: tool.into(),
        when: Some(when.into()),
        action,
        required_approvals: 1,
        edits: None,
        escalation: None,
    }
}

/// The recorder twice behind one gate: `files` gates writes and deletes, with the read-only
/// paths rules; `files-b` gates nothing by default, with a threshold rule on the size of a
/// write and a rule on an argument read_file never has.
struct Env {
    recorder: Recorder,
    api: FakeApi,
    gate: Gate,
}

impl Env {
    async fn start() -> Self {
        init();
        let recorder = Recorder::start().await;
        let upstream = format!("{}/mcp", recorder.url);
        let api = FakeApi::start().await;
        let mut files = server(
            "files",
            McpProtocol::StreamableHttp,
            &upstream,
            &FILE_TOOLS,
            &["write_file", "delete_file"],
        );
        files.rules = vec![
            rule(
                "scratch-writes",
                "write_file",
                "args.path.startsWith('/tmp/')",
                RuleAction::Allow,
            ),
            rule(
                "no-deletes-under-etc",
                "delete_file",
                "args.path.startsWith('/etc/')",
                RuleAction::Deny,
            ),
        ];
        let mut files_b = server(
            "files-b",
            McpProtocol::StreamableHttp,
            &upstream,
            &FILE_TOOLS,
            &[],
        );
        files_b.rules = vec![
            rule(
                "large-writes",
                "write_file",
                "size(args.content) > 1000",
                RuleAction::RequireApproval,
            ),
            rule(
                "deep-reads",
                "read_file",
                "args.offset > 100",
                RuleAction::RequireApproval,
            ),
        ];
        let gate = Gate::start(&config(vec![files, files_b], 3600.0, 0.5), &api).await;
        Self {
            recorder,
            api,
            gate,
        }
    }

    async fn call(&self, server: &str, tool: &str, args: Value) -> (String, bool) {
        let out = client(
            &self.gate.route(server),
            "streamable",
            json!([{"op": "call", "name": tool, "args": args}]),
        )
        .await;
        result_text(&out[0])
    }

    async fn ran(&self) -> Vec<(String, String)> {
        self.recorder
            .calls()
            .await
            .iter()
            .map(|c| {
                (
                    c["tool"].as_str().unwrap().to_owned(),
                    c["args"]["path"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

#[tokio::test]
async fn an_allow_rule_runs_scratch_writes_and_a_deny_rule_refuses_deletes_under_etc() {
    require_peers();
    let env = Env::start().await;
    let written = env
        .call(
            "files",
            "write_file",
            json!({"path": "/tmp/notes.txt", "content": "hi"}),
        )
        .await;
    assert_eq!(written, ("wrote /tmp/notes.txt".to_owned(), false));
    let (text, is_error) = env
        .call("files", "delete_file", json!({"path": "/etc/passwd"}))
        .await;
    assert!(is_error);
    assert_eq!(
        text,
        "NOT executed: tool 'delete_file' is denied for these arguments by approval rule 'no-deletes-under-etc' of this agent. No approval can be asked for this call."
    );
    assert!(
        env.api.objects().is_empty(),
        "neither call asked for an approval"
    );
    assert_eq!(
        env.ran().await,
        [("write_file".to_owned(), "/tmp/notes.txt".to_owned())]
    );
    let metrics = env.gate.metrics().await;
    assert!(
        metrics.contains(r#"hitl_gate_tool_calls_total{outcome="denied_by_rule"} 1"#)
            && metrics.contains(r#"hitl_gate_tool_calls_total{outcome="forwarded"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn outside_the_rules_require_approval_still_decides() {
    require_peers();
    let env = Env::start().await;
    let (text, is_error) = env
        .call(
            "files",
            "write_file",
            json!({"path": "/data/report.csv", "content": "x"}),
        )
        .await;
    assert!(is_error && text.starts_with("NOT executed yet"), "{text}");
    let requests = env.api.objects();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0]["spec"].get("rule").is_none(),
        "requireApproval asked, not a rule: {}",
        requests[0]["spec"]
    );
    assert!(env.ran().await.is_empty());
}

#[tokio::test]
async fn a_threshold_rule_asks_only_above_it_and_the_request_names_the_rule() {
    require_peers();
    let env = Env::start().await;
    let small = env
        .call(
            "files-b",
            "write_file",
            json!({"path": "/data/small", "content": "x".repeat(10)}),
        )
        .await;
    assert_eq!(small, ("wrote /data/small".to_owned(), false));
    assert!(env.api.objects().is_empty());
    let big = json!({"path": "/data/big", "content": "x".repeat(2000)});
    let (text, is_error) = env.call("files-b", "write_file", big.clone()).await;
    assert!(is_error && text.starts_with("NOT executed yet"), "{text}");
    let request = env.api.objects()[0].clone();
    assert_eq!(request["spec"]["rule"], "large-writes");
    assert_eq!(request["spec"]["toolName"], "write_file");
    assert_eq!(
        env.ran().await,
        [("write_file".to_owned(), "/data/small".to_owned())]
    );
    // Approved, the retry of the same call runs once.
    let name = request["metadata"]["name"].as_str().unwrap().to_owned();
    env.api.decide(&name, "Approve", "alice", "expected");
    let (text, is_error) = env.call("files-b", "write_file", big).await;
    assert_eq!((text.as_str(), is_error), ("wrote /data/big", false));
    assert_eq!(env.ran().await.len(), 2);
}

#[tokio::test]
async fn a_condition_over_a_missing_argument_asks_for_approval() {
    require_peers();
    let env = Env::start().await;
    let (text, is_error) = env
        .call("files-b", "read_file", json!({"path": "/data/report.csv"}))
        .await;
    assert!(is_error && text.starts_with("NOT executed yet"), "{text}");
    let requests = env.api.objects();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["spec"]["rule"], "deep-reads");
    assert!(env.ran().await.is_empty());
    let logs = logs();
    assert!(
        logs.contains("could not be evaluated") && logs.contains("deep-reads"),
        "the gate logs why it asked"
    );
}

#[tokio::test]
async fn a_gate_whose_rule_does_not_compile_refuses_to_start_naming_it() {
    init();
    let api = FakeApi::start().await;
    let mut files = server(
        "files",
        McpProtocol::StreamableHttp,
        "http://127.0.0.1:9/mcp",
        &FILE_TOOLS,
        &[],
    );
    files.rules = vec![rule(
        "broken",
        "read_file",
        "args.path.startsWith(",
        RuleAction::Deny,
    )];
    let message =
        build_error(&config(vec![files], 3600.0, 1.0), &api).expect("the gate does not start");
    assert!(
        message.starts_with("gate.json: servers[0].rules: rule \"broken\": when: CEL: "),
        "{message}"
    );
}
