//! ToolGate reconciler, and the ClusterRoleBinding of the ToolGates' gates, against the mock
//! API server.

use hitl_operator::api::freeze::FREEZE_ANNOTATION;
use hitl_operator::api::tool_gate::ToolGateStatus;
use hitl_operator::api::{RemoteMCPServer, ToolGate};
use hitl_operator::controller::rendered::Summaries;
use hitl_operator::controller::token_review::{self, Bound, TokenReviewBinding};
use hitl_operator::controller::tool_gate::reconcile;
use hitl_operator::render::RenderOptions;
use hitl_operator::render::objects::{GateOwner, binding_key_secret};
use hitl_operator::render::refs::RefStore;
use hitl_operator::render::tool_gate::{ToolGateObjects, render_tool_gate};
use http::Method;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::Subject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::PartialObjectMeta;
use kube::core::ObjectMeta;
use serde_json::{Value, json};

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use tokio::sync::Notify;

use crate::harness::*;

const TOKEN: &str = "/api/v1/namespaces/ns/secrets/ledger-token";

fn tool_gate() -> ToolGate {
    yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: ToolGate
metadata: {name: pay, namespace: ns, uid: tg-uid, generation: 2}
spec:
  server: {remoteMCPServer: ledger}
  toolNames: [get_balance, transfer_funds]
  requireApproval: [transfer_funds]
  callers: {groups: ["system:serviceaccounts:team-a"]}
"#,
    )
}

fn server() -> RemoteMCPServer {
    yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: ledger, namespace: ns}
spec:
  url: "http://ledger.ns:8080/mcp"
  headersFrom: [{name: Authorization, valueFrom: {type: Secret, name: ledger-token, key: token}}]
"#,
    )
}

fn token() -> Secret {
    yaml(
        "{apiVersion: v1, kind: Secret, metadata: {name: ledger-token, namespace: ns}, stringData: {token: Bearer x}}",
    )
}

fn rendered(tool_gate: &ToolGate) -> ToolGateObjects {
    let mut refs = RefStore::default();
    refs.insert_remote_mcp_server(server());
    refs.insert_secret(token());
    render_tool_gate(tool_gate, &refs, &RenderOptions::default())
        .expect("fixture renders")
        .objects
}

/// A cache holding the ToolGate, its server and exactly what the renderer produces.
fn applied_cache(tool_gate: &ToolGate, objects: &ToolGateObjects) -> Cache {
    Cache {
        tool_gates: vec![tool_gate.clone()],
        remote_mcp_servers: vec![server()],
        secrets: vec![
            objects.secret.clone(),
            binding_key_secret(&GateOwner::tool_gate(tool_gate), &[7; 32]),
        ],
        service_accounts: vec![objects.service_account.clone()],
        roles: vec![objects.role.clone()],
        role_bindings: vec![objects.role_binding.clone()],
        deployments: vec![objects.deployment.clone()],
        services: vec![objects.service.clone()],
        ..Cache::default()
    }
}

const STATUS: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/toolgates/pay/status";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events?";

#[tokio::test]
async fn a_new_tool_gate_applies_its_gate_and_reports_where_to_call_it() {
    let tool_gate = tool_gate();
    let objects = rendered(&tool_gate);
    let mut script = vec![expect(Method::GET, TOKEN, json_of(&token()))];
    script.extend(created("/api/v1/namespaces/ns/secrets/pay-gate"));
    script.push(expect(
        Method::POST,
        "/api/v1/namespaces/ns/secrets?&fieldManager=hitl-operator",
        json!({}),
    ));
    for path in [
        "/api/v1/namespaces/ns/serviceaccounts/pay-gate",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/pay-gate",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings/pay-gate",
        "/apis/apps/v1/namespaces/ns/deployments/pay-gate",
        "/api/v1/namespaces/ns/services/pay-gate",
    ] {
        script.extend(created(path));
    }
    script.push(expect(
        Method::PATCH,
        &format!("{STATUS}{APPLY}"),
        json_of(&tool_gate),
    ));
    script.push(expect(Method::POST, EVENTS, event_created()));
    let cache = Cache {
        tool_gates: vec![tool_gate.clone()],
        remote_mcp_servers: vec![server()],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(
            std::sync::Arc::new(tool_gate.clone()),
            cache.context(client, at(0)),
        )
    })
    .await;
    result.expect("reconcile succeeds");

    let written = writes(&requests);
    assert_eq!(written[0], &json_of(&objects.secret));
    let key = written[1];
    assert_eq!(key["metadata"]["name"], "pay-gate-binding-key");
    assert_eq!(key["metadata"]["ownerReferences"][0]["kind"], "ToolGate");
    assert_eq!(key["metadata"]["ownerReferences"][0]["uid"], "tg-uid");
    assert_eq!(key["immutable"], true);
    assert_eq!(written[2], &json_of(&objects.service_account));
    assert_eq!(written[3], &json_of(&objects.role));
    assert_eq!(written[4], &json_of(&objects.role_binding));
    assert_eq!(written[5], &json_of(&objects.deployment));
    assert_eq!(written[6], &json_of(&objects.service));

    let status = written[7];
    assert_eq!(status["kind"], "ToolGate");
    assert_eq!(status["metadata"], json!({"name": "pay"}));
    assert_eq!(status["status"]["observedGeneration"], 2);
    assert_eq!(status["status"]["url"], "http://pay-gate.ns.svc:8099");
    assert_eq!(
        status["status"]["route"],
        "http://pay-gate.ns.svc:8099/servers/ns/ledger/mcp"
    );
    assert_eq!(
        status["status"]["audiences"],
        json!(["toolgate.kagent.dev/ns/pay"])
    );
    assert_eq!(
        conditions(status),
        vec![
            ("Accepted".into(), "True".into(), "Reconciled".into()),
            ("Ready".into(), "False".into(), "DeploymentNotReady".into()),
        ]
    );
    let event = written[8];
    assert_eq!(event["reason"], "Reconciled");
    assert_eq!(event["regarding"]["kind"], "ToolGate");
}

/// `tool_gate` with the status its first reconcile writes at `at(0)`, its objects cached as
/// applied: the Secret of the headers is read, the status written, `Reconciled` announced.
async fn settled(mut tool_gate: ToolGate) -> ToolGate {
    let script = vec![
        expect(Method::GET, TOKEN, json_of(&token())),
        expect(
            Method::PATCH,
            &format!("{STATUS}{APPLY}"),
            json_of(&tool_gate),
        ),
        expect(Method::POST, EVENTS, event_created()),
    ];
    let cache = applied_cache(&tool_gate, &rendered(&tool_gate));
    let (result, requests) = run_script(script, |client| {
        reconcile(
            std::sync::Arc::new(tool_gate.clone()),
            cache.context(client, at(0)),
        )
    })
    .await;
    result.expect("reconcile succeeds");
    let status: ToolGateStatus =
        serde_json::from_value(writes(&requests)[0]["status"].clone()).unwrap();
    tool_gate.status = Some(status);
    tool_gate
}

#[tokio::test]
async fn a_tool_gate_with_everything_in_place_makes_no_request() {
    // With its status settled, nothing is written; only the header Secret is read (a watch
    // knows Secrets by name only).
    let tool_gate = settled(tool_gate()).await;
    let writes = reconciled(&tool_gate, namespace(None), 60, &[]).await;
    assert!(writes.is_empty(), "{writes:?}");
}

/// Issue 54: a binding key planted before the ToolGate, labelled as ours but without the
/// ToolGate's controller reference, is another owner's: read, never used or rewritten, and
/// the ToolGate refused before its Deployment (which would mount it) is applied.
#[tokio::test]
async fn a_planted_binding_key_is_never_adopted() {
    let tool_gate = tool_gate();
    let planted: Secret = yaml(
        "{apiVersion: v1, kind: Secret, metadata: {name: pay-gate-binding-key, namespace: ns, labels: {app.kubernetes.io/managed-by: hitl-operator}}, data: {key: YXR0YWNrZXItY2hvc2UtdGhpcy1rZXktb2YtMzItYnl0ZXMh}}",
    );
    let mut cache = applied_cache(&tool_gate, &rendered(&tool_gate));
    cache.secrets[1] = planted.clone();
    let script = vec![
        expect(Method::GET, TOKEN, json_of(&token())),
        expect(
            Method::GET,
            "/api/v1/namespaces/ns/secrets/pay-gate-binding-key",
            json_of(&planted),
        ),
        expect(
            Method::PATCH,
            &format!("{STATUS}{APPLY}"),
            json_of(&tool_gate),
        ),
        expect(Method::POST, EVENTS, event_created()),
    ];
    let (result, requests) = run_script(script, |client| {
        reconcile(
            std::sync::Arc::new(tool_gate.clone()),
            cache.context(client, at(0)),
        )
    })
    .await;
    assert!(result.is_err(), "retried with back-off");
    let written = writes(&requests);
    assert_eq!(
        written.len(),
        2,
        "the status and its Event only: {written:?}"
    );
    let status = written[0];
    assert_eq!(
        conditions(status)[0],
        (
            "Accepted".into(),
            "False".into(),
            "OwnedByAnotherController".into()
        )
    );
    assert_eq!(
        condition_message(status, "Accepted"),
        "Secret ns/pay-gate-binding-key exists and is not hitl-operator's (no controller ownerReference: this operator did not make it (only its labels say so)); it was left alone: delete it, or hand the Agent to hitl-operator as docs/kagent.md says"
    );
}

#[tokio::test]
async fn a_missing_server_is_reported_in_accepted() {
    let tool_gate = tool_gate();
    let script = vec![
        expect(
            Method::PATCH,
            &format!("{STATUS}{APPLY}"),
            json_of(&tool_gate),
        ),
        expect(Method::POST, EVENTS, event_created()),
    ];
    let cache = Cache {
        tool_gates: vec![tool_gate.clone()],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(
            std::sync::Arc::new(tool_gate.clone()),
            cache.context(client, at(0)),
        )
    })
    .await;
    result.expect("a missing reference is a state, not an error");
    let status = writes(&requests)[0];
    assert_eq!(
        conditions(status)[0],
        ("Accepted".into(), "False".into(), "RefNotFound".into())
    );
    assert_eq!(
        condition_message(status, "Accepted"),
        "ToolGate ns/pay: spec.server.remoteMCPServer: RemoteMCPServer ns/ledger not found"
    );
}

/// A Namespace `ns` as the cache of Namespaces holds it, with the freeze annotation `reason`.
fn namespace(reason: Option<&str>) -> PartialObjectMeta<Namespace> {
    PartialObjectMeta {
        metadata: ObjectMeta {
            name: Some("ns".into()),
            annotations: reason.map(|r| [(FREEZE_ANNOTATION.to_string(), r.to_string())].into()),
            ..ObjectMeta::default()
        },
        ..PartialObjectMeta::default()
    }
}

/// The exact status apply of `tool_gate` whose status is `status`.
fn status_apply(status: &ToolGateStatus) -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "ToolGate",
        "metadata": {"name": "pay"},
        "status": json_of(status),
    })
}

/// One reconcile of `tool_gate` at `at(seconds)`, its objects cached as applied and its
/// Namespace as `namespace`, expecting the read of the header Secret, then `writes` (a status
/// apply, Events): the writes made.
async fn reconciled(
    tool_gate: &ToolGate,
    namespace: PartialObjectMeta<Namespace>,
    seconds: i64,
    writes_expected: &[(&str, Value)],
) -> Vec<Value> {
    let mut script = vec![expect(Method::GET, TOKEN, json_of(&token()))];
    for (path, answer) in writes_expected {
        let method = if path.starts_with(EVENTS) {
            Method::POST
        } else {
            Method::PATCH
        };
        script.push(expect(method, path, answer.clone()));
    }
    let cache = Cache {
        namespaces: vec![namespace],
        ..applied_cache(tool_gate, &rendered(tool_gate))
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(
            std::sync::Arc::new(tool_gate.clone()),
            cache.context(client, at(seconds)),
        )
    })
    .await;
    result.expect("reconcile succeeds");
    writes(&requests).into_iter().cloned().collect()
}

/// The condition `Frozen` as the reconcile at `at(seconds)` sets it.
fn frozen(reason: &str, message: &str, seconds: i64) -> Condition {
    Condition {
        type_: "Frozen".into(),
        status: "True".into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(2),
        last_transition_time: Time(at(seconds)),
    }
}

/// A freeze of `tool_gate` (its own annotation, or its Namespace's as `namespace`) at `at(60)`:
/// exactly one status apply, the settled status with `condition` added, and a Warning Event on
/// the ToolGate; still frozen at `at(120)`: nothing written; lifted at `at(180)`: the settled
/// status again, and a Normal Event.
async fn frozen_then_lifted(
    frozen_gate: ToolGate,
    namespace: Option<&str>,
    lifted_gate: ToolGate,
    condition: Condition,
) {
    let settled_status = lifted_gate.status.clone().unwrap();
    let status = format!("{STATUS}{APPLY}");
    let writes = reconciled(
        &frozen_gate,
        self::namespace(namespace),
        60,
        &[(&status, json_of(&frozen_gate)), (EVENTS, event_created())],
    )
    .await;
    let mut frozen_status = settled_status.clone();
    frozen_status.conditions.push(condition.clone());
    assert_eq!(writes[0], status_apply(&frozen_status));
    let event = &writes[1];
    assert_eq!(
        (&event["type"], &event["reason"], &event["action"]),
        (&json!("Warning"), &json!("Frozen"), &json!("Freeze"))
    );
    assert_eq!(
        (&event["regarding"]["kind"], &event["regarding"]["name"]),
        (&json!("ToolGate"), &json!("pay"))
    );
    assert_eq!(
        event["note"],
        format!(
            "{}: its gated tool calls are refused and its pending ApprovalRequests cancelled",
            condition.message
        )
    );

    let mut still = frozen_gate.clone();
    still.status = Some(frozen_status);
    let writes = reconciled(&still, self::namespace(namespace), 120, &[]).await;
    assert!(writes.is_empty(), "{writes:?}");

    let mut lifted = lifted_gate;
    lifted.status = still.status.clone();
    let writes = reconciled(
        &lifted,
        self::namespace(None),
        180,
        &[(&status, json_of(&lifted)), (EVENTS, event_created())],
    )
    .await;
    assert_eq!(writes[0], status_apply(&settled_status));
    assert_eq!(
        (&writes[1]["type"], &writes[1]["reason"]),
        (&json!("Normal"), &json!("Unfrozen"))
    );
}

#[tokio::test]
async fn a_tool_gates_own_freeze_is_its_frozen_condition_until_lifted() {
    let settled = settled(tool_gate()).await;
    let mut annotated = settled.clone();
    annotated.metadata.annotations =
        Some([(FREEZE_ANNOTATION.to_string(), "incident 42".to_string())].into());
    let condition = frozen(
        "ToolGateFrozen",
        "ToolGate pay is frozen (hitl.kagent.dev/freeze: incident 42)",
        60,
    );
    frozen_then_lifted(annotated, None, settled, condition).await;
}

#[tokio::test]
async fn a_namespace_freeze_is_the_tool_gates_frozen_condition_until_lifted() {
    let settled = settled(tool_gate()).await;
    let condition = frozen(
        "NamespaceFrozen",
        "Namespace ns is frozen (hitl.kagent.dev/freeze: drill)",
        60,
    );
    frozen_then_lifted(settled.clone(), Some("drill"), settled, condition).await;
}

const BINDING: &str =
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/hitl-toolgate-token-review";

fn binding() -> TokenReviewBinding {
    TokenReviewBinding {
        name: "hitl-toolgate-token-review".into(),
        role: "hitl-token-reviewer".into(),
    }
}

fn tool_gate_in(namespace: &str, name: &str) -> ToolGate {
    let mut tool_gate = tool_gate();
    tool_gate.metadata.namespace = Some(namespace.into());
    tool_gate.metadata.name = Some(name.into());
    tool_gate
}

/// The subjects of the ToolGates `namespace/name`, each Accepted and controlling its gate's
/// ServiceAccount.
fn subjects_of(gates: &[(&str, &str)]) -> Vec<Subject> {
    let accepted: Vec<ToolGate> = gates
        .iter()
        .map(|(namespace, name)| {
            let mut tool_gate = tool_gate_in(namespace, name);
            tool_gate.metadata.uid = Some(format!("{namespace}-{name}"));
            tool_gate.status = Some(ToolGateStatus {
                conditions: vec![Condition {
                    type_: "Accepted".into(),
                    status: "True".into(),
                    reason: "Reconciled".into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: Time(Timestamp::UNIX_EPOCH),
                }],
                ..ToolGateStatus::default()
            });
            tool_gate
        })
        .collect();
    let accounts = Summaries::listed(accepted.iter().map(|tool_gate| {
        let owner = GateOwner::tool_gate(tool_gate);
        ServiceAccount {
            metadata: ObjectMeta {
                name: Some(owner.gate_name()),
                namespace: Some(owner.namespace.clone()),
                labels: Some(owner.labels()),
                owner_references: Some(vec![owner.owner_reference()]),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        }
    }));
    token_review::subjects(&accepted, &accounts)
}

fn bound() -> Bound {
    Bound::new(binding().name, Arc::new(Notify::new()))
}

#[tokio::test]
async fn the_token_review_binding_holds_every_gate_sorted_and_is_written_on_change_only() {
    let store = subjects_of(&[("team-b", "pay"), ("team-a", "search"), ("team-a", "files")]);
    // First: read, missing, applied.
    let script = vec![
        not_found(BINDING),
        expect(Method::PATCH, &format!("{BINDING}{APPLY}"), json!({})),
    ];
    let (digest, requests) = run_script(script, |client| async move {
        token_review::sync(&client, &binding(), store, &bound(), None).await
    })
    .await;
    let digest = digest.expect("applied");
    assert_eq!(
        writes(&requests)[0],
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "hitl-toolgate-token-review",
                         "labels": {"app.kubernetes.io/managed-by": "hitl-operator"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "hitl-token-reviewer"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "files-gate", "namespace": "team-a"},
                {"kind": "ServiceAccount", "name": "search-gate", "namespace": "team-a"},
                {"kind": "ServiceAccount", "name": "pay-gate", "namespace": "team-b"},
            ],
        })
    );
    // Unchanged: no request at all.
    let store = subjects_of(&[("team-b", "pay"), ("team-a", "search"), ("team-a", "files")]);
    let (again, requests) = run_script(Vec::new(), |client| async move {
        token_review::sync(&client, &binding(), store, &bound(), Some(digest)).await
    })
    .await;
    assert_eq!(again.unwrap(), digest);
    assert!(requests.is_empty());
    // The last ToolGate gone: the subjects are emptied.
    let store = subjects_of(&[]);
    let script = vec![expect(
        Method::PATCH,
        &format!("{BINDING}{APPLY}"),
        json!({}),
    )];
    let (emptied, requests) = run_script(script, |client| async move {
        token_review::sync(&client, &binding(), store, &bound(), Some(digest)).await
    })
    .await;
    assert_ne!(emptied.unwrap(), digest);
    assert_eq!(writes(&requests)[0]["subjects"], json!([]));
}

#[tokio::test]
async fn a_token_review_binding_already_in_place_is_not_written_at_start() {
    let store = subjects_of(&[("team-a", "pay")]);
    let existing = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "hitl-toolgate-token-review",
                     "labels": {"app.kubernetes.io/managed-by": "hitl-operator"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "hitl-token-reviewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "pay-gate", "namespace": "team-a"}],
    });
    let (result, requests) = run_script(
        vec![expect(Method::GET, BINDING, existing)],
        |client| async move { token_review::sync(&client, &binding(), store, &bound(), None).await },
    )
    .await;
    result.expect("read");
    assert!(writes(&requests).is_empty());
}
