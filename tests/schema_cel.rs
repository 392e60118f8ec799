//! Admission as the apiserver does it, offline: structural schema + CEL rules of our CRDs,
//! on create and on update (transition rules with oldSelf), with apiserver wording.

use hitl_operator::validate::Schemas;
use serde_json::{Value, json};

fn errors(object: &Value, old: Option<&Value>) -> Vec<String> {
    match Schemas::shared().validate(object, old) {
        Ok(()) => Vec::new(),
        Err(invalid) => invalid.lines(),
    }
}

fn assert_valid(object: &Value) {
    assert_eq!(errors(object, None), Vec::<String>::new());
}

fn assert_rejected(object: &Value, old: Option<&Value>, expected: &str) {
    let found = errors(object, old);
    assert!(
        found.iter().any(|line| line == expected),
        "expected {expected:?} among {found:#?}"
    );
}

fn agent(name: &str, declarative: Value) -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "Agent",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "Declarative", "declarative": declarative}
    })
}

fn agent_with_server(server: Value) -> Value {
    agent(
        "a",
        json!({"systemMessage": "hi", "tools": [{"type": "McpServer", "mcpServer": server}]}),
    )
}

// ---- Agent ----

#[test]
fn seed_example_without_kind_or_group_is_valid() {
    assert_valid(&agent_with_server(json!({
        "name": "filesystem-server",
        "toolNames": ["read_file", "write_file", "delete_file"],
        "requireApproval": ["delete_file", "write_file"]
    })));
}

#[test]
fn require_approval_outside_tool_names_is_rejected_with_kagents_message() {
    assert_rejected(
        &agent_with_server(
            json!({"name": "fs", "toolNames": ["read_file"], "requireApproval": ["delete_file"]}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].mcpServer: Invalid value: each requireApproval entry must also appear in toolNames",
    );
}

#[test]
fn require_approval_without_tool_names_is_rejected() {
    assert_rejected(
        &agent_with_server(json!({"name": "fs", "requireApproval": ["delete_file"]})),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].mcpServer: Invalid value: each requireApproval entry must also appear in toolNames",
    );
}

#[test]
fn duplicate_tool_names_are_rejected_as_a_set() {
    assert_rejected(
        &agent_with_server(
            json!({"name": "fs", "toolNames": ["write_file", "read_file", "read_file"]}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].mcpServer.toolNames[2]: Duplicate value: \"read_file\"",
    );
}

#[test]
fn duplicate_require_approval_entries_are_rejected() {
    assert_rejected(
        &agent_with_server(
            json!({"name": "fs", "toolNames": ["rm"], "requireApproval": ["rm", "rm"]}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].mcpServer.requireApproval[1]: Duplicate value: \"rm\"",
    );
}

#[test]
fn more_than_fifty_tool_names_are_rejected() {
    let names: Vec<String> = (0..51).map(|i| format!("tool_{i}")).collect();
    assert_rejected(
        &agent_with_server(json!({"name": "fs", "toolNames": names})),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].mcpServer.toolNames: Too many: 51: must have at most 50 items",
    );
}

#[test]
fn more_than_twenty_tool_servers_are_rejected() {
    let tools: Vec<Value> = (0..21)
        .map(|i| json!({"type": "McpServer", "mcpServer": {"name": format!("s{i}"), "toolNames": ["t"]}}))
        .collect();
    assert_rejected(
        &agent("a", json!({"systemMessage": "hi", "tools": tools})),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools: Too many: 21: must have at most 20 items",
    );
}

#[test]
fn overlong_tool_names_are_rejected() {
    let long = "x".repeat(129);
    assert_rejected(
        &agent_with_server(json!({"name": "fs", "toolNames": [long]})),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].mcpServer.toolNames[0]: Too long: may not be more than 128 bytes",
    );
}

#[test]
fn unknown_fields_are_rejected_not_dropped() {
    assert_rejected(
        &agent(
            "a",
            json!({"systemMessage": "hi", "memories": [{"name": "m"}]}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.memories: Invalid value: unknown field \"spec.declarative.memories\"",
    );
}

#[test]
fn declarative_type_requires_the_declarative_block() {
    let object = json!({
        "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
        "metadata": {"name": "a"}, "spec": {"type": "Declarative"}
    });
    assert_rejected(
        &object,
        None,
        "The Agent \"a\" is invalid: spec: Invalid value: spec.declarative is required when type is Declarative",
    );
}

#[test]
fn byo_agents_pass_admission_for_kagent_compatibility() {
    assert_valid(&json!({
        "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
        "metadata": {"name": "byo"}, "spec": {"type": "BYO", "byo": {"deployment": {"image": "x"}}}
    }));
}

#[test]
fn system_message_and_system_message_from_are_exclusive() {
    assert_rejected(
        &agent(
            "a",
            json!({"systemMessage": "hi", "systemMessageFrom": {"type": "ConfigMap", "name": "c", "key": "k"}}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative: Invalid value: systemMessage and systemMessageFrom are mutually exclusive",
    );
}

#[test]
fn unknown_approval_mode_is_unsupported() {
    assert_rejected(
        &agent(
            "a",
            json!({"systemMessage": "hi", "approval": {"mode": "Sometimes"}}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.approval.mode: Unsupported value: \"Sometimes\": supported values: \"Gate\", \"Runtime\", \"Both\"",
    );
}

#[test]
fn malformed_durations_are_rejected() {
    let found = errors(
        &agent(
            "a",
            json!({"systemMessage": "hi", "approval": {"timeout": "1 hour"}}),
        ),
        None,
    );
    assert!(
        found.iter().any(|l| l.starts_with("The Agent \"a\" is invalid: spec.declarative.approval.timeout: Invalid value: \"1 hour\": spec.declarative.approval.timeout in body should match")),
        "{found:#?}"
    );
}

#[test]
fn go_durations_are_accepted() {
    assert_valid(&agent(
        "a",
        json!({"systemMessage": "hi", "approval": {"mode": "Both", "timeout": "1h30m", "waitTimeout": "45s", "ttlAfterFinished": "168h"}}),
    ));
}

#[test]
fn agent_tools_follow_kagents_type_rules() {
    let with_tools = |tools: Value| agent("a", json!({"systemMessage": "hi", "tools": tools}));
    assert_valid(&with_tools(
        json!([{"type": "Agent", "agent": {"name": "b"}}]),
    ));
    for (tools, message) in [
        (
            json!([{"type": "Agent"}]),
            "type.agent must be specified for Agent filter.type",
        ),
        (
            json!([{"type": "McpServer"}]),
            "type.mcpServer must be specified for McpServer filter.type",
        ),
        (
            json!([{"type": "McpServer", "mcpServer": {"name": "s"}, "agent": {"name": "b"}}]),
            "type.agent must be nil if the type is not Agent",
        ),
        (
            json!([{"type": "Agent", "agent": {"name": "b"}, "mcpServer": {"name": "s"}}]),
            "type.mcpServer must be nil if the type is not McpServer",
        ),
    ] {
        assert_rejected(
            &with_tools(tools),
            None,
            &format!(
                "The Agent \"a\" is invalid: spec.declarative.tools[0]: Invalid value: {message}"
            ),
        );
    }
    assert_rejected(
        &with_tools(json!([{"type": "Script"}])),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].type: Unsupported value: \"Script\": supported values: \"McpServer\", \"Agent\"",
    );
}

#[test]
fn service_account_name_and_config_are_mutually_exclusive() {
    assert_rejected(
        &agent(
            "a",
            json!({"systemMessage": "hi", "deployment": {"serviceAccountName": "sa",
                   "serviceAccountConfig": {"labels": {"a": "b"}}}}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.deployment: Invalid value: serviceAccountName and serviceAccountConfig are mutually exclusive",
    );
}

#[test]
fn unsupported_tool_server_kinds_are_rejected() {
    assert_rejected(
        &agent_with_server(json!({"name": "fs", "kind": "Pod", "toolNames": ["t"]})),
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].mcpServer.kind: Unsupported value: \"Pod\": supported values: \"RemoteMCPServer\", \"Service\", \"MCPServer\"",
    );
}

#[test]
fn skills_context_and_allowed_namespaces_follow_kagents_schema() {
    let with_spec = |extra: Value| {
        let mut object = agent("a", json!({"systemMessage": "hi"}));
        object["spec"]
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        object
    };
    assert_valid(&with_spec(json!({
        "skills": {"refs": ["foo:latest"], "gitRefs": [{"url": "https://g/o/r", "ref": "v1"}],
                   "gitAuthSecretRef": {"name": "token"}},
        "allowedNamespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "a"}}}
    })));
    assert_rejected(
        &with_spec(json!({"skills": {"insecureSkipVerify": true}})),
        None,
        "The Agent \"a\" is invalid: spec.skills: Invalid value: at least one of the fields in [refs gitRefs] must be set",
    );
    assert_rejected(
        &with_spec(json!({"allowedNamespaces": {"from": "Selector"}})),
        None,
        "The Agent \"a\" is invalid: spec.allowedNamespaces: Invalid value: selector must be specified when from is Selector",
    );
    assert_rejected(
        &with_spec(json!({"skills": {"gitRefs": [{"ref": "main"}]}})),
        None,
        "The Agent \"a\" is invalid: spec.skills.gitRefs[0].url: Required value",
    );
    let compaction = agent(
        "a",
        json!({"systemMessage": "hi", "context": {"compaction": {"compactionInterval": 0}}}),
    );
    assert_rejected(
        &compaction,
        None,
        "The Agent \"a\" is invalid: spec.declarative.context.compaction.compactionInterval: Invalid value: 0: spec.declarative.context.compaction.compactionInterval in body should be greater than or equal to 1",
    );
    assert_valid(&agent(
        "a",
        json!({"systemMessage": "hi", "executeCodeBlocks": true,
               "promptTemplate": {"dataSources": [{"kind": "ConfigMap", "name": "frags", "alias": "f"}]},
               "a2aConfig": {"skills": [{"id": "s", "name": "S", "tags": ["t"]}]}}),
    ));
}

#[test]
fn a_header_needs_exactly_one_of_value_and_value_from() {
    let object = agent(
        "a",
        json!({"systemMessage": "hi", "tools": [{"type": "McpServer", "mcpServer": {"name": "s", "toolNames": ["t"]},
            "headersFrom": [{"name": "X", "value": "v", "valueFrom": {"type": "Secret", "name": "s", "key": "k"}}]}]}),
    );
    assert_rejected(
        &object,
        None,
        "The Agent \"a\" is invalid: spec.declarative.tools[0].headersFrom[0]: Invalid value: exactly one of value and valueFrom must be set",
    );
}

#[test]
fn names_must_be_dns_subdomains() {
    let found = errors(&agent("Bad_Name", json!({"systemMessage": "hi"})), None);
    assert!(
        found[0].starts_with("The Agent \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"),
        "{found:#?}"
    );
}

#[test]
fn wrong_json_types_are_rejected() {
    assert_rejected(
        &agent(
            "a",
            json!({"systemMessage": "hi", "deployment": {"replicas": "two"}}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.deployment.replicas: Invalid value: \"string\": spec.declarative.deployment.replicas in body must be of type integer: \"string\"",
    );
}

#[test]
fn kubernetes_types_inside_the_agent_are_checked_too() {
    let object = agent(
        "a",
        json!({"systemMessage": "hi", "deployment": {"resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
            "tolerations": [{"key": "k", "operator": "Exists"}], "env": [{"value": "no name"}]}}),
    );
    assert_rejected(
        &object,
        None,
        "The Agent \"a\" is invalid: spec.declarative.deployment.env[0].name: Required value",
    );
}

// ---- ModelConfig ----

fn model_config(spec: Value) -> Value {
    json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig", "metadata": {"name": "m"}, "spec": spec})
}

#[test]
fn openai_model_config_is_valid() {
    assert_valid(&model_config(json!({
        "provider": "OpenAI", "model": "gpt-4o", "apiKeySecret": "s", "apiKeySecretKey": "k",
        "openAI": {"temperature": "0.7", "maxTokens": 1024, "topP": "0.95", "reasoningEffort": "low"},
        "defaultHeaders": {"User-Agent": "kagent/1.0"}
    })));
}

#[test]
fn provider_block_must_match_the_provider() {
    assert_rejected(
        &model_config(json!({"provider": "Anthropic", "model": "claude", "openAI": {}})),
        None,
        "The ModelConfig \"m\" is invalid: spec: Invalid value: provider.openAI must be nil if the provider is not OpenAI",
    );
}

#[test]
fn provider_defaults_to_openai_as_in_kagent() {
    assert_valid(&model_config(
        json!({"model": "gpt-4o", "openAI": {"baseUrl": "http://litellm:4000"}}),
    ));
    assert_rejected(
        &model_config(json!({"model": "claude", "anthropic": {}})),
        None,
        "The ModelConfig \"m\" is invalid: spec: Invalid value: provider.anthropic must be nil if the provider is not Anthropic",
    );
}

#[test]
fn provider_blocks_are_optional_in_the_schema_as_in_kagent() {
    // kagent's CRD accepts these; rendering refuses them, naming the missing block.
    assert_valid(&model_config(
        json!({"provider": "AzureOpenAI", "model": "gpt"}),
    ));
    assert_valid(&model_config(
        json!({"provider": "Bedrock", "model": "claude"}),
    ));
}

#[test]
fn api_key_secret_key_needs_the_secret() {
    assert_rejected(
        &model_config(json!({"provider": "OpenAI", "model": "gpt-4o", "apiKeySecretKey": "k"})),
        None,
        "The ModelConfig \"m\" is invalid: spec: Invalid value: apiKeySecret must be set if apiKeySecretKey is set",
    );
    assert_rejected(
        &model_config(json!({"provider": "OpenAI", "model": "gpt-4o", "apiKeySecret": "s"})),
        None,
        "The ModelConfig \"m\" is invalid: spec: Invalid value: apiKeySecretKey must be set if apiKeySecret is set (except for Bedrock provider)",
    );
}

#[test]
fn bedrock_takes_a_credentials_secret_alone() {
    assert_valid(&model_config(json!({
        "provider": "Bedrock", "model": "us.anthropic.claude-sonnet-4-20250514-v1:0",
        "apiKeySecret": "aws-credentials", "bedrock": {"region": "us-east-1"}
    })));
}

#[test]
fn api_key_passthrough_excludes_a_secret_and_the_google_providers() {
    assert_valid(&model_config(
        json!({"provider": "Anthropic", "model": "claude", "apiKeyPassthrough": true}),
    ));
    assert_rejected(
        &model_config(
            json!({"provider": "OpenAI", "model": "gpt-4o", "apiKeyPassthrough": true,
            "apiKeySecret": "s", "apiKeySecretKey": "k"}),
        ),
        None,
        "The ModelConfig \"m\" is invalid: spec: Invalid value: apiKeyPassthrough and apiKeySecret are mutually exclusive",
    );
    for provider in ["Gemini", "GeminiVertexAI", "AnthropicVertexAI"] {
        assert_rejected(
            &model_config(json!({"provider": provider, "model": "m", "apiKeyPassthrough": true})),
            None,
            "The ModelConfig \"m\" is invalid: spec: Invalid value: apiKeyPassthrough must be false if provider is Gemini;GeminiVertexAI;AnthropicVertexAI",
        );
    }
    assert_rejected(
        &model_config(json!({"provider": "OpenAI", "model": "gpt-4o", "apiKeyPassthrough": "yes"})),
        None,
        "The ModelConfig \"m\" is invalid: spec.apiKeyPassthrough: Invalid value: \"string\": spec.apiKeyPassthrough in body must be of type boolean: \"string\"",
    );
}

#[test]
fn tls_ca_secret_and_key_go_together_unless_verification_is_off() {
    assert_valid(&model_config(
        json!({"provider": "OpenAI", "model": "gpt-4o",
        "tls": {"caCertSecretRef": "ca", "caCertSecretKey": "ca.crt", "disableSystemCAs": true}}),
    ));
    assert_valid(&model_config(
        json!({"provider": "OpenAI", "model": "gpt-4o", "tls": {"disableVerify": true}}),
    ));
    // With verification off, a CA Secret without a key passes, as in kagent.
    assert_valid(&model_config(
        json!({"provider": "OpenAI", "model": "gpt-4o",
        "tls": {"disableVerify": true, "caCertSecretRef": "ca"}}),
    ));
    assert_rejected(
        &model_config(
            json!({"provider": "OpenAI", "model": "gpt-4o", "tls": {"caCertSecretRef": "ca"}}),
        ),
        None,
        "The ModelConfig \"m\" is invalid: spec: Invalid value: caCertSecretRef requires caCertSecretKey (unless disableVerify is true)",
    );
    let key_alone = model_config(
        json!({"provider": "OpenAI", "model": "gpt-4o", "tls": {"caCertSecretKey": "ca.crt"}}),
    );
    assert_rejected(
        &key_alone,
        None,
        "The ModelConfig \"m\" is invalid: spec: Invalid value: caCertSecretKey requires caCertSecretRef",
    );
    assert_rejected(
        &key_alone,
        None,
        "The ModelConfig \"m\" is invalid: spec: Invalid value: caCertSecretKey requires caCertSecretRef (unless disableVerify is true)",
    );
    assert_rejected(
        &model_config(json!({"provider": "OpenAI", "model": "gpt-4o",
            "tls": {"disableVerify": "false"}})),
        None,
        "The ModelConfig \"m\" is invalid: spec.tls.disableVerify: Invalid value: \"string\": spec.tls.disableVerify in body must be of type boolean: \"string\"",
    );
}

#[test]
fn provider_fields_have_kagents_types() {
    assert_valid(&model_config(
        json!({"provider": "Anthropic", "model": "claude",
        "anthropic": {"baseUrl": "https://a.example", "maxTokens": 4096, "temperature": "0.3",
            "topP": "0.9", "topK": 40}}),
    ));
    assert_rejected(
        &model_config(json!({"provider": "Anthropic", "model": "claude",
            "anthropic": {"topK": "40"}})),
        None,
        "The ModelConfig \"m\" is invalid: spec.anthropic.topK: Invalid value: \"string\": spec.anthropic.topK in body must be of type integer: \"string\"",
    );
    assert_valid(&model_config(
        json!({"provider": "AzureOpenAI", "model": "gpt-4o",
        "apiKeySecret": "s", "apiKeySecretKey": "k",
        "azureOpenAI": {"azureEndpoint": "https://e.example", "apiVersion": "2024-10-21",
            "azureDeployment": "prod", "azureAdToken": "t", "temperature": "0.1",
            "maxTokens": 100, "topP": "0.5"}}),
    ));
    assert_rejected(
        &model_config(json!({"provider": "AzureOpenAI", "model": "gpt-4o",
            "azureOpenAI": {"apiVersion": "2024-10-21"}})),
        None,
        "The ModelConfig \"m\" is invalid: spec.azureOpenAI.azureEndpoint: Required value",
    );
    assert_valid(&model_config(
        json!({"provider": "GeminiVertexAI", "model": "gemini-2.0-flash",
        "geminiVertexAI": {"projectID": "p", "location": "us-central1", "temperature": "0.2",
            "topP": "0.9", "topK": "40", "stopSequences": ["END"], "maxOutputTokens": 1024,
            "candidateCount": 1, "responseMimeType": "application/json"}}),
    ));
    assert_valid(&model_config(
        json!({"provider": "AnthropicVertexAI", "model": "claude",
        "anthropicVertexAI": {"projectID": "p", "location": "us-east5", "maxTokens": 1024,
            "topK": "40"}}),
    ));
    assert_rejected(
        &model_config(json!({"provider": "GeminiVertexAI", "model": "g",
            "geminiVertexAI": {"location": "us-central1"}})),
        None,
        "The ModelConfig \"m\" is invalid: spec.geminiVertexAI.projectID: Required value",
    );
    assert_rejected(
        &model_config(json!({"provider": "Mistral", "model": "m"})),
        None,
        "The ModelConfig \"m\" is invalid: spec.provider: Unsupported value: \"Mistral\": supported values: \"Anthropic\", \"OpenAI\", \"AzureOpenAI\", \"Ollama\", \"Gemini\", \"GeminiVertexAI\", \"AnthropicVertexAI\", \"Bedrock\"",
    );
}

#[test]
fn decimal_parameters_are_strings_as_in_kagent() {
    // kagent's CRD takes any string here; rendering refuses one that is not a number.
    assert_valid(&model_config(
        json!({"provider": "OpenAI", "model": "g", "openAI": {"temperature": "hot"}}),
    ));
    assert_rejected(
        &model_config(json!({"provider": "OpenAI", "model": "g", "openAI": {"temperature": 0.7}})),
        None,
        "The ModelConfig \"m\" is invalid: spec.openAI.temperature: Invalid value: \"number\": spec.openAI.temperature in body must be of type string: \"number\"",
    );
}

#[test]
fn memory_names_a_model_config_and_keeps_memories_at_least_a_day() {
    assert_valid(&agent(
        "a",
        json!({"systemMessage": "hi", "memory": {"modelConfig": "embeddings", "ttlDays": 15}}),
    ));
    assert_rejected(
        &agent(
            "a",
            json!({"systemMessage": "hi", "memory": {"ttlDays": 15}}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.memory.modelConfig: Required value",
    );
    assert_rejected(
        &agent(
            "a",
            json!({"systemMessage": "hi", "memory": {"modelConfig": "e", "ttlDays": 0}}),
        ),
        None,
        "The Agent \"a\" is invalid: spec.declarative.memory.ttlDays: Invalid value: 0: spec.declarative.memory.ttlDays in body should be greater than or equal to 1",
    );
}

// ---- RemoteMCPServer ----

fn remote(spec: Value) -> Value {
    json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer", "metadata": {"name": "r"}, "spec": spec})
}

#[test]
fn remote_server_is_valid() {
    assert_valid(&remote(
        json!({"url": "https://tools.example/mcp", "protocol": "SSE", "timeout": "30s", "sseReadTimeout": "5m0s"}),
    ));
}

#[test]
fn remote_server_url_must_be_http() {
    assert_rejected(
        &remote(json!({"url": "ftp://tools/mcp"})),
        None,
        "The RemoteMCPServer \"r\" is invalid: spec.url: Invalid value: \"ftp://tools/mcp\": spec.url in body should match '^https?://'",
    );
}

#[test]
fn remote_server_protocol_is_an_enum() {
    assert_rejected(
        &remote(json!({"url": "http://t/mcp", "protocol": "WEBSOCKET"})),
        None,
        "The RemoteMCPServer \"r\" is invalid: spec.protocol: Unsupported value: \"WEBSOCKET\": supported values: \"STREAMABLE_HTTP\", \"SSE\"",
    );
}

// ---- ApprovalRequest ----

const SHA: &str = "0b52e1b2c7c7b7d5f5d0a3c2e0b1a4f6c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4";

fn request() -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "ApprovalRequest",
        "metadata": {"name": "r1", "namespace": "default"},
        "spec": {
            "agentRef": {"name": "file-agent"},
            "toolServer": {"kind": "RemoteMCPServer", "name": "filesystem-server", "namespace": "default"},
            "toolName": "delete_file",
            "argumentsPreview": {"path": "/data/report.csv"},
            "argumentsSha256": SHA,
            "argumentsBytes": 29,
            "requestedBy": "system:serviceaccount:default:file-agent",
            "message": "Run 'delete_file'?",
            "context": {"sessionId": "s1", "callId": "7"},
            "expiresAt": "2026-11-22T01:00:00Z"
        },
        "status": {"phase": "Pending"}
    })
}

fn with(mut object: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    object.pointer_mut(parent).unwrap()[key] = value;
    object
}

fn without(mut object: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    object
        .pointer_mut(parent)
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove(key);
    object
}

fn decided(kind: &str) -> Value {
    with(
        request(),
        "/spec/decision",
        json!({"type": kind, "reason": "ok", "decidedBy": "alice"}),
    )
}

#[test]
fn approval_request_is_valid_on_create() {
    assert_valid(&request());
}

#[test]
fn arguments_hash_must_be_sha256_hex() {
    let found = errors(
        &with(request(), "/spec/argumentsSha256", json!("abc")),
        None,
    );
    assert!(
        found.iter().any(|l| l.contains("spec.argumentsSha256: Invalid value: \"abc\": spec.argumentsSha256 in body should be at least 64 chars long")),
        "{found:#?}"
    );
}

#[test]
fn expires_at_must_be_a_timestamp() {
    let found = errors(&with(request(), "/spec/expiresAt", json!("tomorrow")), None);
    assert!(
        found
            .iter()
            .any(|l| l.contains("spec.expiresAt: Invalid value: \"tomorrow\"")),
        "{found:#?}"
    );
}

#[test]
fn approved_phase_requires_an_approve_decision() {
    assert_rejected(
        &with(request(), "/status/phase", json!("Approved")),
        None,
        "The ApprovalRequest \"r1\" is invalid: <nil>: Invalid value: phase Approved or Executed requires spec.decision.type Approve or spec.grant",
    );
    assert_rejected(
        &with(decided("Deny"), "/status/phase", json!("Executed")),
        None,
        "The ApprovalRequest \"r1\" is invalid: <nil>: Invalid value: phase Approved or Executed requires spec.decision.type Approve or spec.grant",
    );
}

#[test]
fn executed_with_an_approve_decision_is_valid() {
    let object = with(
        decided("Approve"),
        "/status",
        json!({"phase": "Executed", "consumedAt": "2026-11-22T00:10:00Z", "consumedBy": "pod-1"}),
    );
    assert_eq!(
        errors(&object, Some(&decided("Approve"))),
        Vec::<String>::new()
    );
}

const DECISION_ON_CREATE: &str = "The ApprovalRequest \"r1\" is invalid: spec.decision: Invalid value: spec.decision cannot be set when the request is created: only an approver adds it later";

#[test]
fn a_request_cannot_be_created_with_a_decision() {
    // Without admission policies, whoever may create requests (an agent's gate) could
    // otherwise create one already approved (issue 10, item 4).
    assert_rejected(&decided("Approve"), None, DECISION_ON_CREATE);
    assert_rejected(&decided("Deny"), None, DECISION_ON_CREATE);
    let approved_and_executed = with(
        decided("Approve"),
        "/status",
        json!({"phase": "Executed", "consumedAt": "2026-11-22T00:10:00Z"}),
    );
    assert_rejected(&approved_and_executed, None, DECISION_ON_CREATE);
}

#[test]
fn the_decision_rule_lets_later_writes_through() {
    // Created without a decision: valid (also approval_request_is_valid_on_create).
    assert_valid(&request());
    // The first decision, then a status write on the decided request.
    assert_eq!(
        errors(&decided("Approve"), Some(&request())),
        Vec::<String>::new()
    );
    let consumed = with(
        decided("Approve"),
        "/status",
        json!({"phase": "Executed", "consumedAt": "2026-11-22T00:10:00Z"}),
    );
    assert_eq!(
        errors(&consumed, Some(&decided("Approve"))),
        Vec::<String>::new()
    );
}

#[test]
fn consumption_requires_an_approve_decision() {
    assert_rejected(
        &with(
            request(),
            "/status/consumedAt",
            json!("2026-11-22T00:10:00Z"),
        ),
        None,
        "The ApprovalRequest \"r1\" is invalid: <nil>: Invalid value: status.consumedAt may only be set on an approved request",
    );
}

#[test]
fn writing_the_first_decision_is_allowed() {
    assert_eq!(
        errors(&decided("Approve"), Some(&request())),
        Vec::<String>::new()
    );
}

#[test]
fn a_decision_cannot_be_changed() {
    assert_rejected(
        &decided("Deny"),
        Some(&decided("Approve")),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec.decision is write-once: it cannot be changed or removed once set",
    );
}

#[test]
fn a_decision_reason_cannot_be_edited_afterwards() {
    let edited = with(
        decided("Approve"),
        "/spec/decision/reason",
        json!("changed my mind"),
    );
    assert_rejected(
        &edited,
        Some(&decided("Approve")),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec.decision is write-once: it cannot be changed or removed once set",
    );
}

#[test]
fn a_decision_cannot_be_removed() {
    assert_rejected(
        &request(),
        Some(&decided("Deny")),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec.decision is write-once: it cannot be changed or removed once set",
    );
}

#[test]
fn the_tool_cannot_be_swapped_after_creation() {
    assert_rejected(
        &with(request(), "/spec/toolName", json!("read_file")),
        Some(&request()),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals",
    );
}

#[test]
fn the_arguments_hash_cannot_be_swapped_after_creation() {
    let other = SHA.replace('0', "1");
    assert_rejected(
        &with(request(), "/spec/argumentsSha256", json!(other)),
        Some(&request()),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals",
    );
}

#[test]
fn the_preview_cannot_be_edited_after_creation() {
    assert_rejected(
        &with(
            request(),
            "/spec/argumentsPreview",
            json!({"path": "/data/harmless.txt"}),
        ),
        Some(&request()),
        "The ApprovalRequest \"r1\" is invalid: spec.argumentsPreview: Invalid value: spec is immutable except spec.decision and spec.approvals",
    );
}

#[test]
fn optional_spec_fields_cannot_be_removed_after_creation() {
    assert_rejected(
        &without(request(), "/spec/message"),
        Some(&request()),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals",
    );
}

/// Every way a write can take a status field away from `old` (the same shapes a merge patch,
/// a JSON patch, a PUT or a server-side apply produce once the apiserver has applied them): the
/// field removed or nulled, the whole status removed or emptied, and the field set to each of
/// `others`.
fn rewinds(old: &Value, field: &str, others: &[Value]) -> Vec<(String, Value)> {
    let mut out = vec![
        ("no status".to_owned(), without(old.clone(), "/status")),
        (
            "status {}".to_owned(),
            with(old.clone(), "/status", json!({})),
        ),
        (
            format!("no status.{field}"),
            without(old.clone(), &format!("/status/{field}")),
        ),
    ];
    for other in others {
        out.push((
            format!("status.{field} = {other}"),
            with(old.clone(), &format!("/status/{field}"), other.clone()),
        ));
    }
    out
}

/// The status guarantees of ApprovalRequest hold against every rewind, offline: the rules sit
/// on the root, so a write that removes or replaces the status object cannot skip them.
#[test]
fn a_consumed_request_never_becomes_consumable_again() {
    let consumed = with(
        decided("Approve"),
        "/status",
        json!({"phase": "Executed", "decidedAt": "2026-11-22T00:05:00Z",
               "consumedAt": "2026-11-22T00:10:00Z", "consumedBy": "gate-1"}),
    );
    let approved = with(decided("Approve"), "/status/phase", json!("Approved"));
    assert_eq!(errors(&consumed, Some(&approved)), Vec::<String>::new());
    let earlier = json!("2026-11-22T00:00:00Z");
    let guarded = [
        (
            "consumedAt",
            "status.consumedAt is write-once: a consumed approval never becomes consumable again",
            vec![earlier.clone()],
        ),
        (
            "consumedBy",
            "status.consumedBy is write-once",
            vec![json!("forged")],
        ),
        (
            "decidedAt",
            "status.decidedAt is write-once",
            vec![earlier.clone()],
        ),
        (
            "phase",
            "a finished request's phase cannot change",
            ["Pending", "Approved", "Denied", "Expired", "Cancelled"]
                .map(|p| json!(p))
                .to_vec(),
        ),
    ];
    for (field, message, others) in guarded {
        for (how, rewound) in rewinds(&consumed, field, &others) {
            let expected = format!(
                "The ApprovalRequest \"r1\" is invalid: status.{field}: Invalid value: {message}"
            );
            let found = errors(&rewound, Some(&consumed));
            assert!(
                found.contains(&expected),
                "{how}: expected {expected:?} among {found:#?}"
            );
        }
    }
}

#[test]
fn a_late_decision_revives_nothing() {
    let expired = with(request(), "/status/phase", json!("Expired"));
    for revived in [
        with(decided("Approve"), "/status/phase", json!("Approved")),
        without(decided("Approve"), "/status"),
    ] {
        assert_rejected(
            &revived,
            Some(&expired),
            "The ApprovalRequest \"r1\" is invalid: status.phase: Invalid value: a finished request's phase cannot change",
        );
    }
}

#[test]
fn decided_at_only_on_a_decided_request() {
    assert_rejected(
        &with(
            request(),
            "/status/decidedAt",
            json!("2026-11-22T00:05:00Z"),
        ),
        Some(&request()),
        "The ApprovalRequest \"r1\" is invalid: status.decidedAt: Invalid value: status.decidedAt may only be set on a decided request",
    );
}

#[test]
fn a_denied_request_cannot_be_executed() {
    let denied = with(decided("Deny"), "/status/phase", json!("Denied"));
    let found = errors(
        &with(decided("Deny"), "/status/phase", json!("Executed")),
        Some(&denied),
    );
    assert!(found.len() >= 2, "{found:#?}");
}

// ---- ApprovalRequest: quorum ----

/// A request needing two approvals, approved so far by `approvers`.
fn quorum(approvers: &[&str]) -> Value {
    let mut object = with(request(), "/spec/requiredApprovals", json!(2));
    if !approvers.is_empty() {
        let approvals: Vec<Value> = approvers
            .iter()
            .map(|by| json!({"approvedBy": by, "reason": "ok"}))
            .collect();
        object = with(object, "/spec/approvals", json!(approvals));
    }
    object
}

fn approve(object: Value, by: &str) -> Value {
    with(
        object,
        "/spec/decision",
        json!({"type": "Approve", "decidedBy": by}),
    )
}

const APPROVE_WITHOUT_QUORUM: &str = "The ApprovalRequest \"r1\" is invalid: spec.decision: Invalid value: an Approve decision on a request with spec.requiredApprovals above 1 needs that many entries in spec.approvals, one of them by spec.decision.decidedBy";

#[test]
fn approvals_are_added_one_by_one_then_the_decision() {
    assert_valid(&quorum(&[]));
    let none = errors(&quorum(&["alice"]), Some(&quorum(&[])));
    assert_eq!(none, Vec::<String>::new());
    assert_eq!(
        errors(&quorum(&["alice", "bob"]), Some(&quorum(&["alice"]))),
        Vec::<String>::new()
    );
    // The approval completing the quorum and the decision in one write, by that approver.
    assert_eq!(
        errors(
            &approve(quorum(&["alice", "bob"]), "bob"),
            Some(&quorum(&["alice"]))
        ),
        Vec::<String>::new()
    );
    // A Deny needs no approvals.
    let denied = with(
        quorum(&["alice"]),
        "/spec/decision",
        json!({"type": "Deny", "decidedBy": "carol"}),
    );
    assert_eq!(
        errors(&denied, Some(&quorum(&["alice"]))),
        Vec::<String>::new()
    );
}

#[test]
fn approve_without_the_quorum_is_refused() {
    assert_rejected(
        &approve(quorum(&["alice"]), "alice"),
        Some(&quorum(&["alice"])),
        APPROVE_WITHOUT_QUORUM,
    );
    assert_rejected(
        &approve(quorum(&[]), "alice"),
        Some(&quorum(&[])),
        APPROVE_WITHOUT_QUORUM,
    );
    // Enough approvals, but the decider is not one of the approvers.
    assert_rejected(
        &approve(quorum(&["alice", "bob"]), "carol"),
        Some(&quorum(&["alice", "bob"])),
        APPROVE_WITHOUT_QUORUM,
    );
    // A request without requiredApprovals is approved by its decision alone, as before.
    assert_eq!(
        errors(&decided("Approve"), Some(&request())),
        Vec::<String>::new()
    );
}

#[test]
fn one_person_cannot_approve_twice() {
    let found = errors(&quorum(&["alice", "alice"]), Some(&quorum(&["alice"])));
    assert!(
        found
            .iter()
            .any(|l| l.contains("spec.approvals[1]: Duplicate value")),
        "{found:#?}"
    );
}

#[test]
fn approvals_are_append_only() {
    const APPEND_ONLY: &str = "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec.approvals is append-only: an approval cannot be changed or removed";
    assert_rejected(&quorum(&[]), Some(&quorum(&["alice"])), APPEND_ONLY);
    assert_rejected(&quorum(&["bob"]), Some(&quorum(&["alice"])), APPEND_ONLY);
    let edited = with(
        quorum(&["alice"]),
        "/spec/approvals/0/reason",
        json!("changed"),
    );
    assert_rejected(&edited, Some(&quorum(&["alice"])), APPEND_ONLY);
}

#[test]
fn no_approvals_after_the_decision() {
    let denied = with(
        quorum(&["alice"]),
        "/spec/decision",
        json!({"type": "Deny", "decidedBy": "carol"}),
    );
    let late = with(
        denied.clone(),
        "/spec/approvals",
        json!([{"approvedBy": "alice"}, {"approvedBy": "bob"}]),
    );
    let late = with(late, "/spec/approvals/0/reason", json!("ok"));
    assert_rejected(
        &late,
        Some(&denied),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec.approvals cannot change once spec.decision is set",
    );
}

#[test]
fn required_approvals_is_immutable_and_approvals_come_later() {
    assert_rejected(
        &with(request(), "/spec/requiredApprovals", json!(1)),
        Some(&quorum(&[])),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals",
    );
    assert_rejected(
        &quorum(&[]),
        Some(&request()),
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals",
    );
    assert_rejected(
        &quorum(&["alice", "bob"]),
        None,
        "The ApprovalRequest \"r1\" is invalid: spec.approvals: Invalid value: spec.approvals cannot be set when the request is created: only approvers add them later",
    );
    let found = errors(&with(request(), "/spec/requiredApprovals", json!(17)), None);
    assert!(
        found.iter().any(|l| l.contains("spec.requiredApprovals")),
        "{found:#?}"
    );
}

#[test]
fn agent_rules_may_ask_for_up_to_five_approvals() {
    let with_rule = |required: i64| {
        agent(
            "a",
            json!({"systemMessage": "hi",
                   "tools": [{"type": "McpServer", "mcpServer": {"name": "bank", "toolNames": ["transfer_funds"]}}],
                   "approval": {"rules": [{"name": "two", "tool": "transfer_funds", "action": "RequireApproval", "requiredApprovals": required}]}}),
        )
    };
    assert_valid(&with_rule(2));
    assert_valid(&with_rule(5));
    let found = errors(&with_rule(6), None);
    assert!(
        found
            .iter()
            .any(|l| l.contains("spec.declarative.approval.rules[0].requiredApprovals")),
        "{found:#?}"
    );
}

// ---- CEL cost budget ----

/// Every rule of every CRD compiles and, with the schema node it sits on, passes kube-cel's
/// static cost estimate and bounds check (the apiserver refuses a CRD whose rules may exceed the budget).
#[test]
fn every_rule_fits_the_cel_cost_budget() {
    use kube::core::cel::{compile_schema, estimate_rule_cost};
    fn visit(node: &Value, path: &str, count: &mut usize, problems: &mut Vec<String>) {
        if let Some(rules) = node
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        {
            let compiled = compile_schema(node);
            assert!(
                !compiled.has_errors(),
                "{path}: {:?}",
                compiled.compilation_errors()
            );
            for rule in rules {
                let text = rule["rule"].as_str().unwrap();
                *count += 1;
                for warning in estimate_rule_cost(text, &compiled) {
                    problems.push(format!("{path}: {text}: {}", warning.message));
                }
            }
        }
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                visit(child, &format!("{path}.{name}"), count, problems);
            }
        }
        if let Some(items) = node.get("items") {
            visit(items, &format!("{path}[]"), count, problems);
        }
    }
    let mut count = 0;
    let mut problems = Vec::new();
    for crd in hitl_operator::api::crds() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        visit(
            &schema["openAPIV3Schema"],
            &crd.spec.names.kind,
            &mut count,
            &mut problems,
        );
    }
    assert!(
        count >= 25,
        "expected every rule to be visited, saw {count}"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

fn notifier(channel: Value) -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalNotifier",
        "metadata": {"name": "n", "namespace": "default"},
        "spec": {"channel": channel}
    })
}

#[test]
fn notifier_buttons_are_for_slack_only() {
    let url_from = json!({"name": "hook", "key": "url"});
    assert_valid(&notifier(
        json!({"type": "Slack", "urlFrom": url_from, "buttons": true}),
    ));
    assert_valid(&notifier(
        json!({"type": "Webhook", "urlFrom": url_from, "buttons": false}),
    ));
    assert_rejected(
        &notifier(json!({"type": "Webhook", "urlFrom": url_from, "buttons": true})),
        None,
        "The ApprovalNotifier \"n\" is invalid: spec.channel.buttons: Invalid value: buttons are for Slack channels only",
    );
}

// ---- ApprovalRequest decided by a grant ----

fn granted() -> Value {
    with(
        request(),
        "/spec/grant",
        json!({"name": "g1", "grantedBy": "alice", "reason": "cleanup week"}),
    )
}

#[test]
fn a_request_decided_by_a_grant_is_created_with_it_and_executes_without_a_decision() {
    assert_valid(&granted());
    let executed = with(
        granted(),
        "/status",
        json!({"phase": "Executed", "consumedAt": "2026-11-22T00:10:00Z", "consumedBy": "pod-1"}),
    );
    assert_eq!(errors(&executed, Some(&granted())), Vec::<String>::new());
}

#[test]
fn the_grant_of_a_request_is_immutable_and_excludes_a_decision() {
    const IMMUTABLE: &str = "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals";
    assert_rejected(&granted(), Some(&request()), IMMUTABLE);
    assert_rejected(&request(), Some(&granted()), IMMUTABLE);
    assert_rejected(
        &with(granted(), "/spec/grant/grantedBy", json!("mallory")),
        Some(&granted()),
        IMMUTABLE,
    );
    let both = with(
        granted(),
        "/spec/decision",
        json!({"type": "Deny", "decidedBy": "bob"}),
    );
    assert_rejected(
        &both,
        Some(&granted()),
        "The ApprovalRequest \"r1\" is invalid: spec.grant: Invalid value: a request decided by a grant (spec.grant) takes no decision, approvals or requiredApprovals",
    );
    assert_rejected(
        &with(granted(), "/spec/requiredApprovals", json!(2)),
        None,
        "The ApprovalRequest \"r1\" is invalid: spec.grant: Invalid value: a request decided by a grant (spec.grant) takes no decision, approvals or requiredApprovals",
    );
}

// ---- ApprovalGrant ----

fn approval_grant() -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "ApprovalGrant",
        "metadata": {"name": "g1", "namespace": "default"},
        "spec": {
            "agentRef": {"name": "file-agent"},
            "toolServer": {"kind": "RemoteMCPServer", "name": "filesystem-server", "namespace": "default"},
            "toolName": "delete_file",
            "sessionId": "s1",
            "expiresAt": "2026-11-22T01:00:00Z",
            "maxUses": 2,
            "reason": "cleanup week",
            "grantedBy": "alice"
        }
    })
}

const GRANT_IMMUTABLE: &str = "The ApprovalGrant \"g1\" is invalid: spec: Invalid value: a grant is immutable: only spec.revoked can be set";

#[test]
fn a_grant_needs_its_target_lifetime_reason_and_granter() {
    assert_valid(&approval_grant());
    assert_valid(&without(approval_grant(), "/spec/toolName"));
    for field in ["expiresAt", "reason", "grantedBy", "agentRef", "toolServer"] {
        let found = errors(&without(approval_grant(), &format!("/spec/{field}")), None);
        assert!(
            found
                .iter()
                .any(|l| l.contains(&format!("spec.{field}: Required value"))),
            "{field}: {found:#?}"
        );
    }
    let found = errors(&with(approval_grant(), "/spec/maxUses", json!(0)), None);
    assert!(
        found.iter().any(|l| l.contains("spec.maxUses")),
        "{found:#?}"
    );
}

#[test]
fn a_grant_is_immutable_but_for_revocation_which_sticks() {
    let old = approval_grant();
    for (pointer, value) in [
        ("/spec/toolName", json!("write_file")),
        ("/spec/expiresAt", json!("2026-11-23T01:00:00Z")),
        ("/spec/maxUses", json!(100)),
        ("/spec/grantedBy", json!("mallory")),
        ("/spec/sessionId", json!("s2")),
        ("/spec/when", json!("true")),
        ("/spec/agentRef/name", json!("other")),
    ] {
        assert_rejected(
            &with(old.clone(), pointer, value),
            Some(&old),
            GRANT_IMMUTABLE,
        );
    }
    assert_rejected(
        &without(old.clone(), "/spec/maxUses"),
        Some(&old),
        GRANT_IMMUTABLE,
    );
    let revoked = with(old.clone(), "/spec/revoked", json!(true));
    assert_eq!(errors(&revoked, Some(&old)), Vec::<String>::new());
    for unrevoked in [
        with(old.clone(), "/spec/revoked", json!(false)),
        old.clone(),
    ] {
        assert_rejected(
            &unrevoked,
            Some(&revoked),
            "The ApprovalGrant \"g1\" is invalid: spec: Invalid value: a revoked grant stays revoked",
        );
    }
}

#[test]
fn uses_never_exceed_max_uses_nor_decrease() {
    let used = |n: i64| with(approval_grant(), "/status", json!({"uses": n}));
    assert_eq!(errors(&used(2), Some(&used(1))), Vec::<String>::new());
    assert_rejected(
        &used(3),
        Some(&used(2)),
        "The ApprovalGrant \"g1\" is invalid: <nil>: Invalid value: status.uses cannot exceed spec.maxUses",
    );
    let unlimited = without(used(500), "/spec/maxUses");
    assert_eq!(errors(&unlimited, None), Vec::<String>::new());
}

/// A grant's uses never fall and its last use is never rewritten without a new one, whatever
/// the shape of the write: the rules sit on the root.
#[test]
fn a_grant_use_is_never_undone() {
    let used = with(
        approval_grant(),
        "/status",
        json!({"uses": 2, "lastUsedAt": "2026-11-22T00:10:00Z", "lastUsedBy": "r-2"}),
    );
    let never_fall = "status.uses: Invalid value: status.uses never decreases";
    for (how, rewound) in rewinds(&used, "uses", &[json!(0), json!(1)]) {
        let expected = format!("The ApprovalGrant \"g1\" is invalid: {never_fall}");
        let found = errors(&rewound, Some(&used));
        assert!(
            found.contains(&expected),
            "{how}: expected {expected:?} among {found:#?}"
        );
    }
    let only_with_a_use = "The ApprovalGrant \"g1\" is invalid: status: Invalid value: status.lastUsedAt and status.lastUsedBy change only with a new use (status.uses rising)";
    for (field, other) in [
        ("lastUsedAt", json!("2026-11-22T00:20:00Z")),
        ("lastUsedBy", json!("forged")),
    ] {
        for (how, rewound) in rewinds(&used, field, &[other]) {
            let found = errors(&rewound, Some(&used));
            assert!(
                found.iter().any(|l| l == only_with_a_use),
                "{how}: {found:#?}"
            );
        }
    }
    assert_rejected(
        &with(
            with(used.clone(), "/status/uses", json!(3)),
            "/status/lastUsedAt",
            json!("2026-11-22T00:00:00Z"),
        ),
        Some(&used),
        "The ApprovalGrant \"g1\" is invalid: status.lastUsedAt: Invalid value: status.lastUsedAt never goes back",
    );
    let next = with(
        with(
            with(used.clone(), "/status/uses", json!(3)),
            "/status/lastUsedAt",
            json!("2026-11-22T00:20:00Z"),
        ),
        "/status/lastUsedBy",
        json!("r-3"),
    );
    let next = without(next, "/spec/maxUses");
    assert_eq!(
        errors(&next, Some(&without(used, "/spec/maxUses"))),
        Vec::<String>::new()
    );
}

// ---- a shared gate's caller (spec.caller of requests and grants) ----

/// Every other value a write can leave where `value` was, generated from the value itself: for
/// an object, each key removed, each key's value replaced by each of its own others, and the
/// empty object; for a string, another; for an array, empty, one more entry and each entry
/// replaced or dropped; null.
fn others(value: &Value) -> Vec<(String, Value)> {
    let mut out = vec![("null".to_owned(), Value::Null)];
    match value {
        Value::Object(map) => {
            out.push(("{}".into(), json!({})));
            for (key, inner) in map {
                let mut removed = map.clone();
                removed.remove(key);
                out.push((format!("without .{key}"), Value::Object(removed)));
                for (how, other) in others(inner) {
                    let mut changed = map.clone();
                    changed.insert(key.clone(), other);
                    out.push((format!(".{key} {how}"), Value::Object(changed)));
                }
            }
        }
        Value::Array(items) => {
            out.push(("[]".into(), json!([])));
            let mut more = items.clone();
            more.push(json!("forged"));
            out.push(("one more entry".into(), Value::Array(more)));
            for (i, item) in items.iter().enumerate() {
                let mut dropped = items.clone();
                dropped.remove(i);
                out.push((format!("without [{i}]"), Value::Array(dropped)));
                for (how, other) in others(item) {
                    let mut changed = items.clone();
                    changed[i] = other;
                    out.push((format!("[{i}] {how}"), Value::Array(changed)));
                }
            }
        }
        Value::String(s) => out.push(("another string".into(), json!(format!("{s}-forged")))),
        _ => {}
    }
    out
}

/// Every way a write can take the field at `pointer` of `old` away or change it (removed,
/// nulled, and each generated other value), and give one to `bare`, a copy without it: each is
/// refused, with `immutable` whenever the written object would be valid on its own (otherwise
/// the schema refuses it first, as the apiserver does).
fn is_write_once(old: &Value, bare: &Value, pointer: &str, immutable: &str) {
    let field = old.pointer(pointer).expect("the field is set");
    let mut writes = vec![("removed".to_owned(), without(old.clone(), pointer))];
    for (how, other) in others(field) {
        writes.push((how, with(old.clone(), pointer, other)));
    }
    assert!(writes.len() >= 3, "{writes:#?}");
    for (how, written) in &writes {
        let found = errors(written, Some(old));
        assert!(!found.is_empty(), "{pointer} {how}: accepted");
        if errors(written, None).is_empty() {
            assert!(
                found.iter().any(|l| l == immutable),
                "{pointer} {how}: expected {immutable:?} among {found:#?}"
            );
        }
    }
    // Nor can one be added to an object made without it.
    let found = errors(old, Some(bare));
    assert!(found.iter().any(|l| l == immutable), "added: {found:#?}");
    // An unrelated write keeps it as it is.
    assert_eq!(errors(old, Some(old)), Vec::<String>::new());
}

#[test]
fn a_requests_caller_is_write_once_against_every_generated_write() {
    let shared = with(
        with(
            request(),
            "/spec/agentRef",
            json!({"name": "shared", "kind": "ToolGate"}),
        ),
        "/spec/caller",
        json!({"username": "system:serviceaccount:apps:bot-a", "uid": "u-1",
               "groups": ["system:serviceaccounts", "system:serviceaccounts:apps"]}),
    );
    assert_valid(&shared);
    is_write_once(
        &shared,
        &without(shared.clone(), "/spec/caller"),
        "/spec/caller",
        "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals",
    );
}

// ---- tool risk (spec.toolAnnotations of requests) ----

#[test]
fn a_requests_tool_annotations_are_write_once_against_every_generated_write() {
    let annotations = json!({"title": "Echo", "readOnlyHint": true, "destructiveHint": false,
        "idempotentHint": true, "openWorldHint": false, "trusted": false,
        "definitionSha256": "ab".repeat(32)});
    let annotated = with(request(), "/spec/toolAnnotations", annotations.clone());
    assert_valid(&annotated);
    let immutable = "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals";
    is_write_once(&annotated, &request(), "/spec/toolAnnotations", immutable);
    // Each hint, and the trust, flipped: what lowers the risk the approver saw most of all.
    for key in [
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
        "trusted",
    ] {
        let mut flipped = annotations.clone();
        flipped[key] = json!(!annotations[key].as_bool().unwrap());
        let written = with(annotated.clone(), "/spec/toolAnnotations", flipped);
        assert_valid(&written);
        let found = errors(&written, Some(&annotated));
        assert!(
            found.iter().any(|l| l == immutable),
            "{key} flipped: {found:#?}"
        );
    }
    // Nor can a hint the server left out be added later.
    let bare_hint = without(annotated.clone(), "/spec/toolAnnotations/readOnlyHint");
    let found = errors(&annotated, Some(&bare_hint));
    assert!(found.iter().any(|l| l == immutable), "{found:#?}");
    // A digest that is not one is refused by the schema.
    let bad = with(
        annotated.clone(),
        "/spec/toolAnnotations/definitionSha256",
        json!("xyz"),
    );
    assert!(!errors(&bad, None).is_empty());
}

#[test]
fn a_grants_caller_is_write_once_against_every_generated_write() {
    let shared = with(
        with(
            approval_grant(),
            "/spec/agentRef",
            json!({"name": "shared", "kind": "ToolGate"}),
        ),
        "/spec/caller",
        json!("system:serviceaccount:apps:bot-a"),
    );
    assert_valid(&shared);
    is_write_once(
        &shared,
        &without(shared.clone(), "/spec/caller"),
        "/spec/caller",
        GRANT_IMMUTABLE,
    );
}

// ---- ToolGate ----

fn tool_gate(spec: Value) -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "ToolGate",
        "metadata": {"name": "payments", "namespace": "default"},
        "spec": spec
    })
}

#[test]
fn a_tool_gate_on_a_remote_mcp_server_or_an_inline_url_is_valid() {
    assert_valid(&tool_gate(json!({
        "server": {"remoteMCPServer": "payments-server"},
        "toolNames": ["get_balance", "transfer_funds"],
        "requireApproval": ["transfer_funds"],
        "approval": {"timeout": "30m", "maxOpenRequests": 5, "rules": [
            {"name": "big", "tool": "transfer_funds", "server": "payments-server",
             "when": "args.amount > 1000", "action": "RequireApproval", "requiredApprovals": 2}]},
        "callers": {"groups": ["system:serviceaccounts:team-a"], "maxCallsPerMinute": 60},
        "deployment": {"replicas": 2}
    })));
    assert_valid(&tool_gate(json!({
        "server": {"remoteMCPServer": "payments-server"},
        "toolNames": ["transfer_funds"],
        "requireApproval": ["transfer_funds"],
        "approval": {"timeout": "1h", "escalation": {"warnBefore": "10m", "steps": [
            {"after": "15m", "approvers": {"groups": ["payments-oncall"]}, "notifier": "pager"}]}}
    })));
    assert_valid(&tool_gate(json!({
        "server": {"url": "http://tools.default:8084/mcp", "protocol": "SSE", "timeout": "30s",
                   "headersFrom": [{"name": "Authorization", "valueFrom":
                       {"type": "Secret", "name": "tools-token", "key": "token"}}]},
        "toolNames": ["read"],
        "approval": {"rules": [{"name": "own", "tool": "read", "server": "payments", "action": "Deny"}]}
    })));
}

#[test]
fn a_tool_gate_names_exactly_one_server() {
    assert_rejected(
        &tool_gate(json!({
            "server": {"remoteMCPServer": "payments-server", "url": "http://x.default/mcp"},
            "toolNames": ["a"]
        })),
        None,
        "The ToolGate \"payments\" is invalid: spec.server: Invalid value: exactly one of remoteMCPServer and url must be set",
    );
    assert_rejected(
        &tool_gate(json!({"server": {}, "toolNames": ["a"]})),
        None,
        "The ToolGate \"payments\" is invalid: spec.server: Invalid value: exactly one of remoteMCPServer and url must be set",
    );
    assert_rejected(
        &tool_gate(json!({
            "server": {"remoteMCPServer": "payments-server", "timeout": "30s"},
            "toolNames": ["a"]
        })),
        None,
        "The ToolGate \"payments\" is invalid: spec.server: Invalid value: protocol, headersFrom, timeout and sseReadTimeout go with an inline url only: a RemoteMCPServer brings its own",
    );
}

#[test]
fn accepted_tool_definitions_are_digests_keyed_by_tool_and_on_the_server_object() {
    let digest = "ab".repeat(32);
    assert_valid(&tool_gate(json!({
        "server": {"url": "http://x.default/mcp",
                   "acceptedToolDefinitions": [{"name": "a", "definitionSha256": digest}]},
        "toolNames": ["a"]
    })));
    assert_rejected(
        &tool_gate(json!({
            "server": {"remoteMCPServer": "s",
                       "acceptedToolDefinitions": [{"name": "a", "definitionSha256": digest}]},
            "toolNames": ["a"]
        })),
        None,
        "The ToolGate \"payments\" is invalid: spec.server: Invalid value: acceptedToolDefinitions goes with an inline url only: a RemoteMCPServer's accepted definitions are on it",
    );
    let server = |accepted: Value| {
        json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
            "metadata": {"name": "fs", "namespace": "default"},
            "spec": {"url": "http://x/mcp", "acceptedToolDefinitions": accepted}
        })
    };
    assert_valid(&server(json!([{"name": "a", "definitionSha256": digest}])));
    let errors_of = |accepted: Value| errors(&server(accepted), None).join("\n");
    assert!(
        errors_of(json!([{"name": "a", "definitionSha256": "AB".repeat(32)}]))
            .contains("spec.acceptedToolDefinitions[0].definitionSha256"),
        "upper-case hex is not a digest the gate writes"
    );
    assert!(
        errors_of(json!([
            {"name": "a", "definitionSha256": digest},
            {"name": "a", "definitionSha256": "cd".repeat(32)}
        ]))
        .contains("Duplicate value"),
        "one entry per tool"
    );
}

#[test]
fn a_tool_gate_requires_approval_only_of_its_tools() {
    assert_rejected(
        &tool_gate(json!({
            "server": {"remoteMCPServer": "s"},
            "toolNames": ["get_balance"],
            "requireApproval": ["transfer_funds"]
        })),
        None,
        "The ToolGate \"payments\" is invalid: spec: Invalid value: each requireApproval entry must also appear in toolNames",
    );
    assert_rejected(
        &tool_gate(json!({"server": {"remoteMCPServer": "s"}, "toolNames": []})),
        None,
        "The ToolGate \"payments\" is invalid: spec.toolNames: Invalid value: 0: spec.toolNames in body should have at least 1 items",
    );
}

/// Issue 54: a ToolGate's name must name its gate's objects (`<name>-gate`, a Service among
/// them): at most 58 characters of a DNS-1035 label. kube-apiserver 1.36 words it this way
/// (tests/e2e/toolgate-isolation.sh applies the 250-character one).
#[test]
fn a_tool_gate_name_must_make_valid_gate_objects() {
    let named = |name: &str| {
        let mut object = tool_gate(json!({"server": {"remoteMCPServer": "s"}, "toolNames": ["a"]}));
        object["metadata"]["name"] = json!(name);
        object
    };
    assert_valid(&named(&format!("a{}", "b".repeat(57))));
    for name in [
        "l".repeat(250),
        format!("a{}", "b".repeat(58)),
        "1pay".to_owned(),
        "pay.team".to_owned(),
    ] {
        assert_rejected(
            &named(&name),
            None,
            &format!(
                "The ToolGate {name:?} is invalid: <nil>: Invalid value: a ToolGate's name must be at most 58 characters of lower-case letters, digits and '-', starting with a letter and ending with a letter or digit: its gate's Service, Deployment and ServiceAccount are named <name>-gate"
            ),
        );
    }
}

#[test]
fn a_tool_gate_rule_names_no_other_server() {
    assert_rejected(
        &tool_gate(json!({
            "server": {"remoteMCPServer": "payments-server"},
            "toolNames": ["transfer_funds"],
            "approval": {"rules": [{"name": "r", "tool": "transfer_funds", "server": "other", "action": "Deny"}]}
        })),
        None,
        "The ToolGate \"payments\" is invalid: spec.approval.rules: Invalid value: a rule's server must be unset or name the ToolGate's server: spec.server.remoteMCPServer, or the ToolGate's own name when the server is an inline url",
    );
}

// ---- Deadlines that escalate (issue 60) ----

/// A pending request with two escalation steps, at tier `tier` (absent: none taken).
fn escalating(tier: Option<i64>) -> Value {
    let mut r = with(
        request(),
        "/spec/escalation",
        json!({"warnAt": "2026-11-22T00:55:00Z", "steps": [
            {"tier": 1, "at": "2026-11-22T00:10:00Z", "approvers": {"groups": ["oncall"]}, "notifier": "pager"},
            {"tier": 2, "at": "2026-11-22T00:30:00Z", "approvers": {"users": ["boss"]}}
        ]}),
    );
    if let Some(tier) = tier {
        let records: Vec<Value> = (1..=tier)
            .map(|t| json!({"tier": t, "at": "2026-11-22T00:40:00Z", "by": "controller-0"}))
            .collect();
        r = with(r, "/status/tier", json!(tier));
        r = with(r, "/status/escalations", json!(records));
    }
    r
}

#[test]
fn an_escalating_request_is_valid_and_steps_forward() {
    assert_valid(&escalating(None));
    assert_eq!(
        errors(&escalating(Some(1)), Some(&escalating(None))),
        Vec::<String>::new()
    );
    assert_eq!(
        errors(&escalating(Some(2)), Some(&escalating(Some(1)))),
        Vec::<String>::new()
    );
}

#[test]
fn the_escalation_tier_never_decreases_whatever_the_write() {
    let at_two = escalating(Some(2));
    let tier_message = "The ApprovalRequest \"r1\" is invalid: status.tier: Invalid value: status.tier never decreases: an escalation step taken stays taken";
    for (how, rewound) in rewinds(&at_two, "tier", &[json!(1), json!(0)]) {
        let found = errors(&rewound, Some(&at_two));
        assert!(
            found.iter().any(|l| l == tier_message),
            "{how}: expected {tier_message:?} among {found:#?}"
        );
    }
    let records_message = "The ApprovalRequest \"r1\" is invalid: status.escalations: Invalid value: status.escalations is append-only: a step's record cannot be changed or removed";
    let forged = json!([{"tier": 1, "at": "2026-11-22T00:40:00Z", "by": "forged"},
                        {"tier": 2, "at": "2026-11-22T00:40:00Z", "by": "controller-0"}]);
    for (how, rewound) in rewinds(&at_two, "escalations", &[json!([]), forged]) {
        let found = errors(&rewound, Some(&at_two));
        assert!(
            found.iter().any(|l| l == records_message),
            "{how}: expected {records_message:?} among {found:#?}"
        );
    }
}

#[test]
fn the_tier_cannot_pass_the_last_step() {
    let beyond = with(escalating(Some(2)), "/status/tier", json!(3));
    assert_rejected(
        &beyond,
        Some(&escalating(Some(2))),
        "The ApprovalRequest \"r1\" is invalid: status.tier: Invalid value: status.tier cannot pass the last step of spec.escalation",
    );
    let without_escalation = with(request(), "/status/tier", json!(1));
    assert_rejected(
        &without_escalation,
        Some(&request()),
        "The ApprovalRequest \"r1\" is invalid: status.tier: Invalid value: status.tier cannot pass the last step of spec.escalation",
    );
}

#[test]
fn the_escalation_of_a_request_is_immutable() {
    let old = escalating(None);
    let immutable = "The ApprovalRequest \"r1\" is invalid: spec: Invalid value: spec is immutable except spec.decision and spec.approvals";
    let changes = [
        without(old.clone(), "/spec/escalation"),
        with(
            old.clone(),
            "/spec/escalation/warnAt",
            json!("2026-11-22T00:59:00Z"),
        ),
        with(
            old.clone(),
            "/spec/escalation/steps",
            json!([{"tier": 1, "at": "2026-11-22T00:00:01Z", "approvers": {"users": ["mallory"]}}]),
        ),
    ];
    for changed in changes {
        assert_rejected(&changed, Some(&old), immutable);
    }
    // Nor can one be added after creation.
    assert_rejected(&old, Some(&request()), immutable);
}

#[test]
fn escalation_steps_are_tiers_one_to_n_each_later_than_the_last() {
    let out_of_range = with(
        request(),
        "/spec/escalation",
        json!({"steps": [{"tier": 2, "at": "2026-11-22T00:10:00Z", "approvers": {"users": ["boss"]}}]}),
    );
    assert_rejected(
        &out_of_range,
        None,
        "The ApprovalRequest \"r1\" is invalid: spec.escalation: Invalid value: spec.escalation.steps: tiers are 1 to the number of steps, one step each",
    );
    let backwards = with(
        request(),
        "/spec/escalation",
        json!({"steps": [
            {"tier": 1, "at": "2026-11-22T00:30:00Z", "approvers": {"users": ["a"]}},
            {"tier": 2, "at": "2026-11-22T00:10:00Z", "approvers": {"users": ["b"]}}
        ]}),
    );
    assert_rejected(
        &backwards,
        None,
        "The ApprovalRequest \"r1\" is invalid: spec.escalation: Invalid value: spec.escalation.steps: a higher tier begins strictly later",
    );
}

#[test]
fn agent_escalation_is_bounded_and_its_durations_checked() {
    let steps: Vec<Value> = (1..=9)
        .map(|m| json!({"after": format!("{m}m"), "approvers": {"groups": ["oncall"]}}))
        .collect();
    let too_many = agent("a", json!({"approval": {"escalation": {"steps": steps}}}));
    let found = errors(&too_many, None);
    assert!(
        found
            .iter()
            .any(|l| l.contains("spec.declarative.approval.escalation.steps")
                && l.contains("Too many")),
        "{found:#?}"
    );
    let bad_duration = agent(
        "a",
        json!({"approval": {"escalation": {"steps": [{"after": "soon", "approvers": {"users": ["boss"]}}]}}}),
    );
    let found = errors(&bad_duration, None);
    assert!(
        found
            .iter()
            .any(|l| l.contains("spec.declarative.approval.escalation.steps[0].after")),
        "{found:#?}"
    );
}
