//! The real `hitl-operator gate --config FILE` binary: it reads gate.json, talks to the
//! apiserver from its kubeconfig, serves MCP, /healthz and /metrics, consumes approvals as
//! `$POD_NAME`, logs JSON without arguments, and stops cleanly on SIGTERM.

use std::process::Stdio;

use crate::harness::*;
use crate::stub;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn the_gate_binary_serves_gates_and_stops_on_sigterm() {
    init();
    let upstream = stub::start().await;
    let api = FakeApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: fake\n    user: u\n    namespace: team\ncurrent-context: c\n",
            api.url
        ),
    )
    .unwrap();
    let (mcp_port, metrics_port) = (free_port(), free_port());
    let mut cfg = config(
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
    cfg.listen = format!("127.0.0.1:{mcp_port}");
    cfg.metrics_listen = format!("127.0.0.1:{metrics_port}");
    let config_path = dir.path().join("gate.json");
    std::fs::write(&config_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let key_path = dir.path().join("key");
    std::fs::write(&key_path, [7; 32]).unwrap();

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hitl-operator"))
        .args(["gate", "--config"])
        .arg(&config_path)
        .arg("--binding-key")
        .arg(&key_path)
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "cli-gate-0")
        .env("RUST_LOG", "info,hitl_operator=trace")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let health = format!("http://127.0.0.1:{metrics_port}/healthz");
    for _ in 0..200 {
        if let Ok(r) = http.get(&health).send().await {
            assert_eq!(r.text().await.unwrap(), "ok");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hi", "api_key": "canary-key-987"}}});
    let url = format!("http://127.0.0.1:{mcp_port}/servers/tools/stub/mcp");
    let pending = tokio::spawn(
        http.post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(call.to_string())
            .send(),
    );
    let name = api.first_request_name().await;
    api.decide(&name, "Approve", "alice", "ok");
    let v: Value = pending.await.unwrap().unwrap().json().await.unwrap();
    assert_eq!(
        v["result"]["content"][0]["text"],
        r#"{"message":"hi","api_key":"canary-key-987"}"#
    );
    assert_eq!(api.objects()[0]["status"]["consumedBy"], "cli-gate-0");
    let metrics = http
        .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"hitl_gate_tool_calls_total{outcome="approved"} 1"#),
        "{metrics}"
    );

    // A call still waiting for approval does not keep the gate from stopping.
    let waiting = tokio::spawn(
        http.post(format!("http://127.0.0.1:{mcp_port}/servers/tools/stub/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"later"}}}"#)
            .send(),
    );
    let api3 = api.clone();
    eventually("a second request", move || {
        (api3.objects().len() == 2).then_some(())
    })
    .await;

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status}");
    // The waiting call was cut, never forwarded.
    if let Ok(Ok(resp)) = waiting.await {
        assert!(resp.text().await.is_err());
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert!(stderr.contains("approval gate started"), "{stderr}");
    assert!(
        stderr.lines().all(|l| l.starts_with('{')),
        "JSON logs: {stderr}"
    );
    assert!(
        !stderr.contains("canary-key-987"),
        "arguments in logs: {stderr}"
    );
    assert!(
        !api.requests()
            .iter()
            .any(|(_, _, b)| b.contains("canary-key-987"))
    );
}

#[tokio::test]
async fn a_missing_config_is_reported() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hitl-operator"))
        .args(["gate", "--config", "/nonexistent/gate.json"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/gate.json"));
}

#[tokio::test]
async fn the_gate_does_not_start_without_a_usable_binding_key() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("gate.json");
    let cfg = config(vec![], 3600.0, 30.0);
    std::fs::write(&config_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, [1; 16]).unwrap();
    let missing = dir.path().join("missing");
    for (key, expected) in [
        (
            &short,
            "the binding key has 16 bytes; at least 32 are needed",
        ),
        (&missing, "cannot read the binding key"),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hitl-operator"))
            .args(["gate", "--log-format", "text", "--config"])
            .arg(&config_path)
            .arg("--binding-key")
            .arg(key)
            .output()
            .await
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("binding key {}: {expected}", key.display())),
            "{stderr}"
        );
    }
}
