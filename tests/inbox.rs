//! `kubectl hitl ui` in a real headless browser (Debian's Chromium, driven by playwright-core
//! from tests/ui/inbox.mjs) against the fake apiserver: the list updates when a request
//! appears, Enter approves as the caller, Escape denies with the reason, a batch approves after
//! a confirmation, an RBAC refusal is shown with its fix, "Edit & approve" shows each changed
//! value before it approves with the reviewed patch (and says so without the `edit` right), and
//! hostile requests change nothing.
//! Then the writes the fake apiserver received are checked one by one.

use std::path::PathBuf;

use hitl_operator::cli::hitl::identity;
use hitl_operator::cli::hitl::inbox::{Inbox, Scope};
use hitl_test_kit::FakeApi;
use serde_json::{Value, json};

const NS: &str = "team-a";

fn ui_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ui")
}

/// The browser to drive: `CHROMIUM` or Debian's.
fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Fails the test unless the browser and its driver are installed: a test that could not run
/// must never count as passed. `.ci/run` installs both (`apt-get install chromium`,
/// `npm ci --prefix tests/ui`, which `make test` runs).
fn require_browser() {
    assert!(
        chromium().is_file(),
        "no Chromium at {}: install Debian's `chromium` package or set CHROMIUM",
        chromium().display()
    );
    assert!(
        ui_dir().join("node_modules/playwright-core").is_dir(),
        "tests/ui/node_modules is missing: run `make test` (or `npm ci --prefix tests/ui`)"
    );
}

fn at(minutes: i64) -> String {
    let t = jiff::Timestamp::now() + jiff::SignedDuration::from_mins(minutes);
    jiff::Timestamp::from_second(t.as_second())
        .unwrap()
        .to_string()
}

fn request(name: &str, agent: &str, tool: &str, path: &str, expires_in_minutes: i64) -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalRequest",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "agentRef": {"name": agent},
            "toolServer": {"kind": "RemoteMCPServer", "name": "fs", "namespace": NS},
            "toolName": tool,
            "argumentsPreview": {"path": path},
            "argumentsSha256": "a".repeat(64),
            "argumentsBytes": 30,
            "requestedBy": format!("system:serviceaccount:{NS}:{agent}"),
            "expiresAt": at(expires_in_minutes)
        }
    })
}

async fn seed(api: &FakeApi) {
    let http = reqwest::Client::new();
    let collection = format!(
        "{}/apis/kagent.dev/v1alpha2/namespaces/{NS}/approvalrequests",
        api.url
    );
    for r in [
        request("ops-apply-1", "ops", "kubectl_apply", "deploy.yaml", 20),
        request(
            "helper-delete-2",
            "helper",
            "delete_file",
            "/data/b.csv",
            30,
        ),
        request(
            "helper-delete-1",
            "helper",
            "delete_file",
            "/data/a.csv",
            40,
        ),
        request(
            "ops-forbidden",
            "ops-prod",
            "kubectl_apply",
            "prod.yaml",
            50,
        ),
        request("done-1", "helper", "delete_file", "/data/old.csv", 60),
        request(
            "cleaner-tidy-1",
            "cleaner",
            "delete_file",
            "/data/c.csv",
            70,
        ),
        request("locked-1", "locked", "delete_file", "/data/l.csv", 80),
    ] {
        let status = http
            .post(&collection)
            .json(&r)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 201);
    }
    api.decide("done-1", "Approve", "bob", "fine");
    let consumed =
        json!({"status": {"phase": "Executed", "consumedAt": at(0), "consumedBy": "helper-0"}});
    let status = http
        .patch(format!("{collection}/done-1/status"))
        .header("content-type", "application/merge-patch+json")
        .json(&consumed)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    api.forbid_decisions("ops-forbidden");
    api.forbid_edits("locked");
}

/// The decision bodies the fake apiserver received for request `name`.
fn decisions(api: &FakeApi, name: &str) -> Vec<Value> {
    writes(api, name)
        .iter()
        .map(|spec| spec["decision"].clone())
        .collect()
}

/// The `spec` of every write the fake apiserver received for request `name`.
fn writes(api: &FakeApi, name: &str) -> Vec<Value> {
    let path = format!("/apis/kagent.dev/v1alpha2/namespaces/{NS}/approvalrequests/{name}");
    api.requests()
        .into_iter()
        .filter(|(method, uri, _)| {
            method == "PATCH" && uri.starts_with(&path) && !uri.contains("/status")
        })
        .map(|(_, _, body)| serde_json::from_str::<Value>(&body).unwrap()["spec"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_sees_and_decides_in_a_headless_browser() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    require_browser();
    let api = FakeApi::start().await;
    seed(&api).await;
    let user = identity::username(&api.client()).await.unwrap();
    let inbox = Inbox::bind(api.client(), Scope::Namespace(NS.into()), user, 0)
        .await
        .unwrap();
    let url = inbox.url.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(inbox.serve(async {
        let _ = stopped.await;
    }));

    let screenshot = std::env::var("HITL_UI_SCREENSHOT").unwrap_or_default();
    let run = tokio::process::Command::new("node")
        .arg(ui_dir().join("inbox.mjs"))
        .args([url.as_str(), api.url.as_str(), NS, screenshot.as_str()])
        .env("CHROMIUM", chromium())
        .current_dir(ui_dir())
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .expect("the browser run finished within 2 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("ok - ").count(), 8, "{stdout}");
    let _ = stop.send(());
    server.await.unwrap().unwrap();

    // Each decision was written once, as alice, exactly as asked; the hostile requests and the
    // refused one wrote nothing else.
    let by_alice = |kind: &str| json!({"type": kind, "decidedBy": "alice"});
    assert_eq!(decisions(&api, "ops-apply-1"), [by_alice("Approve")]);
    let mut denial = by_alice("Deny");
    denial["reason"] = json!("not this one");
    assert_eq!(decisions(&api, "helper-delete-2"), [denial]);
    assert_eq!(decisions(&api, "helper-delete-1"), [by_alice("Approve")]);
    assert_eq!(decisions(&api, "new-call"), [by_alice("Approve")]);
    assert_eq!(
        decisions(&api, "ops-forbidden"),
        [by_alice("Approve")],
        "tried once, refused"
    );
    assert_eq!(decisions(&api, "done-1"), Vec::<Value>::new());
    // The edit was written once, with the patch the approver reviewed, as alice's edit and
    // approval of the edited call; the request alice may not edit got no write at all.
    let [edited] = writes(&api, "cleaner-tidy-1").try_into().unwrap();
    let mut decision = by_alice("Approve");
    decision["reason"] = json!("archive, not delete");
    assert_eq!(edited["decision"], decision);
    assert_eq!(edited["edit"]["editedBy"], "alice");
    assert_eq!(edited["edit"]["reason"], "archive, not delete");
    assert_eq!(edited["editApprovals"][0]["approvedBy"], "alice");
    let patch = hitl_operator::edit::parse(edited["edit"]["patch"].as_str().unwrap()).unwrap();
    assert_eq!(
        hitl_operator::edit::apply(&json!({"path": "/data/c.csv"}), &patch).unwrap(),
        json!({"path": "/data/archive/c.csv", "dryRun": true})
    );
    assert_eq!(writes(&api, "locked-1"), Vec::<Value>::new());
    let forbidden = api
        .objects()
        .into_iter()
        .find(|o| o["metadata"]["name"] == "ops-forbidden")
        .unwrap();
    assert!(forbidden["spec"].get("decision").is_none());
}

#[test]
fn the_page_is_served_with_its_script_and_style_only() {
    // The content security policy allows no inline script or style: the page must not need any.
    let page = include_str!("../src/cli/hitl/inbox/assets/index.html");
    assert!(
        !page.contains("<script>") && !page.contains("style="),
        "no inline script or style"
    );
    assert!(page.contains(r#"<script src="/inbox.js" defer>"#));
    let script = include_str!("../src/cli/hitl/inbox/assets/inbox.js");
    assert!(
        !script.contains("innerHTML"),
        "cluster text is never parsed as markup"
    );
}
