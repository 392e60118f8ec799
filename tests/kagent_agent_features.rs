//! kagent's Agent features beyond MCP tools (agents as tools, the controller-wide proxy,
//! skills, context compaction, prompt templates) and the approval gate: in Gate and Both
//! modes nothing here may give the runtime a way to a gated server that skips the gate.

use hitl_operator::api::ApprovalMode;
use hitl_operator::cli::render::{RenderReport, render_documents};
use hitl_operator::manifest::parse_documents;
use hitl_operator::render::RenderOptions;
use serde_json::Value;

const PROXY: &str = "http://proxy.kagent.svc.cluster.local:8080";

const BASE: &str = r#"
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: default-model-config, namespace: ns}
spec: {provider: OpenAI, model: gpt-4o, apiKeySecret: key, apiKeySecretKey: k}
---
apiVersion: v1
kind: Secret
metadata: {name: tok, namespace: ns}
stringData: {token: s3cret}
---
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: fs, namespace: ns}
spec:
  url: "http://fs.ns:3000/mcp"
  headersFrom: [{name: Authorization, valueFrom: {type: Secret, name: tok, key: token}}]
---
apiVersion: v1
kind: Service
metadata:
  name: svc
  namespace: ns
  annotations: {kagent.dev/mcp-service-port: "8084"}
spec: {ports: [{port: 8084}]}
---
apiVersion: kagent.dev/v1alpha1
kind: MCPServer
metadata: {name: kmcp, namespace: ns}
spec: {deployment: {port: 8085}}
"#;

fn agent(name: &str, body: &str) -> String {
    format!(
        "---\napiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  type: Declarative\n{}",
        body.lines().map(|l| format!("  {l}\n")).collect::<String>()
    )
}

const GATED_TOOLS: &str = r#"declarative:
  systemMessage: hi
  tools:
  - type: McpServer
    mcpServer: {name: fs, toolNames: [read_file, delete_file], requireApproval: [delete_file]}
  - type: McpServer
    mcpServer: {name: svc, kind: Service, toolNames: [drop], requireApproval: [drop]}
  - type: McpServer
    mcpServer: {name: kmcp, kind: MCPServer, toolNames: [wipe], requireApproval: [wipe]}
"#;

fn render(yaml: &str, mode: ApprovalMode, proxy: bool) -> RenderReport {
    let documents = parse_documents("t.yaml", yaml).unwrap();
    let options = RenderOptions {
        default_approval_mode: mode,
        proxy_url: proxy.then(|| PROXY.parse().unwrap()),
        ..RenderOptions::default()
    };
    render_documents(documents, "ns", &options)
}

fn secret_json(report: &RenderReport, agent: &str, key: &str) -> Option<Value> {
    let secret = report
        .objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == agent)?;
    let bytes: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"][key].clone()).ok()?;
    serde_json::from_slice(&bytes.0).ok()
}

fn deployment<'a>(report: &'a RenderReport, agent: &str) -> &'a Value {
    report
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == agent)
        .unwrap()
}

fn ok(report: &RenderReport) {
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
}

#[test]
fn with_a_proxy_gated_servers_are_still_reached_only_through_the_gate() {
    let yaml = format!("{BASE}{}", agent("a", GATED_TOOLS));
    for mode in [ApprovalMode::Gate, ApprovalMode::Both] {
        let report = render(&yaml, mode, true);
        ok(&report);
        let config = secret_json(&report, "a", "config.json").unwrap();
        let gate = secret_json(&report, "a", "gate.json").unwrap();
        let entries = config["http_tools"].as_array().unwrap();
        assert_eq!(entries.len(), 3);
        for entry in entries {
            let url = entry["params"]["url"].as_str().unwrap();
            assert!(
                url.starts_with("http://127.0.0.1:8099/servers/ns/"),
                "{mode:?}: config.json sends {url} around the gate"
            );
            assert!(
                entry["params"]["headers"]
                    .as_object()
                    .is_none_or(|h| h.is_empty()),
                "{mode:?}: no upstream or proxy header in config.json: {entry}"
            );
        }
        let text = serde_json::to_string(&config).unwrap();
        for leaked in [
            "proxy.kagent",
            "x-kagent-host",
            "s3cret",
            "fs.ns:3000",
            "svc.ns",
            "kmcp.ns",
        ] {
            assert!(
                !text.contains(leaked),
                "{mode:?}: config.json holds {leaked:?}"
            );
        }
        // The proxy is used on the gate's own leg only, with the upstream credentials.
        for server in gate["servers"].as_array().unwrap() {
            assert!(server["params"]["url"].as_str().unwrap().starts_with(PROXY));
            assert!(server["params"]["headers"]["x-kagent-host"].is_string());
            assert!(!server["require_approval"].as_array().unwrap().is_empty());
        }
        let fs = gate["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "fs")
            .unwrap();
        assert_eq!(fs["params"]["headers"]["Authorization"], "s3cret");
        assert_eq!(fs["params"]["headers"]["x-kagent-host"], "fs.ns");
    }
}

#[test]
fn the_proxy_header_is_no_credential_for_gate_isolation() {
    // Without headersFrom the agent container could call the server itself through the proxy
    // (it can send x-kagent-host as well as the gate): GateIsolated must say so.
    let yaml = format!("{BASE}{}", agent("a", GATED_TOOLS));
    let report = render(&yaml, ApprovalMode::Gate, true);
    ok(&report);
    let warning = report
        .warnings
        .iter()
        .find(|w| w.contains("GateIsolated=False"))
        .expect("the Service and MCPServer servers take calls without credentials");
    assert!(warning.contains("Service ns/svc") && warning.contains("MCPServer ns/kmcp"));
    assert!(!warning.contains("RemoteMCPServer ns/fs"), "{warning}");
}

#[test]
fn without_a_gate_the_proxy_is_used_as_kagent_uses_it() {
    let yaml = format!("{BASE}{}", agent("a", GATED_TOOLS));
    let report = render(&yaml, ApprovalMode::Runtime, true);
    ok(&report);
    let config = secret_json(&report, "a", "config.json").unwrap();
    for entry in config["http_tools"].as_array().unwrap() {
        assert_eq!(entry["params"]["url"], format!("{PROXY}/mcp"));
        assert!(!entry["require_approval"].as_array().unwrap().is_empty());
    }
    assert!(secret_json(&report, "a", "gate.json").is_none());
}

const CALLER: &str = r#"declarative:
  systemMessage: hi
  tools:
  - type: Agent
    agent: {name: worker}
    headersFrom: [{name: X-Team, value: blue}]
"#;

#[test]
fn an_agent_tool_reaches_the_other_agent_whose_own_gate_guards_its_tools() {
    let yaml = format!(
        "{BASE}{}{}",
        agent("worker", GATED_TOOLS),
        agent("boss", CALLER)
    );
    for proxy in [false, true] {
        let report = render(&yaml, ApprovalMode::Gate, proxy);
        ok(&report);
        let boss = secret_json(&report, "boss", "config.json").unwrap();
        let remote = &boss["remote_agents"][0];
        assert_eq!(remote["name"], "ns__NS__worker");
        assert_eq!(remote["headers"]["X-Team"], "blue");
        if proxy {
            assert_eq!(remote["url"], PROXY);
            assert_eq!(remote["headers"]["x-kagent-host"], "worker.ns");
        } else {
            assert_eq!(remote["url"], "http://worker.ns:8080");
        }
        // The caller gets no tool server of the worker, and no gate of its own for them.
        assert!(boss["http_tools"].is_null());
        // The worker's Service fronts its agent container, whose tools go through its gate.
        let worker = secret_json(&report, "worker", "config.json").unwrap();
        for entry in worker["http_tools"].as_array().unwrap() {
            assert!(
                entry["params"]["url"]
                    .as_str()
                    .unwrap()
                    .starts_with("http://127.0.0.1:8099/")
            );
        }
        let pod = &deployment(&report, "worker")["spec"]["template"]["spec"];
        assert_eq!(pod["initContainers"][0]["name"], "approval-gate");
    }
}

#[test]
fn a_gated_caller_is_warned_when_the_agent_it_calls_does_not_gate() {
    let worker = GATED_TOOLS.replace(
        "  systemMessage: hi\n",
        "  systemMessage: hi\n  approval: {mode: Runtime}\n",
    );
    let yaml = format!(
        "{BASE}{}{}",
        agent("worker", &worker),
        agent("boss", CALLER)
    );
    let report = render(&yaml, ApprovalMode::Gate, false);
    ok(&report);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("Agent ns/worker runs in approval mode Runtime")),
        "{:#?}",
        report.warnings
    );
}

#[test]
fn an_agent_tool_cannot_name_a_tool_server() {
    let caller = CALLER.replace("name: worker", "name: fs");
    let report = render(
        &format!("{BASE}{}", agent("boss", &caller)),
        ApprovalMode::Gate,
        false,
    );
    assert_eq!(
        report.problems,
        ["t.yaml: Agent ns/boss: spec.declarative.tools[0].agent: Agent ns/fs not found"]
    );
}

const SKILLS: &str = r#"skills:
  refs: [ghcr.io/org/oci-skill:v1.0]
  gitRefs: [{url: "https://github.com/org/my-skills", ref: v2, path: skills/k8s, name: k8s}]
  gitAuthSecretRef: {name: git-token}
declarative:
  systemMessage: hi
"#;

#[test]
fn skills_are_fetched_before_the_agent_and_privileged_only_without_a_gate() {
    let yaml = format!("{BASE}{}", agent("a", SKILLS));
    for (mode, privileged) in [
        (ApprovalMode::Runtime, true),
        (ApprovalMode::Gate, false),
        (ApprovalMode::Both, false),
    ] {
        let report = render(&yaml, mode, false);
        ok(&report);
        let pod = &deployment(&report, "a")["spec"]["template"]["spec"];
        let init = pod["initContainers"].as_array().unwrap();
        let fetch = init.last().unwrap();
        assert_eq!(fetch["name"], "skills-init");
        assert_eq!(
            fetch["image"],
            "cr.kagent.dev/kagent-dev/kagent/skills-init:0.7.4"
        );
        let args: Vec<&str> = fetch["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            &args[4..],
            [
                "git",
                "https://github.com/org/my-skills",
                "v2",
                "/skills/k8s",
                "skills/k8s",
                "oci",
                "ghcr.io/org/oci-skill:v1.0",
                "/skills/oci-skill"
            ]
        );
        let container = &pod["containers"][0];
        assert!(
            container["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "KAGENT_SKILLS_FOLDER" && e["value"] == "/skills")
        );
        assert_eq!(
            container["securityContext"]["privileged"]
                .as_bool()
                .unwrap_or(false),
            privileged,
            "{mode:?}"
        );
        assert!(
            pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"] == "git-auth" && v["secret"]["secretName"] == "git-token")
        );
        let warned = report.warnings.iter().any(|w| w.contains("spec.skills"));
        assert_eq!(warned, mode.uses_gate(), "{mode:?}");
    }
}

#[test]
fn prompt_templates_include_config_map_fragments_and_agent_variables() {
    let yaml = format!(
        "{BASE}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: prompts, namespace: ns}}\ndata: {{safety: \"Ask before deleting.\"}}\n{}",
        agent(
            "a",
            r#"description: Files
declarative:
  systemMessage: "{{include \"p/safety\"}} I am {{.AgentName}} ({{.Description}}); tools: {{range .ToolNames}}{{.}} {{end}}"
  promptTemplate:
    dataSources: [{kind: ConfigMap, name: prompts, alias: p}]
  tools:
  - type: McpServer
    mcpServer: {name: fs, toolNames: [read_file, delete_file], requireApproval: [delete_file]}
"#
        )
    );
    let report = render(&yaml, ApprovalMode::Gate, false);
    ok(&report);
    let config = secret_json(&report, "a", "config.json").unwrap();
    assert_eq!(
        config["instruction"],
        "Ask before deleting. I am a (Files); tools: read_file delete_file "
    );
}

#[test]
fn a_summarizer_on_another_model_brings_its_key_to_the_agent() {
    let yaml = format!(
        "{BASE}---\napiVersion: kagent.dev/v1alpha2\nkind: ModelConfig\nmetadata: {{name: small, namespace: ns}}\nspec: {{provider: Anthropic, model: claude-3-haiku, apiKeySecret: akey, apiKeySecretKey: k}}\n{}",
        agent(
            "a",
            "declarative:\n  systemMessage: hi\n  context:\n    compaction:\n      summarizer: {modelConfig: small}\n"
        )
    );
    let report = render(&yaml, ApprovalMode::Gate, false);
    ok(&report);
    let config = secret_json(&report, "a", "config.json").unwrap();
    let compaction = &config["context_config"]["compaction"];
    assert_eq!(compaction["compaction_interval"], 5, "the CRD default");
    assert_eq!(compaction["overlap_size"], 2, "the CRD default");
    assert_eq!(compaction["summarizer_model"]["type"], "anthropic");
    let env = deployment(&report, "a")["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        env.iter().any(|e| e["name"] == "ANTHROPIC_API_KEY"
            && e["valueFrom"]["secretKeyRef"]["name"] == "akey")
    );
    assert!(env.iter().any(|e| e["name"] == "OPENAI_API_KEY"));
}

#[test]
fn bad_agent_feature_input_is_refused_naming_the_field() {
    let cases = [
        (
            agent(
                "a",
                "declarative:\n  systemMessage: hi\n  tools:\n  - {type: Agent, agent: {name: a}}\n",
            ),
            "t.yaml: Agent ns/a: spec.declarative.tools[0].agent.name: Invalid value: \"a\": an agent cannot use itself as a tool",
        ),
        (
            format!(
                "{}{}",
                agent(
                    "b",
                    "declarative:\n  systemMessage: hi\n  tools:\n  - {type: Agent, agent: {name: a}}\n"
                ),
                agent(
                    "a",
                    "declarative:\n  systemMessage: hi\n  tools:\n  - {type: Agent, agent: {name: b}}\n"
                )
            ),
            "t.yaml: Agent ns/a: spec.declarative.tools[0].agent: Invalid value: agent tools form a cycle: ns/a -> ns/b -> ns/a",
        ),
        (
            format!(
                "---\napiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {{name: w, namespace: other}}\nspec: {{type: Declarative, declarative: {{systemMessage: hi}}}}\n{}",
                agent(
                    "a",
                    "declarative:\n  systemMessage: hi\n  tools:\n  - {type: Agent, agent: {name: w, namespace: other}}\n"
                )
            ),
            "t.yaml: Agent ns/a: spec.declarative.tools[0].agent.namespace: Forbidden: cross-namespace reference to Agent other/w is not allowed from namespace ns (its spec.allowedNamespaces is unset, which allows only its own namespace)",
        ),
        (
            agent(
                "a",
                "skills: {gitRefs: [{url: \"https://g/o/r\", path: ../../etc}]}\ndeclarative: {systemMessage: hi}\n",
            ),
            "t.yaml: Agent ns/a: spec.skills.gitRefs[0].path: Invalid value: \"../../etc\": must be a relative path without '..'",
        ),
        (
            agent(
                "a",
                "declarative:\n  systemMessage: \"{{include \\\"p/nope\\\"}}\"\n  promptTemplate: {dataSources: [{name: missing}]}\n",
            ),
            "t.yaml: Agent ns/a: spec.declarative.promptTemplate.dataSources[0]: ConfigMap ns/missing not found",
        ),
        (
            agent(
                "a",
                "declarative:\n  systemMessage: hi\n  context: {compaction: {summarizer: {modelConfig: nope}}}\n",
            ),
            "t.yaml: Agent ns/a: spec.declarative.context.compaction.summarizer.modelConfig: ModelConfig ns/nope not found",
        ),
        (
            format!(
                "---\napiVersion: kagent.dev/v1alpha1\nkind: MCPServer\nmetadata: {{name: k, namespace: ns}}\nspec: {{}}\n{}",
                agent(
                    "a",
                    "declarative:\n  systemMessage: hi\n  tools:\n  - {type: McpServer, mcpServer: {name: k, kind: MCPServer, toolNames: [t]}}\n"
                )
            ),
            "t.yaml: MCPServer ns/k: spec.deployment.port: Required value: the port of the MCP server is needed to reach it",
        ),
    ];
    for (yaml, expected) in cases {
        let report = render(&format!("{BASE}{yaml}"), ApprovalMode::Gate, false);
        assert!(
            report.problems.iter().any(|p| p == expected),
            "expected {expected:?} among {:#?}",
            report.problems
        );
    }
    let allowed = format!(
        "{BASE}---\napiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {{name: w, namespace: other}}\nspec: {{type: Declarative, allowedNamespaces: {{from: All}}, declarative: {{systemMessage: hi}}}}\n{}",
        agent(
            "a",
            "declarative:\n  systemMessage: hi\n  tools:\n  - {type: Agent, agent: {name: w, namespace: other}}\n"
        )
    );
    // The caller renders; only the called Agent lacks a ModelConfig in its own namespace.
    let report = render(&allowed, ApprovalMode::Gate, false);
    assert!(
        report
            .problems
            .iter()
            .all(|p| p.starts_with("t.yaml: Agent other/w:")),
        "{:#?}",
        report.problems
    );
    assert!(secret_json(&report, "a", "config.json").is_some());
}

#[test]
fn image_registry_and_service_account_config_apply_as_in_kagent() {
    let yaml = format!(
        "{BASE}{}",
        agent(
            "a",
            "declarative:\n  systemMessage: hi\n  deployment:\n    imageRegistry: mirror.example.com\n    serviceAccountConfig: {labels: {team: blue}, annotations: {iam.example.com/role: agent}}\n"
        )
    );
    let report = render(&yaml, ApprovalMode::Gate, false);
    ok(&report);
    let pod = &deployment(&report, "a")["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "mirror.example.com/kagent-dev/kagent/app:0.7.4"
    );
    let account = report
        .objects
        .iter()
        .find(|o| o["kind"] == "ServiceAccount" && o["metadata"]["name"] == "a")
        .unwrap();
    assert_eq!(account["metadata"]["labels"]["team"], "blue");
    assert_eq!(account["metadata"]["labels"]["kagent.dev/agent"], "a");
    assert_eq!(
        account["metadata"]["annotations"]["iam.example.com/role"],
        "agent"
    );
}
