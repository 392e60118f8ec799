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
