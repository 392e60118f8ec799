//! Properties of the renderer over generated Agents: it never panics, is deterministic,
//! gates exactly the (server, tool) pairs that ask for approval, keeps upstream credentials
//! out of config.json behind a gate, and its config hash moves with the content only.

use std::collections::BTreeMap;

use hitl_operator::api::agent::{
    AgentSpec, ApprovalSettings, DeclarativeAgentSpec, McpServerTool, Tool, ToolType,
};
use hitl_operator::api::common::ValueRef;
use hitl_operator::api::model_config::{ModelConfigSpec, ModelProvider};
use hitl_operator::api::remote_mcp_server::{McpProtocol, RemoteMCPServerSpec};
use hitl_operator::api::{Agent, ApprovalMode, ModelConfig, RemoteMCPServer};
use hitl_operator::render::refs::RefStore;
use hitl_operator::render::{RenderOptions, render_agent};
use proptest::prelude::*;

/// A tool server as generated: its tool names, the ones needing approval, its protocol and
/// one secret-looking header value.
#[derive(Clone, Debug)]
struct ServerCase {
    tools: Vec<String>,
    gated: Vec<String>,
    sse: bool,
    token: String,
}

fn server_case() -> impl Strategy<Value = ServerCase> {
    // A tiny alphabet of tool names so that servers often share names.
    let names = prop::sample::subsequence(
        vec!["read", "write", "delete", "query", "apply", "list"],
        1..=6,
    );
    (names, any::<u8>(), any::<bool>(), "[a-z0-9]{8,16}").prop_map(|(names, mask, sse, token)| {
        let tools: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let gated = tools
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, t)| t.clone())
            .collect();
        ServerCase {
            tools,
            gated,
            sse,
            token: format!("canary-{token}"),
        }
    })
}

fn mode() -> impl Strategy<Value = Option<ApprovalMode>> {
    prop_oneof![
        Just(None),
        Just(Some(ApprovalMode::Gate)),
        Just(Some(ApprovalMode::Runtime)),
        Just(Some(ApprovalMode::Both)),
    ]
}

fn fixture(servers: &[ServerCase], mode: Option<ApprovalMode>) -> (Agent, RefStore) {
    let mut store = RefStore::default();
    let mut model = ModelConfig::new(
        "default-model-config",
        ModelConfigSpec {
            api_key_secret: Some("key".into()),
            api_key_secret_key: Some("k".into()),
            ..ModelConfigSpec::new(ModelProvider::OpenAI, "gpt-4o")
        },
    );
    model.metadata.namespace = Some("ns".into());
    store.insert_model_config(model);
    let mut tools = Vec::new();
    for (index, case) in servers.iter().enumerate() {
        let name = format!("server-{index}");
        let mut remote = RemoteMCPServer::new(
            &name,
            RemoteMCPServerSpec {
                url: format!("http://{name}.tools:8080/mcp"),
                protocol: Some(if case.sse {
                    McpProtocol::Sse
                } else {
                    McpProtocol::StreamableHttp
                }),
                headers_from: vec![ValueRef {
                    name: "Authorization".into(),
                    value: Some(case.token.clone()),
                    value_from: None,
                }],
                timeout: None,
                ..RemoteMCPServerSpec::default()
            },
        );
        remote.metadata.namespace = Some("ns".into());
        store.insert_remote_mcp_server(remote);
        tools.push(Tool {
            tool_type: ToolType::McpServer,
            mcp_server: Some(McpServerTool {
                name,
                tool_names: case.tools.clone(),
                require_approval: case.gated.clone(),
                ..McpServerTool::default()
            }),
            agent: None,
            headers_from: Vec::new(),
        });
    }
    let mut agent = Agent::new(
        "agent",
        AgentSpec {
            agent_type: Default::default(),
            description: None,
            declarative: Some(DeclarativeAgentSpec {
                system_message: Some("hi".into()),
                tools,
                approval: Some(ApprovalSettings {
                    mode,
                    ..ApprovalSettings::default()
                }),
                ..DeclarativeAgentSpec::default()
            }),
            ..AgentSpec::default()
        },
    );
    agent.metadata.namespace = Some("ns".into());
    agent.metadata.uid = Some("uid-1".into());
    (agent, store)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn rendering_is_total_deterministic_and_gates_only_what_asks(
        servers in prop::collection::vec(server_case(), 0..6),
        mode in mode(),
        default_mode in prop_oneof![Just(ApprovalMode::Gate), Just(ApprovalMode::Runtime), Just(ApprovalMode::Both)],
    ) {
        let (agent, store) = fixture(&servers, mode);
        let options = RenderOptions { default_approval_mode: default_mode, ..RenderOptions::default() };
        let first = render_agent(&agent, &store, &options).expect("valid agents render");
        let second = render_agent(&agent, &store, &options).unwrap();
        prop_assert_eq!(&first, &second);
        prop_assert_eq!(
            serde_json::to_vec(&first.objects.to_values().unwrap()).unwrap(),
            serde_json::to_vec(&second.objects.to_values().unwrap()).unwrap()
        );
        let effective = mode.unwrap_or(default_mode);
        prop_assert_eq!(first.mode, effective);
        let config = serde_json::to_string(&first.config).unwrap();
        let entries: Vec<_> = first.config.http_tools.iter().flatten()
            .chain(first.config.sse_tools.iter().flatten()).collect();
        prop_assert_eq!(entries.len(), servers.len());
        match &first.gate {
            Some(gate) => {
                prop_assert!(effective.uses_gate());
                prop_assert_eq!(gate.servers.len(), servers.len());
                for (index, (case, server)) in servers.iter().zip(&gate.servers).enumerate() {
                    prop_assert_eq!(&server.name, &format!("server-{index}"));
                    // Exactly the tools this server asked for, nothing borrowed from another
                    // server with the same tool name.
                    prop_assert_eq!(&server.require_approval, &case.gated);
                    for tool in ["read", "write", "delete", "query", "apply", "list"] {
                        prop_assert_eq!(server.requires_approval(tool), case.gated.iter().any(|t| t == tool));
                        prop_assert_eq!(server.allows(tool), case.tools.iter().any(|t| t == tool));
                    }
                    prop_assert_eq!(server.params.headers.get("Authorization"), Some(&case.token));
                    // Credentials never reach the runtime's config behind a gate.
                    prop_assert!(!config.contains(&case.token));
                }
                for entry in &entries {
                    prop_assert!(entry.params.url.starts_with("http://127.0.0.1:8099/servers/ns/"));
                    if effective == ApprovalMode::Gate {
                        prop_assert!(entry.require_approval.is_empty());
                    }
                }
            }
            None => {
                prop_assert_eq!(effective, ApprovalMode::Runtime);
                prop_assert!(first.objects.role.is_none());
                prop_assert!(first.objects.deployment.spec.as_ref().unwrap()
                    .template.spec.as_ref().unwrap().init_containers.is_none());
            }
        }
        if effective.uses_runtime() {
            let by_url: BTreeMap<String, Vec<String>> = entries.iter()
                .map(|e| (e.params.url.clone(), e.require_approval.clone())).collect();
            for (index, case) in servers.iter().enumerate() {
                let url = if effective.uses_gate() {
                    format!("http://127.0.0.1:8099/servers/ns/server-{index}/mcp")
                } else {
                    format!("http://server-{index}.tools:8080/mcp")
                };
                prop_assert_eq!(by_url.get(&url), Some(&case.gated));
            }
        }
    }

    #[test]
    fn config_hash_follows_content_not_metadata(
        servers in prop::collection::vec(server_case(), 1..4),
        which in any::<prop::sample::Index>(),
    ) {
        let (agent, store) = fixture(&servers, Some(ApprovalMode::Gate));
        let options = RenderOptions::default();
        let base = render_agent(&agent, &store, &options).unwrap().config_hash;

        let mut relabelled = agent.clone();
        relabelled.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        relabelled.metadata.resource_version = Some("42".into());
        prop_assert_eq!(&render_agent(&relabelled, &store, &options).unwrap().config_hash, &base);

        let mut rotated = servers.clone();
        let target = which.index(rotated.len());
        rotated[target].token.push('x');
        let (agent2, store2) = fixture(&rotated, Some(ApprovalMode::Gate));
        let changed = render_agent(&agent2, &store2, &options).unwrap();
        prop_assert_ne!(&changed.config_hash, &base);
        let annotations = changed.objects.deployment.spec.unwrap().template.metadata.unwrap().annotations.unwrap();
        prop_assert_eq!(annotations.get("kagent.dev/config-hash"), Some(&changed.config_hash));
    }
}

#[test]
fn model_key_rotation_changes_the_hash() {
    let servers = [ServerCase {
        tools: vec!["read".into()],
        gated: vec![],
        sse: false,
        token: "t".into(),
    }];
    let (agent, mut store) = fixture(&servers, None);
    let options = RenderOptions::default();
    let before = render_agent(&agent, &store, &options).unwrap().config_hash;
    let mut model = store
        .model_config("ns", "default-model-config")
        .unwrap()
        .clone();
    model.status = Some(hitl_operator::api::model_config::ModelConfigStatus {
        secret_hash: Some("0123".into()),
        ..Default::default()
    });
    store.insert_model_config(model);
    let after = render_agent(&agent, &store, &options).unwrap().config_hash;
    assert_ne!(before, after);
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![
            "",
            "x",
            "McpServer",
            "Service",
            "RemoteMCPServer",
            "Gate",
            "Both",
            "1h",
            "read",
            "OpenAI",
            "Secret",
            "default-model-config",
        ])
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "type",
                    "declarative",
                    "tools",
                    "mcpServer",
                    "name",
                    "kind",
                    "toolNames",
                    "requireApproval",
                    "headersFrom",
                    "valueFrom",
                    "key",
                    "approval",
                    "mode",
                    "timeout",
                    "systemMessage",
                    "modelConfig",
                    "deployment",
                    "replicas",
                ])
                .prop_map(str::to_owned),
                inner,
                0..5,
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Arbitrary (mostly invalid) Agents never make the offline pipeline panic, and a render
    /// either prints objects or reports problems, never both.
    #[test]
    fn arbitrary_agent_documents_never_panic(spec in json_value()) {
        let document = hitl_operator::manifest::Document {
            file: "generated.yaml".into(),
            value: serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                "metadata": {"name": "a", "namespace": "ns"}, "spec": spec
            }),
        };
        let model = hitl_operator::manifest::Document {
            file: "generated.yaml".into(),
            value: serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig",
                "metadata": {"name": "default-model-config", "namespace": "ns"},
                "spec": {"provider": "OpenAI", "model": "gpt-4o"}
            }),
        };
        let report = hitl_operator::cli::render::render_documents(vec![model, document], "ns", &RenderOptions::default());
        prop_assert!(report.objects.is_empty() != report.problems.is_empty(), "{:?}", report.problems);
    }
}
