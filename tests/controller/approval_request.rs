//! ApprovalRequest reconciler against the mock API server, with an injected clock.

use std::time::Duration;

use hitl_operator::api::{Agent, ApprovalRequest};
use hitl_operator::controller::approval_request::reconcile;
use http::Method;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::harness::*;

const PATH: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/approvalrequests/r1";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events?";

fn agent(require_approval: &str, ttl: &str) -> Agent {
    yaml(&format!(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {{name: a, namespace: ns, uid: agent-uid}}
spec:
  declarative:
    approval: {{ttlAfterFinished: {ttl}}}
    tools:
      - type: McpServer
        mcpServer: {{name: fs, toolNames: [read_file, delete_file], requireApproval: [{require_approval}]}}
"#
    ))
}

/// A request created at `at(0)`, expiring at `at(3600)`.
fn request(extra_spec: &str, status: &str, owned: bool) -> ApprovalRequest {
    let owner = if owned {
        "ownerReferences: [{apiVersion: kagent.dev/v1alpha2, kind: Agent, name: a, uid: agent-uid}]"
    } else {
        ""
    };
    yaml(&format!(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata:
  name: r1
  namespace: ns
  uid: request-uid
  creationTimestamp: "{created}"
  {owner}
spec:
  agentRef: {{name: a}}
  toolServer: {{kind: RemoteMCPServer, name: fs, namespace: ns}}
  toolName: delete_file
  argumentsSha256: "{sha}"
  argumentsBytes: 2
  requestedBy: system:serviceaccount:ns:a
  expiresAt: "{expires}"
  {extra_spec}
{status}
"#,
        created = at(0),
        expires = at(3600),
        sha = "a".repeat(64),
    ))
}

fn status_patch(request: &ApprovalRequest) -> Exchange {
    expect(
        Method::PATCH,
        &format!("{PATH}/status{APPLY}"),
        serde_json::to_value(request).unwrap(),
    )
}

fn events(n: usize) -> Vec<Exchange> {
    (0..n)
        .map(|_| expect(Method::POST, EVENTS, event_created()))
        .collect()
}

fn phase(body: &Value) -> &str {
    body["status"]["phase"].as_str().unwrap()
}

#[tokio::test]
async fn new_request_is_adopted_and_pending_until_expiry() {
    let request = request("", "", false);
    let mut script = vec![expect(
        Method::PATCH,
        &format!("{PATH}{APPLY}"),
        serde_json::to_value(&request).unwrap(),
    )];
    script.push(status_patch(&request));
    script.extend(events(2));
    let cache = Cache {
        agents: vec![agent("delete_file", "24h")],
        approvals: vec![request.clone()],
        ..Cache::default()
    };
    let (action, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(600));
        reconcile(cached(request.clone()), ctx)
    })
    .await;
    // Requeued just after expiresAt (3000 s from now, plus a second).
    assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(3001)));
    assert_eq!(
        requests[0].body,
        json!({
            "apiVersion": "kagent.dev/v1alpha2",
            "kind": "ApprovalRequest",
            "metadata": {
                "name": "r1",
                "ownerReferences": [{"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent", "name": "a", "uid": "agent-uid"}],
            },
        })
    );
    assert_eq!(phase(&requests[1].body), "Pending");
    assert_eq!(requests[2].body["reason"], "ApprovalRequested");
    assert_eq!(requests[2].body["regarding"]["kind"], "ApprovalRequest");
    assert_eq!(requests[3].body["regarding"]["kind"], "Agent");
}

#[tokio::test]
async fn undecided_request_expires_at_expires_at() {
    let request = request("", "status: {phase: Pending}", true);
    let mut script = vec![status_patch(&request)];
    script.extend(events(2));
    let cache = Cache {
        agents: vec![agent("delete_file", "1h")],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(3600));
        let request = request.clone();
        async move { (reconcile(cached(request), ctx.clone()).await, ctx) }
    })
    .await;
    let (action, ctx) = result;
    // Deleted one hour (ttlAfterFinished) after it finished: later than the next hourly
    // resync, which requeues it then.
    assert_eq!(action.unwrap(), Action::await_change());
    let body = &requests[0].body;
    assert_eq!(phase(body), "Expired");
    assert_eq!(
        conditions(body),
        vec![("Finished".into(), "True".into(), "Expired".into())]
    );
    assert_eq!(requests[1].body["reason"], "Expired");
    assert_eq!(requests[1].body["type"], "Warning");
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("hitl_decisions_total{outcome=\"expired\"} 1"),
        "{metrics}"
    );
}

/// A request approved by alice, the decision written at `at(90)` by the apiserver's clock.
fn approved_at_90() -> ApprovalRequest {
    let mut request = request(
        "decision: {type: Approve, reason: ok, decidedBy: alice}",
        "status: {phase: Pending}",
        true,
    );
    request.metadata.managed_fields = Some(vec![yaml(&format!(
        "{{manager: kubectl-hitl, operation: Update, time: \"{}\", fieldsType: FieldsV1, fieldsV1: {{f:spec: {{f:decision: {{}}}}}}}}",
        at(90)
    ))]);
    request
}

#[tokio::test]
async fn a_fresh_approval_is_left_to_the_gate_for_a_while() {
    // Within CLAIM_GRACE of the decision the gate's claim is the only status write: the
    // controller writes nothing and looks again when the grace is over.
    let request = approved_at_90();
    let cache = Cache {
        agents: vec![agent("delete_file", "24h")],
        ..Cache::default()
    };
    let (result, requests) = run_script(vec![], |client| {
        reconcile(cached(request.clone()), cache.context(client, at(92)))
    })
    .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(3 + 1)));
    assert!(requests.is_empty());
}

#[tokio::test]
async fn approval_records_decision_time_and_latency() {
    // Unclaimed after the grace: recorded as Approved, decided when the apiserver says.
    let request = approved_at_90();
    let mut script = vec![status_patch(&request)];
    script.extend(events(2));
    let cache = Cache {
        agents: vec![agent("delete_file", "24h")],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(95));
        let request = request.clone();
        async move { (reconcile(cached(request), ctx.clone()).await, ctx) }
    })
    .await;
    let (action, ctx) = result;
    // Unused approvals are deleted ttlAfterFinished (a day) after expiresAt: after the next
    // hourly resync, which requeues it once it is due within the hour.
    assert_eq!(action.unwrap(), Action::await_change());
    let body = &requests[0].body;
    assert_eq!(phase(body), "Approved");
    assert_eq!(body["status"]["decidedAt"], at(90).to_string());
    assert_eq!(body["status"]["message"], "approved by alice: ok");
    assert_eq!(requests[1].body["reason"], "Approved");
    let metrics = ctx.metrics.encode();
    assert!(metrics.contains("hitl_decisions_total{outcome=\"approved\"} 1"));
    assert!(
        metrics.contains("hitl_decision_latency_seconds_sum 90.0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn decision_written_after_expiry_cannot_revive_the_request() {
    let request = request(
        "decision: {type: Approve, decidedBy: alice}",
        "status: {phase: Expired, conditions: [{type: Finished, status: \"True\", reason: Expired, message: m, lastTransitionTime: \"2027-01-15T09:00:00Z\"}], message: m}",
        true,
    );
    let cache = Cache {
        agents: vec![agent("delete_file", "24h")],
        ..Cache::default()
    };
    let (result, requests) = run_script(Vec::new(), |client| {
        reconcile(cached(request.clone()), cache.context(client, at(3700)))
    })
    .await;
    result.unwrap();
    assert!(requests.is_empty(), "an Expired request stays as it is");
}

#[tokio::test]
async fn request_is_cancelled_when_approval_is_no_longer_required_or_agent_is_gone() {
    for agents in [vec![agent("read_file", "24h")], vec![]] {
        let request = request("", "status: {phase: Pending}", true);
        let mut script = vec![status_patch(&request)];
        script.extend(events(1 + agents.len()));
        let cache = Cache {
            agents: agents.clone(),
            ..Cache::default()
        };
        let (result, requests) = run_script(script, |client| {
            reconcile(cached(request.clone()), cache.context(client, at(10)))
        })
        .await;
        result.unwrap();
        let body = &requests[0].body;
        assert_eq!(phase(body), "Cancelled");
        assert_eq!(
            conditions(body),
            vec![("Finished".into(), "True".into(), "PolicyChanged".into())]
        );
        assert_eq!(requests[1].body["reason"], "PolicyChanged");
    }
}

#[tokio::test]
async fn a_frozen_agents_pending_and_fresh_approved_requests_are_cancelled_at_once() {
    // A fresh approval is not left to the gate while the Agent is frozen.
    for request in [
        request("", "status: {phase: Pending}", true),
        approved_at_90(),
    ] {
        let mut frozen = agent("delete_file", "24h");
        frozen.metadata.annotations = Some(
            [(
                "hitl.kagent.dev/freeze".to_string(),
                "incident 42".to_string(),
            )]
            .into(),
        );
        let mut script = vec![status_patch(&request)];
        script.extend(events(2));
        let cache = Cache {
            agents: vec![frozen],
            ..Cache::default()
        };
        let (result, requests) = run_script(script, |client| {
            reconcile(cached(request.clone()), cache.context(client, at(91)))
        })
        .await;
        result.unwrap();
        let body = &requests[0].body;
        assert_eq!(phase(body), "Cancelled");
        assert_eq!(
            conditions(body),
            vec![("Finished".into(), "True".into(), "Frozen".into())]
        );
        assert_eq!(
            body["status"]["message"],
            "cancelled: Agent a is frozen (hitl.kagent.dev/freeze: incident 42); nothing runs when the freeze is lifted, the call must be made again"
        );
        assert_eq!(requests[1].body["reason"], "Frozen");
        assert_eq!(requests[1].body["type"], "Warning");
    }
}

#[tokio::test]
async fn finished_request_is_deleted_after_the_ttl() {
    let finished = "status: {phase: Denied, decidedAt: \"2027-01-15T08:01:40Z\", message: m, conditions: [{type: Finished, status: \"True\", reason: Denied, message: m, lastTransitionTime: \"2027-01-15T08:01:40Z\"}]}";
    let request = request("decision: {type: Deny, decidedBy: bob}", finished, true);
    assert_eq!(
        request
            .status
            .as_ref()
            .unwrap()
            .decided_at
            .as_ref()
            .unwrap()
            .0,
        at(100),
        "fixture times line up with at()"
    );
    let cache = || Cache {
        agents: vec![agent("delete_file", "10m")],
        ..Cache::default()
    };

    // Before the TTL: nothing written, requeued for the deletion.
    let (result, requests) = run_script(Vec::new(), |client| {
        reconcile(cached(request.clone()), cache().context(client, at(500)))
    })
    .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(201)));
    assert!(requests.is_empty());

    // After it: deleted, guarded by the uid.
    let script = vec![expect(
        Method::DELETE,
        &format!("{PATH}?"),
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}}),
    )];
    let (result, requests) = run_script(script, |client| {
        reconcile(cached(request.clone()), cache().context(client, at(700)))
    })
    .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert_eq!(
        requests[0].body["preconditions"],
        json!({"uid": "request-uid"})
    );
}

#[tokio::test]
async fn consumed_approval_becomes_executed() {
    let request = request(
        "decision: {type: Approve, decidedBy: alice}",
        "status: {phase: Approved, decidedAt: \"2027-01-15T08:01:40Z\", consumedAt: \"2027-01-15T08:01:50Z\", consumedBy: pod-1, message: m}",
        true,
    );
    let mut script = vec![status_patch(&request)];
    script.extend(events(2));
    let cache = Cache {
        agents: vec![agent("delete_file", "24h")],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(cached(request.clone()), cache.context(client, at(200)))
    })
    .await;
    result.unwrap();
    let body = &requests[0].body;
    assert_eq!(phase(body), "Executed");
    // The gate's fields are left to the gate.
    assert!(body["status"].get("consumedAt").is_none());
    assert_eq!(requests[1].body["reason"], "Executed");
}

#[tokio::test]
async fn executed_set_by_the_gate_is_recorded_once() {
    let executed = "status: {phase: Executed, decidedAt: \"2027-01-15T08:01:40Z\", consumedAt: \"2027-01-15T08:01:50Z\", consumedBy: pod-1, message: ran}";
    let request = request(
        "decision: {type: Approve, decidedBy: alice}",
        executed,
        true,
    );
    let mut script = vec![status_patch(&request)];
    script.extend(events(2));
    let cache = || Cache {
        agents: vec![agent("delete_file", "24h")],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(cached(request.clone()), cache().context(client, at(200)))
    })
    .await;
    result.unwrap();
    let body = &requests[0].body;
    assert_eq!(phase(body), "Executed");
    assert_eq!(
        conditions(body),
        vec![("Finished".into(), "True".into(), "Executed".into())]
    );
    assert_eq!(requests[1].body["reason"], "Executed");

    // Recorded: the next reconcile writes nothing.
    let mut recorded = request.clone();
    recorded.status = Some(serde_json::from_value(body["status"].clone()).unwrap());
    recorded.status.as_mut().unwrap().consumed_at =
        request.status.as_ref().unwrap().consumed_at.clone();
    let (result, requests) = run_script(Vec::new(), |client| {
        reconcile(cached(recorded.clone()), cache().context(client, at(300)))
    })
    .await;
    result.unwrap();
    assert!(requests.is_empty());
}

/// A ToolGate `a` (the name of the Agent of the other tests: its requests are not the
/// Agent's) in front of RemoteMCPServer `fs`, requiring approval of `require_approval`.
fn tool_gate(require_approval: &str) -> hitl_operator::api::ToolGate {
    yaml(&format!(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: ToolGate
metadata: {{name: a, namespace: ns, uid: tool-gate-uid}}
spec:
  server: {{remoteMCPServer: fs}}
  toolNames: [read_file, delete_file]
  requireApproval: [{require_approval}]
"#
    ))
}

/// `request` made through ToolGate `a` (`spec.agentRef.kind`).
fn through_tool_gate(mut request: ApprovalRequest) -> ApprovalRequest {
    request.spec.agent_ref.kind = Some(hitl_operator::api::approval_request::PolicyKind::ToolGate);
    request
}

#[tokio::test]
async fn a_request_through_a_tool_gate_is_adopted_by_it_and_its_event_goes_on_it() {
    let request = through_tool_gate(request("", "", false));
    let mut script = vec![expect(
        Method::PATCH,
        &format!("{PATH}{APPLY}"),
        serde_json::to_value(&request).unwrap(),
    )];
    script.push(status_patch(&request));
    script.extend(events(2));
    // An Agent of the same name that no longer asks: it has no say over the ToolGate's request.
    let cache = Cache {
        agents: vec![agent("read_file", "24h")],
        tool_gates: vec![tool_gate("delete_file")],
        approvals: vec![request.clone()],
        ..Cache::default()
    };
    let (action, requests) = run_script(script, |client| {
        reconcile(cached(request.clone()), cache.context(client, at(600)))
    })
    .await;
    assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(3001)));
    assert_eq!(
        requests[0].body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "kagent.dev/v1alpha2", "kind": "ToolGate", "name": "a", "uid": "tool-gate-uid"}])
    );
    assert_eq!(phase(&requests[1].body), "Pending");
    assert_eq!(requests[3].body["regarding"]["kind"], "ToolGate");
}

#[tokio::test]
async fn a_request_through_a_tool_gate_is_cancelled_when_it_no_longer_asks_or_is_gone() {
    for tool_gates in [vec![tool_gate("read_file")], vec![]] {
        let request = through_tool_gate(request("", "status: {phase: Pending}", false));
        let mut script = Vec::new();
        if !tool_gates.is_empty() {
            script.push(expect(
                Method::PATCH,
                &format!("{PATH}{APPLY}"),
                serde_json::to_value(&request).unwrap(),
            ));
        }
        script.push(status_patch(&request));
        script.extend(events(1 + tool_gates.len()));
        // The Agent of the same name still asks: it has no say either.
        let cache = Cache {
            agents: vec![agent("delete_file", "24h")],
            tool_gates: tool_gates.clone(),
            ..Cache::default()
        };
        let (result, requests) = run_script(script, |client| {
            reconcile(cached(request.clone()), cache.context(client, at(10)))
        })
        .await;
        result.unwrap();
        let body = &requests
            .iter()
            .find(|r| r.body["status"]["phase"].is_string())
            .unwrap()
            .body;
        assert_eq!(phase(body), "Cancelled");
        assert_eq!(
            conditions(body),
            vec![("Finished".into(), "True".into(), "PolicyChanged".into())]
        );
    }
}

#[tokio::test]
async fn a_frozen_tool_gates_pending_request_is_cancelled_and_the_event_goes_on_it() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PartialObjectMeta;

    let freeze =
        |reason: &str| Some([("hitl.kagent.dev/freeze".to_string(), reason.to_string())].into());
    let mut annotated = tool_gate("delete_file");
    annotated.metadata.annotations = freeze("incident 42");
    let mut frozen_namespace = PartialObjectMeta::<Namespace>::default();
    frozen_namespace.metadata.name = Some("ns".into());
    frozen_namespace.metadata.annotations = freeze("drill");
    for (tool_gate, namespaces, why) in [
        (
            annotated,
            vec![],
            "ToolGate a is frozen (hitl.kagent.dev/freeze: incident 42)",
        ),
        (
            tool_gate("delete_file"),
            vec![frozen_namespace],
            "Namespace ns is frozen (hitl.kagent.dev/freeze: drill)",
        ),
    ] {
        let request = through_tool_gate(request("", "status: {phase: Pending}", false));
        let mut script = vec![expect(
            Method::PATCH,
            &format!("{PATH}{APPLY}"),
            serde_json::to_value(&request).unwrap(),
        )];
        script.push(status_patch(&request));
        script.extend(events(2));
        // The Agent of the same name is not frozen: it has no say over the ToolGate's request.
        let cache = Cache {
            agents: vec![agent("delete_file", "24h")],
            tool_gates: vec![tool_gate],
            namespaces,
            ..Cache::default()
        };
        let (result, requests) = run_script(script, |client| {
            reconcile(cached(request.clone()), cache.context(client, at(10)))
        })
        .await;
        result.unwrap();
        let body = &requests[1].body;
        assert_eq!(phase(body), "Cancelled");
        assert_eq!(
            conditions(body),
            vec![("Finished".into(), "True".into(), "Frozen".into())]
        );
        assert_eq!(
            body["status"]["message"],
            format!(
                "cancelled: {why}; nothing runs when the freeze is lifted, the call must be made again"
            )
        );
        for event in &requests[2..] {
            assert_eq!(
                (&event.body["type"], &event.body["reason"]),
                (&json!("Warning"), &json!("Frozen"))
            );
        }
        assert_eq!(requests[3].body["regarding"]["kind"], "ToolGate");
    }
}
