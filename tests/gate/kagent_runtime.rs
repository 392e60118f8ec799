//! The gate's session store driven by kagent's agent runtime's own clients
//! (tests/kagent-runtime/store_client.py): `KAgentSessionService`, `KAgentTaskStore` and the
//! token service's request hook, on one httpx client as the runtime builds it, in each runtime
//! version `make runtime-peers` installs. It fails when a version's venv is missing
//! (tests/kagent-runtime/.venv-VERSION): a test that did not run never reports a pass.

use std::path::PathBuf;

use crate::harness::*;

/// The runtime versions `make runtime-peers` installs.
const RUNTIME_VERSIONS: &[&str] = &["0.7.4", "0.10.4"];

#[tokio::test]
async fn kagents_session_service_and_task_store_work_against_the_gate() {
    init();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kagent-runtime");
    for version in RUNTIME_VERSIONS {
        let venv = dir.join(format!(".venv-{version}"));
        let python = venv.join("bin/python");
        assert!(
            venv.join(".installed").is_file() && python.is_file(),
            "tests/kagent-runtime/.venv-{version} is missing: run `make runtime-peers`"
        );
        let api = FakeApi::start().await;
        let mut cfg = config(vec![], 3600.0, 30.0);
        cfg.session_store = true;
        let gate = Gate::start(&cfg, &api).await;
        let out = tokio::process::Command::new(python)
            .arg("store_client.py")
            .arg(&gate.url)
            // The app name the runtime makes of KAGENT_NAMESPACE=team, KAGENT_NAME=agent-a.
            .arg("team__NS__agent_a")
            .current_dir(&dir)
            .output()
            .await
            .expect("the runtime's Python runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && stdout.ends_with(&format!("all passed (kagent-adk {version})\n")),
            "kagent-adk {version}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The text of an OpenAI chat message's content: a string, or a list of text parts.
fn text_of(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => {
            parts.iter().filter_map(|p| p["text"].as_str()).collect()
        }
        _ => String::new(),
    }
}

/// What the scripted model was sent last: (role, text) of each message.
fn last_prompt(log: &std::path::Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(log).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let messages = last.get("messages").unwrap_or(&last);
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                text_of(&m["content"]),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_conversation_through_kagents_runtime_keeps_its_history_in_the_gate() {
    init();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kagent-runtime");
    for version in RUNTIME_VERSIONS {
        let venv = dir.join(format!(".venv-{version}"));
        assert!(
            venv.join(".installed").is_file(),
            "tests/kagent-runtime/.venv-{version} is missing: run `make runtime-peers`"
        );
        let python = venv.join("bin/python");
        let work = tempfile::tempdir().unwrap();
        let model_log = work.path().join("model.jsonl");
        let (_model, model_port) = spawn_listening("the scripted model", |port| {
            let mut command = tokio::process::Command::new(&python);
            command
                .arg("model.py")
                .arg(port.to_string())
                .arg(&model_log)
                .current_dir(&dir);
            command
        })
        .await;
        let api = FakeApi::start().await;
        let mut cfg = config(vec![], 3600.0, 30.0);
        cfg.session_store = true;
        let gate = Gate::start(&cfg, &api).await;
        // config.json and agent-card.json as the renderer writes them, without tools.
        let config_dir = work.path().join("config");
        std::fs::create_dir(&config_dir).unwrap();
        let agent_config = serde_json::json!({
            "model": {"type": "openai", "model": "gpt-4o",
                "base_url": format!("http://127.0.0.1:{model_port}/v1")},
            "description": "test agent", "instruction": "You are a test agent.",
            "http_tools": [], "sse_tools": [], "remote_agents": null, "stream": false});
        std::fs::write(config_dir.join("config.json"), agent_config.to_string()).unwrap();
        let card = serde_json::json!({"name": "agent-a", "description": "test agent",
            "url": "http://agent-a.team:8080", "version": "",
            "capabilities": {"streaming": false, "pushNotifications": false,
                "stateTransitionHistory": true},
            "defaultInputModes": ["text"], "defaultOutputModes": ["text"], "skills": []});
        std::fs::write(config_dir.join("agent-card.json"), card.to_string()).unwrap();
        let (_runtime, runtime_port) = spawn_listening("kagent-adk static", |port| {
            let mut command = tokio::process::Command::new(venv.join("bin/kagent-adk"));
            command
                .args(["static", "--host", "127.0.0.1", "--port", &port.to_string()])
                .arg("--filepath")
                .arg(&config_dir)
                .env("KAGENT_URL", &gate.url)
                .env("KAGENT_NAMESPACE", "team")
                .env("KAGENT_NAME", "agent-a")
                .env("OPENAI_API_KEY", "sk-test")
                .current_dir(work.path());
            command
        })
        .await;
        let agent_url = format!("http://127.0.0.1:{runtime_port}/");
        let mut context: Option<String> = None;
        for text in ["first message", "second message", "third message"] {
            let mut command = tokio::process::Command::new(&python);
            command.arg("a2a_send.py").arg(&agent_url).arg(text);
            if let Some(context) = &context {
                command.arg(context);
            }
            let out = command.current_dir(&dir).output().await.unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let answer: serde_json::Value = serde_json::from_str(
                stdout.lines().last().unwrap_or_default(),
            )
            .unwrap_or_else(|_| {
                panic!(
                    "kagent-adk {version}: {stdout}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            assert_eq!(
                answer["state"], "completed",
                "kagent-adk {version}: {answer}"
            );
            context = Some(answer["context_id"].as_str().unwrap().to_owned());
        }
        let turns: Vec<(String, String)> = [
            ("user", "first message"),
            ("assistant", "OK"),
            ("user", "second message"),
            ("assistant", "OK"),
        ]
        .iter()
        .map(|(r, t)| (r.to_string(), t.to_string()))
        .collect();
        // The third turn's prompt: the system's, the history in order, the new message. The
        // 0.7.4 runtime appends the events it read once more to its session (its own doing, as
        // against kagent), so it sends the history twice, each copy in order.
        let copies = if *version == "0.7.4" { 2 } else { 1 };
        let mut want = Vec::new();
        for _ in 0..copies {
            want.extend(turns.iter().cloned());
        }
        want.push(("user".into(), "third message".into()));
        let prompt = last_prompt(&model_log);
        assert_eq!(prompt[0].0, "system", "kagent-adk {version}: {prompt:?}");
        assert_eq!(prompt[1..], want, "kagent-adk {version}");
    }
}
