//! The `render` and `crds` commands as a user runs them.

use std::process::Command;

fn hitl(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hitl-operator"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn render_prints_every_object_of_the_examples() {
    let (code, stdout, stderr) = hitl(&["render", "-f", "examples/", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let kinds: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_owned(),
                o["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for agent in [
        "file-agent",
        "db-agent",
        "k8s-agent",
        "payments-agent",
        "guarded-agent",
    ] {
        for kind in ["Secret", "ServiceAccount", "Deployment", "Service"] {
            assert!(
                kinds.contains(&(kind.to_owned(), agent.to_owned())),
                "{kind} {agent} missing from {kinds:?}"
            );
        }
        assert!(kinds.contains(&("Role".to_owned(), format!("{agent}-approval-gate"))));
    }
    // The ToolGate of examples/toolgate.yaml: its shared gate, every object `<name>-gate`.
    for kind in [
        "Secret",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
    ] {
        assert!(
            kinds.contains(&(kind.to_owned(), "payments-gate".to_owned())),
            "{kind} payments-gate missing from {kinds:?}"
        );
    }
}

#[test]
fn render_yaml_is_multi_document() {
    let (code, stdout, _) = hitl(&[
        "render",
        "-f",
        "examples/filesystem-agent.yaml",
        "-f",
        "examples/model-openai.yaml",
    ]);
    assert_eq!(code, 0);
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    assert_eq!(documents.len(), 6);
}

/// The `KAGENT_URL` of the agent container of the Deployment `name` in a JSON `List`.
fn kagent_url(list: &serde_json::Value, name: &str) -> String {
    let deployment = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
        .unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "KAGENT_URL")
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn render_says_where_each_agent_keeps_its_sessions() {
    let agent = [
        "-f",
        "examples/model-openai.yaml",
        "-f",
        "examples/filesystem-agent.yaml",
    ];
    let (code, stdout, stderr) = hitl(&[&["render"], &agent[..]].concat());
    assert_eq!(code, 0, "{stderr}");
    // YAML: a comment heading the documents, which `kubectl apply` skips.
    assert!(
        stdout.starts_with(
            "# Agent default/file-agent: status.sessionStore: http://hitl-sessions.hitl-system.svc:8083 (hitl-operator's session store, the runtime's KAGENT_URL)\n---\n"
        ),
        "{stdout}"
    );
    // JSON: stdout is the List alone; the line goes to stderr.
    let (code, stdout, stderr) = hitl(
        &[
            &[
                "render",
                "-o",
                "json",
                "--session-store-url",
                "http://store.hitl.svc:8083",
            ],
            &agent[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        kagent_url(&list, "file-agent"),
        "http://store.hitl.svc:8083"
    );
    assert!(
        stderr.contains("note: Agent default/file-agent: status.sessionStore: http://store.hitl.svc:8083 (hitl-operator's session store"),
        "{stderr}"
    );
    // --kagent-url wins over the store, in every approval mode.
    let (code, stdout, stderr) = hitl(
        &[
            &[
                "render",
                "--approval-mode",
                "Runtime",
                "--kagent-url",
                "http://kagent-controller.kagent:8083",
            ],
            &agent[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("# Agent default/file-agent: status.sessionStore: http://kagent-controller.kagent:8083 (the kagent controller of --kagent-url, the runtime's KAGENT_URL)\n"),
        "{stdout}"
    );
    assert!(stdout.contains("audience: kagent\n"), "{stdout}");
    let (code, _, stderr) = hitl(
        &[
            &["render", "--session-store-url", "http://x:8083/api"],
            &agent[..],
        ]
        .concat(),
    );
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn invalid_examples_fail_with_one_apiserver_style_line_each() {
    let (code, stdout, stderr) = hitl(&["render", "-f", "examples/invalid/"]);
    assert_eq!(code, 1);
    assert!(
        stdout.is_empty(),
        "nothing is printed when anything is invalid"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "error: examples/invalid/duplicate-tool-name.yaml: The Agent \"b\" is invalid: spec.declarative.tools[0].mcpServer.toolNames[1]: Duplicate value: \"read_file\"",
            "error: examples/invalid/require-approval-not-in-tool-names.yaml: The Agent \"a\" is invalid: spec.declarative.tools[0].mcpServer: Invalid value: each requireApproval entry must also appear in toolNames",
            "error: examples/invalid/missing-tool-server.yaml: Agent default/c: spec.declarative.tools[0].mcpServer: RemoteMCPServer default/no-such-server not found",
            "error: examples/invalid/mounts-gate-volume.yaml: Agent default/e: spec.declarative.deployment.volumeMounts[1].name: Forbidden: \"binding-key\" is the approval gate's volume; the agent container may not mount it",
            NODE_ACCESS_REFUSED,
            "error: examples/invalid/rule-condition-does-not-compile.yaml: Agent default/d: spec.declarative.approval.rules[1].when: Invalid value: \"args.amount > > 1000\": CEL: 1:15: Syntax error: extraneous input '>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ]
    );
}

/// How `render` refuses examples/invalid/node-access.yaml: privileged, and the node's
/// /var/lib/kubelet as a hostPath volume.
const NODE_ACCESS_REFUSED: &str = "error: examples/invalid/node-access.yaml: Agent default/node-reader: spec.declarative.deployment.securityContext.privileged: Forbidden: a privileged container has every capability and the node's devices: the agent's pods could reach the node, where the kubelet keeps the approval gate's credentials, and go around the gate of approval mode Gate (also spec.declarative.deployment.volumes[0].hostPath); remove it, or have the operator allow it with --allow-agent-node-access (the chart's allowAgentNodeAccess: the gate can then be bypassed)";

#[test]
fn an_agent_that_reaches_the_node_is_refused_unless_the_flag_allows_it() {
    let files = [
        "render",
        "-f",
        "examples/model-openai.yaml",
        "-f",
        "examples/invalid/node-access.yaml",
        "-o",
        "json",
    ];
    let (code, stdout, stderr) = hitl(&files);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().collect::<Vec<_>>(), [NODE_ACCESS_REFUSED]);

    for allow in [
        &["--allow-agent-node-access"][..],
        &["--allow-agent-node-access=true"],
    ] {
        let (code, stdout, stderr) = hitl(&[&files[..], allow].concat());
        assert_eq!(code, 0, "{stderr}");
        let warning = stderr
            .lines()
            .find(|line| line.contains("GateIsolated=False"))
            .unwrap_or_else(|| panic!("no GateIsolated warning: {stderr}"));
        assert_eq!(
            warning,
            "warning: examples/invalid/node-access.yaml: Agent default/node-reader: GateIsolated=False (AgentReachesNode): the agent's pods can reach the node they run on: spec.declarative.deployment.securityContext.privileged (a privileged container has every capability and the node's devices); spec.declarative.deployment.volumes[0].hostPath (volume \"kubelet\" mounts the node's \"/var/lib/kubelet\"); the kubelet keeps the pod's gate.json with the tool servers' credentials, its binding key and the gate's token under its folder there (/var/lib/kubelet), so the agent can call RemoteMCPServer default/ledger (delete_entry) directly or act as the gate, skipping approval"
        );
        let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let pod = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .map(|d| &d["spec"]["template"]["spec"])
            .unwrap();
        assert_eq!(pod["containers"][0]["securityContext"]["privileged"], true);
        assert!(pod["volumes"].to_string().contains("/var/lib/kubelet"));
    }
    let (code, _, stderr) = hitl(&[&files[..], &["--allow-agent-node-access=false"]].concat());
    assert_eq!(code, 1, "{stderr}");

    // Without a gate (Runtime mode) nothing is refused and nothing is isolated to report.
    let (code, _, stderr) = hitl(&[&files[..], &["--approval-mode", "Runtime"]].concat());
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("GateIsolated"), "{stderr}");
}

#[test]
fn approval_mode_flag_sets_the_default() {
    let (code, stdout, _) = hitl(&[
        "render",
        "-f",
        "examples/model-openai.yaml",
        "-f",
        "examples/filesystem-agent.yaml",
        "--approval-mode",
        "Runtime",
        "-o",
        "json",
    ]);
    assert_eq!(code, 0);
    assert!(
        !stdout.contains("approval-gate"),
        "Runtime mode renders no gate"
    );
}

#[test]
fn missing_files_are_reported() {
    let (code, _, stderr) = hitl(&["render", "-f", "examples/nope.yaml"]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("error: examples/nope.yaml: "),
        "{stderr}"
    );
}

#[test]
fn crds_command_prints_all_four_crds() {
    let (code, stdout, _) = hitl(&["crds"]);
    assert_eq!(code, 0);
    for name in [
        "agents",
        "approvalrequests",
        "modelconfigs",
        "remotemcpservers",
    ] {
        assert!(
            stdout.contains(&format!("name: {name}.kagent.dev")),
            "{name}"
        );
    }
}

#[test]
fn grant_max_ttl_reaches_the_gate_and_off_leaves_the_gate_without_grants() {
    let render = |ttl: &str| {
        let (code, stdout, stderr) = hitl(&[
            "render",
            "-f",
            "examples/filesystem-agent.yaml",
            "-f",
            "examples/model-openai.yaml",
            "-o",
            "json",
            "--grant-max-ttl",
            ttl,
        ]);
        assert_eq!(code, 0, "{stderr}");
        let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let items = list["items"].as_array().unwrap().clone();
        let of = |kind: &str| items.iter().find(|o| o["kind"] == kind).unwrap().clone();
        let role = of("Role");
        let grant_rules = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["resources"].to_string().contains("approvalgrants"))
            .count();
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(of("Secret")).unwrap();
        let gate: serde_json::Value =
            serde_json::from_slice(&secret.data.unwrap()["gate.json"].0).unwrap();
        (
            grant_rules,
            gate["approval"]["grant_max_ttl_seconds"].clone(),
        )
    };
    assert_eq!(render("90m"), (2, serde_json::json!(5400.0)));
    assert_eq!(render("off"), (0, serde_json::Value::Null));
    let (code, _, stderr) = hitl(&["render", "-f", "examples/", "--grant-max-ttl", "forever"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("not a duration such as 24h or 90m, nor off"),
        "{stderr}"
    );
}
