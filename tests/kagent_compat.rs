//! kagent compatibility: every case of `../shared/compat/kagent/` renders, in Runtime mode, to
//! the config.json kagent renders (keys whose value is null, "", [] or {} dropped on both
//! sides), and in Gate mode differs only as DESIGN.md §3 allows.

use std::path::{Path, PathBuf};

use hitl_operator::api::ApprovalMode;
use hitl_operator::cli::render::render_documents;
use hitl_operator::manifest::{Document, parse_documents};
use hitl_operator::render::RenderOptions;
use serde_json::Value;

fn compat_dir() -> PathBuf {
    std::env::var_os("KAGENT_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/compat/kagent"))
}

/// Cases kagent's test renders with its controller-wide proxy (their `proxyURL`), and that URL.
const PROXIED: &[&str] = &[
    "agent_with_proxy",
    "agent_with_proxy_external_remotemcp",
    "agent_with_proxy_mcpserver",
    "agent_with_proxy_mcpserver_custom_timeout",
    "agent_with_proxy_service",
];
const KAGENT_TEST_PROXY: &str = "http://proxy.kagent.svc.cluster.local:8080";

/// Every case of the shared directory.
fn cases() -> Vec<PathBuf> {
    let dir = compat_dir();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (set KAGENT_COMPAT_DIR)", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 26,
        "expected kagent's 26 cases in {}",
        dir.display()
    );
    cases
}

fn without_empty(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), without_empty(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_empty).collect()),
        other => other.clone(),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Numbers compared by value, so kagent's `30` equals our `30` whatever the JSON spelling.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

/// A key of the rendered Secret of the case's agent: the last Agent of the case, as in kagent's
/// test (the Agents before it are its tools).
fn secret_key(objects: &[Value], key: &str) -> Option<Value> {
    let secret = objects
        .iter()
        .rfind(|o| o["kind"] == "Secret" && o["data"].get("config.json").is_some())?;
    let encoded: Vec<u8> =
        serde_json::from_value::<k8s_openapi::ByteString>(secret["data"][key].clone())
            .ok()?
            .0;
    serde_json::from_slice(&encoded).ok()
}

fn stem(case: &Path) -> &str {
    case.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
}

/// The Namespaces kagent's test creates besides those of the objects: the `name.namespace`
/// hosts of RemoteMCPServer URLs (whether such a URL is in the cluster depends on them).
fn url_namespaces(documents: &[Document]) -> Vec<Document> {
    documents
        .iter()
        .filter(|d| d.kind() == "RemoteMCPServer")
        .filter_map(|d| d.value["spec"]["url"].as_str())
        .filter_map(|url| reqwest::Url::parse(url).ok()?.host_str().map(str::to_owned))
        .filter_map(|host| host.split('.').nth(1).map(str::to_owned))
        .map(|namespace| Document {
            file: "kagent-test-namespaces".into(),
            value: serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        })
        .collect()
}

/// kagent's test translates only the case's agent; the Agents it uses as tools are only read.
/// `render` renders every Agent it is given, so each tool Agent gets the case's ModelConfigs
/// (and their Secrets) in its own namespace when that namespace has none.
fn tool_agent_models(documents: &[Document]) -> Vec<Document> {
    let namespace_of = |d: &Document| d.value["metadata"]["namespace"].as_str().map(str::to_owned);
    let has_model = |ns: &str| {
        documents
            .iter()
            .any(|d| d.kind() == "ModelConfig" && namespace_of(d).as_deref() == Some(ns))
    };
    let needing: std::collections::BTreeSet<String> = documents
        .iter()
        .filter(|d| d.kind() == "Agent")
        .filter_map(namespace_of)
        .filter(|ns| !has_model(ns))
        .collect();
    needing
        .iter()
        .flat_map(|ns| {
            documents
                .iter()
                .filter(|d| matches!(d.kind(), "ModelConfig" | "Secret"))
                .map(move |d| {
                    let mut copy = d.clone();
                    copy.value["metadata"]["namespace"] = serde_json::json!(ns);
                    copy
                })
        })
        .collect()
}

fn render_report(case: &Path, mode: ApprovalMode) -> hitl_operator::cli::render::RenderReport {
    let text = std::fs::read_to_string(case).unwrap();
    let mut documents = parse_documents(&case.display().to_string(), &text).unwrap();
    let models = tool_agent_models(&documents);
    documents.extend(models);
    let proxied = PROXIED.contains(&stem(case));
    if proxied {
        documents.extend(url_namespaces(&documents));
    }
    let options = RenderOptions {
        default_approval_mode: mode,
        proxy_url: proxied.then(|| KAGENT_TEST_PROXY.parse().unwrap()),
        ..RenderOptions::default()
    };
    render_documents(documents, "default", &options)
}

fn render(case: &Path, mode: ApprovalMode) -> (Value, Option<Value>) {
    let report = render_report(case, mode);
    assert!(
        report.problems.is_empty(),
        "{}: {:#?}",
        case.display(),
        report.problems
    );
    (
        secret_key(&report.objects, "config.json").expect("config.json rendered"),
        secret_key(&report.objects, "gate.json"),
    )
}

#[test]
fn runtime_mode_config_equals_kagents() {
    for case in cases() {
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(case.with_extension("config.json")).unwrap(),
        )
        .unwrap();
        let (config, gate) = render(&case, ApprovalMode::Runtime);
        assert!(
            gate.is_none(),
            "{}: Runtime mode has no gate",
            case.display()
        );
        assert!(
            same(&without_empty(&config), &without_empty(&expected)),
            "{}:\n ours:   {}\n kagent: {}",
            case.display(),
            without_empty(&config),
            without_empty(&expected)
        );
    }
}

#[test]
fn gate_mode_differs_only_where_design_allows() {
    for case in cases() {
        let (runtime, _) = render(&case, ApprovalMode::Runtime);
        let (gated, gate) = render(&case, ApprovalMode::Gate);
        let gate = gate.expect("gate.json in Gate mode");
        let servers = gate["servers"].as_array().unwrap();
        let mut expected = runtime.clone();
        for list in ["http_tools", "sse_tools"] {
            let Some(entries) = expected[list].as_array_mut() else {
                continue;
            };
            for entry in entries {
                // Through a proxy, servers share a URL: the routing header tells them apart.
                let server = servers
                    .iter()
                    .find(|s| s["params"] == entry["params"])
                    .or_else(|| {
                        servers
                            .iter()
                            .find(|s| s["params"]["url"] == entry["params"]["url"])
                    })
                    .expect("every runtime server has a gate entry");
                // The upstream identity and credentials move to gate.json...
                assert_eq!(server["params"]["headers"], entry["params"]["headers"]);
                assert_eq!(server["tools"], entry["tools"]);
                let runtime_approval = entry
                    .get("require_approval")
                    .cloned()
                    .unwrap_or(Value::Array(vec![]));
                assert_eq!(server["require_approval"], runtime_approval);
                // ...and the runtime talks to the gate, without credentials or approvals.
                entry["params"]["url"] = Value::String(format!(
                    "http://127.0.0.1:8099/servers/{}/{}/mcp",
                    server["namespace"].as_str().unwrap(),
                    server["name"].as_str().unwrap()
                ));
                entry["params"]["headers"] = Value::Object(Default::default());
                entry.as_object_mut().unwrap().remove("require_approval");
                if !runtime_approval.as_array().unwrap().is_empty() {
                    // A gated server's timeouts are raised to outlast waitTimeout.
                    let wait = gate["approval"]["wait_timeout_seconds"].as_f64().unwrap();
                    let params = &mut entry["params"];
                    let timeout = params["timeout"].as_f64().unwrap_or(0.0);
                    params["timeout"] = serde_json::json!(timeout.max(wait + 10.0));
                    if let Some(read) = params["sse_read_timeout"].as_f64() {
                        params["sse_read_timeout"] = serde_json::json!(read.max(wait + 10.0));
                    }
                }
            }
        }
        assert!(
            same(&without_empty(&gated), &without_empty(&expected)),
            "{}:\n gate:     {}\n expected: {}",
            case.display(),
            without_empty(&gated),
            without_empty(&expected)
        );
    }
}
