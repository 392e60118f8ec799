//! The `ModelConfig` kind: which LLM an agent uses and where its API key is.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Pattern of numeric parameters that kagent spells as strings (temperature, topP, ...).
const DECIMAL_PATTERN: &str = r"^-?[0-9]+(\.[0-9]+)?$";

/// Desired state of a ModelConfig.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kagent.dev",
    version = "v1alpha2",
    kind = "ModelConfig",
    plural = "modelconfigs",
    shortname = "mc",
    namespaced,
    status = "ModelConfigStatus",
    cel,
    doc = "The LLM provider and model an agent uses.",
    printcolumn = r#"{"name": "Provider", "type": "string", "jsonPath": ".spec.provider"}"#,
    printcolumn = r#"{"name": "Model", "type": "string", "jsonPath": ".spec.model"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("!has(self.openAI) || self.provider == 'OpenAI'").message("openAI may only be set when provider is OpenAI"),
    validation = kube::core::Rule::new("!has(self.anthropic) || self.provider == 'Anthropic'").message("anthropic may only be set when provider is Anthropic"),
    validation = kube::core::Rule::new("!has(self.azureOpenAI) || self.provider == 'AzureOpenAI'").message("azureOpenAI may only be set when provider is AzureOpenAI"),
    validation = kube::core::Rule::new("!has(self.ollama) || self.provider == 'Ollama'").message("ollama may only be set when provider is Ollama"),
    validation = kube::core::Rule::new("!has(self.gemini) || self.provider == 'Gemini'").message("gemini may only be set when provider is Gemini"),
    validation = kube::core::Rule::new("!has(self.geminiVertexAI) || self.provider == 'GeminiVertexAI'").message("geminiVertexAI may only be set when provider is GeminiVertexAI"),
    validation = kube::core::Rule::new("!has(self.anthropicVertexAI) || self.provider == 'AnthropicVertexAI'").message("anthropicVertexAI may only be set when provider is AnthropicVertexAI"),
    validation = kube::core::Rule::new("!has(self.bedrock) || self.provider == 'Bedrock'").message("bedrock may only be set when provider is Bedrock"),
    validation = kube::core::Rule::new("self.provider != 'AzureOpenAI' || has(self.azureOpenAI)").message("azureOpenAI is required when provider is AzureOpenAI"),
    validation = kube::core::Rule::new("self.provider != 'Ollama' || has(self.ollama)").message("ollama is required when provider is Ollama"),
    validation = kube::core::Rule::new("self.provider != 'GeminiVertexAI' || has(self.geminiVertexAI)").message("geminiVertexAI is required when provider is GeminiVertexAI"),
    validation = kube::core::Rule::new("self.provider != 'AnthropicVertexAI' || has(self.anthropicVertexAI)").message("anthropicVertexAI is required when provider is AnthropicVertexAI"),
    validation = kube::core::Rule::new("self.provider != 'Bedrock' || has(self.bedrock)").message("bedrock is required when provider is Bedrock"),
    validation = kube::core::Rule::new("has(self.apiKeySecret) == has(self.apiKeySecretKey)").message("apiKeySecret and apiKeySecretKey must be set together")
)]
pub struct ModelConfigSpec {
    /// LLM provider.
    pub provider: ModelProvider,
    /// Model name, such as `gpt-4o`.
    #[schemars(length(min = 1, max = 256))]
    pub model: String,
    /// Secret in the same namespace holding the API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub api_key_secret: Option<String>,
    /// Key of the API key inside apiKeySecret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub api_key_secret_key: Option<String>,
    /// HTTP headers sent with every model request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub default_headers: BTreeMap<String, String>,
    /// OpenAI settings.
    #[serde(default, rename = "openAI", skip_serializing_if = "Option::is_none")]
    pub open_ai: Option<OpenAIConfig>,
    /// Anthropic settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic: Option<AnthropicConfig>,
    /// Azure OpenAI settings.
    #[serde(
        default,
        rename = "azureOpenAI",
        skip_serializing_if = "Option::is_none"
    )]
    pub azure_open_ai: Option<AzureOpenAIConfig>,
    /// Ollama settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ollama: Option<OllamaConfig>,
    /// Gemini settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemini: Option<GeminiConfig>,
    /// Gemini on Vertex AI settings.
    #[serde(
        default,
        rename = "geminiVertexAI",
        skip_serializing_if = "Option::is_none"
    )]
    pub gemini_vertex_ai: Option<VertexAIConfig>,
    /// Anthropic on Vertex AI settings.
    #[serde(
        default,
        rename = "anthropicVertexAI",
        skip_serializing_if = "Option::is_none"
    )]
    pub anthropic_vertex_ai: Option<VertexAIConfig>,
    /// AWS Bedrock settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bedrock: Option<BedrockConfig>,
}

/// LLM provider.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ModelProvider {
    /// OpenAI (or an OpenAI-compatible endpoint through openAI.baseUrl).
    OpenAI,
    /// Anthropic.
    Anthropic,
    /// Azure OpenAI.
    AzureOpenAI,
    /// Ollama.
    Ollama,
    /// Google Gemini.
    Gemini,
    /// Gemini on Vertex AI.
    GeminiVertexAI,
    /// Anthropic on Vertex AI.
    AnthropicVertexAI,
    /// AWS Bedrock.
    Bedrock,
}

impl ModelProvider {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAI => "OpenAI",
            Self::Anthropic => "Anthropic",
            Self::AzureOpenAI => "AzureOpenAI",
            Self::Ollama => "Ollama",
            Self::Gemini => "Gemini",
            Self::GeminiVertexAI => "GeminiVertexAI",
            Self::AnthropicVertexAI => "AnthropicVertexAI",
            Self::Bedrock => "Bedrock",
        }
    }
}

/// OpenAI settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenAIConfig {
    /// Base URL of an OpenAI-compatible API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub base_url: Option<String>,
    /// OpenAI organization (passed as OPENAI_ORGANIZATION).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub organization: Option<String>,
    /// Sampling temperature, as a decimal string such as "0.7".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DECIMAL_PATTERN))]
    pub temperature: Option<String>,
    /// Maximum tokens of a completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Nucleus sampling, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DECIMAL_PATTERN))]
    pub top_p: Option<String>,
    /// Frequency penalty, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DECIMAL_PATTERN))]
    pub frequency_penalty: Option<String>,
    /// Presence penalty, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DECIMAL_PATTERN))]
    pub presence_penalty: Option<String>,
    /// Sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Number of completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<i64>,
    /// Request timeout in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
    /// Reasoning effort of reasoning models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
}

/// Reasoning effort of OpenAI reasoning models.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// minimal
    Minimal,
    /// low
    Low,
    /// medium
    Medium,
    /// high
    High,
}

impl ReasoningEffort {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

/// Anthropic settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnthropicConfig {
    /// Base URL of the Anthropic API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub base_url: Option<String>,
    /// Maximum tokens of a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Sampling temperature, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DECIMAL_PATTERN))]
    pub temperature: Option<String>,
    /// Nucleus sampling, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DECIMAL_PATTERN))]
    pub top_p: Option<String>,
    /// Top-k sampling, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DECIMAL_PATTERN))]
    pub top_k: Option<String>,
}

/// Azure OpenAI settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureOpenAIConfig {
    /// Endpoint, passed as AZURE_OPENAI_ENDPOINT.
    #[schemars(length(min = 1, max = 2048))]
    pub endpoint: String,
    /// API version, passed as OPENAI_API_VERSION.
    #[schemars(length(min = 1, max = 64))]
    pub api_version: String,
    /// Deployment name; used as the model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub deployment_name: Option<String>,
}

/// Ollama settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OllamaConfig {
    /// Ollama host, passed as OLLAMA_API_BASE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub host: Option<String>,
    /// Model options, passed through as strings.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

/// Gemini settings (none today; kept for kagent compatibility).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
pub struct GeminiConfig {}

/// Vertex AI settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct VertexAIConfig {
    /// Google Cloud project, passed as GOOGLE_CLOUD_PROJECT.
    #[serde(rename = "projectID")]
    #[schemars(length(min = 1, max = 256))]
    pub project_id: String,
    /// Google Cloud location, passed as GOOGLE_CLOUD_LOCATION.
    #[schemars(length(min = 1, max = 64))]
    pub location: String,
}

/// AWS Bedrock settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BedrockConfig {
    /// AWS region, passed as AWS_REGION.
    #[schemars(length(min = 1, max = 64))]
    pub region: String,
}

/// Observed state of a ModelConfig.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelConfigStatus {
    /// The generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`: whether the API-key Secret exists and holds the key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// SHA-256 of the API key, so a key rotation rolls the agent pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_hash: Option<String>,
}
