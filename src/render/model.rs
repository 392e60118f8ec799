//! ModelConfig -> the `model` block of config.json plus the environment, volumes and mounts
//! of the agent container, as kagent's translator renders them.
//!
//! Credentials never enter config.json: API keys and AWS credentials reach the agent
//! container as environment variables through `secretKeyRef`, Google credentials and TLS CA
//! certificates as Secret volumes mounted into the agent container only.

use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, Secret, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use kube::ResourceExt;
use serde_json::{Map, Value, json};

use super::refs::{ObjectKey, RefKind, RefStore};
use crate::api::ModelConfig;
use crate::api::model_config::{ModelProvider, TlsConfig};
use crate::{Error, Result};

/// Volume holding Google credentials for the Vertex AI providers.
const GOOGLE_CREDENTIALS_VOLUME: &str = "google-creds";
/// Where [`GOOGLE_CREDENTIALS_VOLUME`] is mounted.
const GOOGLE_CREDENTIALS_PATH: &str = "/creds";
/// Volume holding the TLS CA certificate of `spec.tls.caCertSecretRef`.
pub const TLS_CA_VOLUME: &str = "tls-ca-cert";
/// Where [`TLS_CA_VOLUME`] is mounted; config.json names the file below it.
pub const TLS_CA_PATH: &str = "/etc/ssl/certs/custom";
/// Key of a Bedrock credentials Secret holding a bearer token (preferred when present).
pub const AWS_BEARER_TOKEN: &str = "AWS_BEARER_TOKEN_BEDROCK";
/// Keys of a Bedrock credentials Secret holding IAM credentials (the session token optional).
pub const AWS_CREDENTIAL_KEYS: [&str; 2] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];
/// Optional key of a Bedrock credentials Secret for temporary credentials.
pub const AWS_SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";

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
    /// Fields accepted for kagent compatibility that kagent's runtime does not read.
    pub warnings: Vec<String>,
}

impl RenderedModel {
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

    fn secret_volume(&mut self, volume: &str, secret: &str, path: &str, mode: Option<i32>) {
        self.volumes.push(Volume {
            name: volume.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.to_owned()),
                default_mode: mode,
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        self.volume_mounts.push(VolumeMount {
            name: volume.to_owned(),
            mount_path: path.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }

    fn google_credentials(&mut self, secret: &str, key: &str) {
        self.plain_env(
            "GOOGLE_APPLICATION_CREDENTIALS",
            &format!("{GOOGLE_CREDENTIALS_PATH}/{key}"),
        );
        self.secret_volume(
            GOOGLE_CREDENTIALS_VOLUME,
            secret,
            GOOGLE_CREDENTIALS_PATH,
            None,
        );
    }

    /// Adds what `other` (another ModelConfig of the same agent) needs to the container.
    /// Entries equal to ones already present are shared; an environment variable, volume or
    /// mount path that `other` needs with a different content is refused: the runtime has
    /// one of each. `field` names the reference in the error.
    pub fn merge(&mut self, other: RenderedModel, object: &str, field: &str) -> Result<()> {
        let conflict = |what: String| Error::InvalidSpec {
            object: object.to_owned(),
            field: field.to_owned(),
            message: format!(
                "Invalid value: {what} is needed with a different value by the agent's own ModelConfig; the runtime has one of each"
            ),
        };
        for env in other.env {
            match self.env.iter().find(|e| e.name == env.name) {
                Some(existing) if *existing != env => {
                    return Err(conflict(format!("environment variable {}", env.name)));
                }
                Some(_) => {}
                None => self.env.push(env),
            }
        }
        for volume in other.volumes {
            match self.volumes.iter().find(|v| v.name == volume.name) {
                Some(existing) if *existing != volume => {
                    return Err(conflict(format!("volume {}", volume.name)));
                }
                Some(_) => {}
                None => self.volumes.push(volume),
            }
        }
        for mount in other.volume_mounts {
            match self
                .volume_mounts
                .iter()
                .find(|m| m.mount_path == mount.mount_path)
            {
                Some(existing) if *existing != mount => {
                    return Err(conflict(format!("mount path {}", mount.mount_path)));
                }
                Some(_) => {}
                None => self.volume_mounts.push(mount),
            }
        }
        self.warnings.extend(other.warnings);
        Ok(())
    }

    /// The TLS settings: the `tls_*` keys of the model block, and the CA Secret mounted
    /// read-only at [`TLS_CA_PATH`] when both its Secret and key are named.
    fn tls(&mut self, block: &mut Map<String, Value>, tls: &TlsConfig) {
        block.insert(
            "tls_disable_verify".into(),
            json!(tls.disable_verify.unwrap_or(false)),
        );
        block.insert(
            "tls_disable_system_cas".into(),
            json!(tls.disable_system_cas.unwrap_or(false)),
        );
        if let Some((secret, key)) = tls.ca_cert() {
            block.insert(
                "tls_ca_cert_path".into(),
                json!(format!("{TLS_CA_PATH}/{key}")),
            );
            self.secret_volume(TLS_CA_VOLUME, secret, TLS_CA_PATH, Some(0o444));
        }
    }
}

/// `ModelConfig namespace/name`, as used in messages.
pub fn describe(model: &ModelConfig) -> String {
    format!(
        "ModelConfig {}/{}",
        model.namespace().unwrap_or_default(),
        model.name_any()
    )
}

/// The hash of a ModelConfig's Secrets its status records (empty until the controller has
/// read them); folded into the agent's config hash so a rotation rolls the pods.
pub fn secret_hash(model: &ModelConfig) -> String {
    model
        .status
        .as_ref()
        .and_then(|status| status.secret_hash.clone())
        .unwrap_or_default()
}

/// Parses one of kagent's decimal strings ("0.7") into a JSON number; empty means unset.
fn decimal(model: &ModelConfig, field: &str, text: &Option<String>) -> Result<Option<Value>> {
    let Some(text) = text.as_deref().filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    text.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(|number| Some(Value::Number(number)))
        .ok_or_else(|| Error::InvalidSpec {
            object: describe(model),
            field: field.to_owned(),
            message: format!("Invalid value: {text:?}: must be a finite decimal number"),
        })
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

/// Notes each set field (by its path) that kagent's runtime does not read.
fn unread(out: &mut RenderedModel, model: &ModelConfig, fields: &[(&str, bool)]) {
    for (field, set) in fields {
        if *set {
            out.warnings.push(format!(
                "{}: spec.{field} is accepted for kagent compatibility but not passed to the runtime (kagent does not pass it either)",
                describe(model)
            ));
        }
    }
}

fn has_key(secret: &Secret, key: &str) -> bool {
    secret.data.as_ref().is_some_and(|d| d.contains_key(key))
        || secret
            .string_data
            .as_ref()
            .is_some_and(|d| d.contains_key(key))
}

/// The keys of a Bedrock credentials Secret the agent gets, each as the environment variable
/// of its own name: [`AWS_BEARER_TOKEN`] when the Secret holds it, the IAM keys otherwise
/// (the session token when present). kagent reads the Secret the same way; `apiKeySecretKey`
/// is not used. `Err` names the first missing IAM key.
pub fn bedrock_keys(secret: &Secret) -> std::result::Result<Vec<&'static str>, &'static str> {
    if has_key(secret, AWS_BEARER_TOKEN) {
        return Ok(vec![AWS_BEARER_TOKEN]);
    }
    let mut keys = Vec::new();
    for name in AWS_CREDENTIAL_KEYS {
        if !has_key(secret, name) {
            return Err(name);
        }
        keys.push(name);
    }
    if has_key(secret, AWS_SESSION_TOKEN) {
        keys.push(AWS_SESSION_TOKEN);
    }
    Ok(keys)
}

/// The Bedrock credentials Secret `secret_name` of `model` and the keys the agent gets from it;
/// refused, naming `spec.apiKeySecret`, when the Secret or a needed key is missing.
pub fn bedrock_secret<'a>(
    model: &ModelConfig,
    secret_name: &str,
    refs: &'a RefStore,
) -> Result<(&'a Secret, Vec<&'static str>)> {
    let namespace = model.namespace().unwrap_or_default();
    let key = ObjectKey::new(RefKind::Secret, &namespace, secret_name);
    let missing = |missing: String| Error::RefNotFound {
        object: describe(model),
        field: "spec.apiKeySecret".into(),
        missing,
    };
    let secret = refs
        .secret(&namespace, secret_name)
        .ok_or_else(|| missing(key.to_string()))?;
    let keys = bedrock_keys(secret)
        .map_err(|name| missing(format!("{key} key {name:?} (or key {AWS_BEARER_TOKEN:?})")))?;
    Ok((secret, keys))
}

/// Renders a ModelConfig. `refs` supplies the Bedrock credentials Secret, whose keys decide
/// which credentials the container gets.
pub fn render_model(model: &ModelConfig, refs: &RefStore) -> Result<RenderedModel> {
    let spec = &model.spec;
    let mut out = RenderedModel::default();
    let passthrough = spec.passthrough();
    let api_key = spec.key_secret().zip(spec.api_key_secret_key.as_deref());
    let mut block = Map::new();
    block.insert("model".into(), json!(spec.model));
    if !spec.default_headers.is_empty() {
        block.insert("headers".into(), json!(spec.default_headers));
    }
    if let Some(tls) = &spec.tls {
        out.tls(&mut block, tls);
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
            for (key, field, text) in [
                ("temperature", "temperature", &openai.temperature),
                ("top_p", "topP", &openai.top_p),
                (
                    "frequency_penalty",
                    "frequencyPenalty",
                    &openai.frequency_penalty,
                ),
                (
                    "presence_penalty",
                    "presencePenalty",
                    &openai.presence_penalty,
                ),
            ] {
                let value = decimal(model, &format!("spec.openAI.{field}"), text)?;
                insert_some(&mut block, key, value);
            }
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
            if let Some(organization) = openai.organization.as_deref().filter(|o| !o.is_empty()) {
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
            unread(
                &mut out,
                model,
                &[
                    ("anthropic.maxTokens", anthropic.max_tokens.is_some()),
                    ("anthropic.temperature", anthropic.temperature.is_some()),
                    ("anthropic.topP", anthropic.top_p.is_some()),
                    ("anthropic.topK", anthropic.top_k.is_some()),
                ],
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
            if let Some(token) = azure.azure_ad_token.as_deref().filter(|t| !t.is_empty()) {
                out.plain_env("AZURE_AD_TOKEN", token);
            }
            if !azure.api_version.is_empty() {
                out.plain_env("OPENAI_API_VERSION", &azure.api_version);
            }
            if !azure.azure_endpoint.is_empty() {
                out.plain_env("AZURE_OPENAI_ENDPOINT", &azure.azure_endpoint);
            }
            if let Some(deployment) = azure.azure_deployment.as_deref().filter(|d| !d.is_empty()) {
                block.insert("model".into(), json!(deployment));
            }
            unread(
                &mut out,
                model,
                &[
                    ("azureOpenAI.temperature", azure.temperature.is_some()),
                    ("azureOpenAI.maxTokens", azure.max_tokens.is_some()),
                    ("azureOpenAI.topP", azure.top_p.is_some()),
                ],
            );
            "azure_openai"
        }
        ModelProvider::Ollama => {
            let ollama = spec
                .ollama
                .as_ref()
                .ok_or_else(|| missing_block(model, "ollama"))?;
            if let Some(host) = ollama.host.as_deref().filter(|h| !h.is_empty()) {
                let host = if host.starts_with("http://") || host.starts_with("https://") {
                    host.to_owned()
                } else {
                    format!("http://{host}")
                };
                out.plain_env("OLLAMA_API_BASE", &host);
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
        ModelProvider::GeminiVertexAI => {
            let gemini = spec
                .gemini_vertex_ai
                .as_ref()
                .ok_or_else(|| missing_block(model, "geminiVertexAI"))?;
            out.plain_env("GOOGLE_CLOUD_PROJECT", &gemini.vertex.project_id);
            out.plain_env("GOOGLE_CLOUD_LOCATION", &gemini.vertex.location);
            out.plain_env("GOOGLE_GENAI_USE_VERTEXAI", "true");
            if let Some((secret, key)) = api_key {
                out.google_credentials(secret, key);
            }
            unread_vertex(&mut out, model, "geminiVertexAI", &gemini.vertex);
            unread(
                &mut out,
                model,
                &[
                    (
                        "geminiVertexAI.maxOutputTokens",
                        gemini.max_output_tokens.is_some(),
                    ),
                    (
                        "geminiVertexAI.candidateCount",
                        gemini.candidate_count.is_some(),
                    ),
                    (
                        "geminiVertexAI.responseMimeType",
                        gemini.response_mime_type.is_some(),
                    ),
                ],
            );
            "gemini_vertex_ai"
        }
        ModelProvider::AnthropicVertexAI => {
            let anthropic = spec
                .anthropic_vertex_ai
                .as_ref()
                .ok_or_else(|| missing_block(model, "anthropicVertexAI"))?;
            out.plain_env("GOOGLE_CLOUD_PROJECT", &anthropic.vertex.project_id);
            out.plain_env("GOOGLE_CLOUD_LOCATION", &anthropic.vertex.location);
            if let Some((secret, key)) = api_key {
                out.google_credentials(secret, key);
            }
            unread_vertex(&mut out, model, "anthropicVertexAI", &anthropic.vertex);
            unread(
                &mut out,
                model,
                &[(
                    "anthropicVertexAI.maxTokens",
                    anthropic.max_tokens.is_some(),
                )],
            );
            "gemini_anthropic"
        }
        ModelProvider::Bedrock => {
            let bedrock = spec
                .bedrock
                .as_ref()
                .ok_or_else(|| missing_block(model, "bedrock"))?;
            out.plain_env("AWS_REGION", &bedrock.region);
            if let Some(secret) = spec.bedrock_secret() {
                for key in bedrock_secret(model, secret, refs)?.1 {
                    out.secret_env(key, secret, key);
                }
            }
            unread(
                &mut out,
                model,
                &[("apiKeySecretKey", spec.api_key_secret_key.is_some())],
            );
            if !bedrock.region.is_empty() {
                block.insert("region".into(), json!(bedrock.region));
            }
            "bedrock"
        }
    };
    if passthrough && spec.provider != ModelProvider::Gemini {
        block.insert("api_key_passthrough".into(), json!(true));
    }
    block.insert("type".into(), json!(model_type));
    out.model = Value::Object(block);
    Ok(out)
}

fn unread_vertex(
    out: &mut RenderedModel,
    model: &ModelConfig,
    block: &str,
    vertex: &crate::api::model_config::VertexAIConfig,
) {
    let fields = [
        ("temperature", vertex.temperature.is_some()),
        ("topP", vertex.top_p.is_some()),
        ("topK", vertex.top_k.is_some()),
        ("stopSequences", !vertex.stop_sequences.is_empty()),
    ];
    for (field, set) in fields {
        unread(out, model, &[(&format!("{block}.{field}"), set)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ModelConfig;

    fn model(spec: Value) -> ModelConfig {
        serde_json::from_value(json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig",
            "metadata": {"name": "m", "namespace": "ns"}, "spec": spec,
        }))
        .unwrap()
    }

    fn secret(data: &[&str]) -> RefStore {
        let mut refs = RefStore::default();
        let data: serde_json::Map<String, Value> = data
            .iter()
            .map(|k| (k.to_string(), json!("eA==")))
            .collect();
        refs.insert_secret(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "aws", "namespace": "ns"}, "data": data,
            }))
            .unwrap(),
        );
        refs
    }

    fn env_names(rendered: &RenderedModel) -> Vec<(&str, Option<&str>)> {
        rendered
            .env
            .iter()
            .map(|e| {
                let key = e
                    .value_from
                    .as_ref()
                    .and_then(|v| v.secret_key_ref.as_ref())
                    .map(|r| r.key.as_str());
                (e.name.as_str(), key)
            })
            .collect()
    }

    #[test]
    fn tls_with_a_ca_mounts_the_secret_read_only_and_names_the_file() {
        let rendered = render_model(
            &model(json!({"provider": "OpenAI", "model": "gpt-4o",
                "tls": {"caCertSecretRef": "ca", "caCertSecretKey": "ca.crt", "disableSystemCAs": true}})),
            &RefStore::default(),
        )
        .unwrap();
        assert_eq!(
            rendered.model["tls_ca_cert_path"],
            "/etc/ssl/certs/custom/ca.crt"
        );
        assert_eq!(rendered.model["tls_disable_system_cas"], true);
        assert_eq!(rendered.model["tls_disable_verify"], false);
        let volume = &rendered.volumes[0];
        assert_eq!(volume.name, TLS_CA_VOLUME);
        let source = volume.secret.as_ref().unwrap();
        assert_eq!(source.secret_name.as_deref(), Some("ca"));
        assert_eq!(source.default_mode, Some(0o444));
        assert_eq!(rendered.volume_mounts[0].mount_path, TLS_CA_PATH);
        assert_eq!(rendered.volume_mounts[0].read_only, Some(true));
    }

    #[test]
    fn tls_without_a_ca_mounts_nothing() {
        let rendered = render_model(
            &model(
                json!({"provider": "Anthropic", "model": "claude", "tls": {"disableVerify": true}}),
            ),
            &RefStore::default(),
        )
        .unwrap();
        assert_eq!(rendered.model["tls_disable_verify"], true);
        assert!(rendered.model.get("tls_ca_cert_path").is_none());
        assert!(rendered.volumes.is_empty() && rendered.volume_mounts.is_empty());
    }

    #[test]
    fn passthrough_renders_the_flag_and_no_key() {
        let rendered = render_model(
            &model(json!({"provider": "OpenAI", "model": "gpt-4o", "apiKeyPassthrough": true})),
            &RefStore::default(),
        )
        .unwrap();
        assert_eq!(rendered.model["api_key_passthrough"], true);
        assert!(rendered.env.is_empty());
    }

    #[test]
    fn bedrock_prefers_a_bearer_token() {
        let spec = json!({"provider": "Bedrock", "model": "claude", "apiKeySecret": "aws",
            "bedrock": {"region": "us-east-1"}});
        let rendered = render_model(
            &model(spec.clone()),
            &secret(&[AWS_BEARER_TOKEN, "AWS_ACCESS_KEY_ID"]),
        )
        .unwrap();
        assert_eq!(
            env_names(&rendered),
            [
                ("AWS_REGION", None),
                (AWS_BEARER_TOKEN, Some(AWS_BEARER_TOKEN))
            ]
        );
        assert_eq!(
            rendered.model,
            json!({"model": "claude", "region": "us-east-1", "type": "bedrock"})
        );
    }

    #[test]
    fn bedrock_iam_credentials_come_from_their_own_keys() {
        let spec = json!({"provider": "Bedrock", "model": "claude", "apiKeySecret": "aws",
            "bedrock": {"region": "us-east-1"}});
        let rendered = render_model(
            &model(spec.clone()),
            &secret(&[
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                AWS_SESSION_TOKEN,
            ]),
        )
        .unwrap();
        assert_eq!(
            env_names(&rendered),
            [
                ("AWS_REGION", None),
                ("AWS_ACCESS_KEY_ID", Some("AWS_ACCESS_KEY_ID")),
                ("AWS_SECRET_ACCESS_KEY", Some("AWS_SECRET_ACCESS_KEY")),
                (AWS_SESSION_TOKEN, Some(AWS_SESSION_TOKEN)),
            ]
        );
        let error = render_model(&model(spec), &secret(&["AWS_ACCESS_KEY_ID"])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "ModelConfig ns/m: spec.apiKeySecret: Secret ns/aws key \"AWS_SECRET_ACCESS_KEY\" (or key \"AWS_BEARER_TOKEN_BEDROCK\") not found"
        );
    }

    #[test]
    fn values_kagents_runtime_ignores_are_warned_about() {
        let rendered = render_model(
            &model(json!({"provider": "Anthropic", "model": "claude",
                "anthropic": {"baseUrl": "https://a.example", "topK": 40}})),
            &RefStore::default(),
        )
        .unwrap();
        assert_eq!(
            rendered.model,
            json!({"model": "claude", "base_url": "https://a.example", "type": "anthropic"})
        );
        assert_eq!(rendered.warnings.len(), 1);
        assert!(rendered.warnings[0].contains("spec.anthropic.topK"));
    }

    #[test]
    fn azure_uses_kagents_field_names() {
        let rendered = render_model(
            &model(json!({"provider": "AzureOpenAI", "model": "gpt-4o",
                "apiKeySecret": "s", "apiKeySecretKey": "k",
                "azureOpenAI": {"azureEndpoint": "https://e.example", "apiVersion": "2024-10-21",
                    "azureDeployment": "prod-gpt", "azureAdToken": "t"}})),
            &RefStore::default(),
        )
        .unwrap();
        assert_eq!(
            env_names(&rendered),
            [
                ("AZURE_OPENAI_API_KEY", Some("k")),
                ("AZURE_AD_TOKEN", None),
                ("OPENAI_API_VERSION", None),
                ("AZURE_OPENAI_ENDPOINT", None),
            ]
        );
        assert_eq!(rendered.model["model"], "prod-gpt");
    }

    #[test]
    fn openai_parameters_render_as_kagent_does() {
        let rendered = render_model(
            &model(json!({"provider": "OpenAI", "model": "o3", "apiKeySecret": "s", "apiKeySecretKey": "k",
                "defaultHeaders": {"X-Team": "a"},
                "openAI": {"baseUrl": "http://litellm:4000", "organization": "org", "temperature": "0.7",
                    "maxTokens": 0, "topP": "", "frequencyPenalty": "0.5", "presencePenalty": "-1",
                    "seed": 7, "n": 1, "timeout": 30, "reasoningEffort": "high"}})),
            &RefStore::default(),
        )
        .unwrap();
        assert_eq!(
            rendered.model,
            json!({"model": "o3", "headers": {"X-Team": "a"}, "base_url": "http://litellm:4000",
                "temperature": 0.7, "frequency_penalty": 0.5, "presence_penalty": -1.0, "seed": 7,
                "n": 1, "timeout": 30, "reasoning_effort": "high", "type": "openai"})
        );
        assert_eq!(
            env_names(&rendered),
            [("OPENAI_API_KEY", Some("k")), ("OPENAI_ORGANIZATION", None)]
        );
    }

    #[test]
    fn ollama_and_vertex_settings_go_to_the_environment() {
        let ollama = render_model(
            &model(json!({"provider": "Ollama", "model": "llama3",
                "ollama": {"host": "ollama.ai:11434", "options": {"num_ctx": "4096"}}})),
            &RefStore::default(),
        )
        .unwrap();
        assert_eq!(
            ollama.env[0].value.as_deref(),
            Some("http://ollama.ai:11434")
        );
        assert_eq!(ollama.model["options"], json!({"num_ctx": "4096"}));
        let vertex = render_model(
            &model(json!({"provider": "AnthropicVertexAI", "model": "claude",
                "apiKeySecret": "gcp", "apiKeySecretKey": "key.json",
                "anthropicVertexAI": {"projectID": "p", "location": "us-east5"}})),
            &RefStore::default(),
        )
        .unwrap();
        assert_eq!(
            vertex
                .env
                .iter()
                .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or_default()))
                .collect::<Vec<_>>(),
            [
                ("GOOGLE_CLOUD_PROJECT", "p"),
                ("GOOGLE_CLOUD_LOCATION", "us-east5"),
                ("GOOGLE_APPLICATION_CREDENTIALS", "/creds/key.json"),
            ]
        );
        assert_eq!(vertex.volumes[0].name, "google-creds");
        assert_eq!(
            vertex.model,
            json!({"model": "claude", "type": "gemini_anthropic"})
        );
    }

    #[test]
    fn merging_refuses_a_different_value_for_the_same_name() {
        let openai = |secret: &str| {
            render_model(
                &model(json!({"provider": "OpenAI", "model": "m",
                    "apiKeySecret": secret, "apiKeySecretKey": "k"})),
                &RefStore::default(),
            )
            .unwrap()
        };
        let mut main = openai("a");
        main.merge(
            openai("a"),
            "Agent ns/x",
            "spec.declarative.memory.modelConfig",
        )
        .unwrap();
        assert_eq!(main.env.len(), 1);
        let error = main
            .merge(
                openai("b"),
                "Agent ns/x",
                "spec.declarative.memory.modelConfig",
            )
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("Agent ns/x: spec.declarative.memory.modelConfig: Invalid value: environment variable OPENAI_API_KEY"),
            "{error}"
        );
    }
}
