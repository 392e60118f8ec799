//! The `ModelConfig` kind: which LLM an agent uses and where its API key is.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Longest Secret name or key the CEL rules touch (a Secret name or data key is never longer).
const MAX_SECRET_REF: usize = 253;

/// Desired state of a ModelConfig: kagent's v1alpha2 schema, field for field.
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
    validation = kube::core::Rule::new("!(has(self.openAI) && self.provider != 'OpenAI')").message("provider.openAI must be nil if the provider is not OpenAI"),
    validation = kube::core::Rule::new("!(has(self.anthropic) && self.provider != 'Anthropic')").message("provider.anthropic must be nil if the provider is not Anthropic"),
    validation = kube::core::Rule::new("!(has(self.azureOpenAI) && self.provider != 'AzureOpenAI')").message("provider.azureOpenAI must be nil if the provider is not AzureOpenAI"),
    validation = kube::core::Rule::new("!(has(self.ollama) && self.provider != 'Ollama')").message("provider.ollama must be nil if the provider is not Ollama"),
    validation = kube::core::Rule::new("!(has(self.gemini) && self.provider != 'Gemini')").message("provider.gemini must be nil if the provider is not Gemini"),
    validation = kube::core::Rule::new("!(has(self.geminiVertexAI) && self.provider != 'GeminiVertexAI')").message("provider.geminiVertexAI must be nil if the provider is not GeminiVertexAI"),
    validation = kube::core::Rule::new("!(has(self.anthropicVertexAI) && self.provider != 'AnthropicVertexAI')").message("provider.anthropicVertexAI must be nil if the provider is not AnthropicVertexAI"),
    validation = kube::core::Rule::new("!(has(self.bedrock) && self.provider != 'Bedrock')").message("provider.bedrock must be nil if the provider is not Bedrock"),
    validation = kube::core::Rule::new("!(has(self.apiKeySecretKey) && !has(self.apiKeySecret))").message("apiKeySecret must be set if apiKeySecretKey is set"),
    validation = kube::core::Rule::new("!(has(self.apiKeySecret) && !has(self.apiKeySecretKey) && self.provider != 'Bedrock')").message("apiKeySecretKey must be set if apiKeySecret is set (except for Bedrock provider)"),
    validation = kube::core::Rule::new("!(has(self.apiKeyPassthrough) && self.apiKeyPassthrough && has(self.apiKeySecret) && size(self.apiKeySecret) > 0)").message("apiKeyPassthrough and apiKeySecret are mutually exclusive"),
    validation = kube::core::Rule::new("!(has(self.apiKeyPassthrough) && self.apiKeyPassthrough && (self.provider == 'Gemini' || self.provider == 'GeminiVertexAI' || self.provider == 'AnthropicVertexAI'))").message("apiKeyPassthrough must be false if provider is Gemini;GeminiVertexAI;AnthropicVertexAI"),
    validation = kube::core::Rule::new("!(has(self.tls) && has(self.tls.caCertSecretKey) && size(self.tls.caCertSecretKey) > 0 && (!has(self.tls.caCertSecretRef) || size(self.tls.caCertSecretRef) == 0))").message("caCertSecretKey requires caCertSecretRef"),
    validation = kube::core::Rule::new("!(has(self.tls) && (!has(self.tls.disableVerify) || !self.tls.disableVerify) && has(self.tls.caCertSecretKey) && size(self.tls.caCertSecretKey) > 0 && (!has(self.tls.caCertSecretRef) || size(self.tls.caCertSecretRef) == 0))").message("caCertSecretKey requires caCertSecretRef (unless disableVerify is true)"),
    validation = kube::core::Rule::new("!(has(self.tls) && (!has(self.tls.disableVerify) || !self.tls.disableVerify) && has(self.tls.caCertSecretRef) && size(self.tls.caCertSecretRef) > 0 && (!has(self.tls.caCertSecretKey) || size(self.tls.caCertSecretKey) == 0))").message("caCertSecretRef requires caCertSecretKey (unless disableVerify is true)")
)]
pub struct ModelConfigSpec {
    /// Model name, such as `gpt-4o`.
    pub model: String,
    /// Secret in the same namespace holding the API key (for Bedrock: the AWS credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_SECRET_REF))]
    pub api_key_secret: Option<String>,
    /// Key of the API key inside apiKeySecret (not used for Bedrock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_SECRET_REF))]
    pub api_key_secret_key: Option<String>,
    /// Forward the Bearer token of incoming A2A requests to the provider as the API key
    /// (mutually exclusive with apiKeySecret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_passthrough: Option<bool>,
    /// HTTP headers sent with every model request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub default_headers: BTreeMap<String, String>,
    /// LLM provider (default OpenAI).
    #[serde(default)]
    pub provider: ModelProvider,
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
    pub gemini_vertex_ai: Option<GeminiVertexAIConfig>,
    /// Anthropic on Vertex AI settings.
    #[serde(
        default,
        rename = "anthropicVertexAI",
        skip_serializing_if = "Option::is_none"
    )]
    pub anthropic_vertex_ai: Option<AnthropicVertexAIConfig>,
    /// AWS Bedrock settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bedrock: Option<BedrockConfig>,
    /// TLS settings of the connection to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
}

impl ModelConfigSpec {
    /// A spec for `provider` and `model` with every optional field unset.
    pub fn new(provider: ModelProvider, model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            api_key_secret: None,
            api_key_secret_key: None,
            api_key_passthrough: None,
            default_headers: BTreeMap::new(),
            provider,
            open_ai: None,
            anthropic: None,
            azure_open_ai: None,
            ollama: None,
            gemini: None,
            gemini_vertex_ai: None,
            anthropic_vertex_ai: None,
            bedrock: None,
            tls: None,
        }
    }

    /// Whether the Bearer token of A2A requests is the API key.
    pub fn passthrough(&self) -> bool {
        self.api_key_passthrough.unwrap_or(false)
    }

    /// The Secret with the API key (or a Bedrock ModelConfig's AWS credentials), unless the
    /// key is passed through.
    pub fn key_secret(&self) -> Option<&str> {
        self.api_key_secret
            .as_deref()
            .filter(|name| !name.is_empty() && !self.passthrough())
    }

    /// The AWS credentials Secret of a Bedrock ModelConfig.
    pub fn bedrock_secret(&self) -> Option<&str> {
        self.key_secret()
            .filter(|_| self.provider == ModelProvider::Bedrock)
    }

    /// Every Secret this ModelConfig names: the key Secret and the TLS CA Secret.
    pub fn secret_names(&self) -> Vec<&str> {
        let ca = self.tls.as_ref().and_then(TlsConfig::ca_cert);
        self.key_secret()
            .into_iter()
            .chain(ca.map(|(secret, _)| secret))
            .collect()
    }
}

/// LLM provider (listed in kagent's order, which error messages follow).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum ModelProvider {
    /// Anthropic.
    Anthropic,
    /// OpenAI (or an OpenAI-compatible endpoint through openAI.baseUrl).
    #[default]
    OpenAI,
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

/// OpenAI settings. Decimal parameters are strings, as in kagent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenAIConfig {
    /// Base URL of an OpenAI-compatible API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// OpenAI organization (passed as OPENAI_ORGANIZATION).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    /// Sampling temperature, such as "0.7".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<String>,
    /// Maximum tokens of a completion (rendered when above 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Nucleus sampling, such as "0.95".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<String>,
    /// Frequency penalty, such as "0.5".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<String>,
    /// Presence penalty, such as "0.5".
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    pub base_url: Option<String>,
    /// Maximum tokens of a response (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Sampling temperature (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<String>,
    /// Nucleus sampling (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<String>,
    /// Top-k sampling (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
}

/// Azure OpenAI settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureOpenAIConfig {
    /// Endpoint, passed as AZURE_OPENAI_ENDPOINT.
    pub azure_endpoint: String,
    /// API version, passed as OPENAI_API_VERSION.
    pub api_version: String,
    /// Deployment name; the model name the runtime uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure_deployment: Option<String>,
    /// Azure AD token, passed as AZURE_AD_TOKEN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure_ad_token: Option<String>,
    /// Sampling temperature (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<String>,
    /// Maximum tokens (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Nucleus sampling (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<String>,
}

/// Ollama settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OllamaConfig {
    /// Ollama host, passed as OLLAMA_API_BASE (`http://` added when no scheme is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Model options, passed through as strings.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

/// Gemini settings (none; kept for kagent compatibility).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
pub struct GeminiConfig {}

/// Settings shared by the Vertex AI providers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct VertexAIConfig {
    /// Google Cloud project, passed as GOOGLE_CLOUD_PROJECT.
    #[serde(rename = "projectID")]
    pub project_id: String,
    /// Google Cloud location, passed as GOOGLE_CLOUD_LOCATION.
    pub location: String,
    /// Sampling temperature (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<String>,
    /// Nucleus sampling (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<String>,
    /// Top-k sampling (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<String>,
    /// Stop sequences (kagent's runtime does not read them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
}

/// Gemini on Vertex AI settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeminiVertexAIConfig {
    /// Project, location and sampling settings.
    #[serde(flatten)]
    pub vertex: VertexAIConfig,
    /// Maximum output tokens (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<i64>,
    /// Candidate count (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_count: Option<i64>,
    /// Response MIME type (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_mime_type: Option<String>,
}

/// Anthropic on Vertex AI settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnthropicVertexAIConfig {
    /// Project, location and sampling settings.
    #[serde(flatten)]
    pub vertex: VertexAIConfig,
    /// Maximum tokens (kagent's runtime does not read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
}

/// AWS Bedrock settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BedrockConfig {
    /// AWS region, passed as AWS_REGION.
    pub region: String,
}

/// TLS settings of the connection to the model provider.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsConfig {
    /// Skip certificate verification (development only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub disable_verify: Option<bool>,
    /// Secret in the same namespace holding the CA certificate(s), PEM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_SECRET_REF))]
    pub ca_cert_secret_ref: Option<String>,
    /// Key of the CA certificate inside caCertSecretRef.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_SECRET_REF))]
    pub ca_cert_secret_key: Option<String>,
    /// Trust only the custom CA, not the system CAs.
    #[serde(
        default,
        rename = "disableSystemCAs",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = false))]
    pub disable_system_cas: Option<bool>,
}

impl TlsConfig {
    /// The CA Secret and key, when both are set (and non-empty).
    pub fn ca_cert(&self) -> Option<(&str, &str)> {
        let secret = self
            .ca_cert_secret_ref
            .as_deref()
            .filter(|s| !s.is_empty())?;
        let key = self
            .ca_cert_secret_key
            .as_deref()
            .filter(|k| !k.is_empty())?;
        Some((secret, key))
    }
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
