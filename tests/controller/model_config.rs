//! ModelConfig reconciler against the mock API server.

use std::sync::Arc;

use hitl_operator::api::ModelConfig;
use hitl_operator::controller::model_config::reconcile;
use http::Method;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::harness::*;

const SECRET: &str = "/api/v1/namespaces/ns/secrets/openai";
const STATUS: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/modelconfigs/mc/status?&force=true&fieldManager=hitl-operator";

fn model_config() -> ModelConfig {
    yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: mc, namespace: ns, generation: 2}
spec: {provider: OpenAI, model: gpt-4o, apiKeySecret: openai, apiKeySecretKey: key}
"#,
    )
}

fn secret(key: &str, value: &str) -> serde_json::Value {
    let encoded = serde_json::to_value(k8s_openapi::ByteString(value.as_bytes().to_vec())).unwrap();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "openai", "namespace": "ns"}, "data": {key: encoded}})
}

#[tokio::test]
async fn records_the_hash_of_the_key_then_writes_nothing() {
    let model_config = model_config();
    let script = vec![
        expect(Method::GET, SECRET, secret("key", "sk-123")),
        expect(
            Method::PATCH,
            STATUS,
            serde_json::to_value(&model_config).unwrap(),
        ),
    ];
    let (result, requests) = run_script(script, |client| {
        reconcile(
            Arc::new(model_config.clone()),
            Cache::default().context(client, at(0)),
        )
    })
    .await;
    result.unwrap();
    let body = &requests[1].body;
    let expected = hex::encode(Sha256::digest(b"sk-123"));
    assert_eq!(body["status"]["secretHash"], expected);
    assert_eq!(body["status"]["observedGeneration"], 2);
    assert_eq!(
        conditions(body),
        vec![("Accepted".into(), "True".into(), "Reconciled".into())]
    );

    // With that status in place, the same key means no write.
    let mut current = model_config.clone();
    current.status = Some(serde_json::from_value(body["status"].clone()).unwrap());
    let (result, requests) = run_script(
        vec![expect(Method::GET, SECRET, secret("key", "sk-123"))],
        |client| {
            reconcile(
                Arc::new(current.clone()),
                Cache::default().context(client, at(60)),
            )
        },
    )
    .await;
    result.unwrap();
    assert!(requests.iter().all(|r| !r.is_write()));

    // A rotated key changes the hash.
    let script = vec![
        expect(Method::GET, SECRET, secret("key", "sk-456")),
        expect(
            Method::PATCH,
            STATUS,
            serde_json::to_value(&model_config).unwrap(),
        ),
    ];
    let (result, requests) = run_script(script, |client| {
        reconcile(
            Arc::new(current.clone()),
            Cache::default().context(client, at(120)),
        )
    })
    .await;
    result.unwrap();
    assert_eq!(
        requests[1].body["status"]["secretHash"],
        hex::encode(Sha256::digest(b"sk-456"))
    );
}

#[tokio::test]
async fn missing_secret_or_key_is_ref_not_found() {
    let model_config = model_config();
    for (answer, detail) in [
        (not_found(SECRET), "Secret ns/openai not found"),
        (
            expect(Method::GET, SECRET, secret("other", "x")),
            "Secret ns/openai key \"key\" not found",
        ),
    ] {
        let script = vec![
            answer,
            expect(
                Method::PATCH,
                STATUS,
                serde_json::to_value(&model_config).unwrap(),
            ),
        ];
        let (result, requests) = run_script(script, |client| {
            reconcile(
                Arc::new(model_config.clone()),
                Cache::default().context(client, at(0)),
            )
        })
        .await;
        result.unwrap();
        let body = &requests[1].body;
        assert_eq!(
            conditions(body),
            vec![("Accepted".into(), "False".into(), "RefNotFound".into())]
        );
        assert_eq!(
            condition_message(body, "Accepted"),
            format!("ModelConfig ns/mc: spec.apiKeySecret: {detail}")
        );
        assert!(body["status"].get("secretHash").is_none());
    }
}
