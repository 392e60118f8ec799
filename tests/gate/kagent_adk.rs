//! The gate's session store driven by kagent-adk 0.7.4's own clients (tests/kagent-adk/
//! store_client.py): `KAgentSessionService`, `KAgentTaskStore` and the token service's request
//! hook, on one httpx client as the runtime builds it. It fails when tests/kagent-adk/.venv is
//! missing: `make test` (or `make peers`) makes it, and a test that did not run never reports
//! a pass.

use std::path::PathBuf;

use crate::harness::*;

/// Directory of the kagent-adk driver.
fn kadk_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kagent-adk")
}

#[tokio::test]
async fn kagent_adks_session_service_and_task_store_work_against_the_gate() {
    init();
    let python = kadk_dir().join(".venv/bin/python");
    assert!(
        kadk_dir().join(".venv/.installed").is_file() && python.is_file(),
        "tests/kagent-adk/.venv is missing: run `make test` (or `make peers`)"
    );
    let api = FakeApi::start().await;
    let mut cfg = config(vec![], 3600.0, 30.0);
    cfg.session_store = true;
    let gate = Gate::start(&cfg, &api).await;
    let out = tokio::process::Command::new(python)
        .arg("store_client.py")
        .arg(&gate.url)
        // The app name kagent-adk makes of KAGENT_NAMESPACE=team, KAGENT_NAME=agent-a.
        .arg("team__NS__agent_a")
        .current_dir(kadk_dir())
        .output()
        .await
        .expect("the kagent-adk driver runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.ends_with("all passed\n"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
