//! Escalation steps (issue 60), driven by the ApprovalRequest reconciler, against the mock API
//! server: one guarded status write per step, an Event per step, and a step taken by someone
//! else (a stale cache, another replica) declined without an Event.

use std::time::Duration;

use hitl_operator::api::{Agent, ApprovalRequest};
use hitl_operator::controller::approval_request::reconcile;
use http::{Method, StatusCode};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::harness::*;

const REQUEST: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/approvalrequests/r1";
const BY_ESCALATION: &str = "?&fieldManager=hitl-operator-escalation";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events?";

fn agent() -> Agent {
    yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: a, namespace: ns, uid: agent-uid}
spec:
  declarative:
    tools:
      - type: McpServer
        mcpServer: {name: fs, toolNames: [delete_file], requireApproval: [delete_file]}
"#,
    )
}

/// A Pending request with steps at +300 s (tier 1) and +900 s (tier 2), whose status is what
/// the reconciler would write, at resourceVersion `rv` and `tier`.
fn request(rv: &str, tier: Option<i32>) -> ApprovalRequest {
    let mut r: Value = json_of(&yaml::<ApprovalRequest>(&format!(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata:
  name: r1
  namespace: ns
  uid: request-uid
  resourceVersion: "{rv}"
  creationTimestamp: "{created}"
  ownerReferences: [{{apiVersion: kagent.dev/v1alpha2, kind: Agent, name: a, uid: agent-uid}}]
spec:
  agentRef: {{name: a}}
  toolServer: {{kind: RemoteMCPServer, name: fs, namespace: ns}}
  toolName: delete_file
  argumentsSha256: "{sha}"
  argumentsBytes: 52
  requestedBy: system:serviceaccount:ns:a
  expiresAt: "{expires}"
  escalation:
    steps:
      - {{tier: 1, at: "{one}", approvers: {{groups: [oncall]}}}}
      - {{tier: 2, at: "{two}", approvers: {{users: [boss]}}}}
status:
  phase: Pending
  message: waiting for a decision until {expires}
"#,
        created = at(0),
        one = at(300),
        two = at(900),
        expires = at(3600),
        sha = "a".repeat(64),
    )));
    if let Some(tier) = tier {
        r["status"]["tier"] = json!(tier);
        r["status"]["escalations"] =
            json!([{"tier": 1, "at": at(300).to_string(), "by": "another"}]);
    }
    serde_json::from_value(r).unwrap()
}

fn cache_of(cached: &ApprovalRequest) -> Cache {
    Cache {
        agents: vec![agent()],
        approvals: vec![cached.clone()],
        ..Cache::default()
    }
}

/// What the apiserver sees when tier 1 of `held` is taken: the guarded status write (answered
/// with tier 1 at the next resourceVersion) and the Events on the request and its Agent.
fn tier_one_taken(held: &ApprovalRequest) -> Vec<Exchange> {
    let mut written = json_of(held);
    written["metadata"]["resourceVersion"] = json!("6");
    written["status"]["tier"] = json!(1);
    vec![
        expect(
            Method::PATCH,
            &format!("{REQUEST}/status{BY_ESCALATION}"),
            written,
        ),
        expect(Method::POST, EVENTS, event_created()),
        expect(Method::POST, EVENTS, event_created()),
    ]
}

#[tokio::test]
async fn a_step_due_is_one_guarded_write_and_an_event_on_the_request_and_its_agent() {
    let held = request("5", None);
    let script = tier_one_taken(&held);
    let cache = cache_of(&held);
    let (action, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(600));
        async move { reconcile(cached(held), ctx).await }
    })
    .await;
    assert_eq!(
        requests[0].body,
        json!({"metadata": {"resourceVersion": "5"},
               "status": {"tier": 1, "escalations": [{"tier": 1, "at": at(600).to_string(), "by": "test"}]}}),
        "the step, guarded by the resourceVersion the cache holds"
    );
    assert_eq!(requests[1].body["reason"], "Escalated");
    assert!(
        requests[1].body["note"]
            .as_str()
            .unwrap()
            .contains("escalated to tier 1"),
        "{}",
        requests[1].body
    );
    assert_eq!(requests[1].body["regarding"]["kind"], "ApprovalRequest");
    assert_eq!(requests[2].body["regarding"]["kind"], "Agent");
    // Looks again at once: the write brings the next reconcile, which tells the notifier.
    assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(1)));
}

#[tokio::test]
async fn a_step_whose_notifier_is_missing_is_a_warning_and_counted() {
    let mut held = json_of(&request("5", None));
    held["spec"]["escalation"]["steps"][0]["notifier"] = json!("pager");
    let held: ApprovalRequest = serde_json::from_value(held).unwrap();
    let script = tier_one_taken(&held);
    let cache = cache_of(&held);
    let (result, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(600));
        async move { (reconcile(cached(held), ctx.clone()).await, ctx) }
    })
    .await;
    let (action, ctx) = result;
    action.unwrap();
    assert_eq!(
        requests.len(),
        3,
        "the step and its two Events, no delivery"
    );
    for event in &requests[1..] {
        assert_eq!(event.body["type"], "Warning");
        assert_eq!(event.body["reason"], "Escalated");
        let note = event.body["note"].as_str().unwrap();
        assert!(
            note.contains("escalated to tier 1")
                && note.contains(
                    "its notifier \"pager\" is not an ApprovalNotifier in namespace ns: nobody was told"
                ),
            "{note}"
        );
    }
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("hitl_escalations_total{notifier=\"missing\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_step_taken_meanwhile_is_declined_after_the_conflict_without_an_event() {
    let held = request("5", None);
    let taken = request("7", Some(1));
    let script = vec![
        failure(
            Method::PATCH,
            &format!("{REQUEST}/status{BY_ESCALATION}"),
            StatusCode::CONFLICT,
        ),
        expect(Method::GET, REQUEST, json_of(&taken)),
    ];
    let cache = cache_of(&held);
    let (action, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(600));
        async move { reconcile(cached(held), ctx).await }
    })
    .await;
    assert_eq!(requests.len(), 2, "no second write, no Event");
    // The next step is at +900 s; the write by the other replica brings a reconcile too.
    assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(301)));
}

#[tokio::test]
async fn nothing_is_written_before_the_step_or_after_the_last() {
    for (held, now, wait) in [
        (request("5", None), at(200), 101),
        (request("5", Some(2)), at(1000), 2601),
    ] {
        let cache = cache_of(&held);
        let (action, requests) = run_script(vec![], |client| {
            let ctx = cache.context(client, now);
            async move { reconcile(cached(held), ctx).await }
        })
        .await;
        assert!(requests.is_empty(), "{requests:?}");
        assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(wait)));
    }
}
