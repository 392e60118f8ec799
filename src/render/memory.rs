//! `spec.declarative.memory` -> the `memory` block of config.json: which model embeds the
//! agent's memories, and what that model needs in the agent container.

use serde_json::{Map, Value, json};

use super::model::{RenderedModel, render_model, secret_hash};
use super::refs::RefStore;
use crate::api::agent::MemorySpec;
use crate::{Error, Result};

/// Field of the embedding ModelConfig reference, as errors name it.
pub const MEMORY_MODEL_FIELD: &str = "spec.declarative.memory.modelConfig";

/// The memory of an agent, rendered.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedMemory {
    /// The `memory` object of config.json.
    pub config: Value,
    /// What the embedding model needs in the agent container.
    pub model: RenderedModel,
    /// The embedding ModelConfig's secret hash, which rolls the pods when its Secrets change.
    pub secret_hash: String,
}

/// The embedding settings kagent's runtime reads from a rendered model block: its type as
/// the provider, its model and, for OpenAI and Anthropic, its base URL.
fn embedding(model: &Value) -> Value {
    let mut embedding = Map::new();
    embedding.insert("provider".into(), model["type"].clone());
    embedding.insert("model".into(), model["model"].clone());
    if let Some(base_url) = model
        .get("base_url")
        .and_then(Value::as_str)
        .filter(|url| !url.is_empty())
    {
        embedding.insert("base_url".into(), json!(base_url));
    }
    Value::Object(embedding)
}

/// Renders an Agent's memory, resolving its ModelConfig in `namespace`.
pub fn render_memory(
    object: &str,
    namespace: &str,
    memory: &MemorySpec,
    refs: &RefStore,
) -> Result<RenderedMemory> {
    let model_config = refs
        .model_config(namespace, &memory.model_config)
        .ok_or_else(|| Error::RefNotFound {
            object: object.to_owned(),
            field: MEMORY_MODEL_FIELD.into(),
            missing: format!("ModelConfig {namespace}/{}", memory.model_config),
        })?;
    let model = render_model(model_config, refs)?;
    let mut config = Map::new();
    if let Some(days) = memory.ttl_days {
        config.insert("ttl_days".into(), json!(days));
    }
    config.insert("embedding".into(), embedding(&model.model));
    Ok(RenderedMemory {
        config: Value::Object(config),
        model,
        secret_hash: secret_hash(model_config),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_keeps_provider_model_and_a_set_base_url() {
        assert_eq!(
            embedding(
                &json!({"type": "openai", "model": "e", "base_url": "https://x", "temperature": 1})
            ),
            json!({"provider": "openai", "model": "e", "base_url": "https://x"})
        );
        assert_eq!(
            embedding(&json!({"type": "gemini_vertex_ai", "model": "e", "base_url": ""})),
            json!({"provider": "gemini_vertex_ai", "model": "e"})
        );
    }
}
