//! ModelConfig reconciler: checks the API-key Secret and records the SHA-256 of the key in
//! `status.secretHash`, which the renderer folds into the agents' config hash so a key rotation
//! rolls their pods.

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use super::{Context, fetch_value_source, measured};
use crate::api::ModelConfig;
use crate::api::common::{ValueSource, ValueSourceType};
use crate::api::model_config::ModelConfigStatus;
use crate::kube::{apply_status, new_condition, set_condition};
use crate::render::refs::RefStore;
use crate::{Error, Result};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "modelconfig";

/// Reconciles one ModelConfig.
pub async fn reconcile(model_config: Arc<ModelConfig>, ctx: Arc<Context>) -> Result<Action> {
    measured(
        &ctx,
        CONTROLLER,
        model_config.as_ref(),
        reconcile_inner(&model_config, &ctx),
    )
    .await
}

async fn reconcile_inner(model_config: &ModelConfig, ctx: &Context) -> Result<Action> {
    let namespace = model_config.namespace().unwrap_or_default();
    let (secret_hash, outcome) = match check_secret(model_config, ctx, &namespace).await {
        Ok(hash) => (hash, Ok(())),
        Err(error @ Error::RefNotFound { .. }) => (None, Err(error)),
        Err(error) => return Err(error),
    };
    let current = model_config.status.clone().unwrap_or_default();
    let mut status = ModelConfigStatus {
        observed_generation: model_config.meta().generation,
        conditions: current.conditions.clone(),
        // Keep the last good hash while the Secret is broken: pods keep running as they are.
        secret_hash: secret_hash.or(current.secret_hash.clone()),
    };
    let now = ctx.clock.now();
    let condition = match &outcome {
        Ok(()) => new_condition(
            "Accepted",
            true,
            "Reconciled",
            "",
            status.observed_generation,
            now,
        ),
        Err(error) => new_condition(
            "Accepted",
            false,
            error.reason(),
            error.to_string(),
            status.observed_generation,
            now,
        ),
    };
    set_condition(&mut status.conditions, condition);
    if status != current {
        let api: Api<ModelConfig> = Api::namespaced(ctx.client.clone(), &namespace);
        apply_status(&api, model_config, &status).await?;
    }
    Ok(Action::requeue(Duration::from_secs(3600)))
}

/// The hex SHA-256 of the API key, or `None` when the ModelConfig needs no key.
async fn check_secret(
    model_config: &ModelConfig,
    ctx: &Context,
    namespace: &str,
) -> Result<Option<String>> {
    let (Some(name), Some(key)) = (
        model_config.spec.api_key_secret.clone(),
        model_config.spec.api_key_secret_key.clone(),
    ) else {
        return Ok(None);
    };
    let source = ValueSource {
        source_type: ValueSourceType::Secret,
        name,
        key,
    };
    let mut refs = RefStore::default();
    fetch_value_source(&ctx.client, &source, namespace, &mut refs).await?;
    let value = refs.value(&source, namespace).map_err(|missing| {
        missing.into_error(
            &format!("ModelConfig {namespace}/{}", model_config.name_any()),
            "spec.apiKeySecret",
        )
    })?;
    Ok(Some(hex::encode(Sha256::digest(value.as_bytes()))))
}

/// The ModelConfigs in `store` whose API key lives in the Secret `namespace/name`.
pub fn using_secret(
    store: &Store<ModelConfig>,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<ModelConfig>> {
    store
        .state()
        .iter()
        .filter(|mc| {
            mc.namespace().as_deref() == Some(namespace)
                && mc.spec.api_key_secret.as_deref() == Some(name)
        })
        .map(|mc| ObjectRef::from_obj(mc.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};

    #[test]
    fn secrets_map_to_the_model_configs_using_them() {
        let (store, mut writer) = reflector::store::<ModelConfig>();
        for (namespace, name, secret) in
            [("a", "m1", "key"), ("a", "m2", "other"), ("b", "m3", "key")]
        {
            let model_config: ModelConfig = serde_json::from_value(serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"provider": "OpenAI", "model": "gpt-4o", "apiKeySecret": secret, "apiKeySecretKey": "k"},
            }))
            .unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(model_config));
        }
        let names: Vec<String> = using_secret(&store, "a", "key")
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, vec!["m1"]);
        assert!(using_secret(&store, "c", "key").is_empty());
    }
}
