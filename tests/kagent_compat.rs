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
    render_report_with(case, mode, None)
}

/// As [`render_report`], with the controller's `--kagent-url` set to `kagent_url`.
fn render_report_with(
    case: &Path,
    mode: ApprovalMode,
    kagent_url: Option<&str>,
) -> hitl_operator::cli::render::RenderReport {
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
        kagent_url: kagent_url.map(|url| url.parse().unwrap()),
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

// ------------------------------------------------------------------ the pod around config.json

/// kagent's controller address, as its translator renders `KAGENT_URL` in these cases.
const KAGENT_CONTROLLER_URL: &str = "http://kagent-controller.kagent:8083";

/// The Deployment of the case's agent (the last Agent, as in kagent's test).
fn agent_deployment(report: &hitl_operator::cli::render::RenderReport) -> Value {
    let agent = report
        .objects
        .iter()
        .rfind(|o| o["kind"] == "Secret" && o["data"].get("config.json").is_some())
        .expect("an agent Secret")["metadata"]["name"]
        .clone();
    report
        .objects
        .iter()
        .rfind(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == agent)
        .expect("the agent's Deployment")
        .clone()
}

/// What the agent container shows of one part (env, volumeMounts, args, ports, probe) and the
/// pod's volumes, in a form both renderers can be compared in: lists sorted by name where
/// order has no meaning, `protocol: TCP` (the apiserver's default) dropped, and the
/// differences docs/kagent.md lists as intended normalised away.
fn pod_view(deployment: &Value) -> Value {
    let pod = &deployment["spec"]["template"]["spec"];
    let container = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "agent" || c["name"] == "kagent")
        .expect("the agent container");
    let sorted = |value: &Value| {
        let mut items = value.as_array().cloned().unwrap_or_default();
        items.sort_by_key(|item| item["name"].as_str().unwrap_or_default().to_owned());
        Value::Array(items)
    };
    let mut mounts = sorted(&container["volumeMounts"]);
    for mount in mounts.as_array_mut().unwrap() {
        // Intended: every mount of ours is read-only; kagent leaves readOnly unset.
        mount.as_object_mut().unwrap().remove("readOnly");
    }
    let mounted: Vec<&Value> = mounts
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["name"])
        .collect();
    let mut volumes = sorted(&pod["volumes"]);
    // Only the agent container's volumes: the gate's are the gate sidecar's (intended).
    volumes
        .as_array_mut()
        .unwrap()
        .retain(|v| mounted.contains(&&v["name"]));
    for volume in volumes.as_array_mut().unwrap() {
        // Intended: of the agent's Secret the agent container gets config.json and
        // agent-card.json only (gate.json is in the same Secret); kagent mounts all of it.
        if let Some(secret) = volume["secret"].as_object_mut() {
            secret.remove("items");
            secret.remove("defaultMode");
        }
    }
    let mut env = sorted(&container["env"]);
    for var in env.as_array_mut().unwrap() {
        // `apiVersion: v1` of a fieldRef is the apiserver's default.
        if let Some(field) = var["valueFrom"]["fieldRef"].as_object_mut()
            && field.get("apiVersion").is_some_and(|v| v == "v1")
        {
            field.remove("apiVersion");
        }
    }
    let mut ports = container["ports"].clone();
    for port in ports.as_array_mut().into_iter().flatten() {
        port.as_object_mut()
            .unwrap()
            .retain(|k, v| !(k == "protocol" && v == "TCP"));
    }
    serde_json::json!({
        "args": container["args"],
        "command": container["command"],
        "env": env,
        "ports": ports,
        "readinessProbe": container["readinessProbe"],
        "livenessProbe": container["livenessProbe"],
        "startupProbe": container["startupProbe"],
        "volumeMounts": mounts,
        "volumes": volumes,
    })
}

/// Where the runtime keeps its sessions in a render: the `KAGENT_URL` and the audience of
/// the `kagent-token` volume it gets.
struct SessionApi {
    url: &'static str,
    audience: &'static str,
}

/// hitl-operator's session store (the default: no `--kagent-url`).
const STORE: SessionApi = SessionApi {
    url: "http://hitl-sessions.hitl-system.svc:8083",
    audience: "hitl-operator-sessions",
};

/// kagent's controller (`--kagent-url`), as kagent's translator renders it.
const KAGENT: SessionApi = SessionApi {
    url: KAGENT_CONTROLLER_URL,
    audience: "kagent",
};

/// The agent container's and pod's view ([`pod_view`]) with the session store's `KAGENT_URL`
/// and token audience, where they are, replaced by kagent's: the intended differences of the
/// default render (docs/kagent.md, "The pod around config.json"). Both must be there.
fn as_if_kagent_served_the_sessions(view: &mut Value) {
    let url = view["env"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["name"] == "KAGENT_URL")
        .expect("KAGENT_URL");
    assert_eq!(url["value"], STORE.url);
    url["value"] = Value::String(KAGENT.url.into());
    let token = view["volumes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|v| v["name"] == "kagent-token")
        .expect("the kagent-token volume");
    let audience = &mut token["projected"]["sources"][0]["serviceAccountToken"]["audience"];
    assert_eq!(*audience, STORE.audience);
    *audience = Value::String(KAGENT.audience.into());
}

/// Every case in every approval mode, with the session store (the default) and with
/// `--kagent-url` at kagent's controller: the agent container starts kagent's runtime as
/// kagent's translator does (the same args, port and probe), with the environment and files
/// the runtime reads at start: KAGENT_NAMESPACE, KAGENT_NAME, KAGENT_URL (the store's, or
/// kagent's controller) and the projected `kagent-token` at /var/run/secrets/tokens, of the
/// audience of whoever serves the sessions.
#[test]
fn the_agent_container_starts_the_runtime_as_kagent_does() {
    for case in cases() {
        for mode in [
            ApprovalMode::Runtime,
            ApprovalMode::Gate,
            ApprovalMode::Both,
        ] {
            for (api, kagent_url) in [(STORE, None), (KAGENT, Some(KAGENT_CONTROLLER_URL))] {
                let report = render_report_with(&case, mode, kagent_url);
                let deployment = agent_deployment(&report);
                let name = deployment["metadata"]["name"].as_str().unwrap().to_owned();
                let view = pod_view(&deployment);
                let at = format!("{} ({mode:?}, KAGENT_URL {})", case.display(), api.url);
                assert_eq!(
                    view["args"],
                    serde_json::json!([
                        "--host",
                        "0.0.0.0",
                        "--port",
                        "8080",
                        "--filepath",
                        "/config"
                    ]),
                    "{at}"
                );
                assert_eq!(
                    view["ports"],
                    serde_json::json!([{"name": "http", "containerPort": 8080}]),
                    "{at}"
                );
                assert_eq!(
                    view["readinessProbe"],
                    serde_json::json!({"httpGet": {"path": "/.well-known/agent-card.json", "port": "http"},
                        "initialDelaySeconds": 15, "periodSeconds": 15, "timeoutSeconds": 15}),
                    "{at}"
                );
                let env = |var: &str| {
                    view["env"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|e| e["name"] == var)
                        .cloned()
                        .unwrap_or_else(|| panic!("{at}: no {var}"))
                };
                assert_eq!(
                    env("KAGENT_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
                    "metadata.namespace",
                    "{at}"
                );
                assert_eq!(env("KAGENT_NAME")["value"], name.as_str(), "{at}");
                assert_eq!(env("KAGENT_URL")["value"], api.url, "{at}");
                let mount = |path: &str| {
                    view["volumeMounts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|m| m["mountPath"] == path)
                        .unwrap_or_else(|| panic!("{at}: nothing mounted at {path}"))["name"]
                        .clone()
                };
                assert_eq!(mount("/config"), "config", "{at}");
                assert_eq!(mount("/var/run/secrets/tokens"), "kagent-token", "{at}");
                let token = view["volumes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|v| v["name"] == "kagent-token")
                    .unwrap_or_else(|| panic!("{at}: no kagent-token volume"))
                    .clone();
                assert_eq!(
                    token["projected"]["sources"],
                    serde_json::json!([{"serviceAccountToken": {"audience": api.audience, "expirationSeconds": 3600, "path": "kagent-token"}}]),
                    "{at}"
                );
            }
        }
    }
}

/// The directory of kagent's translator outputs: `KAGENT_TRANSLATOR_OUTPUTS`, else
/// `../shared/compat/kagent/outputs` (kagent's
/// `go/internal/controller/translator/agent/testdata/outputs/NAME.json` at the commit of
/// `../shared/compat/kagent/`, its `SOURCE.md`).
fn translator_outputs() -> PathBuf {
    std::env::var_os("KAGENT_TRANSLATOR_OUTPUTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| compat_dir().join("outputs"))
}

/// Every case against kagent's own translator output ([`translator_outputs`]), in Runtime
/// mode: the agent container's env (names and sources), volumes and mounts, args, ports and
/// probes equal kagent's once the differences docs/kagent.md lists as intended are normalised
/// ([`pod_view`]) — with `--kagent-url` at kagent's controller, and by default (the session
/// store), where `KAGENT_URL` and the token's audience are the store's
/// ([`as_if_kagent_served_the_sessions`]).
#[test]
fn the_agent_container_equals_kagents_translator_output() {
    let outputs = translator_outputs();
    let mut differences = Vec::new();
    for case in cases() {
        let path = outputs.join(format!("{}.json", stem(&case)));
        let kagent: Value = serde_json::from_str(
            &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        let theirs = kagent["manifest"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .expect("kagent's Deployment");
        let theirs = pod_view(theirs);
        let with_kagent =
            render_report_with(&case, ApprovalMode::Runtime, Some(KAGENT_CONTROLLER_URL));
        let mut with_store = pod_view(&agent_deployment(&render_report_with(
            &case,
            ApprovalMode::Runtime,
            None,
        )));
        as_if_kagent_served_the_sessions(&mut with_store);
        for (how, ours) in [
            ("--kagent-url", pod_view(&agent_deployment(&with_kagent))),
            ("the session store", with_store),
        ] {
            for part in ours.as_object().unwrap().keys() {
                if ours[part] != theirs[part] {
                    differences.push(format!(
                        "{} {part} (with {how}):\n ours:   {}\n kagent: {}",
                        stem(&case),
                        ours[part],
                        theirs[part]
                    ));
                }
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// The runtime versions `make runtime-peers` installs (tests/kagent-runtime/.venv-VERSION).
const RUNTIME_VERSIONS: &[&str] = &["0.7.4", "0.10.4"];

/// Every case in every approval mode, and every example: kagent's runtime, in each pinned
/// version, loads the rendered config.json and agent-card.json with its own models and builds
/// the agent from them (tests/kagent-runtime/check_config.py), as `kagent-adk static` does at
/// start. Fails when the runtime is not installed (`make runtime-peers`).
#[test]
fn kagents_runtime_loads_every_rendered_config() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let mut reports: Vec<(String, hitl_operator::cli::render::RenderReport)> = Vec::new();
    for case in cases() {
        for mode in [
            ApprovalMode::Runtime,
            ApprovalMode::Gate,
            ApprovalMode::Both,
        ] {
            reports.push((
                format!("{}-{mode:?}", stem(&case)),
                render_report(&case, mode),
            ));
        }
    }
    let examples = hitl_operator::manifest::load(&[root.join("examples")], false).unwrap();
    reports.push((
        "examples".into(),
        render_documents(examples, "default", &RenderOptions::default()),
    ));
    let mut directories = Vec::new();
    for (name, report) in &reports {
        assert!(report.problems.is_empty(), "{name}: {:#?}", report.problems);
        for secret in report
            .objects
            .iter()
            .filter(|o| o["kind"] == "Secret" && o["data"].get("config.json").is_some())
        {
            let dir = work.path().join(format!(
                "{name}-{}-{}",
                secret["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default"),
                secret["metadata"]["name"].as_str().unwrap()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            for key in ["config.json", "agent-card.json"] {
                let bytes: k8s_openapi::ByteString =
                    serde_json::from_value(secret["data"][key].clone()).unwrap();
                std::fs::write(dir.join(key), bytes.0).unwrap();
            }
            directories.push(dir);
        }
    }
    assert!(directories.len() > 80, "{} configs", directories.len());
    for version in RUNTIME_VERSIONS {
        let python = root.join(format!("tests/kagent-runtime/.venv-{version}/bin/python"));
        assert!(
            python.exists(),
            "{}: kagent-adk {version} is not installed: make runtime-peers",
            python.display()
        );
        let output = std::process::Command::new(&python)
            .arg(root.join("tests/kagent-runtime/check_config.py"))
            .args(&directories)
            // The providers' clients read their keys when the agent is built; the pod has them
            // from the ModelConfig's Secret.
            .envs([
                ("OPENAI_API_KEY", "sk-test"),
                ("ANTHROPIC_API_KEY", "sk-ant-test"),
                ("GOOGLE_API_KEY", "test"),
                ("AZURE_OPENAI_API_KEY", "test"),
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut wrong = Vec::new();
        for directory in &directories {
            let line = stdout
                .lines()
                .find(|l| {
                    l.split_once(' ').is_some_and(|(_, rest)| {
                        rest.starts_with(&format!("{}:", directory.display()))
                    })
                })
                .unwrap_or("no answer");
            let model: Value =
                serde_json::from_slice(&std::fs::read(directory.join("config.json")).unwrap())
                    .unwrap();
            // kagent-adk before 0.7.9 does not know Bedrock; render warns about it
            // (render::runtime_version), and the runtime must indeed refuse it.
            let refused = *version == "0.7.4" && model["model"]["type"] == "bedrock";
            let as_expected = if refused {
                line.starts_with("FAIL ") && line.contains("'bedrock'")
            } else {
                line.starts_with("ok ")
            };
            if !as_expected {
                wrong.push(line.to_owned());
            }
        }
        assert!(
            wrong.is_empty(),
            "kagent-adk {version}:\n{}\n{}",
            wrong.join("\n"),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
