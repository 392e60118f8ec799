//! ModelConfig reconciler: checks the Secrets a ModelConfig names (API key or Bedrock AWS
//! credentials, TLS CA certificate) and records a SHA-256 over what the agent gets from them
//! in `status.secretHash`, which the renderer folds into the agents' config hash so a
//! rotation rolls their pods.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use super::watches::ModelConfigWatches;
use super::{Context, drain, measured, retry_after_error};
use crate::api::ModelConfig;
use crate::api::common::{ValueSource, ValueSourceType};
use crate::api::model_config::{ModelConfigStatus, TlsConfig};
use crate::apiserver::{apply_status, new_condition, set_condition};
use crate::render::model::{bedrock_secret, describe};
use crate::render::refs::RefStore;
use crate::{Error, Result};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "modelconfig";

/// The ModelConfig controller on `watches`, until `shutdown` resolves.
pub fn controller(
    watches: ModelConfigWatches,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> {
    let ModelConfigWatches {
        model_configs,
        secrets,
    } = watches;
    let store = ctx.stores.model_configs.clone();
    let controller = Controller::for_shared_stream(model_configs, store.clone())
        .watches_stream(secrets, move |secret: PartialObjectMeta<Secret>| {
            using_secret(
                &store,
                &secret.namespace().unwrap_or_default(),
                &secret.name_any(),
            )
        })
        .graceful_shutdown_on(shutdown);
    drain(controller.run(
        reconcile,
        |object, error, ctx| retry_after_error(CONTROLLER, object.as_ref(), error, &ctx),
        ctx,
    ))
}

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

/// Fetches the Secrets the ModelConfig names and hashes them ([`secrets_hash`]).
async fn check_secret(
    model_config: &ModelConfig,
    ctx: &Context,
    namespace: &str,
) -> Result<Option<String>> {
    let mut refs = RefStore::default();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    for name in model_config.spec.secret_names() {
        if let Some(secret) = api.get_opt(name).await? {
            refs.insert_secret(secret);
        }
    }
    secrets_hash(model_config, &refs)
}

/// The hex SHA-256 of what the agent container gets from the ModelConfig's Secrets in
/// `refs` (the API key, a Bedrock ModelConfig's AWS credentials, the TLS CA certificate), or
/// `None` when it names none. With an API key alone it is the SHA-256 of the key. A missing
/// Secret or key is refused naming the field that references it.
pub fn secrets_hash(model_config: &ModelConfig, refs: &RefStore) -> Result<Option<String>> {
    let spec = &model_config.spec;
    let namespace = model_config.namespace().unwrap_or_default();
    let object = describe(model_config);
    let read = |name: &str, key: &str, field: &str| {
        let source = ValueSource {
            source_type: ValueSourceType::Secret,
            name: name.to_owned(),
            key: key.to_owned(),
        };
        refs.value(&source, &namespace)
            .map_err(|missing| missing.into_error(&object, field))
    };
    let mut hasher = Sha256::new();
    let mut any = false;
    if let Some(secret) = spec.bedrock_secret() {
        for key in bedrock_secret(model_config, secret, refs)?.1 {
            hasher.update(format!("\0{key}\0"));
            hasher.update(read(secret, key, "spec.apiKeySecret")?);
        }
        any = true;
    } else if let Some((secret, key)) = spec.key_secret().zip(spec.api_key_secret_key.as_deref()) {
        hasher.update(read(secret, key, "spec.apiKeySecret")?);
        any = true;
    }
    if let Some((secret, key)) = spec.tls.as_ref().and_then(TlsConfig::ca_cert) {
        hasher.update("\0tls.caCert\0");
        hasher.update(read(secret, key, "spec.tls.caCertSecretRef")?);
        any = true;
    }
    Ok(any.then(|| hex::encode(hasher.finalize())))
}

/// The ModelConfigs in `store` that name the Secret `namespace/name` (key or TLS CA).
pub fn using_secret(
    store: &Store<ModelConfig>,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<ModelConfig>> {
    store
        .state()
        .iter()
        .filter(|mc| {
            mc.namespace().as_deref() == Some(namespace) && mc.spec.secret_names().contains(&name)
        })
        .map(|mc| ObjectRef::from_obj(mc.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};

    fn model_config(spec: serde_json::Value) -> ModelConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "ModelConfig",
            "metadata": {"name": "m", "namespace": "a"}, "spec": spec,
        }))
        .unwrap()
    }

    fn secrets(secrets: &[(&str, &[(&str, &str)])]) -> RefStore {
        let mut refs = RefStore::default();
        for (name, data) in secrets {
            let data: serde_json::Map<String, serde_json::Value> = data
                .iter()
                .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
                .collect();
            refs.insert_secret(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "namespace": "a"}, "stringData": data,
                }))
                .unwrap(),
            );
        }
        refs
    }

    #[test]
    fn the_hash_covers_the_key_the_aws_credentials_and_the_ca() {
        let openai = model_config(serde_json::json!({"provider": "OpenAI", "model": "g",
            "apiKeySecret": "key", "apiKeySecretKey": "k"}));
        let refs = secrets(&[("key", &[("k", "sk-1")])]);
        // An API key alone hashes as before TLS support: no roll on upgrade.
        assert_eq!(
            secrets_hash(&openai, &refs).unwrap(),
            Some(hex::encode(Sha256::digest(b"sk-1")))
        );
        let mut with_ca = openai.clone();
        with_ca.spec.tls = Some(TlsConfig {
            ca_cert_secret_ref: Some("ca".into()),
            ca_cert_secret_key: Some("ca.crt".into()),
            ..TlsConfig::default()
        });
        let error = secrets_hash(&with_ca, &refs).unwrap_err();
        assert_eq!(
            error.to_string(),
            "ModelConfig a/m: spec.tls.caCertSecretRef: Secret a/ca not found"
        );
        let one = secrets(&[("key", &[("k", "sk-1")]), ("ca", &[("ca.crt", "one")])]);
        let two = secrets(&[("key", &[("k", "sk-1")]), ("ca", &[("ca.crt", "two")])]);
        assert_ne!(
            secrets_hash(&with_ca, &one).unwrap(),
            secrets_hash(&with_ca, &two).unwrap(),
            "a new CA rolls the pods"
        );
        let bedrock = model_config(serde_json::json!({"provider": "Bedrock", "model": "c",
            "apiKeySecret": "aws", "bedrock": {"region": "us-east-1"}}));
        let iam = |secret: &str| {
            secrets(&[(
                "aws",
                &[
                    ("AWS_ACCESS_KEY_ID", "id"),
                    ("AWS_SECRET_ACCESS_KEY", secret),
                ],
            )])
        };
        assert_ne!(
            secrets_hash(&bedrock, &iam("s1")).unwrap(),
            secrets_hash(&bedrock, &iam("s2")).unwrap()
        );
        assert!(secrets_hash(&bedrock, &secrets(&[("aws", &[])])).is_err());
        let passthrough = model_config(
            serde_json::json!({"provider": "OpenAI", "model": "g", "apiKeyPassthrough": true}),
        );
        assert_eq!(
            secrets_hash(&passthrough, &RefStore::default()).unwrap(),
            None
        );
    }

    #[test]
    fn ca_secrets_map_to_their_model_configs() {
        let (store, mut writer) = reflector::store::<ModelConfig>();
        writer.apply_watcher_event(&watcher::Event::Apply(model_config(serde_json::json!({
            "provider": "OpenAI", "model": "g",
            "tls": {"caCertSecretRef": "corp-ca", "caCertSecretKey": "ca.crt"}
        }))));
        let names: Vec<String> = using_secret(&store, "a", "corp-ca")
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, vec!["m"]);
    }

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
