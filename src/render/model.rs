//! ModelConfig -> the `model` block of config.json plus the environment of the agent container.
//!
//! API keys never enter config.json: they reach the container as the provider's environment
//! variable through a `secretKeyRef`.

use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use kube::ResourceExt;
use serde_json::{Map, Value, json};

use crate::api::ModelConfig;
use crate::api::model_config::ModelProvider;
use crate::{Error, Result};

/// Volume holding Google credentials for the Vertex AI providers.
const GOOGLE_CREDENTIALS_VOLUME: &str = "google-credentials";
/// Where [`GOOGLE_CREDENTIALS_VOLUME`] is mounted.
const GOOGLE_CREDENTIALS_PATH: &str = "/creds";

/// What a ModelConfig contributes to the agent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RenderedModel {
    /// The `model` object of config.json.
    pub model: Value,
    /// Environment variables of the agent container.
    pub env: Vec<EnvVar>,
    /// Volumes of the pod.
    pub volumes: Vec<Volume>,
    /// Volume mounts of the agent container.
    pub volume_mounts: Vec<VolumeMount>,
}

impl RenderedModel {
    /// Adds what `other` (a second model of the agent) needs to the pod, skipping environment
    /// variables and volumes already there by name and mounts by path, as kagent merges them.
    pub fn merge_deployment(&mut self, other: &RenderedModel) {
        for var in &other.env {
            if !self.env.iter().any(|v| v.name == var.name) {
                self.env.push(var.clone());
            }
        }
        for volume in &other.volumes {
            if !self.volumes.iter().any(|v| v.name == volume.name) {
                self.volumes.push(volume.clone());
            }
        }
        for mount in &other.volume_mounts {
            if !self
                .volume_mounts
                .iter()
                .any(|m| m.mount_path == mount.mount_path)
            {
                self.volume_mounts.push(mount.clone());
            }
        }
    }

    fn plain_env(&mut self, name: &str, value: &str) {
        self.env.push(EnvVar {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            ..EnvVar::default()
        });
    }

    fn secret_env(&mut self, name: &str, secret: &str, key: &str) {
        self.env.push(EnvVar {
            name: name.to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_owned(),
                    key: key.to_owned(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        });
    }

    fn google_credentials(&mut self, secret: &str, key: &str) {
        self.plain_env(
            "GOOGLE_APPLICATION_CREDENTIALS",
            &format!("{GOOGLE_CREDENTIALS_PATH}/{key}"),
        );
        self.volumes.push(Volume {
            name: GOOGLE_CREDENTIALS_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.to_owned()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        self.volume_mounts.push(VolumeMount {
            name: GOOGLE_CREDENTIALS_VOLUME.to_owned(),
            mount_path: GOOGLE_CREDENTIALS_PATH.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
}

/// Parses one of kagent's decimal strings ("0.7") into a JSON number.
fn decimal(model: &ModelConfig, field: &str, text: &Option<String>) -> Result<Option<Value>> {
    let Some(text) = text else {
        return Ok(None);
    };
    let number: f64 = text.parse().map_err(|_| Error::InvalidSpec {
        object: describe(model),
        field: field.to_owned(),
        message: format!("Invalid value: {text:?}: must be a decimal number"),
    })?;
    Ok(serde_json::Number::from_f64(number).map(Value::Number))
}

fn describe(model: &ModelConfig) -> String {
    format!(
        "ModelConfig {}/{}",
        model.namespace().unwrap_or_default(),
        model.name_any()
    )
}

fn insert_some(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value);
    }
}

fn missing_block(model: &ModelConfig, block: &str) -> Error {
    Error::InvalidSpec {
        object: describe(model),
        field: format!("spec.{block}"),
        message: format!(
            "Required value: {block} is required when provider is {}",
            model.spec.provider.as_str()
        ),
    }
}

/// Renders a ModelConfig.
pub fn render_model(model: &ModelConfig) -> Result<RenderedModel> {
    let spec = &model.spec;
    let mut out = RenderedModel::default();
    let api_key = spec
        .api_key_secret
        .as_deref()
        .zip(spec.api_key_secret_key.as_deref());
    let mut block = Map::new();
    block.insert("model".into(), json!(spec.model));
    if !spec.default_headers.is_empty() {
        block.insert("headers".into(), json!(spec.default_headers));
    }
    let model_type = match spec.provider {
        ModelProvider::OpenAI => {
            if let Some((secret, key)) = api_key {
                out.secret_env("OPENAI_API_KEY", secret, key);
            }
            let openai = spec.open_ai.clone().unwrap_or_default();
            block.insert(
                "base_url".into(),
                json!(openai.base_url.clone().unwrap_or_default()),
            );
            insert_some(
                &mut block,
                "temperature",
                decimal(model, "spec.openAI.temperature", &openai.temperature)?,
            );
            insert_some(
                &mut block,
                "top_p",
                decimal(model, "spec.openAI.topP", &openai.top_p)?,
            );
            insert_some(
                &mut block,
                "frequency_penalty",
                decimal(
                    model,
                    "spec.openAI.frequencyPenalty",
                    &openai.frequency_penalty,
                )?,
            );
            insert_some(
                &mut block,
                "presence_penalty",
                decimal(
                    model,
                    "spec.openAI.presencePenalty",
                    &openai.presence_penalty,
                )?,
            );
            insert_some(
                &mut block,
                "max_tokens",
                openai.max_tokens.filter(|n| *n > 0).map(Value::from),
            );
            insert_some(&mut block, "seed", openai.seed.map(Value::from));
            insert_some(&mut block, "n", openai.n.map(Value::from));
            insert_some(&mut block, "timeout", openai.timeout.map(Value::from));
            insert_some(
                &mut block,
                "reasoning_effort",
                openai.reasoning_effort.map(|e| json!(e.as_str())),
            );
            if let Some(organization) = &openai.organization {
                out.plain_env("OPENAI_ORGANIZATION", organization);
            }
            "openai"
        }
        ModelProvider::Anthropic => {
            if let Some((secret, key)) = api_key {
                out.secret_env("ANTHROPIC_API_KEY", secret, key);
            }
            let anthropic = spec.anthropic.clone().unwrap_or_default();
            block.insert(
                "base_url".into(),
                json!(anthropic.base_url.clone().unwrap_or_default()),
            );
            insert_some(
                &mut block,
                "max_tokens",
                anthropic.max_tokens.filter(|n| *n > 0).map(Value::from),
            );
            insert_some(
                &mut block,
                "temperature",
                decimal(model, "spec.anthropic.temperature", &anthropic.temperature)?,
            );
            insert_some(
                &mut block,
                "top_p",
                decimal(model, "spec.anthropic.topP", &anthropic.top_p)?,
            );
            insert_some(
                &mut block,
                "top_k",
                decimal(model, "spec.anthropic.topK", &anthropic.top_k)?,
            );
            "anthropic"
        }
        ModelProvider::AzureOpenAI => {
            let azure = spec
                .azure_open_ai
                .as_ref()
                .ok_or_else(|| missing_block(model, "azureOpenAI"))?;
            if let Some((secret, key)) = api_key {
                out.secret_env("AZURE_OPENAI_API_KEY", secret, key);
            }
            out.plain_env("OPENAI_API_VERSION", &azure.api_version);
            out.plain_env("AZURE_OPENAI_ENDPOINT", &azure.endpoint);
            if let Some(deployment) = &azure.deployment_name {
                block.insert("model".into(), json!(deployment));
            }
            "azure_openai"
        }
        ModelProvider::Ollama => {
            let ollama = spec
                .ollama
                .as_ref()
                .ok_or_else(|| missing_block(model, "ollama"))?;
            if let Some(host) = &ollama.host {
                out.plain_env("OLLAMA_API_BASE", host);
            }
            if !ollama.options.is_empty() {
                block.insert("options".into(), json!(ollama.options));
            }
            "ollama"
        }
        ModelProvider::Gemini => {
            if let Some((secret, key)) = api_key {
                out.secret_env("GOOGLE_API_KEY", secret, key);
            }
            "gemini"
        }
        ModelProvider::GeminiVertexAI | ModelProvider::AnthropicVertexAI => {
            let (vertex, block_name, model_type) = match spec.provider {
                ModelProvider::GeminiVertexAI => (
                    spec.gemini_vertex_ai.as_ref(),
                    "geminiVertexAI",
                    "gemini_vertex_ai",
                ),
                _ => (
                    spec.anthropic_vertex_ai.as_ref(),
                    "anthropicVertexAI",
                    "gemini_anthropic",
                ),
            };
            let vertex = vertex.ok_or_else(|| missing_block(model, block_name))?;
            out.plain_env("GOOGLE_CLOUD_PROJECT", &vertex.project_id);
            out.plain_env("GOOGLE_CLOUD_LOCATION", &vertex.location);
            if spec.provider == ModelProvider::GeminiVertexAI {
                out.plain_env("GOOGLE_GENAI_USE_VERTEXAI", "true");
            }
            if let Some((secret, key)) = api_key {
                out.google_credentials(secret, key);
            }
            model_type
        }
        ModelProvider::Bedrock => {
            let bedrock = spec
                .bedrock
                .as_ref()
                .ok_or_else(|| missing_block(model, "bedrock"))?;
            out.plain_env("AWS_REGION", &bedrock.region);
            if let Some((secret, key)) = api_key {
                out.secret_env("AWS_BEARER_TOKEN_BEDROCK", secret, key);
            }
            block.insert("region".into(), json!(bedrock.region));
            "bedrock"
        }
    };
    block.insert("type".into(), json!(model_type));
    out.model = Value::Object(block);
    Ok(out)
}
