//! What the renderer refuses, and how it says so: object, field and reason on one line.

use hitl_operator::cli::render::{RenderReport, render_documents};
use hitl_operator::manifest::parse_documents;
use hitl_operator::render::RenderOptions;
use serde_json::json;

const MODEL: &str = r#"
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: default-model-config, namespace: ns}
spec: {provider: OpenAI, model: gpt-4o, apiKeySecret: key, apiKeySecretKey: k}
"#;

const SERVER: &str = r#"
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: fs, namespace: ns}
spec: {url: "http://fs:3000/mcp"}
"#;

fn render(yaml: &str) -> RenderReport {
    let documents = parse_documents("t.yaml", yaml).unwrap();
    render_documents(documents, "ns", &RenderOptions::default())
}

fn agent(declarative: &str) -> String {
    format!(
        "apiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {{name: a, namespace: ns}}\nspec:\n  type: Declarative\n  declarative:\n{}",
        declarative
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    )
}

fn problems(yaml: &str) -> Vec<String> {
    let report = render(yaml);
    assert!(
        report.objects.is_empty(),
        "nothing is rendered when anything fails"
    );
    report.problems
}

#[test]
fn byo_agents_are_refused_clearly() {
    let yaml = "apiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {name: a, namespace: ns}\nspec: {type: BYO, byo: {}}\n";
    assert_eq!(
        problems(yaml),
        [
            "t.yaml: Agent ns/a: spec.type: Unsupported value: \"BYO\": hitl-operator runs Declarative agents only"
        ]
    );
}

#[test]
fn a_missing_model_config_is_named() {
    assert_eq!(
        problems(&agent("systemMessage: hi\nmodelConfig: gpt")),
        ["t.yaml: Agent ns/a: spec.declarative.modelConfig: ModelConfig ns/gpt not found"]
    );
}

#[test]
fn a_missing_secret_key_in_server_headers_is_named() {
    let yaml = format!(
        "{MODEL}---\n{}---\n{}",
        r#"
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: fs, namespace: ns}
spec:
  url: "http://fs:3000/mcp"
  headersFrom: [{name: Authorization, valueFrom: {type: Secret, name: tok, key: token}}]
---
apiVersion: v1
kind: Secret
metadata: {name: tok, namespace: ns}
stringData: {other: x}
"#,
        agent("tools: [{type: McpServer, mcpServer: {name: fs, toolNames: [t]}}]")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: RemoteMCPServer ns/fs: spec.headersFrom[0]: Secret ns/tok key \"token\" not found"
        ]
    );
}

#[test]
fn system_message_from_a_config_map() {
    let yaml = format!(
        "{MODEL}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: prompts, namespace: ns}}\ndata: {{main: Be careful.}}\n---\n{}",
        agent("systemMessageFrom: {type: ConfigMap, name: prompts, key: main}")
    );
    let report = render(&yaml);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let missing_key = yaml.replace("key: main", "key: other");
    assert_eq!(
        problems(&missing_key),
        [
            "t.yaml: Agent ns/a: spec.declarative.systemMessageFrom: ConfigMap ns/prompts key \"other\" not found"
        ]
    );
}

#[test]
fn the_same_server_twice_is_refused() {
    let yaml = format!(
        "{MODEL}---\n{SERVER}---\n{}",
        agent(
            "tools:\n- {type: McpServer, mcpServer: {name: fs, toolNames: [a]}}\n- {type: McpServer, mcpServer: {name: fs, toolNames: [b], requireApproval: [b]}}"
        )
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.tools[1].mcpServer.name: Duplicate value: \"fs\": RemoteMCPServer ns/fs is already listed; put all of its tools in one entry"
        ]
    );
}

#[test]
fn api_group_must_match_the_kind() {
    let yaml = format!(
        "{MODEL}---\n{SERVER}---\n{}",
        agent("tools: [{type: McpServer, mcpServer: {name: fs, apiGroup: apps, toolNames: [a]}}]")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.tools[0].mcpServer.apiGroup: Unsupported value: \"apps\": kind RemoteMCPServer belongs to API group \"kagent.dev\""
        ]
    );
}

#[test]
fn wait_timeout_cannot_exceed_timeout() {
    let yaml = format!(
        "{MODEL}---\n{}",
        agent("approval: {timeout: 1m, waitTimeout: 2m}")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.waitTimeout: Invalid value: \"2m\": must not exceed timeout (\"1m\")"
        ]
    );
}

#[test]
fn a_service_without_an_mcp_port_is_refused() {
    let yaml = format!(
        "{MODEL}---\napiVersion: v1\nkind: Service\nmetadata: {{name: svc, namespace: ns}}\nspec: {{ports: [{{name: a, port: 1}}, {{name: b, port: 2}}]}}\n---\n{}",
        agent("tools: [{type: McpServer, mcpServer: {kind: Service, name: svc, toolNames: [t]}}]")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Service ns/svc: spec.ports: Required value: no MCP port: set annotation kagent.dev/mcp-service-port, expose a single port, or mark one with appProtocol: mcp"
        ]
    );
}

#[test]
fn a_custom_service_account_is_bound_not_created() {
    let yaml = format!(
        "{MODEL}---\n{SERVER}---\n{}",
        agent(
            "deployment: {serviceAccountName: custom}\ntools: [{type: McpServer, mcpServer: {name: fs, toolNames: [rm], requireApproval: [rm]}}]"
        )
    );
    let report = render(&yaml);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(!report.objects.iter().any(|o| o["kind"] == "ServiceAccount"));
    let binding = report
        .objects
        .iter()
        .find(|o| o["kind"] == "RoleBinding")
        .unwrap();
    assert_eq!(binding["subjects"][0]["name"], "custom");
    let deployment = report
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "custom"
    );
}

#[test]
fn kagent_kinds_we_do_not_serve_are_refused() {
    let yaml = "apiVersion: kagent.dev/v1alpha1\nkind: ToolServer\nmetadata: {name: m, namespace: ns}\nspec: {}\n";
    assert_eq!(
        problems(yaml),
        [
            "t.yaml: ToolServer ns/m: apiVersion \"kagent.dev/v1alpha1\" kind \"ToolServer\" is not served by hitl-operator (it serves Agent, ToolGate, RemoteMCPServer, ModelConfig, ApprovalRequest, ApprovalNotifier and ApprovalGrant in kagent.dev/v1alpha2)"
        ]
    );
}

#[test]
fn only_the_gate_sees_credentials_and_a_token() {
    let yaml = format!(
        "{MODEL}---\n{SERVER}---\n{}",
        agent(
            "tools: [{type: McpServer, mcpServer: {name: fs, toolNames: [rm], requireApproval: [rm]}}]"
        )
    );
    let report = render(&yaml);
    let deployment = report
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    let agent_mounts = pod["containers"][0]["volumeMounts"].to_string();
    assert!(!agent_mounts.contains("gate-config") && !agent_mounts.contains("gate-token"));
    let gate = &pod["initContainers"][0];
    assert_eq!(gate["restartPolicy"], "Always");
    assert_eq!(gate["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(gate["securityContext"]["runAsNonRoot"], true);
    let gate_mounts = gate["volumeMounts"].to_string();
    assert!(
        gate_mounts.contains("gate-config")
            && gate_mounts.contains("/var/run/secrets/kubernetes.io/serviceaccount")
    );
    let config_volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .unwrap();
    assert!(!config_volume.to_string().contains("gate.json"));
    let env = pod["containers"][0]["env"].to_string();
    assert!(env.contains("OPENAI_API_KEY") && env.contains("secretKeyRef"));
}

#[test]
fn the_agent_container_may_not_mount_the_gates_volumes() {
    let tools =
        "tools: [{type: McpServer, mcpServer: {name: fs, toolNames: [rm], requireApproval: [rm]}}]";
    let deployment = |volumes: &str, mounts: &str| {
        format!(
            "{MODEL}---\n{SERVER}---\n{}",
            agent(&format!(
                "{tools}\ndeployment:\n  volumes: [{{name: scratch, emptyDir: {{}}}}{volumes}]\n  volumeMounts: [{{name: scratch, mountPath: /scratch}}{mounts}]"
            ))
        )
    };
    assert_eq!(
        problems(&deployment("", ", {name: gate-config, mountPath: /leak}")),
        [
            "t.yaml: Agent ns/a: spec.declarative.deployment.volumeMounts[1].name: Forbidden: \"gate-config\" is the approval gate's volume; the agent container may not mount it"
        ]
    );
    assert_eq!(
        problems(&deployment(", {name: gate-token, emptyDir: {}}", "")),
        [
            "t.yaml: Agent ns/a: spec.declarative.deployment.volumes[1].name: Forbidden: \"gate-token\" is the approval gate's volume; the agent container may not mount it"
        ]
    );
    // Another name for the Secret holding gate.json is the same volume.
    assert_eq!(
        problems(&deployment(
            ", {name: copy, secret: {secretName: a}}",
            ", {name: copy, mountPath: /leak}"
        )),
        [
            "t.yaml: Agent ns/a: spec.declarative.deployment.volumes[1].secret.secretName: Forbidden: Secret \"a\" is the approval gate's (its volume \"gate-config\"); the agent container may not mount it"
        ]
    );
    // Without a gate (Runtime mode) the names are free.
    let runtime = deployment("", ", {name: gate-config, mountPath: /x}")
        .replace("deployment:", "approval: {mode: Runtime}\n    deployment:");
    let report = render(&runtime);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// Issue 41: nor may it read them another way: an environment variable of the Agent's, or a
/// ModelConfig's key Secret or TLS CA Secret that is the Agent's gate Secret.
#[test]
fn the_agent_container_may_not_read_the_gates_secrets() {
    let tools =
        "tools: [{type: McpServer, mcpServer: {name: fs, toolNames: [rm], requireApproval: [rm]}}]";
    let with_env = |env: &str| {
        format!(
            "{MODEL}---\n{SERVER}---\n{}",
            agent(&format!("{tools}\ndeployment:\n  env: [{env}]"))
        )
    };
    assert_eq!(
        problems(&with_env(
            "{name: LEAK, valueFrom: {secretKeyRef: {name: a, key: gate.json}}}"
        )),
        [
            "t.yaml: Agent ns/a: spec.declarative.deployment.env[0].valueFrom.secretKeyRef: Forbidden: key \"gate.json\" of Secret \"a\" is the approval gate's (its volume \"gate-config\"); the agent container may not read it"
        ]
    );
    assert_eq!(
        problems(&with_env(
            "{name: OK, value: x}, {name: KEY, valueFrom: {secretKeyRef: {name: a-binding-key, key: key}}}"
        )),
        [
            "t.yaml: Agent ns/a: spec.declarative.deployment.env[1].valueFrom.secretKeyRef: Forbidden: key \"key\" of Secret \"a-binding-key\" is the approval gate's (its volume \"binding-key\"); the agent container may not read it"
        ]
    );
    // The Agent's Secret also holds config.json, which is the agent's to read.
    let own = render(&with_env(
        "{name: CONFIG, valueFrom: {secretKeyRef: {name: a, key: config.json}}}",
    ));
    assert!(own.problems.is_empty(), "{:?}", own.problems);

    let with_model = |spec: &str| {
        format!(
            "apiVersion: kagent.dev/v1alpha2\nkind: ModelConfig\nmetadata: {{name: default-model-config, namespace: ns}}\nspec: {spec}\n---\n{SERVER}---\n{}",
            agent(tools)
        )
    };
    assert_eq!(
        problems(&with_model(
            "{provider: OpenAI, model: gpt-4o, apiKeySecret: a, apiKeySecretKey: gate.json}"
        )),
        [
            "t.yaml: Agent ns/a: spec.declarative.modelConfig: Forbidden: key \"gate.json\" of Secret \"a\" is the approval gate's (its volume \"gate-config\"); the agent container may not read it"
        ]
    );
    assert_eq!(
        problems(&with_model(
            "{provider: OpenAI, model: gpt-4o, apiKeySecret: key, apiKeySecretKey: k, tls: {caCertSecretRef: a-binding-key, caCertSecretKey: key}}"
        )),
        [
            "t.yaml: Agent ns/a: spec.declarative.modelConfig: Forbidden: Secret \"a-binding-key\" is the approval gate's (its volume \"binding-key\"); the agent container may not read it"
        ]
    );
}

#[test]
fn gateway_placement_needs_a_gate() {
    let tools =
        "tools: [{type: McpServer, mcpServer: {name: fs, toolNames: [rm], requireApproval: [rm]}}]";
    let yaml = format!(
        "{MODEL}---\n{SERVER}---\n{}",
        agent(&format!(
            "{tools}\napproval: {{mode: Runtime, placement: Gateway}}"
        ))
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.placement: Invalid value: \"Gateway\": approval mode Runtime runs no gate to place; use mode Gate or Both, or remove placement"
        ]
    );
    // The same when Runtime is the operator's default rather than the Agent's choice.
    let yaml = format!(
        "{MODEL}---\n{SERVER}---\n{}",
        agent(&format!("{tools}\napproval: {{placement: Gateway}}"))
    );
    let options = RenderOptions {
        default_approval_mode: hitl_operator::api::ApprovalMode::Runtime,
        ..RenderOptions::default()
    };
    let report = render_documents(parse_documents("t.yaml", &yaml).unwrap(), "ns", &options);
    assert!(report.objects.is_empty());
    assert_eq!(
        report.problems,
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.placement: Invalid value: \"Gateway\": approval mode Runtime (the operator's default) runs no gate to place; use mode Gate or Both, or remove placement"
        ]
    );
}

#[test]
fn the_gate_pod_label_is_reserved() {
    let yaml = format!(
        "{MODEL}---\n{}",
        agent("deployment: {labels: {kagent.dev/approval-gate: other}}")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.deployment.labels: Forbidden: \"kagent.dev/approval-gate\" is reserved for the approval gate's pods"
        ]
    );
}

#[test]
fn in_gateway_placement_only_the_gate_pods_hold_the_token_and_the_rights() {
    let yaml = format!(
        "{MODEL}---\n{SERVER}---\n{}",
        agent(
            "tools: [{type: McpServer, mcpServer: {name: fs, toolNames: [rm], requireApproval: [rm]}}]\napproval: {placement: Gateway}"
        )
    );
    let report = render(&yaml);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let find = |kind: &str, name: &str| {
        report
            .objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} rendered"))
    };
    let agent_pod = &find("Deployment", "a")["spec"]["template"];
    assert!(agent_pod["spec"].get("initContainers").is_none());
    assert!(!agent_pod.to_string().contains("gate-token"));
    let gate = &find("Deployment", "a-gate")["spec"];
    let gate_labels = gate["template"]["metadata"]["labels"].as_object().unwrap();
    assert!(!gate_labels.contains_key("kagent.dev/agent"));
    assert_eq!(gate_labels["kagent.dev/approval-gate"], "a");
    assert_eq!(
        gate["selector"]["matchLabels"],
        json!({"kagent.dev/approval-gate": "a"})
    );
    assert_eq!(gate["template"]["spec"]["serviceAccountName"], "a-gate");
    let container = &gate["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "approval-gate");
    assert!(container.get("restartPolicy").is_none());
    assert_eq!(
        find("RoleBinding", "a-approval-gate")["subjects"],
        json!([{"kind": "ServiceAccount", "name": "a-gate", "namespace": "ns"}])
    );
    assert_eq!(
        find("Service", "a-gate")["spec"]["sessionAffinity"],
        "ClientIP"
    );
    find("ServiceAccount", "a-gate");
    find("NetworkPolicy", "a-gate");
    find("NetworkPolicy", "a-egress");
}

#[test]
fn the_operators_default_placement_applies_to_agents_that_set_none() {
    let tools =
        "tools: [{type: McpServer, mcpServer: {name: fs, toolNames: [rm], requireApproval: [rm]}}]";
    let gateway = RenderOptions {
        default_placement: hitl_operator::api::GatePlacement::Gateway,
        ..RenderOptions::default()
    };
    let rendered = |approval: &str| {
        let yaml = format!(
            "{MODEL}---\n{SERVER}---\n{}",
            agent(&format!("{tools}\napproval: {approval}"))
        );
        let report = render_documents(parse_documents("t.yaml", &yaml).unwrap(), "ns", &gateway);
        assert!(
            report.problems.is_empty(),
            "{approval}: {:?}",
            report.problems
        );
        let has = |kind: &str, name: &str| {
            report
                .objects
                .iter()
                .any(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        };
        let sidecar = report
            .objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "a")
            .unwrap()["spec"]["template"]["spec"]
            .get("initContainers")
            .is_some();
        (
            has("Deployment", "a-gate"),
            has("NetworkPolicy", "a-egress"),
            sidecar,
        )
    };
    // No placement of its own: the operator's Gateway, with its NetworkPolicies.
    assert_eq!(rendered("{}"), (true, true, false));
    // The Agent's own choice wins.
    assert_eq!(rendered("{placement: Sidecar}"), (false, false, true));
    // No gate runs in mode Runtime: the default has nothing to place, and is no error.
    assert_eq!(rendered("{mode: Runtime}"), (false, false, false));
}

/// An Agent in `ns` using RemoteMCPServer `tools/shared`, which says `allowed` (YAML flow).
fn cross_namespace(allowed: &str) -> String {
    let allowed = if allowed.is_empty() {
        String::new()
    } else {
        format!(", allowedNamespaces: {allowed}")
    };
    format!(
        "{MODEL}---\napiVersion: kagent.dev/v1alpha2\nkind: RemoteMCPServer\nmetadata: {{name: shared, namespace: tools}}\nspec: {{url: \"http://shared.tools.svc:8080/mcp\"{allowed}}}\n---\n{}",
        agent(
            "systemMessage: hi\ntools:\n  - type: McpServer\n    mcpServer: {name: shared, namespace: tools, toolNames: [list]}"
        )
    )
}

#[test]
fn a_tool_server_in_another_namespace_must_allow_the_agents_namespace() {
    let refused = |why: &str| {
        vec![format!(
            "t.yaml: Agent ns/a: spec.declarative.tools[0].mcpServer.namespace: Forbidden: cross-namespace reference to RemoteMCPServer tools/shared is not allowed from namespace ns{why}"
        )]
    };
    // Unset or Same: only the server's own namespace (kagent's default).
    assert_eq!(
        problems(&cross_namespace("")),
        refused(" (its spec.allowedNamespaces is unset, which allows only its own namespace)")
    );
    assert_eq!(
        problems(&cross_namespace("{from: Same}")),
        refused(" (its spec.allowedNamespaces does not include it)")
    );
    // All: allowed, and the server's headers reach only gate.json.
    let report = render(&cross_namespace("{from: All}"));
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(!report.objects.is_empty());
    // Selector: the Agent's namespace's labels decide. Offline, a namespace the input names
    // but holds no Namespace document for has no labels.
    let selector = "{from: Selector, selector: {matchLabels: {team: tools-users}}}";
    assert_eq!(
        problems(&cross_namespace(selector)),
        refused(" (its spec.allowedNamespaces does not include it)")
    );
    let namespace = |labels: &str| {
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns, labels: {labels}}}\n---\n")
    };
    let matching = format!(
        "{}{}",
        namespace("{team: tools-users}"),
        cross_namespace(selector)
    );
    assert!(render(&matching).problems.is_empty());
    let other = format!(
        "{}{}",
        namespace("{team: billing}"),
        cross_namespace(selector)
    );
    assert_eq!(
        problems(&other),
        refused(" (its spec.allowedNamespaces does not include it)")
    );
}

#[test]
fn a_service_in_another_namespace_is_refused() {
    let yaml = format!(
        "{MODEL}---\n{}",
        agent(
            "systemMessage: hi\ntools:\n  - type: McpServer\n    mcpServer: {kind: Service, apiGroup: \"\", name: fs, namespace: tools, toolNames: [list]}"
        )
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.tools[0].mcpServer.namespace: Forbidden: cross-namespace reference to Service tools/fs is not allowed from namespace ns: Service does not support cross-namespace references (use a RemoteMCPServer with spec.allowedNamespaces)"
        ]
    );
}

#[test]
fn allowed_namespaces_from_selector_needs_a_selector() {
    let yaml = "apiVersion: kagent.dev/v1alpha2\nkind: RemoteMCPServer\nmetadata: {name: shared, namespace: tools}\nspec: {url: \"http://x:1/mcp\", allowedNamespaces: {from: Selector}}\n";
    let problems = render(yaml).problems;
    assert!(
        problems
            .iter()
            .any(|p| p.contains("spec.allowedNamespaces: Invalid value")
                && p.contains("selector must be specified when from is Selector")),
        "{problems:?}"
    );
}

/// A ModelConfig named `default-model-config` in `ns` with the given spec (flow YAML).
fn model(spec: &str) -> String {
    format!(
        "apiVersion: kagent.dev/v1alpha2\nkind: ModelConfig\nmetadata: {{name: default-model-config, namespace: ns}}\nspec: {spec}\n"
    )
}

#[test]
fn a_decimal_parameter_that_is_no_number_is_named() {
    let yaml = format!(
        "{}---\n{}",
        model("{provider: OpenAI, model: gpt-4o, openAI: {temperature: hot}}"),
        agent("systemMessage: hi")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: ModelConfig ns/default-model-config: spec.openAI.temperature: Invalid value: \"hot\": must be a finite decimal number"
        ]
    );
}

#[test]
fn a_provider_without_its_block_is_named() {
    let yaml = format!(
        "{}---\n{}",
        model("{provider: AzureOpenAI, model: gpt-4o}"),
        agent("systemMessage: hi")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: ModelConfig ns/default-model-config: spec.azureOpenAI: Required value: azureOpenAI is required when provider is AzureOpenAI"
        ]
    );
}

#[test]
fn bedrock_credentials_must_be_in_the_secret() {
    let bedrock = model(
        "{provider: Bedrock, model: claude, apiKeySecret: aws, bedrock: {region: us-east-1}}",
    );
    let yaml = format!("{bedrock}---\n{}", agent("systemMessage: hi"));
    assert_eq!(
        problems(&yaml),
        ["t.yaml: ModelConfig ns/default-model-config: spec.apiKeySecret: Secret ns/aws not found"]
    );
    let yaml = format!(
        "{bedrock}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: aws, namespace: ns}}\nstringData: {{AWS_ACCESS_KEY_ID: x}}\n---\n{}",
        agent("systemMessage: hi")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: ModelConfig ns/default-model-config: spec.apiKeySecret: Secret ns/aws key \"AWS_SECRET_ACCESS_KEY\" (or key \"AWS_BEARER_TOKEN_BEDROCK\") not found"
        ]
    );
}

#[test]
fn tls_ca_without_its_key_is_refused_as_the_apiserver_would() {
    let yaml = format!(
        "{}---\n{}",
        model("{provider: OpenAI, model: gpt-4o, tls: {caCertSecretRef: corp-ca}}"),
        agent("systemMessage: hi")
    );
    assert_eq!(
        problems(&yaml)[0],
        "t.yaml: The ModelConfig \"default-model-config\" is invalid: spec: Invalid value: caCertSecretRef requires caCertSecretKey (unless disableVerify is true)"
    );
}

#[test]
fn memory_names_its_model_config() {
    let yaml = format!(
        "{MODEL}---\n{}",
        agent("systemMessage: hi\nmemory: {modelConfig: embeddings}")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.memory.modelConfig: ModelConfig ns/embeddings not found"
        ]
    );
}

#[test]
fn memory_with_a_different_key_for_the_same_variable_is_refused() {
    let embeddings = "apiVersion: kagent.dev/v1alpha2\nkind: ModelConfig\nmetadata: {name: embeddings, namespace: ns}\nspec: {provider: OpenAI, model: text-embedding-3-small, apiKeySecret: other, apiKeySecretKey: k}\n";
    let yaml = format!(
        "{MODEL}---\n{embeddings}---\n{}",
        agent("systemMessage: hi\nmemory: {modelConfig: embeddings}")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.memory.modelConfig: Invalid value: environment variable OPENAI_API_KEY is needed with a different value by the agent's own ModelConfig; the runtime has one of each"
        ]
    );
}

/// An Agent on server `fs` (toolNames read_file, write_file) with `rules` (YAML list items).
fn ruled(rules: &str) -> String {
    let rules: String = rules.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "{MODEL}---{SERVER}---\n{}",
        agent(&format!(
            "systemMessage: hi\ntools:\n- type: McpServer\n  mcpServer: {{name: fs, toolNames: [read_file, write_file]}}\napproval:\n  rules:\n{rules}"
        ))
    )
}

#[test]
fn approval_rules_must_name_the_agents_servers_and_tools() {
    assert_eq!(
        problems(&ruled(
            "- {name: r, server: db, tool: read_file, action: Allow}"
        )),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.rules[0].server: Invalid value: \"db\": no tool server in spec.declarative.tools has this name"
        ]
    );
    assert_eq!(
        problems(&ruled(
            "- {name: r, tool: read_file, action: Allow}\n- {name: s, server: fs, tool: delete_file, action: Deny}"
        )),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.rules[1].tool: Invalid value: \"delete_file\": must appear in the toolNames of server \"fs\""
        ]
    );
    assert_eq!(
        problems(&ruled("- {name: r, tool: exec, action: Allow}")),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.rules[0].tool: Invalid value: \"exec\": must appear in the toolNames of a tool server"
        ]
    );
}

#[test]
fn approval_rule_conditions_are_compiled_with_their_bounds() {
    let problem = |when: &str| {
        problems(&ruled(&format!(
            "- {{name: r, tool: write_file, action: Allow, when: {when:?}}}"
        )))
    };
    assert_eq!(
        problem("args.path.startsWith("),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.rules[0].when: Invalid value: \"args.path.startsWith(\": CEL: 1:22: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', ')', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"
        ]
    );
    assert_eq!(
        problem("path.startsWith('/tmp/')"),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.rules[0].when: Invalid value: \"path.startsWith('/tmp/')\": undeclared reference to 'path': a condition can use args, agent, namespace, server, tool, session, annotations"
        ]
    );
    let nested = problem("args.paths.all(p, args.allowed.exists(a, p.startsWith(a)))");
    assert!(
        nested[0].contains("rules[0].when: Invalid value:")
            && nested[0].contains("inside the body of another one is not allowed"),
        "{nested:?}"
    );
    let long = problem(&format!("args.path == '{}'", "x".repeat(2048)));
    assert_eq!(
        long,
        [
            "t.yaml: The Agent \"a\" is invalid: spec.declarative.approval.rules[0].when: Too long: may not be more than 2048 bytes"
        ]
    );
}

#[test]
fn approval_rule_names_are_unique_and_quorum_is_bounded() {
    assert_eq!(
        problems(&ruled(
            "- {name: r, tool: read_file, action: Allow}\n- {name: r, tool: write_file, action: Deny}"
        )),
        [
            "t.yaml: The Agent \"a\" is invalid: spec.declarative.approval.rules[1]: Duplicate value: {\"name\":\"r\"}"
        ]
    );
    let five = render(&ruled(
        "- {name: r, tool: read_file, action: RequireApproval, requiredApprovals: 5}",
    ));
    assert!(five.problems.is_empty(), "{:?}", five.problems);
    assert_eq!(
        problems(&ruled(
            "- {name: r, tool: read_file, action: RequireApproval, requiredApprovals: 6}"
        )),
        [
            "t.yaml: The Agent \"a\" is invalid: spec.declarative.approval.rules[0].requiredApprovals: Invalid value: 6: spec.declarative.approval.rules[0].requiredApprovals in body should be less than or equal to 5"
        ]
    );
}

#[test]
fn approval_rule_edits_are_bounded_json_pointers() {
    let problem = |edits: &str| {
        problems(&ruled(&format!(
            "- {{name: r, tool: write_file, action: RequireApproval, edits: {edits}}}"
        )))
    };
    let fine = render(&ruled(
        "- {name: r, tool: write_file, action: RequireApproval, edits: {allowed: false}}\n- {name: s, tool: read_file, action: RequireApproval, edits: {paths: [/path, /a~1b/c~0d]}}",
    ));
    assert!(fine.problems.is_empty(), "{:?}", fine.problems);
    assert_eq!(
        problem("{paths: [/path, a]}"),
        [
            "t.yaml: The Agent \"a\" is invalid: spec.declarative.approval.rules[0].edits.paths[1]: Invalid value: \"a\": spec.declarative.approval.rules[0].edits.paths[1] in body should match '^/'"
        ]
    );
    assert_eq!(
        problem("{paths: [/path, /a~2]}"),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.rules[0].edits.paths[1]: Invalid value: \"/a~2\": not a JSON pointer: ~ must be followed by 0 or 1 (~0 is ~, ~1 is /)"
        ]
    );
    let long = format!("/{}", "x".repeat(256));
    assert_eq!(
        problem(&format!("{{paths: [{long}]}}")),
        [
            "t.yaml: The Agent \"a\" is invalid: spec.declarative.approval.rules[0].edits.paths[0]: Too long: may not be more than 256 bytes"
        ]
    );
    let many: Vec<String> = (0..33).map(|i| format!("/p{i}")).collect();
    assert_eq!(
        problem(&format!("{{paths: [{}]}}", many.join(", "))),
        [
            "t.yaml: The Agent \"a\" is invalid: spec.declarative.approval.rules[0].edits.paths: Too many: 33: must have at most 32 items"
        ]
    );
    // To forbid every edit, `allowed: false` says so; an empty list is refused.
    assert_eq!(
        problem("{paths: []}"),
        [
            "t.yaml: The Agent \"a\" is invalid: spec.declarative.approval.rules[0].edits.paths: Invalid value: 0: spec.declarative.approval.rules[0].edits.paths in body should have at least 1 items"
        ]
    );
}

#[test]
fn approval_rule_edits_reach_the_gate_config() {
    let report = render(&ruled(
        "- {name: r, tool: write_file, action: RequireApproval, edits: {allowed: true, paths: [/path]}}\n- {name: s, tool: read_file, action: RequireApproval}",
    ));
    let gate = gate_json(&report);
    let rules = &gate["servers"][0]["rules"];
    assert_eq!(
        rules[0]["edits"],
        json!({"allowed": true, "paths": ["/path"]})
    );
    assert!(rules[1].get("edits").is_none(), "{rules}");
}

#[test]
fn approval_rules_need_a_gate() {
    let yaml = ruled("- {name: r, tool: read_file, action: Allow}")
        .replace("approval:\n", "approval:\n      mode: Runtime\n");
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: Agent ns/a: spec.declarative.approval.rules: Forbidden: approval rules are enforced by the gate, and approval mode Runtime runs none; use mode Gate or Both, or remove the rules"
        ]
    );
}

#[test]
fn a_grant_whose_condition_does_not_compile_is_named() {
    let grant = |when: &str| {
        format!(
            "apiVersion: kagent.dev/v1alpha2\nkind: ApprovalGrant\nmetadata: {{name: g, namespace: ns}}\nspec:\n  agentRef: {{name: a}}\n  toolServer: {{kind: RemoteMCPServer, name: fs, namespace: ns}}\n  expiresAt: \"2026-11-25T00:00:00Z\"\n  reason: cleanup\n  grantedBy: alice\n  when: \"{when}\"\n"
        )
    };
    let found = problems(&grant("args.path.startsWith("));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("t.yaml: ApprovalGrant ns/g: spec.when: CEL"),
        "{found:?}"
    );
    let found = problems(&grant("secret == 1"));
    assert!(
        found[0].contains("undeclared reference to 'secret'"),
        "{found:?}"
    );
    let report = render(&grant("args.path.startsWith('/tmp/')"));
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// The cap on open requests in the gate.json rendered for an Agent with `approval`.
fn rendered_cap(approval: &str, options: &RenderOptions) -> serde_json::Value {
    let yaml = format!(
        "{MODEL}---\n{SERVER}---\n{}",
        agent(&format!(
            "tools: [{{type: McpServer, mcpServer: {{name: fs, toolNames: [rm], requireApproval: [rm]}}}}]\napproval: {approval}"
        ))
    );
    let documents = parse_documents("t.yaml", &yaml).unwrap();
    gate_json(&render_documents(documents, "ns", options))["approval"]["max_open_requests"].clone()
}

/// The gate.json of Agent `a`, rendered without problems.
fn gate_json(report: &RenderReport) -> serde_json::Value {
    assert_eq!(report.problems, Vec::<String>::new());
    let secret = report
        .objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "a")
        .unwrap();
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(secret.clone()).unwrap();
    serde_json::from_slice(&secret.data.unwrap()["gate.json"].0).unwrap()
}

#[test]
fn max_open_requests_reaches_the_gate_within_its_bounds() {
    let defaults = RenderOptions::default();
    assert_eq!(rendered_cap("{}", &defaults), json!(50));
    assert_eq!(
        rendered_cap("{maxOpenRequests: 200}", &defaults),
        json!(200)
    );
    let operator = RenderOptions {
        max_open_requests: 10,
        ..RenderOptions::default()
    };
    assert_eq!(rendered_cap("{}", &operator), json!(10));
    assert_eq!(rendered_cap("{maxOpenRequests: 3}", &operator), json!(3));
    // As kube-apiserver 1.36 says it.
    for (cap, bound) in [
        (0, "greater than or equal to 1"),
        (1001, "less than or equal to 1000"),
    ] {
        let yaml = format!(
            "{MODEL}---\n{}",
            agent(&format!("approval: {{maxOpenRequests: {cap}}}"))
        );
        assert_eq!(
            problems(&yaml),
            [format!(
                "t.yaml: The Agent \"a\" is invalid: spec.declarative.approval.maxOpenRequests: Invalid value: {cap}: spec.declarative.approval.maxOpenRequests in body should be {bound}"
            )]
        );
    }
}

fn tool_gate(spec: &str) -> String {
    format!(
        "apiVersion: kagent.dev/v1alpha2\nkind: ToolGate\nmetadata: {{name: pay, namespace: ns}}\nspec: {spec}\n"
    )
}

#[test]
fn a_tool_gate_without_its_remote_mcp_server_names_the_field() {
    assert_eq!(
        problems(&tool_gate(
            "{server: {remoteMCPServer: ledger}, toolNames: [pay]}"
        )),
        [
            "t.yaml: ToolGate ns/pay: spec.server.remoteMCPServer: RemoteMCPServer ns/ledger not found"
        ]
    );
}

#[test]
fn a_tool_gate_requires_approval_only_of_tools_it_lists() {
    let yaml = format!(
        "{SERVER}---\n{}",
        tool_gate("{server: {remoteMCPServer: fs}, toolNames: [read], requireApproval: [delete]}")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: The ToolGate \"pay\" is invalid: spec: Invalid value: each requireApproval entry must also appear in toolNames"
        ]
    );
}

#[test]
fn a_tool_gate_names_its_server_once() {
    let yaml = format!(
        "{SERVER}---\n{}",
        tool_gate("{server: {remoteMCPServer: fs, url: 'http://fs:3000/mcp'}, toolNames: [read]}")
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: The ToolGate \"pay\" is invalid: spec.server: Invalid value: exactly one of remoteMCPServer and url must be set"
        ]
    );
}

#[test]
fn a_tool_gate_rule_about_a_tool_it_does_not_list_names_the_rule() {
    let yaml = format!(
        "{SERVER}---\n{}",
        tool_gate(
            "{server: {remoteMCPServer: fs}, toolNames: [read], approval: {rules: [{name: r, tool: delete, action: Deny}]}}"
        )
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: ToolGate ns/pay: spec.approval.rules[0].tool: Invalid value: \"delete\": must appear in spec.toolNames"
        ]
    );
}

#[test]
fn a_tool_gate_rules_edit_paths_name_the_field() {
    let yaml = format!(
        "{SERVER}---\n{}",
        tool_gate(
            "{server: {remoteMCPServer: fs}, toolNames: [read], approval: {rules: [{name: r, tool: read, action: RequireApproval, edits: {paths: [/ok, /a~]}}]}}"
        )
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: ToolGate ns/pay: spec.approval.rules[0].edits.paths[1]: Invalid value: \"/a~\": not a JSON pointer: ~ must be followed by 0 or 1 (~0 is ~, ~1 is /)"
        ]
    );
}

#[test]
fn a_tool_gate_with_a_wait_longer_than_its_timeout_names_the_field() {
    let yaml = format!(
        "{SERVER}---\n{}",
        tool_gate(
            "{server: {remoteMCPServer: fs}, toolNames: [read], approval: {timeout: 1m, waitTimeout: 2m}}"
        )
    );
    assert_eq!(
        problems(&yaml),
        [
            "t.yaml: ToolGate ns/pay: spec.approval.waitTimeout: Invalid value: \"2m\": must not exceed timeout (\"1m\")"
        ]
    );
}

/// Issue 59: each field of an Agent's own deployment that reaches the node, and how the
/// renderer names it, as the verdict and the refusal must.
fn node_fields() -> Vec<(String, String)> {
    let mut cases = vec![
        (
            "securityContext: {privileged: true}".to_owned(),
            "securityContext.privileged".to_owned(),
        ),
        (
            "securityContext: {windowsOptions: {hostProcess: true}}".to_owned(),
            "securityContext.windowsOptions.hostProcess".to_owned(),
        ),
        (
            "podSecurityContext: {windowsOptions: {hostProcess: true}}".to_owned(),
            "podSecurityContext.windowsOptions.hostProcess".to_owned(),
        ),
        (
            "volumes: [{name: scratch, emptyDir: {}}, {name: kubelet, hostPath: {path: /var/lib/kubelet}}]".to_owned(),
            "volumes[1].hostPath".to_owned(),
        ),
        (
            "volumes: [{name: repo, gitRepo: {repository: \"https://example.com/r.git\"}}]".to_owned(),
            "volumes[0].gitRepo".to_owned(),
        ),
    ];
    for (name, _) in hitl_operator::render::node_access::NODE_CAPABILITIES {
        for spelled in [name.to_string(), format!("cap_{}", name.to_lowercase())] {
            cases.push((
                format!("securityContext: {{capabilities: {{add: [CHOWN, {spelled}]}}}}"),
                "securityContext.capabilities.add[1]".to_owned(),
            ));
        }
    }
    cases
}

fn reaching(mode: &str, deployment: &str) -> String {
    format!(
        "{MODEL}---\n{}---\n{}",
        SERVER.replace(
            "spec: {url: \"http://fs:3000/mcp\"}",
            "spec: {url: \"http://fs:3000/mcp\", headersFrom: [{name: Authorization, value: Bearer x}]}"
        ),
        agent(&format!(
            "tools: [{{type: McpServer, mcpServer: {{name: fs, toolNames: [rm], requireApproval: [rm]}}}}]\napproval: {{mode: {mode}}}\ndeployment: {{{deployment}}}"
        ))
    )
}

#[test]
fn an_agent_whose_pods_reach_the_node_is_refused_next_to_a_gate_unless_allowed() {
    let allowed = RenderOptions {
        allow_agent_node_access: true,
        ..RenderOptions::default()
    };
    let cases = node_fields();
    assert_eq!(cases.len(), 5 + 2 * 8);
    for (deployment, field) in cases {
        let field = format!("spec.declarative.deployment.{field}");
        for mode in ["Gate", "Both"] {
            let yaml = reaching(mode, &deployment);
            let refused = problems(&yaml);
            assert_eq!(refused.len(), 1, "{refused:?}");
            let prefix = format!("t.yaml: Agent ns/a: {field}: Forbidden: ");
            assert!(refused[0].starts_with(&prefix), "{deployment}: {refused:?}");
            assert!(
                refused[0].contains(&format!(
                    "go around the gate of approval mode {mode}; remove it, or have the operator allow it with --allow-agent-node-access (the chart's allowAgentNodeAccess: the gate can then be bypassed)"
                )),
                "{refused:?}"
            );
            // Allowed: rendered, and GateIsolated=False names the field.
            let documents = parse_documents("t.yaml", &yaml).unwrap();
            let report = render_documents(documents, "ns", &allowed);
            assert!(report.problems.is_empty(), "{:?}", report.problems);
            let verdict = report
                .warnings
                .iter()
                .find(|w| w.contains("GateIsolated=False"))
                .unwrap_or_else(|| panic!("{deployment}: {:?}", report.warnings));
            assert!(
                verdict.starts_with(&format!(
                    "t.yaml: Agent ns/a: GateIsolated=False (AgentReachesNode): the agent's pods can reach the node they run on: {field} ("
                )),
                "{verdict}"
            );
        }
        // Without a gate there is nothing to go around.
        let report = render(&reaching("Runtime", &deployment));
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert!(
            !report.warnings.iter().any(|w| w.contains("GateIsolated")),
            "{:?}",
            report.warnings
        );
    }
}

#[test]
fn a_refusal_names_every_field_that_reaches_the_node() {
    let refused = problems(&reaching(
        "Gate",
        "securityContext: {privileged: true, capabilities: {add: [SYS_PTRACE]}}, volumes: [{name: k, hostPath: {path: /}}]",
    ));
    assert!(
        refused[0].starts_with(
            "t.yaml: Agent ns/a: spec.declarative.deployment.securityContext.privileged: Forbidden: a privileged container has every capability and the node's devices: "
        ),
        "{refused:?}"
    );
    assert!(
        refused[0].contains(
            " (also spec.declarative.deployment.securityContext.capabilities.add[0], spec.declarative.deployment.volumes[0].hostPath); "
        ),
        "{refused:?}"
    );
}

#[test]
fn weaker_settings_than_node_access_are_not_refused() {
    for deployment in [
        "securityContext: {allowPrivilegeEscalation: true, runAsUser: 0}",
        "securityContext: {seccompProfile: {type: Unconfined}, appArmorProfile: {type: Unconfined}}",
        "securityContext: {capabilities: {add: [NET_ADMIN, NET_RAW, DAC_OVERRIDE, MKNOD, SYS_CHROOT]}}",
        "podSecurityContext: {seccompProfile: {type: Unconfined}, runAsUser: 0}",
        "volumes: [{name: c, persistentVolumeClaim: {claimName: data}}]",
    ] {
        let report = render(&reaching("Gate", deployment));
        assert!(
            report.problems.is_empty(),
            "{deployment}: {:?}",
            report.problems
        );
        assert!(
            !report.warnings.iter().any(|w| w.contains("GateIsolated")),
            "{deployment}: {:?}",
            report.warnings
        );
    }
}

/// Skills run their init container under the agent container's security context: one
/// privileged Agent is refused once, by its own field.
#[test]
fn skills_beside_a_privileged_agent_name_the_agents_field() {
    let yaml = reaching("Gate", "securityContext: {privileged: true}").replace(
        "spec:\n  type: Declarative\n",
        "spec:\n  type: Declarative\n  skills: {refs: [ghcr.io/org/skill:v1]}\n",
    );
    let refused = problems(&yaml);
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].starts_with(
            "t.yaml: Agent ns/a: spec.declarative.deployment.securityContext.privileged: Forbidden:"
        ),
        "{refused:?}"
    );
    assert!(!refused[0].contains("(also"), "{refused:?}");
}

/// The Deployments `report` rendered, by name.
fn deployments(report: &RenderReport) -> Vec<(String, k8s_openapi::api::apps::v1::Deployment)> {
    report
        .objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_owned(),
                serde_json::from_value(o.clone()).unwrap(),
            )
        })
        .collect()
}

/// Issue 59: the gate's own pods (an Agent's Gateway, a ToolGate) take from their owner only
/// replicas, resources, pull secrets and scheduling: none of it reaches the node, whatever the
/// owner sets, the gate container included.
#[test]
fn the_gates_own_pods_reach_no_node_whatever_their_owner_sets() {
    use hitl_operator::render::node_access;
    let scheduling = "nodeSelector: {disk: ssd}, tolerations: [{operator: Exists}], affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: k, operator: Exists}]}]}}}";
    let everything = format!(
        "replicas: 2, imagePullSecrets: [{{name: pull}}], {scheduling}, securityContext: {{privileged: true, capabilities: {{add: [ALL]}}, windowsOptions: {{hostProcess: true}}}}, podSecurityContext: {{windowsOptions: {{hostProcess: true}}}}, volumes: [{{name: k, hostPath: {{path: /var/lib/kubelet}}}}]"
    );
    let yaml = reaching("Gate", &everything).replace(
        "approval: {mode: Gate}",
        "approval: {mode: Gate, placement: Gateway}",
    );
    let allowed = RenderOptions {
        allow_agent_node_access: true,
        ..RenderOptions::default()
    };
    let report = render_documents(parse_documents("t.yaml", &yaml).unwrap(), "ns", &allowed);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let rendered = deployments(&report);
    let names: Vec<&str> = rendered.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "a-gate"]);
    // The agent's pods have all of it (so the scan sees it), the gate's none.
    assert_eq!(node_access::deployment(&rendered[0].1, None).len(), 5);
    assert_eq!(node_access::deployment(&rendered[1].1, None), []);
    let gate_pod = rendered[1]
        .1
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(gate_pod.node_selector.as_ref().unwrap()["disk"], "ssd");

    let tool_gate = format!(
        "{}---\n{}",
        SERVER,
        tool_gate(&format!(
            "{{server: {{remoteMCPServer: fs}}, toolNames: [rm], requireApproval: [rm], deployment: {{replicas: 3, resources: {{limits: {{memory: 256Mi}}}}, {scheduling}}}}}"
        ))
    );
    let report = render(&tool_gate);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let rendered = deployments(&report);
    assert_eq!(rendered.len(), 1);
    assert_eq!(node_access::deployment(&rendered[0].1, None), []);
    let pod = rendered[0]
        .1
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(pod.tolerations.as_ref().unwrap().len(), 1);
}
