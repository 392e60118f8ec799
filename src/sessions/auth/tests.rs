use hitl_test_kit::mock;
use http::Method;
use serde_json::{Value, json};

use super::*;

const AUDIENCE: &str = "hitl-operator-sessions";

fn review_answer(pod: Option<(&str, &str)>, audiences: &[&str]) -> Value {
    let mut extra = serde_json::Map::new();
    if let Some((name, uid)) = pod {
        extra.insert(POD_NAME_EXTRA.into(), json!([name]));
        extra.insert(POD_UID_EXTRA.into(), json!([uid]));
    }
    json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {},
        "status": {
            "authenticated": true,
            "audiences": audiences,
            "user": {"username": "system:serviceaccount:team:agent-a", "extra": extra}
        }
    })
}

fn pod(uid: &str, account: &str, labels: Value, owner: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent-a-5d9-x", "namespace": "team", "uid": uid,
            "labels": labels, "ownerReferences": [owner]},
        "spec": {"serviceAccountName": account, "containers": []}
    })
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true})
}

fn ours() -> Value {
    json!({"app.kubernetes.io/managed-by": "hitl-operator", "kagent.dev/agent": "agent-a"})
}

/// Answers the token's review, its pod, ReplicaSet and Deployment as given, checking each
/// request is the one expected; returns what `agent_of` said.
async fn verify(
    token: &str,
    answers: Vec<(&'static str, u16, Value)>,
) -> Result<AgentKey, Refused> {
    let (client, mut apiserver) = mock::pair("default");
    let tokens = PodTokens::new(client, AUDIENCE);
    let server = tokio::spawn(async move {
        for (expected, code, body) in answers {
            let call = apiserver.next().await;
            let want_method = if expected.contains("tokenreviews") {
                Method::POST
            } else {
                Method::GET
            };
            assert_eq!(call.method, want_method);
            assert_eq!(call.uri.split('?').next().unwrap(), expected);
            if expected.contains("tokenreviews") {
                assert_eq!(call.body["spec"]["audiences"], json!([AUDIENCE]));
            }
            call.reply.respond(code, &body);
        }
        apiserver
    });
    let result = tokens.agent_of(token).await;
    let mut apiserver = server.await.unwrap();
    assert!(apiserver.is_idle(), "no request beyond those answered");
    result
}

const REVIEW: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const POD: &str = "/api/v1/namespaces/team/pods/agent-a-5d9-x";
const RS: &str = "/apis/apps/v1/namespaces/team/replicasets/agent-a-5d9";
const DEPLOY: &str = "/apis/apps/v1/namespaces/team/deployments/agent-a";

fn chain() -> Vec<(&'static str, u16, Value)> {
    vec![
        (
            REVIEW,
            201,
            review_answer(Some(("agent-a-5d9-x", "pod-uid")), &[AUDIENCE]),
        ),
        (
            POD,
            200,
            pod(
                "pod-uid",
                "agent-a",
                ours(),
                owner("apps/v1", "ReplicaSet", "agent-a-5d9", "rs-uid"),
            ),
        ),
        (
            RS,
            200,
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "agent-a-5d9", "namespace": "team", "uid": "rs-uid",
                    "ownerReferences": [owner("apps/v1", "Deployment", "agent-a", "deploy-uid")]}}),
        ),
        (
            DEPLOY,
            200,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "agent-a", "namespace": "team", "uid": "deploy-uid",
                    "ownerReferences": [owner("kagent.dev/v1alpha2", "Agent", "agent-a", "agent-uid")]}}),
        ),
    ]
}

#[tokio::test]
async fn a_pods_token_names_the_agent_that_controls_the_pod() {
    assert_eq!(
        verify("t", chain()).await,
        Ok(AgentKey::new("team", "agent-a"))
    );
}

#[tokio::test]
async fn a_verified_token_is_asked_about_once() {
    let (client, mut apiserver) = mock::pair("default");
    let tokens = PodTokens::new(client, AUDIENCE);
    let server = tokio::spawn(async move {
        for (_, code, body) in chain() {
            apiserver.next().await.reply.respond(code, &body);
        }
        apiserver
    });
    assert!(tokens.agent_of("t").await.is_ok());
    let mut apiserver = server.await.unwrap();
    assert_eq!(
        tokens.agent_of("t").await,
        Ok(AgentKey::new("team", "agent-a"))
    );
    assert!(apiserver.is_idle());
}

#[tokio::test]
async fn a_token_the_apiserver_refuses_or_of_another_audience_is_refused() {
    let refused = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {},
        "status": {"authenticated": false, "error": "token audiences invalid"}});
    let result = verify("t", vec![(REVIEW, 201, refused)]).await;
    assert!(
        matches!(result, Err(Refused::Unauthenticated(ref m)) if m.contains("audiences invalid")),
        "{result:?}"
    );
    let other = review_answer(
        Some(("agent-a-5d9-x", "pod-uid")),
        &["https://kubernetes.default.svc"],
    );
    let result = verify("t", vec![(REVIEW, 201, other)]).await;
    assert!(
        matches!(result, Err(Refused::Unauthenticated(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_service_accounts_token_bound_to_no_pod_is_refused() {
    let result = verify("t", vec![(REVIEW, 201, review_answer(None, &[AUDIENCE]))]).await;
    assert!(
        matches!(result, Err(Refused::Unauthenticated(ref m)) if m.contains("bound to no pod")),
        "{result:?}"
    );
}

#[tokio::test]
async fn an_apiserver_that_fails_gives_503_never_a_pass() {
    let result = verify(
        "t",
        vec![(REVIEW, 500, json!({"kind": "Status", "code": 500}))],
    )
    .await;
    assert!(matches!(result, Err(Refused::Unverified(_))), "{result:?}");
    let mut answers = chain();
    answers.truncate(1);
    answers.push((POD, 500, json!({"kind": "Status", "code": 500})));
    let result = verify("t", answers).await;
    assert!(matches!(result, Err(Refused::Unverified(_))), "{result:?}");
}

#[tokio::test]
async fn a_deleted_or_replaced_pod_proves_nothing() {
    let mut gone = chain();
    gone.truncate(1);
    gone.push((
        POD,
        404,
        json!({"kind": "Status", "code": 404, "reason": "NotFound"}),
    ));
    let result = verify("t", gone).await;
    assert!(
        matches!(result, Err(Refused::Unauthenticated(ref m)) if m.contains("gone")),
        "{result:?}"
    );
    let mut replaced = chain();
    replaced.truncate(2);
    replaced[1].2["metadata"]["uid"] = json!("another-uid");
    let result = verify("t", replaced).await;
    assert!(
        matches!(result, Err(Refused::Unauthenticated(ref m)) if m.contains("another UID")),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_pod_that_is_not_an_agents_pod_of_ours_proves_nothing() {
    // Labelled by someone else.
    let mut unlabelled = chain();
    unlabelled.truncate(2);
    unlabelled[1].2["metadata"]["labels"] = json!({"kagent.dev/agent": "agent-a"});
    assert!(verify("t", unlabelled).await.is_err());
    // Run as another ServiceAccount than the token's.
    let mut other_account = chain();
    other_account.truncate(2);
    other_account[1].2["spec"]["serviceAccountName"] = json!("someone-else");
    assert!(verify("t", other_account).await.is_err());
    // A Deployment controlled by no Agent (a look-alike made by hand).
    let mut by_hand = chain();
    by_hand[3].2["metadata"]["ownerReferences"] = json!([]);
    assert!(verify("t", by_hand).await.is_err());
    // The pod's label names agent-b, its Deployment agent-a's Agent.
    let mut mislabelled = chain();
    mislabelled[1].2["metadata"]["labels"]["kagent.dev/agent"] = json!("agent-b");
    assert!(verify("t", mislabelled).await.is_err());
    // A ReplicaSet of the same name made again (another UID) is not the pod's owner.
    let mut replaced_rs = chain();
    replaced_rs.truncate(3);
    replaced_rs[2].2["metadata"]["uid"] = json!("rs-uid-2");
    assert!(verify("t", replaced_rs).await.is_err());
}

#[test]
fn the_controller_reference_is_matched_by_group_and_kind() {
    let meta: ObjectMeta = serde_json::from_value(json!({"ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"},
        owner("kagent.dev/v1alpha2", "Agent", "a", "2"),
    ]}))
    .unwrap();
    assert_eq!(
        controller_of(&meta, "kagent.dev", "Agent").unwrap().name,
        "a"
    );
    assert!(controller_of(&meta, "other.dev", "Agent").is_none());
    assert!(controller_of(&meta, "kagent.dev", "ToolGate").is_none());
}
