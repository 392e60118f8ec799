//! The gate between the official MCP Python SDK's client and server (`mcp==2.3.0`, pinned in
//! tests/mcp-peers-py/requirements.txt), which speak MCP revision 2026-07-28: no session,
//! `server/discover`, `resultType` on every result, the `Mcp-Method`/`Mcp-Name`/`Mcp-Param-*`
//! headers mirroring the body, and `input_required` rounds. They fail when
//! tests/mcp-peers-py/.venv is missing: `make test` makes it, and a test that did not run never
//! reports a pass.

use std::path::PathBuf;

use crate::harness::*;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use serde_json::{Value, json};

/// Directory of the Python MCP peers.
fn py_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-peers-py")
}

/// The venv's Python.
fn python() -> PathBuf {
    py_dir().join(".venv/bin/python")
}

/// Fails the test unless the Python peers' venv is installed: a test that could not run must
/// never count as passed.
fn require_py_peers() {
    assert!(
        py_dir().join(".venv/.installed").is_file() && python().is_file(),
        "tests/mcp-peers-py/.venv is missing: run `make test` (or `make peers`)"
    );
}

/// tests/mcp-peers-py/server.py, killed on drop; it records every tool that ran to completion.
struct PyServer {
    _child: tokio::process::Child,
    port: u16,
    record: tempfile::NamedTempFile,
}

impl PyServer {
    async fn start() -> Self {
        let record = tempfile::NamedTempFile::new().unwrap();
        let (child, port) = spawn_listening("the Python MCP server", |port| {
            let mut command = tokio::process::Command::new(python());
            command
                .arg("server.py")
                .arg(port.to_string())
                .arg(record.path())
                .current_dir(py_dir());
            command
        })
        .await;
        Self {
            _child: child,
            port,
            record,
        }
    }

    /// The tools that ran, in order: `{tool, args}`.
    fn ran(&self) -> Vec<Value> {
        std::fs::read_to_string(self.record.path())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Runs tests/mcp-peers-py/client.py against `url` with `steps` and `options`; one JSON value
/// per step.
async fn py_client(url: &str, steps: Value, options: Value) -> Vec<Value> {
    let out = tokio::process::Command::new(python())
        .arg("client.py")
        .arg(url)
        .arg(steps.to_string())
        .arg(options.to_string())
        .current_dir(py_dir())
        .kill_on_drop(true)
        .output()
        .await
        .expect("the venv's python runs");
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), steps.as_array().unwrap().len(), "{lines:?}");
    lines
}

/// A `client.py` step calling `name` with `args`.
fn step(name: &str, args: Value) -> Value {
    json!({"op": "call", "name": name, "args": args})
}

/// The Python server behind a counting proxy, a fake apiserver, and a gate offering echo,
/// delete_file and wipe_dir (the last two gated; get_secret hidden) on route `py`.
struct Env {
    server: PyServer,
    counter: Counter,
    api: FakeApi,
    gate: Gate,
}

impl Env {
    async fn start(wait: f64) -> Self {
        init();
        let server = PyServer::start().await;
        let counter = Counter::start(format!("http://127.0.0.1:{}", server.port)).await;
        let api = FakeApi::start().await;
        let cfg = config(
            vec![server_entry(&format!("{}/mcp", counter.url))],
            3600.0,
            wait,
        );
        let gate = Gate::start(&cfg, &api).await;
        Self {
            server,
            counter,
            api,
            gate,
        }
    }

    fn url(&self) -> String {
        self.gate.route("py")
    }

    /// The name of the request for `tool`, once it exists.
    async fn request_for(&self, tool: &str) -> String {
        let api = self.api.clone();
        eventually("an ApprovalRequest", move || {
            api.objects()
                .into_iter()
                .find(|o| o["spec"]["toolName"] == tool)
                .and_then(|o| o["metadata"]["name"].as_str().map(String::from))
        })
        .await
    }

    /// How many `tools/call`s of any tool reached the server.
    fn calls_upstream(&self) -> usize {
        ["echo", "delete_file", "wipe_dir", "get_secret"]
            .iter()
            .map(|t| self.counter.count(t))
            .sum()
    }
}

fn server_entry(url: &str) -> hitl_operator::contract::gate_config::GateServer {
    server(
        "py",
        McpProtocol::StreamableHttp,
        url,
        &["echo", "delete_file", "wipe_dir"],
        &["delete_file", "wipe_dir"],
    )
}

/// The 2026-07-28 request envelope the SDK sends in every request's `params._meta`.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    })
}

/// A `tools/call` as the 2026-07-28 SDK writes it.
fn call_body(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta()}})
}

/// POSTs `body` to `url` as a 2026-07-28 client would, with `headers` added: the status and
/// the JSON answer.
async fn post(url: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let (status, _, answer) = post_typed(url, body, headers).await;
    (status, answer)
}

/// [`post`], with the answer's `Content-Type`.
async fn post_typed(url: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, String, Value) {
    let mut req = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body.to_string());
    if !headers.iter().any(|(k, _)| *k == "mcp-protocol-version") {
        req = req.header("mcp-protocol-version", "2026-07-28");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = resp.text().await.unwrap();
    // A JSON answer, or an event stream whose last data line is the answer.
    let json = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(&text);
    (
        status,
        content_type,
        serde_json::from_str(json).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn python_lists_are_filtered_and_ungated_calls_answered_as_the_server_answers() {
    require_py_peers();
    let env = Env::start(5.0).await;
    let steps = json!([
        {"op": "list"},
        step("echo", json!({"message": "hi"})),
        step("get_secret", json!({})),
    ]);
    let through = py_client(&env.url(), steps.clone(), json!({})).await;
    // The hidden tool is neither listed nor run.
    assert_eq!(
        through[0]["tools"],
        json!(["echo", "delete_file", "wipe_dir"])
    );
    let direct = py_client(
        &format!("http://127.0.0.1:{}/mcp", env.server.port),
        json!([step("echo", json!({"message": "hi"}))]),
        json!({}),
    )
    .await;
    // The ungated call: exactly the server's answer, as the SDK parsed it.
    assert_eq!(through[1]["result"], direct[0]["result"]);
    assert_eq!(through[1]["result"]["content"][0]["text"], "Echo: hi");
    // The gate's own answer is a result of this revision the SDK parsed: resultType present.
    let refused = &through[2]["result"];
    assert_eq!(refused["isError"], true, "{}", through[2]);
    assert_eq!(refused["resultType"], "complete");
    assert_eq!(
        refused["content"][0]["text"],
        "NOT executed: tool 'get_secret' is not available on this server."
    );
    assert_eq!(env.counter.count("get_secret"), 0);
    assert_eq!(
        env.server.ran(),
        [
            json!({"tool": "echo", "args": {"message": "hi"}}),
            json!({"tool": "echo", "args": {"message": "hi"}})
        ]
    );
    assert!(
        env.api.requests().is_empty(),
        "ungated calls never touch the apiserver"
    );
    // The SDK discovers without a session, and the gate relayed that too.
    assert!(
        env.counter
            .bodies()
            .iter()
            .any(|(_, b)| String::from_utf8_lossy(b).contains("server/discover"))
    );
    // The raw answer to the refused call carries resultType as the revision requires.
    let (status, answer) = post(
        &env.url(),
        &call_body(9, "get_secret", json!({})),
        &[("mcp-method", "tools/call"), ("mcp-name", "get_secret")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert_eq!(answer["id"], 9);
}

#[tokio::test]
async fn python_a_gated_call_waits_runs_once_on_approval_and_a_replay_asks_again() {
    require_py_peers();
    let env = Env::start(3.0).await;
    let url = env.url();
    let task = tokio::spawn(async move {
        py_client(
            &url,
            json!([{"op": "list"}, step("delete_file", json!({"path": "/tmp/x"}))]),
            json!({}),
        )
        .await
    });
    let name = env.request_for("delete_file").await;
    assert_eq!(env.counter.count("delete_file"), 0, "held until approved");
    env.api.decide(&name, "Approve", "alice", "fine");
    let out = task.await.unwrap();
    assert_eq!(out[1]["result"]["content"][0]["text"], "deleted /tmp/x");
    assert_eq!(out[1]["result"]["isError"], false);
    // The call carried its Mcp-Param-Path header, which the gate checked and relayed.
    assert_eq!(env.counter.count("delete_file"), 1);
    // The same call again: the approval is used up, so it waits again and is not run.
    let out = py_client(
        &env.url(),
        json!([{"op": "list"}, step("delete_file", json!({"path": "/tmp/x"}))]),
        json!({}),
    )
    .await;
    let result = &out[1]["result"];
    assert_eq!(result["isError"], true, "{}", out[1]);
    assert_eq!(result["resultType"], "complete");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("NOT executed yet") && !text.contains(&name),
        "{text}"
    );
    assert_eq!(
        env.server.ran(),
        [json!({"tool": "delete_file", "args": {"path": "/tmp/x"}})]
    );
    assert_eq!(env.counter.count("delete_file"), 1);
    assert_eq!(env.api.objects().len(), 2);
}

#[tokio::test]
async fn python_a_denied_call_is_not_run_and_the_client_gets_the_reason() {
    require_py_peers();
    let env = Env::start(30.0).await;
    let url = env.url();
    let task = tokio::spawn(async move {
        py_client(
            &url,
            json!([step("delete_file", json!({"path": "/etc"}))]),
            json!({}),
        )
        .await
    });
    let name = env.request_for("delete_file").await;
    env.api.decide(&name, "Deny", "bob", "not the config");
    let out = task.await.unwrap();
    let result = &out[0]["result"];
    assert_eq!(result["isError"], true, "{}", out[0]);
    assert_eq!(result["resultType"], "complete");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("NOT executed: tool 'delete_file' was denied by bob")
            && text.contains("Reason: not the config"),
        "{text}"
    );
    assert_eq!(env.counter.count("delete_file"), 0);
    assert!(env.server.ran().is_empty());
}

#[tokio::test]
async fn python_headers_that_disagree_with_the_body_never_reach_the_server() {
    require_py_peers();
    let env = Env::start(0.3).await;
    let url = env.url();
    // The gate learns which Mcp-Param-* headers each tool declares from the lists it relays.
    let listed = py_client(&url, json!([{"op": "list"}]), json!({})).await;
    assert_eq!(listed[0]["tools"].as_array().unwrap().len(), 3);
    let echo = call_body(1, "echo", json!({"message": "hi"}));
    let delete = call_body(2, "delete_file", json!({"path": "/tmp/x"}));
    for (body, headers, named) in [
        // A router on Mcp-Method would not see a tool call.
        (
            &echo,
            vec![("mcp-method", "tools/list"), ("mcp-name", "echo")],
            "mcp-method",
        ),
        // One on Mcp-Name would route the ungated echo as the gated delete_file, or the other
        // way round.
        (
            &echo,
            vec![("mcp-method", "tools/call"), ("mcp-name", "delete_file")],
            "mcp-name",
        ),
        (
            &delete,
            vec![("mcp-method", "tools/call"), ("mcp-name", "echo")],
            "mcp-name",
        ),
        // Mcp-Param-Path other than the approved argument.
        (
            &delete,
            vec![
                ("mcp-method", "tools/call"),
                ("mcp-name", "delete_file"),
                ("mcp-param-path", "/etc/passwd"),
            ],
            "mcp-param-path",
        ),
        // A header the tool does not declare, and so no argument of the body backs.
        (
            &echo,
            vec![
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
                ("mcp-param-message", "hi"),
            ],
            "mcp-param-message",
        ),
        // Another revision than the envelope's: the gate would answer for the wrong one.
        (
            &echo,
            vec![
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
            ],
            "mcp-protocol-version",
        ),
        // Twice, with different values: readers taking the first or the last disagree.
        (
            &echo,
            vec![
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
                ("mcp-name", "delete_file"),
            ],
            "mcp-name",
        ),
    ] {
        let (status, answer) = post(&url, body, &headers).await;
        assert_eq!(status, 400, "{headers:?}: {answer}");
        assert_eq!(answer["error"]["code"], -32020, "{answer}");
        assert_eq!(answer["id"], body["id"], "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("header {named}")) && message.contains("not forwarded"),
            "{message}"
        );
    }
    assert_eq!(
        env.calls_upstream(),
        0,
        "nothing reached the server: {:?}",
        env.counter.bodies()
    );
    assert!(env.server.ran().is_empty());
    assert!(env.api.requests().is_empty(), "nothing was asked either");
    // The same messages with headers that agree go through: the check refuses only mismatches.
    let (status, answer) = post(
        &url,
        &echo,
        &[("mcp-method", "tools/call"), ("mcp-name", "echo")],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(result_text(&answer), ("Echo: hi".into(), false));
    let (status, answer) = post(
        &url,
        &delete,
        &[
            ("mcp-method", "tools/call"),
            ("mcp-name", "delete_file"),
            ("mcp-param-path", "/tmp/x"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        result_text(&answer).0.starts_with("NOT executed yet"),
        "{answer}"
    );
    assert_eq!(env.counter.count("echo"), 1);
    assert_eq!(env.counter.count("delete_file"), 0);
}

#[tokio::test]
async fn python_input_required_rounds_of_an_approved_call_are_relayed_and_run_once() {
    require_py_peers();
    let env = Env::start(30.0).await;
    let url = env.url();
    let task = tokio::spawn(async move {
        py_client(
            &url,
            json!([step("wipe_dir", json!({"path": "/d"}))]),
            json!({"confirm": true, "note": "yes"}),
        )
        .await
    });
    let name = env.request_for("wipe_dir").await;
    assert_eq!(env.counter.count("wipe_dir"), 0);
    env.api.decide(&name, "Approve", "alice", "ok");
    let out = task.await.unwrap();
    // The server asked; the client answered and retried; the retry went on the approval.
    assert_eq!(out[0]["asked"], json!(["Really wipe /d?"]), "{}", out[0]);
    assert_eq!(out[0]["result"]["content"][0]["text"], "wiped /d (yes)");
    assert_eq!(
        env.server.ran(),
        [json!({"tool": "wipe_dir", "args": {"path": "/d", "note": "yes"}})]
    );
    assert_eq!(env.counter.count("wipe_dir"), 2, "two rounds, one approval");
    assert_eq!(env.api.objects().len(), 1);
    let metrics = env.gate.metrics().await;
    assert!(
        metrics.contains(r#"hitl_gate_tool_calls_total{outcome="approved"} 1"#)
            && metrics.contains(r#"hitl_gate_tool_calls_total{outcome="continued"} 1"#),
        "{metrics}"
    );
}

/// Approves round one of `wipe_dir {"path": "/d"}` sent raw with id `id` (asking for progress,
/// so answered on an event stream the gate writes, when `progress`): its `input_required`
/// answer.
async fn approved_first_round(env: &Env, id: u64, progress: bool) -> Value {
    let url = env.url();
    let mut body = call_body(id, "wipe_dir", json!({"path": "/d"}));
    if progress {
        body["params"]["_meta"]["progressToken"] = json!("p1");
    }
    let first = tokio::spawn(async move {
        post_typed(
            &url,
            &body,
            &[("mcp-method", "tools/call"), ("mcp-name", "wipe_dir")],
        )
        .await
    });
    let api = env.api.clone();
    let name = eventually("a pending request", move || {
        api.objects()
            .into_iter()
            .find(|o| o["spec"].get("decision").is_none())
            .and_then(|o| o["metadata"]["name"].as_str().map(String::from))
    })
    .await;
    env.api.decide(&name, "Approve", "alice", "ok");
    let (status, content_type, answer) = first.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        content_type.starts_with("text/event-stream"),
        progress,
        "{content_type}"
    );
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    answer
}

/// The retry of `wipe_dir` with `args`, the client's answer and the server's `state`.
fn retry_body(id: u64, args: Value, state: &str) -> Value {
    let mut body = call_body(id, "wipe_dir", args);
    body["params"]["requestState"] = json!(state);
    body["params"]["inputResponses"] = json!({"__main__:ask_confirm": {"action": "accept", "content": {"confirm": true, "note": "raw"}}});
    body
}

#[tokio::test]
async fn python_a_continuation_is_bound_to_its_arguments_and_passes_once() {
    require_py_peers();
    let env = Env::start(30.0).await;
    let url = env.url();
    let headers = [("mcp-method", "tools/call"), ("mcp-name", "wipe_dir")];
    // Attack: the approved call's retry with another argument is not covered, and uses the
    // continuation up, so the genuine retry is refused too.
    let answer = approved_first_round(&env, 1, false).await;
    let state = answer["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, answer) = post(
        &url,
        &retry_body(2, json!({"path": "/etc"}), &state),
        &headers,
    )
    .await;
    let (text, is_error) = result_text(&answer);
    assert!(is_error && text.contains("arguments differ"), "{text}");
    assert_eq!(answer["result"]["resultType"], "complete");
    let (_, answer) = post(
        &url,
        &retry_body(3, json!({"path": "/d"}), &state),
        &headers,
    )
    .await;
    let (text, is_error) = result_text(&answer);
    assert!(is_error && text.contains("continues no call"), "{text}");
    assert_eq!(
        env.counter.count("wipe_dir"),
        1,
        "only the approved first round"
    );
    assert!(env.server.ran().is_empty());
    // The genuine flow (the first round answered on the gate's progress stream this time): the
    // retry runs once; replaying it runs nothing.
    let answer = approved_first_round(&env, 4, true).await;
    let state = answer["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let retry = retry_body(5, json!({"path": "/d"}), &state);
    let (_, answer) = post(&url, &retry, &headers).await;
    assert_eq!(result_text(&answer), ("wiped /d (raw)".into(), false));
    let (_, answer) = post(&url, &retry, &headers).await;
    let (text, is_error) = result_text(&answer);
    assert!(is_error && text.contains("continues no call"), "{text}");
    // A requestState the gate never saw approved asks nobody and runs nothing.
    let (_, answer) = post(
        &url,
        &retry_body(6, json!({"path": "/d"}), "v1.forged"),
        &headers,
    )
    .await;
    assert!(result_text(&answer).1);
    assert_eq!(
        env.server.ran(),
        [json!({"tool": "wipe_dir", "args": {"path": "/d", "note": "raw"}})]
    );
    assert_eq!(
        env.counter.count("wipe_dir"),
        3,
        "two first rounds, one retry"
    );
    assert_eq!(env.api.objects().len(), 2, "one request per approved call");
}
