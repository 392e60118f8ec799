//! Rendering cost of a large Agent: 5 tool servers x 20 tools (10 gated each), in every mode.
//! Run: `cargo bench --bench render`.

use criterion::{Criterion, criterion_group, criterion_main};
use hitl_operator::api::agent::{
    AgentSpec, ApprovalSettings, DeclarativeAgentSpec, McpServerTool, Tool, ToolType,
};
use hitl_operator::api::model_config::{ModelConfigSpec, ModelProvider};
use hitl_operator::api::remote_mcp_server::RemoteMCPServerSpec;
use hitl_operator::api::{Agent, ApprovalMode, ModelConfig, RemoteMCPServer};
use hitl_operator::render::refs::RefStore;
use hitl_operator::render::{RenderOptions, render_agent};

fn fixture() -> (Agent, RefStore) {
    let mut store = RefStore::default();
    let mut model = ModelConfig::new(
        "default-model-config",
        ModelConfigSpec {
            api_key_secret: Some("openai".into()),
            api_key_secret_key: Some("key".into()),
            ..ModelConfigSpec::new(ModelProvider::OpenAI, "gpt-4o")
        },
    );
    model.metadata.namespace = Some("bench".into());
    store.insert_model_config(model);
    let mut tools = Vec::new();
    for server in 0..5 {
        let name = format!("server-{server}");
        let mut remote = RemoteMCPServer::new(
            &name,
            RemoteMCPServerSpec {
                url: format!("http://{name}.tools:8080/mcp"),
                protocol: None,
                headers_from: Vec::new(),
                timeout: Some("30s".into()),
                ..RemoteMCPServerSpec::default()
            },
        );
        remote.metadata.namespace = Some("bench".into());
        store.insert_remote_mcp_server(remote);
        let tool_names: Vec<String> = (0..20).map(|t| format!("tool_{t}")).collect();
        tools.push(Tool {
            tool_type: ToolType::McpServer,
            mcp_server: Some(McpServerTool {
                name,
                require_approval: tool_names[..10].to_vec(),
                tool_names,
                ..McpServerTool::default()
            }),
            agent: None,
            headers_from: Vec::new(),
        });
    }
    let mut agent = Agent::new(
        "bench-agent",
        AgentSpec {
            agent_type: Default::default(),
            description: Some("benchmark".into()),
            declarative: Some(DeclarativeAgentSpec {
                system_message: Some("You are benchmarked.".into()),
                tools,
                approval: Some(ApprovalSettings::default()),
                ..DeclarativeAgentSpec::default()
            }),
            ..AgentSpec::default()
        },
    );
    agent.metadata.namespace = Some("bench".into());
    agent.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    (agent, store)
}

fn render(c: &mut Criterion) {
    let (agent, store) = fixture();
    let mut group = c.benchmark_group("render_5x20");
    for mode in [
        ApprovalMode::Gate,
        ApprovalMode::Runtime,
        ApprovalMode::Both,
    ] {
        let options = RenderOptions {
            default_approval_mode: mode,
            ..RenderOptions::default()
        };
        group.bench_function(mode.as_str(), |b| {
            b.iter(|| render_agent(&agent, &store, &options).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, render);
criterion_main!(benches);
