//! What kagent's agent runtime of a given image version cannot run: a config.json it would
//! refuse at start is warned about when rendered, naming the version that can.

use serde_json::Value;

/// Repository of kagent's agent runtime image, whose tag is the `kagent-adk` version.
const KAGENT_APP_REPOSITORY: &str = "kagent-dev/kagent/app";

/// Model types (config.json `model.type`) and the first runtime version that knows them.
const MODEL_TYPES_SINCE: &[(&str, (u64, u64, u64))] = &[("bedrock", (0, 7, 9))];

/// The `kagent-adk` version of `image` when it is kagent's agent image with a version tag.
fn runtime_version(image: &str) -> Option<(u64, u64, u64)> {
    let (repository, tag) = image.rsplit_once(':')?;
    if !repository.ends_with(KAGENT_APP_REPOSITORY) || tag.contains('/') {
        return None;
    }
    let mut parts = tag.trim_start_matches('v').splitn(3, '.');
    let mut next = || parts.next()?.parse::<u64>().ok();
    Some((next()?, next()?, next()?))
}

/// A warning when the runtime of `image` does not know the type of `model` (config.json's
/// `model`), so the agent container would exit at start.
pub fn model_warning(image: &str, model: &Value) -> Option<String> {
    let model_type = model.get("type")?.as_str()?;
    let (_, since) = MODEL_TYPES_SINCE.iter().find(|(t, _)| *t == model_type)?;
    let version = runtime_version(image)?;
    (version < *since).then(|| {
        format!(
            "the agent image {image} runs kagent-adk {}.{}.{}, which does not know model type {model_type:?} (from {}.{}.{} on): its runtime would exit at start; set spec.declarative.deployment.image, or the controller's --agent-image (chart value agentImage), to {}.{}.{} or later",
            version.0, version.1, version.2, since.0, since.1, since.2, since.0, since.1, since.2
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bedrock_needs_a_runtime_from_0_7_9_on() {
        let bedrock = json!({"type": "bedrock", "model": "m"});
        let warning = model_warning("cr.kagent.dev/kagent-dev/kagent/app:0.7.4", &bedrock).unwrap();
        assert!(warning.contains("kagent-adk 0.7.4"), "{warning}");
        assert!(warning.contains("0.7.9 or later"), "{warning}");
        for image in [
            "cr.kagent.dev/kagent-dev/kagent/app:0.7.9",
            "cr.kagent.dev/kagent-dev/kagent/app:v0.10.4",
            "registry.example/mirror/kagent-dev/kagent/app:0.10.4",
            "my.registry/agent:0.1.0",
            "cr.kagent.dev/kagent-dev/kagent/app:latest",
            "cr.kagent.dev/kagent-dev/kagent/app",
        ] {
            assert_eq!(model_warning(image, &bedrock), None, "{image}");
        }
        let openai = json!({"type": "openai", "model": "gpt-4o"});
        assert_eq!(
            model_warning("cr.kagent.dev/kagent-dev/kagent/app:0.7.4", &openai),
            None
        );
    }
}
