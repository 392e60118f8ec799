//! `spec.declarative.context`: compaction of the conversation history, rendered as
//! config.json's `context_config`. A summarizer on another ModelConfig adds that model's
//! credentials to the agent container, as kagent does.

use crate::api::agent::ContextConfig as ContextSpec;
use crate::contract::agent_config::{CompactionConfig, ContextConfig};
use crate::render::model::{RenderedModel, render_model, secret_hash};
use crate::render::refs::RefStore;
use crate::{Error, Result};

/// The rendered context settings, and the summarizer's ModelConfig key hash when it is a
/// model of its own (so that rotating its key rolls the pods).
pub struct RenderedContext {
    /// config.json's `context_config`.
    pub config: ContextConfig,
    /// The summarizer ModelConfig's `status.secretHash`, when it is another ModelConfig.
    pub summarizer_key_hash: Option<String>,
}

/// Renders `context`; `model_name` and `model` are the agent's own ModelConfig, whose pod
/// settings grow by the summarizer's when it uses another one.
pub fn render_context(
    object: &str,
    namespace: &str,
    context: &ContextSpec,
    model_name: &str,
    model: &mut RenderedModel,
    refs: &RefStore,
) -> Result<RenderedContext> {
    let mut summarizer_key_hash = None;
    let compaction = match &context.compaction {
        None => None,
        Some(compaction) => {
            let mut summarizer_model = None;
            let mut prompt_template = String::new();
            if let Some(summarizer) = &compaction.summarizer {
                prompt_template = summarizer.prompt_template.clone().unwrap_or_default();
                let name = summarizer.model_config.as_deref().unwrap_or_default();
                if name.is_empty() || name == model_name {
                    summarizer_model = Some(model.model.clone());
                } else {
                    let config =
                        refs.model_config(namespace, name)
                            .ok_or_else(|| Error::RefNotFound {
                                object: object.to_owned(),
                                field: "spec.declarative.context.compaction.summarizer.modelConfig"
                                    .into(),
                                missing: format!("ModelConfig {namespace}/{name}"),
                            })?;
                    let rendered = render_model(config, refs)?;
                    summarizer_model = Some(rendered.model.clone());
                    model.merge(
                        rendered,
                        object,
                        "spec.declarative.context.compaction.summarizer.modelConfig",
                    )?;
                    summarizer_key_hash = Some(secret_hash(config));
                }
            }
            Some(CompactionConfig {
                compaction_interval: compaction.compaction_interval,
                overlap_size: compaction.overlap_size,
                summarizer_model,
                prompt_template,
                token_threshold: compaction.token_threshold,
                event_retention_size: compaction.event_retention_size,
            })
        }
    };
    Ok(RenderedContext {
        config: ContextConfig { compaction },
        summarizer_key_hash,
    })
}
