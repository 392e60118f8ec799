//! Golden files: what `render` produces for the examples, byte for byte. Review changes with
//! `cargo insta review` (or `INSTA_UPDATE=always cargo test --test render_golden`).

use std::path::Path;

use hitl_operator::api::ApprovalMode;
use hitl_operator::cli::render::{RenderReport, render_documents};
use hitl_operator::contract::gate_config::GateConfig;
use hitl_operator::gate::policy::{PolicyCall, PolicyVerdict, ServerPolicy};
use hitl_operator::manifest::{Document, parse_documents};
use hitl_operator::render::RenderOptions;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn documents(files: &[&str]) -> Vec<Document> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            parse_documents(file, &text).unwrap()
        })
        .collect()
}

fn decode(data: &Value) -> Vec<u8> {
    serde_json::from_value::<k8s_openapi::ByteString>(data.clone())
        .unwrap()
        .0
}

/// The rendered objects with the Secret's JSON files decoded in front, and the Secret's
/// (base64) values replaced by their SHA-256 so the snapshot stays readable.
fn golden(report: &RenderReport) -> String {
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
    let mut out = String::new();
    let mut objects = report.objects.clone();
    for object in &mut objects {
        if object["kind"] != "Secret" {
            continue;
        }
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let data = object["data"].as_object_mut().unwrap();
        for (key, value) in data.iter_mut() {
            let bytes = decode(value);
            let parsed: Value = serde_json::from_slice(&bytes).unwrap();
            out.push_str(&format!(
                "# {key} of Secret {name}\n{}\n",
                serde_json::to_string_pretty(&parsed).unwrap()
            ));
            *value = json!(format!("sha256:{}", hex::encode(Sha256::digest(&bytes))));
        }
    }
    for warning in &report.warnings {
        out.push_str(&format!("# warning: {warning}\n"));
    }
    out + &hitl_operator::cli::render::format_objects(
        &objects,
        hitl_operator::cli::render::Output::Yaml,
    )
}

fn render(files: &[&str], mode: ApprovalMode) -> String {
    let options = RenderOptions {
        default_approval_mode: mode,
        ..RenderOptions::default()
    };
    golden(&render_documents(documents(files), "default", &options))
}

#[test]
fn filesystem_agent_gates_delete_and_write() {
    insta::assert_snapshot!(render(
        &[
            "examples/model-openai.yaml",
            "examples/filesystem-agent.yaml"
        ],
        ApprovalMode::Gate
    ));
}

#[test]
fn filesystem_agent_in_runtime_mode_has_no_gate() {
    insta::assert_snapshot!(render(
        &[
            "examples/model-openai.yaml",
            "examples/filesystem-agent.yaml"
        ],
        ApprovalMode::Runtime
    ));
}

#[test]
fn same_tool_on_two_servers_is_gated_on_one_only() {
    insta::assert_snapshot!(render(
        &[
            "examples/model-openai.yaml",
            "examples/two-databases-agent.yaml"
        ],
        ApprovalMode::Gate
    ));
}

#[test]
fn service_backed_tool_server() {
    insta::assert_snapshot!(render(
        &[
            "examples/model-openai.yaml",
            "examples/service-tool-server.yaml"
        ],
        ApprovalMode::Gate
    ));
}

#[test]
fn sse_server_with_secret_headers_anthropic_and_both_mode() {
    insta::assert_snapshot!(render(
        &["examples/sse-payments-agent.yaml"],
        ApprovalMode::Gate
    ));
}

#[test]
fn approval_rules_go_to_the_gate_per_server() {
    insta::assert_snapshot!(render(
        &[
            "examples/model-openai.yaml",
            "examples/approval-rules-agent.yaml"
        ],
        ApprovalMode::Gate
    ));
}

/// What the gate does with the example's path rules, as rendered into gate.json: they compare
/// cleaned paths, so `..`, `.` and `//` walk a write neither into the Allow under /tmp/ nor a
/// delete out of the Deny under /etc/.
#[test]
fn the_example_path_rules_compare_cleaned_paths() {
    let report = render_documents(
        documents(&[
            "examples/model-openai.yaml",
            "examples/approval-rules-agent.yaml",
        ]),
        "default",
        &RenderOptions::default(),
    );
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let secret = report
        .objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "guarded-agent")
        .unwrap();
    let gate: GateConfig = serde_json::from_slice(&decode(&secret["data"]["gate.json"])).unwrap();
    let files = gate
        .servers
        .iter()
        .find(|s| s.name == "scratch-files")
        .unwrap();
    let policy = ServerPolicy::compile(&gate.agent, files).unwrap();
    let decide = |tool: &str, path: &str| {
        policy.decide(&PolicyCall {
            tool,
            args: &json!({ "path": path }),
            message_bytes: 100,
            session: None,
            annotations: hitl_operator::tool_risk::ToolFacts::unlisted(false),
        })
    };
    let asks = PolicyVerdict::RequireApproval {
        rule: None,
        required_approvals: 1,
        unevaluated: None,
    };
    for path in ["/tmp/../etc/x", "/tmp/./../etc", "//tmp/../etc"] {
        assert_eq!(decide("write_file", path), asks, "{path}: no rule matches");
    }
    assert_eq!(
        decide("write_file", "/tmp/a/../b"),
        PolicyVerdict::Forward {
            rule: Some("scratch-writes".into())
        }
    );
    for path in ["/tmp/../etc/passwd", "//etc/passwd", "/./etc/passwd"] {
        assert_eq!(
            decide("delete_file", path),
            PolicyVerdict::Deny {
                rule: "no-deletes-under-etc".into()
            },
            "{path}"
        );
    }
}

#[test]
fn rendering_is_byte_identical_across_runs() {
    let files = [
        "examples/model-openai.yaml",
        "examples/filesystem-agent.yaml",
        "examples/two-databases-agent.yaml",
        "examples/service-tool-server.yaml",
        "examples/sse-payments-agent.yaml",
        "examples/gateway-agent.yaml",
        "examples/tls-memory-agent.yaml",
        "examples/bedrock-agent.yaml",
        "examples/approval-rules-agent.yaml",
        "examples/toolgate.yaml",
    ];
    let options = RenderOptions::default();
    let first = render_documents(documents(&files), "default", &options);
    let second = render_documents(documents(&files), "default", &options);
    let format = hitl_operator::cli::render::Output::Json;
    assert_eq!(
        hitl_operator::cli::render::format_objects(&first.objects, format),
        hitl_operator::cli::render::format_objects(&second.objects, format)
    );
}

#[test]
fn a_tool_gate_runs_one_shared_gate_with_a_caller_policy() {
    insta::assert_snapshot!(render(&["examples/toolgate.yaml"], ApprovalMode::Gate));
}

#[test]
fn gateway_placement_runs_the_gate_behind_network_policies() {
    insta::assert_snapshot!(render(
        &["examples/model-openai.yaml", "examples/gateway-agent.yaml"],
        ApprovalMode::Gate
    ));
}

#[test]
fn tls_ca_and_memory_mount_only_into_the_agent_container() {
    let files = [
        "examples/model-openai.yaml",
        "examples/tls-memory-agent.yaml",
    ];
    let options = RenderOptions::default();
    let report = render_documents(documents(&files), "default", &options);
    let deployment = report
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let gate = &pod["initContainers"][0];
    assert_eq!(gate["name"], "approval-gate");
    assert!(
        !gate.to_string().contains("tls-ca-cert") && !gate.to_string().contains("OPENAI_API_KEY"),
        "the gate gets neither the CA nor the model key: {gate}"
    );
    insta::assert_snapshot!(render(&files, ApprovalMode::Gate));
}

#[test]
fn bedrock_credentials_come_from_the_aws_secret() {
    insta::assert_snapshot!(render(
        &["examples/bedrock-agent.yaml"],
        ApprovalMode::Runtime
    ));
}

/// Issue 59: no example asks for a way to the node, next to a gate in either placement: each renders
/// (nothing is refused next to a gate), no pod it renders reaches the node (the gate's own
/// included), and no verdict is AgentReachesNode.
#[test]
fn no_example_reaches_the_node() {
    use hitl_operator::api::GatePlacement;
    use hitl_operator::render::node_access;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| format!("examples/{}", path.file_name().unwrap().to_str().unwrap()))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    for mode in [ApprovalMode::Gate, ApprovalMode::Both] {
        for placement in [GatePlacement::Sidecar, GatePlacement::Gateway] {
            let options = RenderOptions {
                default_approval_mode: mode,
                default_placement: placement,
                ..RenderOptions::default()
            };
            let report = render_documents(documents(&files), "default", &options);
            assert!(
                report.problems.is_empty(),
                "{mode:?} {placement:?}: {:#?}",
                report.problems
            );
            assert!(
                !report
                    .warnings
                    .iter()
                    .any(|w| w.contains("AgentReachesNode")),
                "{:?}",
                report.warnings
            );
            let deployments: Vec<k8s_openapi::api::apps::v1::Deployment> = report
                .objects
                .iter()
                .filter(|o| o["kind"] == "Deployment")
                .map(|o| serde_json::from_value(o.clone()).unwrap())
                .collect();
            assert!(deployments.len() >= 8, "{mode:?} {placement:?}");
            for deployment in &deployments {
                assert_eq!(
                    node_access::deployment(deployment, None),
                    [],
                    "{mode:?} {placement:?}"
                );
            }
        }
    }
}
