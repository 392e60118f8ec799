//! Mock-apiserver tests: the exact requests the gate sends, and fail-closed behaviour on
//! apiserver errors.

use std::sync::{Arc, Mutex};

use hitl_test_kit::mock::{self, ApiMock, Reply};
use serde_json::{Value, json};

use super::*;
use crate::api::agent::ToolServerKind;
use crate::contract::binding_key::BindingKey;
use crate::contract::gate_config::DEFAULT_MAX_OPEN_REQUESTS;
use crate::gate::decision::Refusal;
use crate::gate::freeze::FreezeState;
use crate::gate::hash::digest;

const NS: &str = "team";
const BASE_PATH: &str = "/apis/kagent.dev/v1alpha2/namespaces/team/approvalrequests";

/// A clock the test moves by hand.
struct Manual(Mutex<Timestamp>);
impl Clock for Manual {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}

fn now() -> Timestamp {
    "2026-11-22T00:00:00Z".parse().unwrap()
}

fn approvals(at: Timestamp) -> (Approvals, ApiMock) {
    let (a, handle, _) = approvals_with_clock(at);
    (a, handle)
}

fn approvals_with_clock(at: Timestamp) -> (Approvals, ApiMock, Arc<Manual>) {
    approvals_with(at, None)
}

fn approvals_with(
    at: Timestamp,
    grant_max_ttl: Option<SignedDuration>,
) -> (Approvals, ApiMock, Arc<Manual>) {
    let open = OpenRequests::fixed(&agent(), DEFAULT_MAX_OPEN_REQUESTS, &[]);
    approvals_counting(at, grant_max_ttl, open)
}

/// The identity of the agent whose gate the tests run.
fn agent() -> AgentIdentity {
    AgentIdentity {
        kind: Default::default(),
        namespace: NS.into(),
        name: "agent-a".into(),
        uid: "uid-1".into(),
        service_account: "agent-a-sa".into(),
    }
}

/// A gate whose count of the agent's open requests is `open`.
fn approvals_counting(
    at: Timestamp,
    grant_max_ttl: Option<SignedDuration>,
    open: OpenRequests,
) -> (Approvals, ApiMock, Arc<Manual>) {
    let clock = Arc::new(Manual(Mutex::new(at)));
    let (client, handle) = mock::pair(NS);
    let agent = agent();
    let settings = ApprovalSettings {
        timeout: Duration::from_secs(3600),
        wait: Duration::from_secs(30),
        progress_every: Duration::from_secs(3600),
        pod: "gate-pod-0".into(),
        metrics: Arc::new(Metrics::default()),
        freeze: FreezeWatch::fixed(FreezeState::Clear),
        grant_max_ttl,
        open,
        escalation: None,
    };
    (
        Approvals::new(client, agent, settings, clock.clone()),
        handle,
        clock,
    )
}

fn args() -> Value {
    json!({"path": "/data/report.csv", "password": "canary-pw-123", "note": "sk-canary0123456789"})
}

fn call(arguments: &Value) -> GatedCall {
    let key = BindingKey::from_bytes(&[7; 32]).unwrap();
    let digest = digest(&key, arguments).unwrap();
    GatedCall {
        key: CallKey {
            agent: "agent-a".into(),
            kind: PolicyKind::Agent,
            caller: None,
            server_kind: ToolServerKind::RemoteMCPServer,
            server_namespace: "tools".into(),
            server_name: "fs".into(),
            tool: "delete_file".into(),
            binding: digest.binding.clone(),
            required_approvals: 1,
        },
        digest,
        preview: redact::preview(arguments),
        rule: None,
        context: CallContext {
            session_id: Some("sess-1".into()),
            task_id: None,
            call_id: Some("7".into()),
        },
        caller: None,
        tool_annotations: None,
        escalation: None,
    }
}

/// `call(arguments)` through the shared gate of ToolGate `agent-a`, by `caller`.
fn shared_call(arguments: &Value, caller: &str) -> GatedCall {
    let mut c = call(arguments);
    c.key.kind = PolicyKind::ToolGate;
    c.key.caller = Some(caller.into());
    c.caller = Some(Caller {
        username: caller.into(),
        uid: Some("caller-uid".into()),
        groups: vec!["system:serviceaccounts".into()],
    });
    c
}

/// What the apiserver stored after creation, with a resourceVersion.
/// The apiserver records the creator as the owner of every spec field it wrote.
fn stored(created: &Value, rv: &str) -> Value {
    let mut obj = created.clone();
    obj["metadata"]["resourceVersion"] = json!(rv);
    obj["metadata"]["uid"] = json!("req-uid");
    obj["metadata"]["creationTimestamp"] = json!(now());
    let owned: serde_json::Map<String, Value> = obj["spec"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (format!("f:{k}"), json!({})))
        .collect();
    obj["metadata"]["managedFields"] = json!([{"manager": "hitl-gate", "operation": "Update",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": owned}}]);
    obj
}

/// An approver adds the decision afterwards, as its own managedFields entry.
fn with_decision(obj: &Value, rv: &str, decision: Value) -> Value {
    let mut obj = if obj["metadata"]["managedFields"].is_array() {
        obj.clone()
    } else {
        stored(obj, rv)
    };
    obj["metadata"]["resourceVersion"] = json!(rv);
    obj["spec"]["decision"] = decision;
    obj["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .push(
            json!({"manager": "kubectl-hitl", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:decision": {}}}}),
        );
    obj
}

fn list_of(items: Vec<Value>) -> Value {
    json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalRequestList", "metadata": {"resourceVersion": "1"}, "items": items})
}

fn status(code: u16, reason: &str) -> Value {
    hitl_test_kit::status(code, reason, &format!("mock {reason}"))
}

/// Runs `resolve` for a call with `arguments` in the background.
fn spawn_resolve(a: Approvals, arguments: &Value) -> tokio::task::JoinHandle<Result<Resolution>> {
    let arguments = arguments.clone();
    tokio::spawn(async move { resolve(&a, &call(&arguments)).await })
}

fn expected_name(c: &GatedCall, generation: u64) -> String {
    format!("{}-{generation}", base_name(&c.key))
}

fn list_uri(c: &GatedCall) -> String {
    format!(
        "{BASE_PATH}?&labelSelector=kagent.dev%2Fagent%3Dagent-a%2Ckagent.dev%2Ftool%3Ddelete_file%2Ckagent.dev%2Fargs-hash%3D{}",
        c.digest.short()
    )
}

fn watch_uri(name: &str, rv: &str) -> String {
    format!(
        "{BASE_PATH}?&watch=true&timeoutSeconds=30&fieldSelector=metadata.name%3D{name}&allowWatchBookmarks=true&resourceVersion={rv}"
    )
}

async fn resolve(a: &Approvals, c: &GatedCall) -> Result<Resolution> {
    let progress = Mutex::new(Vec::<String>::new());
    a.resolve(c, None, &|m: &str| {
        progress.lock().unwrap().push(m.to_string())
    })
    .await
}

/// Expects list (empty) + create; answers them; returns the stored object.
async fn expect_list_and_create(handle: &mut ApiMock, c: &GatedCall) -> Value {
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", list_uri(c)));
    send.respond(200, &list_of(vec![]));
    let (m, uri, body, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        ("POST", &format!("{BASE_PATH}?&fieldManager=hitl-gate")[..])
    );
    let obj = stored(&body, "10");
    send.respond(201, &obj);
    obj
}

#[tokio::test]
async fn create_watch_consume_exact_requests() {
    let arguments = args();
    let c = call(&arguments);
    let name = expected_name(&c, 0);
    let (a, mut handle) = approvals(now());
    let task = {
        let a = a.clone();
        let arguments = arguments.clone();
        tokio::spawn(async move { resolve(&a, &call(&arguments)).await })
    };

    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", list_uri(&c)));
    send.respond(200, &list_of(vec![]));

    let (m, uri, body, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        ("POST", &format!("{BASE_PATH}?&fieldManager=hitl-gate")[..])
    );
    let expected = json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "ApprovalRequest",
        "metadata": {
            "labels": {
                "kagent.dev/agent": "agent-a",
                "kagent.dev/args-hash": c.digest.short(),
                "kagent.dev/tool": "delete_file",
            },
            "name": name,
            "namespace": "team",
            "ownerReferences": [{"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent", "name": "agent-a", "uid": "uid-1"}],
        },
        "spec": {
            "agentRef": {"name": "agent-a"},
            "toolServer": {"kind": "RemoteMCPServer", "name": "fs", "namespace": "tools"},
            "toolName": "delete_file",
            "argumentsPreview": {"path": "/data/report.csv", "password": "[REDACTED]", "note": "[REDACTED]"},
            "argumentsSha256": c.digest.binding,
            "argumentsBytes": c.digest.bytes,
            "requestedBy": "system:serviceaccount:team:agent-a-sa",
            "message": "NOTE: 2 values were redacted (at /password, /note); the approved call runs with the real values. Run 'delete_file' on RemoteMCPServer tools/fs with arguments {\"path\":\"/data/report.csv\",\"password\":\"[REDACTED]\",\"note\":\"[REDACTED]\"}?",
            "context": {"sessionId": "sess-1", "callId": "7"},
            "expiresAt": "2026-11-22T01:00:00Z",
        },
    });
    assert_eq!(body, expected);
    let text = body.to_string();
    assert!(!text.contains("canary-pw-123") && !text.contains("sk-canary"));
    let obj = stored(&body, "10");
    send.respond(201, &obj);

    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", watch_uri(&name, "10")));
    let approved = with_decision(
        &obj,
        "11",
        json!({"type": "Approve", "decidedBy": "alice", "reason": "ok"}),
    );
    send.watch(&[("MODIFIED", approved)]);

    let (m, uri, body, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri),
        (
            "PATCH",
            format!("{BASE_PATH}/{name}/status?&fieldManager=hitl-gate")
        )
    );
    assert_eq!(
        body,
        json!({
            "metadata": {"resourceVersion": "11"},
            "status": {
                "phase": "Executed",
                "consumedAt": "2026-11-22T00:00:00Z",
                "consumedBy": "gate-pod-0",
                "decidedAt": "2026-11-22T00:00:00Z",
                "message": "Approved call forwarded by gate-pod-0",
            },
        })
    );
    send.respond(200, &obj);
    assert!(matches!(task.await.unwrap(), Ok(Resolution::Approved { name: n }) if n == name));
}

#[tokio::test]
async fn deny_is_refused_without_consuming() {
    let arguments = args();
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &call(&arguments)).await;
    let (_, _, _, send) = handle.next().await.parts();
    let denied = with_decision(
        &obj,
        "11",
        json!({"type": "Deny", "decidedBy": "bob", "reason": "no"}),
    );
    send.watch(&[("MODIFIED", denied)]);
    let res = task.await.unwrap().unwrap();
    assert!(
        matches!(res, Resolution::Refused { refusal: Refusal::Denied { ref decided_by, ref reason }, .. }
        if decided_by == "bob" && reason.as_deref() == Some("no"))
    );
    // No further request (no consumption) before the client was dropped.
    assert!(handle.try_next().await.is_none());
}

#[tokio::test]
async fn apiserver_errors_fail_closed() {
    for (code, reason) in [(500, "InternalError"), (403, "Forbidden")] {
        let arguments = args();
        let (a, mut handle) = approvals(now());
        let task = spawn_resolve(a, &arguments);
        let (_, _, _, send) = handle.next().await.parts();
        send.respond(code, &status(code, reason));
        let err = task.await.unwrap().unwrap_err();
        assert!(
            matches!(&err, Error::Kube(kube::Error::Api(s)) if s.code == code),
            "{err}"
        );
    }
    // Forbidden on create.
    let arguments = args();
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![]));
    let (m, _, _, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    send.respond(403, &status(403, "Forbidden"));
    assert!(task.await.unwrap().is_err());
}

#[tokio::test]
async fn consume_500_fails_closed() {
    let arguments = args();
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &call(&arguments)).await;
    let (_, _, _, send) = handle.next().await.parts();
    let approved = with_decision(&obj, "11", json!({"type": "Approve", "decidedBy": "alice"}));
    send.watch(&[("MODIFIED", approved)]);
    let (m, _, _, send) = handle.next().await.parts();
    assert_eq!(m, "PATCH");
    send.respond(500, &status(500, "InternalError"));
    assert!(task.await.unwrap().is_err());
}

#[tokio::test]
async fn conflict_on_consume_rereads_and_does_not_forward() {
    let arguments = args();
    let c = call(&arguments);
    let name = expected_name(&c, 0);
    let (a, mut handle) = approvals(now());
    let metrics = a.metrics.clone();
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &c).await;
    let (_, _, _, send) = handle.next().await.parts();
    let approved = with_decision(&obj, "11", json!({"type": "Approve", "decidedBy": "alice"}));
    send.watch(&[("MODIFIED", approved.clone())]);
    let (m, _, _, send) = handle.next().await.parts();
    assert_eq!(m, "PATCH");
    send.respond(409, &status(409, "Conflict"));
    // Re-read: another gate consumed it.
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", format!("{BASE_PATH}/{name}")));
    let mut consumed = approved;
    consumed["metadata"]["resourceVersion"] = json!("12");
    consumed["status"] = json!({"phase": "Executed", "consumedAt": "2026-11-22T00:00:00Z", "consumedBy": "gate-pod-1"});
    send.respond(200, &consumed);
    let res = task.await.unwrap().unwrap();
    assert!(
        matches!(res, Resolution::Refused { refusal: Refusal::Consumed { by: Some(ref b) }, .. } if b == "gate-pod-1")
    );
    assert!(
        metrics
            .encode()
            .contains("hitl_gate_claim_conflicts_total 1"),
        "the conflict is counted"
    );
}

#[tokio::test]
async fn malformed_decision_fails_closed() {
    let arguments = args();
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &call(&arguments)).await;
    let (_, _, _, send) = handle.next().await.parts();
    let bad = with_decision(&obj, "11", json!({"type": "Maybe", "decidedBy": "alice"}));
    send.watch(&[("MODIFIED", bad)]);
    assert!(task.await.unwrap().is_err());
}

#[tokio::test]
async fn deleted_request_fails_closed() {
    let arguments = args();
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &call(&arguments)).await;
    let (_, _, _, send) = handle.next().await.parts();
    send.watch(&[("DELETED", obj)]);
    assert!(matches!(
        task.await.unwrap(),
        Err(Error::RequestDeleted { .. })
    ));
}

#[tokio::test]
async fn approval_seen_after_expiry_is_not_consumed() {
    let arguments = args();
    let (a, mut handle, clock) = approvals_with_clock(now());
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &call(&arguments)).await;
    assert_eq!(obj["spec"]["expiresAt"], json!("2026-11-22T01:00:00Z"));
    let (_, _, _, send) = handle.next().await.parts();
    // The approval arrives, but the gate sees it at expiresAt: it revives nothing.
    *clock.0.lock().unwrap() = "2026-11-22T01:00:00Z".parse().unwrap();
    let approved = with_decision(&obj, "11", json!({"type": "Approve", "decidedBy": "alice"}));
    send.watch(&[("MODIFIED", approved)]);
    let res = task.await.unwrap().unwrap();
    assert!(
        matches!(
            res,
            Resolution::Refused {
                refusal: Refusal::Expired { .. },
                ..
            }
        ),
        "{res:?}"
    );
    assert!(handle.try_next().await.is_none(), "nothing consumed");
}

#[tokio::test]
async fn an_expired_approved_request_is_replaced_not_used() {
    let arguments = args();
    let c = call(&arguments);
    let (old_gate, _old) = approvals(now());
    let old = serde_json::to_value(old_gate.build(&c, &expected_name(&c, 0)).unwrap()).unwrap();
    let old = with_decision(&old, "5", json!({"type": "Approve", "decidedBy": "alice"}));
    let (a, mut handle) = approvals("2026-11-22T01:00:00Z".parse().unwrap());
    let task = tokio::spawn({
        let a = a.clone();
        let arguments = arguments.clone();
        async move { a.find_or_create(&call(&arguments)).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![old]));
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    assert_eq!(body["metadata"]["name"], json!(expected_name(&c, 1)));
    assert_eq!(body["spec"]["expiresAt"], json!("2026-11-22T02:00:00Z"));
    send.respond(201, &stored(&body, "10"));
    let (req, _) = task.await.unwrap().unwrap();
    assert_eq!(req.metadata.name, Some(expected_name(&c, 1)));
}

#[tokio::test]
async fn a_request_created_with_its_approval_is_not_adopted() {
    let arguments = args();
    let c = call(&arguments);
    let (a, mut handle) = approvals(now());
    // Someone created generation 0 with the Approve already in it: its creator owns
    // spec.decision. The gate neither consumes nor reuses it, and asks anew.
    let mut planted = stored(
        &serde_json::to_value(a.build(&c, &expected_name(&c, 0)).unwrap()).unwrap(),
        "5",
    );
    planted["spec"]["decision"] = json!({"type": "Approve", "decidedBy": "mallory"});
    planted["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:decision"] = json!({});
    let task = tokio::spawn({
        let a = a.clone();
        let arguments = arguments.clone();
        async move { a.find_or_create(&call(&arguments)).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![planted]));
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    assert_eq!(body["metadata"]["name"], json!(expected_name(&c, 1)));
    assert!(body["spec"].get("decision").is_none());
    send.respond(201, &stored(&body, "10"));
    let (req, _) = task.await.unwrap().unwrap();
    assert_eq!(req.metadata.name, Some(expected_name(&c, 1)));
}

/// Runs `find_or_create` for `c` while the test answers the list with `items`; returns the
/// name the gate then tries to create (answered 201) and what it resolved to.
async fn created_after_listing(items: Vec<Value>) -> (String, String) {
    let arguments = args();
    let (a, mut handle) = approvals(now());
    let task = tokio::spawn({
        let arguments = arguments.clone();
        async move { a.find_or_create(&call(&arguments)).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(items));
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    send.respond(201, &stored(&body, "10"));
    let (req, _) = task.await.unwrap().unwrap();
    let tried = body["metadata"]["name"].as_str().unwrap().to_string();
    (tried, req.metadata.name.unwrap())
}

#[tokio::test]
async fn a_request_that_shows_something_else_than_the_call_is_not_adopted() {
    let arguments = args();
    let c = call(&arguments);
    let (a, _handle) = approvals(now());
    let genuine = stored(
        &serde_json::to_value(a.build(&c, &expected_name(&c, 0)).unwrap()).unwrap(),
        "5",
    );
    // Planted by another identity (no admission policies): the call's hash, copied from an
    // earlier request, with a harmless-looking preview, message or size, or an expiry far
    // beyond the approval timeout. Each would make an approver approve what they did not see.
    type Edit = fn(&mut Value);
    let lies: [Edit; 4] = [
        |o| o["spec"]["argumentsPreview"] = json!({"path": "/tmp/scratch.txt"}),
        |o| o["spec"]["message"] = json!("Run 'delete_file' with arguments {\"path\":\"/tmp/x\"}?"),
        |o| o["spec"]["argumentsBytes"] = json!(3),
        |o| o["spec"]["expiresAt"] = json!("2027-01-01T00:00:00Z"),
    ];
    for lie in lies {
        let mut planted = genuine.clone();
        lie(&mut planted);
        let (tried, got) = created_after_listing(vec![planted]).await;
        assert_eq!(tried, expected_name(&c, 0));
        assert_eq!(got, expected_name(&c, 0));
    }
    // The genuine one is reused (numbers as the apiserver stores them compare equal).
    assert!(
        a.unfaithful(&serde_json::from_value(genuine).unwrap(), &c)
            .is_none()
    );
}

#[tokio::test]
async fn a_squatted_name_is_skipped_for_a_random_generation() {
    let arguments = args();
    let c = call(&arguments);
    let name = expected_name(&c, 0);
    let (a, mut handle) = approvals(now());
    let mut squatter = stored(
        &serde_json::to_value(a.build(&c, &name).unwrap()).unwrap(),
        "3",
    );
    squatter["spec"]["argumentsPreview"] = json!({"path": "/tmp/scratch.txt"});
    let task = tokio::spawn({
        let arguments = arguments.clone();
        async move { a.find_or_create(&call(&arguments)).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![]));
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(409, &status(409, "AlreadyExists"));
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", format!("{BASE_PATH}/{name}")));
    send.respond(200, &squatter);
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    let next_name = body["metadata"]["name"].as_str().unwrap().to_string();
    let generation = next_name
        .strip_prefix(&format!("{}-", base_name(&c.key)))
        .and_then(|g| g.parse::<u64>().ok())
        .expect("a generation of the call's name");
    assert_ne!(generation, 1, "the next name is not the predictable one");
    send.respond(201, &stored(&body, "10"));
    let (req, _) = task.await.unwrap().unwrap();
    assert_eq!(req.metadata.name, Some(next_name));
}

#[test]
fn creations_are_limited_to_a_burst_then_a_steady_rate() {
    let start = Instant::now();
    let mut budget = CreationBudget::new(start);
    for _ in 0..CREATE_BURST {
        assert!(budget.take(start));
    }
    assert!(!budget.take(start));
    assert!(!budget.take(start + Duration::from_millis(500)));
    assert!(budget.take(start + Duration::from_millis(1500)));
    assert!(!budget.take(start + Duration::from_millis(1600)));
}

#[tokio::test]
async fn a_gate_over_its_creation_budget_refuses_without_creating() {
    let arguments = args();
    let (a, mut handle) = approvals(now());
    *a.budget.lock().unwrap() = CreationBudget {
        tokens: 0.0,
        updated: Instant::now(),
    };
    let task = spawn_resolve(a, &arguments);
    let (m, _, _, send) = handle.next().await.parts();
    assert_eq!(m, "GET");
    send.respond(200, &list_of(vec![]));
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(err.reason(), "ApprovalRateLimited");
    assert!(handle.try_next().await.is_none(), "nothing created");
}

#[tokio::test(start_paused = true)]
async fn a_hung_apiserver_refuses_the_call_after_the_wait_and_grace() {
    let arguments = args();
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    // The list is sent but never answered.
    let (m, _, _, _send) = handle.next().await.parts();
    assert_eq!(m, "GET");
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(err.reason(), "ApiTimeout");
    assert_eq!(
        err.to_string(),
        "the Kubernetes API did not answer within 40s (approval.waitTimeout plus 10s)"
    );
}

#[tokio::test]
async fn already_exists_reads_and_shares_the_live_request() {
    let arguments = args();
    let c = call(&arguments);
    let name = expected_name(&c, 0);
    let (a, mut handle) = approvals(now());
    let task = tokio::spawn({
        let a = a.clone();
        let arguments = arguments.clone();
        async move { a.find_or_create(&call(&arguments)).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![]));
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    send.respond(409, &status(409, "AlreadyExists"));
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", format!("{BASE_PATH}/{name}")));
    send.respond(200, &stored(&body, "9"));
    let (req, previous) = task.await.unwrap().unwrap();
    assert_eq!(req.metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(req.metadata.resource_version.as_deref(), Some("9"));
    assert!(previous.is_none());
}

#[tokio::test]
async fn finished_requests_do_not_block_a_new_generation() {
    let arguments = args();
    let c = call(&arguments);
    let (a, mut handle) = approvals(now());
    let gen0 = serde_json::to_value(a.build(&c, &expected_name(&c, 0)).unwrap()).unwrap();
    let executed = {
        let mut o = with_decision(&gen0, "3", json!({"type": "Approve", "decidedBy": "alice"}));
        o["status"] =
            json!({"phase": "Executed", "consumedAt": "2026-11-21T23:00:00Z", "consumedBy": "p"});
        o
    };
    let gen1 = serde_json::to_value(a.build(&c, &expected_name(&c, 1)).unwrap()).unwrap();
    let denied = with_decision(
        &gen1,
        "4",
        json!({"type": "Deny", "decidedBy": "bob", "reason": "no"}),
    );
    // A request for other arguments with the same label prefix is ignored.
    let mut foreign = with_decision(&gen0, "5", json!({"type": "Approve", "decidedBy": "x"}));
    foreign["metadata"]["name"] = json!("agent-a-delete-file-ffffffffffffffff-0");
    foreign["spec"]["argumentsSha256"] = json!("f".repeat(64));
    let task = tokio::spawn({
        let a = a.clone();
        let arguments = arguments.clone();
        async move { a.find_or_create(&call(&arguments)).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![executed, denied, foreign]));
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    assert_eq!(body["metadata"]["name"], json!(expected_name(&c, 2)));
    send.respond(201, &stored(&body, "10"));
    let (req, previous) = task.await.unwrap().unwrap();
    assert_eq!(req.metadata.name, Some(expected_name(&c, 2)));
    assert_eq!(previous.unwrap().metadata.name, Some(expected_name(&c, 1)));
}

#[tokio::test]
async fn a_live_request_is_reused_without_creating() {
    let arguments = args();
    let c = call(&arguments);
    let (a, mut handle) = approvals(now());
    let pending = stored(
        &serde_json::to_value(a.build(&c, &expected_name(&c, 0)).unwrap()).unwrap(),
        "7",
    );
    let task = tokio::spawn({
        let a = a.clone();
        let arguments = arguments.clone();
        async move { a.find_or_create(&call(&arguments)).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![pending]));
    let (req, _) = task.await.unwrap().unwrap();
    assert_eq!(req.metadata.resource_version.as_deref(), Some("7"));
    assert!(handle.is_idle());
}

/// Requests of the agent, as its gate created them, for calls with `n` other arguments each.
fn open_requests_of_other_calls(n: u64) -> Vec<Value> {
    let (a, _handle) = approvals(now());
    (0..n)
        .map(|i| {
            let other = call(&json!({"path": format!("/data/{i}.csv")}));
            let built = a.build(&other, &expected_name(&other, 0)).unwrap();
            stored(&serde_json::to_value(built).unwrap(), "3")
        })
        .collect()
}

fn typed(requests: &[Value]) -> Vec<ApprovalRequest> {
    requests
        .iter()
        .map(|r| serde_json::from_value(r.clone()).unwrap())
        .collect()
}

#[tokio::test]
async fn at_the_cap_a_new_call_creates_nothing_and_a_pending_one_keeps_its_request() {
    let open = open_requests_of_other_calls(2);
    let counted = OpenRequests::fixed(&agent(), 2, &typed(&open));
    let (a, mut handle, _) = approvals_counting(now(), None, counted);

    // A call with no request of its own: the agent holds 2 of 2, so none is created.
    let arguments = args();
    let c = call(&arguments);
    let task = tokio::spawn({
        let a = a.clone();
        async move { a.find_or_create(&call(&arguments)).await }
    });
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", list_uri(&c)));
    send.respond(200, &list_of(vec![]));
    let refused = task.await.unwrap().unwrap_err();
    assert!(
        matches!(refused, Error::OpenRequestCap { open: 2, cap: 2 }),
        "{refused:?}"
    );
    assert!(handle.is_idle());

    // The same call as one of the open requests: it is reused, whatever the cap.
    let same = call(&json!({"path": "/data/1.csv"}));
    let task = tokio::spawn({
        let a = a.clone();
        async move {
            a.find_or_create(&call(&json!({"path": "/data/1.csv"})))
                .await
        }
    });
    let (_, uri, _, send) = handle.next().await.parts();
    assert_eq!(uri, list_uri(&same));
    send.respond(200, &list_of(vec![open[1].clone()]));
    let (req, _) = task.await.unwrap().unwrap();
    assert_eq!(req.metadata.name, Some(expected_name(&same, 0)));
    assert!(handle.is_idle());
}

#[tokio::test]
async fn a_request_this_gate_created_counts_before_any_watch_shows_it() {
    let counted = OpenRequests::fixed(&agent(), 1, &[]);
    let (a, mut handle, _) = approvals_counting(now(), None, counted);
    let task = tokio::spawn({
        let a = a.clone();
        async move { a.find_or_create(&call(&args())).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![]));
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    send.respond(201, &stored(&body, "10"));
    task.await.unwrap().unwrap();

    let task = tokio::spawn({
        let a = a.clone();
        async move { a.find_or_create(&call(&json!({"path": "/other"}))).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![]));
    let refused = task.await.unwrap().unwrap_err();
    assert!(
        matches!(refused, Error::OpenRequestCap { open: 1, cap: 1 }),
        "{refused:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_gate_that_cannot_count_creates_nothing() {
    let counted = OpenRequests::unknown(50, "cannot watch: connection refused");
    let (a, mut handle, _) = approvals_counting(now(), None, counted);
    let task = tokio::spawn({
        let a = a.clone();
        async move { a.find_or_create(&call(&args())).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![]));
    let refused = task.await.unwrap().unwrap_err();
    assert_eq!(refused.reason(), "OpenRequestsUnknown");
    assert!(handle.is_idle());
}

/// A shared gate's request: its caller in `spec.caller`, in its name and in a label; the
/// ToolGate as its agentRef and owner. Another caller's identical call is another request.
#[tokio::test]
async fn a_shared_gates_request_is_its_callers() {
    let arguments = args();
    let c = shared_call(&arguments, "system:serviceaccount:apps:bot-a");
    let clock = Arc::new(Manual(Mutex::new(now())));
    let (client, mut handle) = mock::pair(NS);
    let gate = AgentIdentity {
        kind: PolicyKind::ToolGate,
        ..agent()
    };
    let settings = ApprovalSettings {
        timeout: Duration::from_secs(3600),
        wait: Duration::from_secs(30),
        progress_every: Duration::from_secs(3600),
        pod: "gate-pod-0".into(),
        metrics: Arc::new(Metrics::default()),
        freeze: FreezeWatch::fixed(FreezeState::Clear),
        grant_max_ttl: None,
        open: OpenRequests::fixed(&gate, DEFAULT_MAX_OPEN_REQUESTS, &[]),
        escalation: None,
    };
    let a = Approvals::new(client, gate, settings, clock);
    let task = tokio::spawn({
        let c = c.clone();
        async move { a.find_or_create(&c).await.map(|(r, _)| r) }
    });
    let hash = caller_label("system:serviceaccount:apps:bot-a");
    assert_eq!(hash.len(), 16);
    let (_, uri, _, send) = handle.next().await.parts();
    assert_eq!(
        uri,
        format!("{}%2Ckagent.dev%2Fcaller-hash%3D{hash}", list_uri(&c))
    );
    send.respond(200, &list_of(vec![]));
    let (_, _, body, send) = handle.next().await.parts();
    assert_eq!(body["metadata"]["name"], json!(expected_name(&c, 0)));
    assert_eq!(
        body["metadata"]["labels"]["kagent.dev/caller-hash"],
        json!(hash)
    );
    assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "ToolGate");
    assert_eq!(
        body["spec"]["agentRef"],
        json!({"name": "agent-a", "kind": "ToolGate"})
    );
    assert_eq!(
        body["spec"]["caller"],
        json!({"username": "system:serviceaccount:apps:bot-a", "uid": "caller-uid",
            "groups": ["system:serviceaccounts"]})
    );
    send.respond(201, &stored(&body, "10"));
    let created = task.await.unwrap().unwrap();
    assert!(c.key.matches(&created));
    let other = shared_call(&arguments, "system:serviceaccount:apps:bot-b");
    assert!(!other.key.matches(&created));
    assert_ne!(base_name(&other.key), base_name(&c.key));
    // An Agent's identical call is named as before callers existed.
    assert_ne!(base_name(&call(&arguments).key), base_name(&c.key));
}

#[test]
fn names_are_deterministic_and_valid() {
    let arguments = args();
    let c = call(&arguments);
    let a = base_name(&c.key);
    assert_eq!(a, base_name(&call(&args()).key));
    assert!(a.starts_with("agent-a-delete-file-"), "{a}");
    let mut other = c.key.clone();
    other.server_name = "fs2".into();
    assert_ne!(a, base_name(&other));
    assert_eq!(label_value("Weird/Tool Name!"), "Weird_Tool_Name");
    assert_eq!(label_value(&"x".repeat(80)).len(), 63);
    assert_eq!(dns_part("--Get.Sum--", 40), "get-sum");
}

#[tokio::test]
async fn endless_conflicts_fail_closed() {
    let arguments = args();
    let c = call(&arguments);
    let name = expected_name(&c, 0);
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &c).await;
    let (_, _, _, send) = handle.next().await.parts();
    let approved = with_decision(&obj, "11", json!({"type": "Approve", "decidedBy": "alice"}));
    send.watch(&[("MODIFIED", approved.clone())]);
    // MAX_CONFLICTS guarded writes, each refused, with a fresh read between them.
    for attempt in 1..=MAX_CONFLICTS {
        let (m, _, body, send) = handle.next().await.parts();
        assert_eq!(m, "PATCH");
        assert_eq!(body["metadata"]["resourceVersion"], json!("11"));
        send.respond(409, &status(409, "Conflict"));
        if attempt < MAX_CONFLICTS {
            let (m, uri, _, send) = handle.next().await.parts();
            assert_eq!((m.as_str(), uri), ("GET", format!("{BASE_PATH}/{name}")));
            send.respond(200, &approved);
        }
    }
    let err = task.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, Error::Contended { attempts, .. } if *attempts == MAX_CONFLICTS),
        "{err}"
    );
    assert!(handle.try_next().await.is_none(), "nothing more is sent");
}

#[tokio::test]
async fn a_closed_watch_is_reread_and_reopened() {
    let arguments = args();
    let c = call(&arguments);
    let name = expected_name(&c, 0);
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &c).await;
    // The apiserver ends the watch without events.
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", watch_uri(&name, "10")));
    send.watch(&[]);
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", format!("{BASE_PATH}/{name}")));
    send.respond(200, &obj);
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", watch_uri(&name, "10")));
    let approved = with_decision(&obj, "11", json!({"type": "Approve", "decidedBy": "alice"}));
    send.watch(&[("MODIFIED", approved)]);
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "PATCH");
    assert_eq!(body["metadata"]["resourceVersion"], json!("11"));
    send.respond(200, &obj);
    assert!(matches!(
        task.await.unwrap(),
        Ok(Resolution::Approved { .. })
    ));
}

#[tokio::test]
async fn a_watch_error_event_rereads_the_request() {
    let arguments = args();
    let c = call(&arguments);
    let name = expected_name(&c, 0);
    let (a, mut handle) = approvals(now());
    let task = spawn_resolve(a, &arguments);
    let obj = expect_list_and_create(&mut handle, &c).await;
    let (_, _, _, send) = handle.next().await.parts();
    send.watch(&[("ERROR", status(410, "Expired"))]);
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", format!("{BASE_PATH}/{name}")));
    let denied = with_decision(&obj, "12", json!({"type": "Deny", "decidedBy": "bob"}));
    send.respond(200, &denied);
    let res = task.await.unwrap().unwrap();
    assert!(matches!(
        res,
        Resolution::Refused {
            refusal: Refusal::Denied { .. },
            ..
        }
    ));
}

/// `call` of a rule that asks for `required` approvals.
fn call_needing(arguments: &Value, required: u32) -> GatedCall {
    let mut c = call(arguments);
    c.key.required_approvals = required;
    c.rule = Some("big-transfers".into());
    c
}

/// Approvers add their entries, and the last one the decision, each as their own write.
fn with_approvals(obj: &Value, rv: &str, approvers: &[&str], decided_by: Option<&str>) -> Value {
    let mut obj = obj.clone();
    obj["metadata"]["resourceVersion"] = json!(rv);
    obj["spec"]["approvals"] = approvers
        .iter()
        .map(|by| json!({"approvedBy": by}))
        .collect();
    obj["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .push(
            json!({"manager": "kubectl-hitl", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:approvals": {}, "f:decision": {}}}}),
        );
    if let Some(by) = decided_by {
        obj["spec"]["decision"] = json!({"type": "Approve", "decidedBy": by});
    }
    obj
}

#[tokio::test]
async fn a_quorum_call_waits_for_every_approval_then_runs_once() {
    let arguments = args();
    let c = call_needing(&arguments, 2);
    let name = expected_name(&c, 0);
    let (a, mut handle) = approvals(now());
    let task = {
        let a = a.clone();
        let arguments = arguments.clone();
        tokio::spawn(async move { resolve(&a, &call_needing(&arguments, 2)).await })
    };
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![]));
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    // The request carries the rule's count; nobody's approvals yet.
    assert_eq!(body["spec"]["requiredApprovals"], json!(2));
    assert_eq!(body["spec"]["rule"], json!("big-transfers"));
    assert!(body["spec"].get("approvals").is_none());
    let obj = stored(&body, "10");
    send.respond(201, &obj);

    // alice approves (1/2): the gate keeps waiting, watching from the new version.
    let (_, uri, _, send) = handle.next().await.parts();
    assert_eq!(uri, watch_uri(&name, "10"));
    let one = with_approvals(&obj, "11", &["alice"], None);
    send.watch(&[("MODIFIED", one.clone())]);
    let (_, uri, _, send) = handle.next().await.parts();
    assert_eq!(uri, watch_uri(&name, "11"));
    // bob completes it, with the decision: consumed once.
    let both = with_approvals(&one, "12", &["alice", "bob"], Some("bob"));
    send.watch(&[("MODIFIED", both)]);
    let (m, uri, body, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri),
        (
            "PATCH",
            format!("{BASE_PATH}/{name}/status?&fieldManager=hitl-gate")
        )
    );
    assert_eq!(body["metadata"]["resourceVersion"], json!("12"));
    assert_eq!(body["status"]["phase"], json!("Executed"));
    send.respond(200, &obj);
    assert!(matches!(task.await.unwrap(), Ok(Resolution::Approved { name: n }) if n == name));
}

#[tokio::test]
async fn an_approve_without_the_quorum_is_refused_not_consumed() {
    let arguments = args();
    let (a, mut handle) = approvals(now());
    let task = {
        let a = a.clone();
        let arguments = arguments.clone();
        tokio::spawn(async move { resolve(&a, &call_needing(&arguments, 2)).await })
    };
    let obj = expect_list_and_create(&mut handle, &call_needing(&arguments, 2)).await;
    let (_, _, _, send) = handle.next().await.parts();
    // Only possible with the CRD rule gone: an Approve with one approval.
    let forged = with_approvals(&obj, "11", &["alice"], Some("alice"));
    send.watch(&[("MODIFIED", forged)]);
    let res = task.await.unwrap().unwrap();
    assert!(
        matches!(res, Resolution::Refused { refusal: Refusal::Untrusted(ref why), .. }
            if why == "it needs 2 approvals and spec.approvals holds 1"),
        "{res:?}"
    );
    // No consumption: the client is gone without another request.
    drop(a);
    assert!(handle.try_next().await.is_none());
}

#[tokio::test]
async fn a_request_asking_fewer_approvals_than_the_rule_is_replaced() {
    // A live request for the same call from before the rule asked for two.
    let arguments = args();
    let one = call(&arguments);
    let (a, mut handle) = approvals(now());
    let old = stored(
        &serde_json::to_value(a.build(&one, &expected_name(&one, 0)).unwrap()).unwrap(),
        "7",
    );
    let two = call_needing(&arguments, 2);
    let task = tokio::spawn({
        let a = a.clone();
        let arguments = arguments.clone();
        async move { a.find_or_create(&call_needing(&arguments, 2)).await }
    });
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(200, &list_of(vec![old]));
    let (m, _, body, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    assert_eq!(body["metadata"]["name"], json!(expected_name(&two, 1)));
    assert_eq!(body["spec"]["requiredApprovals"], json!(2));
    send.respond(201, &stored(&body, "8"));
    let (req, _) = task.await.unwrap().unwrap();
    assert_eq!(req.spec.required_approvals, Some(2));
}

// Grants (gate::grants): the exact requests of a call a grant covers, and every way a use can
// fail to be recorded, which leaves the call to a person.

const GRANTS_PATH: &str = "/apis/kagent.dev/v1alpha2/namespaces/team/approvalgrants";

/// A grant by alice of `delete_file` on the call's server, created an hour before [`now`].
fn grant_object(name: &str, rv: &str) -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalGrant",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": rv,
            "creationTimestamp": "2026-11-21T23:00:00Z"},
        "spec": {"agentRef": {"name": "agent-a"},
            "toolServer": {"kind": "RemoteMCPServer", "name": "fs", "namespace": "tools"},
            "toolName": "delete_file", "expiresAt": "2026-11-22T01:00:00Z", "maxUses": 2,
            "reason": "cleanup week", "grantedBy": "alice"},
    })
}

fn grant_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalGrantList", "metadata": {"resourceVersion": "1"}, "items": items})
}

/// Runs `by_grant` for the standard call in the background, with grants on.
fn spawn_by_grant() -> (tokio::task::JoinHandle<Result<Option<String>>>, ApiMock) {
    let (a, handle, _) = approvals_with(now(), Some(SignedDuration::from_hours(24)));
    let arguments = args();
    let task = tokio::spawn(async move {
        let facts = Activation::new(&crate::condition::CallFacts {
            args: &arguments,
            args_bytes: 64,
            agent: "agent-a",
            namespace: NS,
            server: "fs",
            tool: "delete_file",
            session: Some("sess-1"),
            annotations: crate::tool_risk::ToolFacts::unlisted(false),
        });
        a.by_grant(&call(&arguments), &facts).await
    });
    (task, handle)
}

/// Expects the list of grants and answers it with `items`.
async fn expect_grant_list(handle: &mut ApiMock, items: Vec<Value>) {
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        ("GET", &format!("{GRANTS_PATH}?&limit=100")[..])
    );
    send.respond(200, &grant_list(items));
}

/// Expects a resourceVersion-guarded use of grant `g` at `rv` (its `uses`-th); returns the
/// request name it records and the response handle.
async fn expect_use(handle: &mut ApiMock, rv: &str, uses: i64) -> (String, Reply) {
    let (m, uri, body, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        (
            "PATCH",
            &format!("{GRANTS_PATH}/g/status?&fieldManager=hitl-gate")[..]
        )
    );
    assert_eq!(body["metadata"], json!({"resourceVersion": rv}));
    assert_eq!(body["status"]["uses"], json!(uses));
    assert_eq!(body["status"]["lastUsedAt"], json!(now()));
    let request = body["status"]["lastUsedBy"].as_str().unwrap().to_owned();
    (request, send)
}

#[tokio::test]
async fn grants_are_listed_a_page_at_a_time_keeping_those_that_cover_the_call() {
    let (_task, mut handle) = spawn_by_grant();
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        ("GET", &format!("{GRANTS_PATH}?&limit=100")[..])
    );
    // Named to be tried first if it were a candidate.
    let mut another_agents = grant_object("a", "4");
    another_agents["spec"]["agentRef"]["name"] = json!("agent-b");
    let mut first = grant_list(vec![another_agents]);
    first["metadata"]["continue"] = json!("page-2");
    send.respond(200, &first);
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        (
            "GET",
            &format!("{GRANTS_PATH}?&limit=100&continue=page-2")[..]
        )
    );
    send.respond(200, &grant_list(vec![grant_object("g", "5")]));
    // The grant of the second page is used; the other agent's was never a candidate.
    expect_use(&mut handle, "5", 1).await;
}

#[tokio::test]
async fn a_covering_grant_is_used_once_and_leaves_a_consumed_request() {
    let (task, mut handle) = spawn_by_grant();
    let c = call(&args());
    expect_grant_list(&mut handle, vec![grant_object("g", "5")]).await;
    let (request, send) = expect_use(&mut handle, "5", 1).await;
    let base = base_name(&c.key);
    let suffix = request
        .strip_prefix(&format!("{base}-g"))
        .expect("named after the call");
    assert!(
        suffix.len() == 8 && suffix.chars().all(|ch| ch.is_ascii_hexdigit()),
        "{request}"
    );
    let mut used = grant_object("g", "6");
    used["status"] = json!({"uses": 1});
    send.respond(200, &used);

    let (m, uri, body, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        ("POST", &format!("{BASE_PATH}?&fieldManager=hitl-gate")[..])
    );
    assert_eq!(body["metadata"]["name"], json!(request));
    assert_eq!(body["metadata"]["labels"]["kagent.dev/grant"], json!("g"));
    assert_eq!(
        body["spec"]["grant"],
        json!({"name": "g", "grantedBy": "alice", "reason": "cleanup week"})
    );
    assert!(body["spec"].get("decision").is_none());
    assert_eq!(body["spec"]["argumentsSha256"], json!(c.digest.binding));
    let created = stored(&body, "20");
    send.respond(201, &created);

    // Consumed at once, guarded by the resourceVersion of the request as created.
    let (m, uri, body, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        (
            "PATCH",
            &format!("{BASE_PATH}/{request}/status?&fieldManager=hitl-gate")[..]
        )
    );
    assert_eq!(body["metadata"], json!({"resourceVersion": "20"}), "{body}");
    assert_eq!(body["status"]["phase"], json!("Executed"));
    assert_eq!(body["status"]["consumedAt"], json!(now()));
    assert_eq!(body["status"]["consumedBy"], json!("gate-pod-0"));
    assert!(
        body["status"]["message"]
            .as_str()
            .unwrap()
            .contains("ApprovalGrant g (granted by alice)")
    );
    let mut consumed = created.clone();
    consumed["status"] = body["status"].clone();
    send.respond(200, &consumed);
    assert_eq!(task.await.unwrap().unwrap(), Some(request));
}

#[tokio::test]
async fn no_covering_grant_writes_nothing() {
    let (task, mut handle) = spawn_by_grant();
    let mut other_tool = grant_object("g", "5");
    other_tool["spec"]["toolName"] = json!("write_file");
    let mut used_up = grant_object("h", "5");
    used_up["status"] = json!({"uses": 2});
    expect_grant_list(&mut handle, vec![other_tool, used_up]).await;
    assert_eq!(task.await.unwrap().unwrap(), None);
}

#[tokio::test]
async fn unreadable_grants_leave_the_call_to_a_person() {
    let (task, mut handle) = spawn_by_grant();
    let (_, _, _, send) = handle.next().await.parts();
    send.respond(403, &status(403, "Forbidden"));
    assert_eq!(task.await.unwrap().unwrap(), None);
}

#[tokio::test]
async fn a_grant_revoked_while_being_used_is_not_used() {
    let (task, mut handle) = spawn_by_grant();
    expect_grant_list(&mut handle, vec![grant_object("g", "5")]).await;
    let (_, send) = expect_use(&mut handle, "5", 1).await;
    send.respond(409, &status(409, "Conflict"));
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        ("GET", &format!("{GRANTS_PATH}/g")[..])
    );
    let mut revoked = grant_object("g", "6");
    revoked["spec"]["revoked"] = json!(true);
    send.respond(200, &revoked);
    assert_eq!(task.await.unwrap().unwrap(), None);
}

#[tokio::test]
async fn a_grant_used_up_by_another_gate_meanwhile_is_not_used_again() {
    let (task, mut handle) = spawn_by_grant();
    let mut one_left = grant_object("g", "5");
    one_left["status"] = json!({"uses": 1});
    expect_grant_list(&mut handle, vec![one_left]).await;
    let (_, send) = expect_use(&mut handle, "5", 2).await;
    send.respond(409, &status(409, "Conflict"));
    let (_, _, _, send) = handle.next().await.parts();
    let mut used_up = grant_object("g", "6");
    used_up["status"] = json!({"uses": 2});
    send.respond(200, &used_up);
    assert_eq!(task.await.unwrap().unwrap(), None);
}

#[tokio::test]
async fn a_grant_changed_but_still_covering_is_used_at_its_new_version() {
    let (task, mut handle) = spawn_by_grant();
    expect_grant_list(&mut handle, vec![grant_object("g", "5")]).await;
    let (_, send) = expect_use(&mut handle, "5", 1).await;
    send.respond(409, &status(409, "Conflict"));
    let (_, _, _, send) = handle.next().await.parts();
    let mut used_once = grant_object("g", "7");
    used_once["status"] = json!({"uses": 1});
    send.respond(200, &used_once);
    let (_, send) = expect_use(&mut handle, "7", 2).await;
    send.respond(500, &status(500, "InternalError"));
    assert_eq!(
        task.await.unwrap().unwrap(),
        None,
        "a failed use leaves the call to a person"
    );
}

#[tokio::test]
async fn a_request_that_cannot_be_recorded_after_a_use_refuses_the_call() {
    let (task, mut handle) = spawn_by_grant();
    expect_grant_list(&mut handle, vec![grant_object("g", "5")]).await;
    let (_, send) = expect_use(&mut handle, "5", 1).await;
    send.respond(200, &grant_object("g", "6"));
    let (m, _, _, send) = handle.next().await.parts();
    assert_eq!(m, "POST");
    send.respond(500, &status(500, "InternalError"));
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(err.reason(), "GrantRecordFailed");
    assert!(err.to_string().contains("the call was not run"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_hung_apiserver_while_looking_for_grants_refuses_the_call_within_the_same_bound() {
    let (a, mut handle, _) = approvals_with(now(), Some(SignedDuration::from_hours(24)));
    let arguments = args();
    let task = tokio::spawn(async move {
        let facts = Activation::new(&crate::condition::CallFacts {
            args: &arguments,
            args_bytes: 64,
            agent: "agent-a",
            namespace: NS,
            server: "fs",
            tool: "delete_file",
            session: None,
            annotations: crate::tool_risk::ToolFacts::unlisted(false),
        });
        a.resolve(&call(&arguments), Some(&facts), &|_: &str| {})
            .await
    });
    // The list of grants is sent but never answered.
    let (m, uri, _, _send) = handle.next().await.parts();
    assert_eq!(
        (m.as_str(), uri.as_str()),
        ("GET", &format!("{GRANTS_PATH}?&limit=100")[..])
    );
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Kubernetes API did not answer within 40s (approval.waitTimeout plus 10s)"
    );
}

#[tokio::test]
async fn a_call_no_grant_covers_goes_on_to_a_person() {
    let (a, mut handle, _) = approvals_with(now(), Some(SignedDuration::from_hours(24)));
    let arguments = args();
    let c = call(&arguments);
    let task = tokio::spawn(async move {
        let facts = Activation::new(&crate::condition::CallFacts {
            args: &arguments,
            args_bytes: 64,
            agent: "agent-a",
            namespace: NS,
            server: "fs",
            tool: "delete_file",
            session: None,
            annotations: crate::tool_risk::ToolFacts::unlisted(false),
        });
        a.resolve(&call(&arguments), Some(&facts), &|_: &str| {})
            .await
    });
    expect_grant_list(&mut handle, vec![]).await;
    let obj = expect_list_and_create(&mut handle, &c).await;
    let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
    let (m, uri, _, send) = handle.next().await.parts();
    assert_eq!((m.as_str(), uri), ("GET", watch_uri(&name, "10")));
    send.watch(&[(
        "MODIFIED",
        with_decision(&obj, "11", json!({"type": "Deny", "decidedBy": "alice"})),
    )]);
    assert!(matches!(
        task.await.unwrap().unwrap(),
        Resolution::Refused {
            refusal: Refusal::Denied { .. },
            ..
        }
    ));
}

// Escalation (issue 60): the Agent's steps copied into each request with absolute instants.

#[tokio::test]
async fn a_request_carries_the_agents_escalation_with_instants_from_its_creation() {
    let (mut a, _handle) = approvals(now());
    let one = call(&args());
    assert!(
        a.build(&one, "r").unwrap().spec.escalation.is_none(),
        "no escalation, no field: requests look as before"
    );
    a.escalation = Some(
        serde_json::from_value(json!({"warnBefore": "10m", "steps": [
            {"after": "15m", "approvers": {"groups": ["oncall"]}, "notifier": "pager"},
            {"after": "40m", "approvers": {"users": ["boss"]}}
        ]}))
        .unwrap(),
    );
    let req = a.build(&one, "r").unwrap();
    let body = serde_json::to_value(&req).unwrap();
    assert_eq!(
        body["spec"]["escalation"],
        json!({"warnAt": "2026-11-22T00:50:00Z", "steps": [
            {"tier": 1, "at": "2026-11-22T00:15:00Z", "approvers": {"groups": ["oncall"]}, "notifier": "pager"},
            {"tier": 2, "at": "2026-11-22T00:40:00Z", "approvers": {"users": ["boss"]}}
        ]})
    );
    assert_eq!(body["spec"]["expiresAt"], json!("2026-11-22T01:00:00Z"));
    // The asking rule's own escalation replaces the Agent's.
    let mut ruled = call(&args());
    ruled.rule = Some("big-transfer".into());
    ruled.escalation = Some(
        serde_json::from_value(json!({"steps": [
            {"after": "5m", "approvers": {"groups": ["treasury"]}}
        ]}))
        .unwrap(),
    );
    let body = serde_json::to_value(a.build(&ruled, "r").unwrap()).unwrap();
    assert_eq!(
        body["spec"]["escalation"],
        json!({"steps": [
            {"tier": 1, "at": "2026-11-22T00:05:00Z", "approvers": {"groups": ["treasury"]}}
        ]})
    );
}
