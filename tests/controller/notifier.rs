//! ApprovalNotifier deliveries, driven by the ApprovalRequest reconciler, against the mock API
//! server (every request checked) and a real HTTP receiver on loopback.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use hitl_operator::api::{Agent, ApprovalNotifier, ApprovalRequest};
use hitl_operator::controller::approval_request::reconcile;
use hitl_operator::egress::destination::Destinations;
use http::Method;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::harness::*;

const REQUEST: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/approvalrequests/r1";
const NOTIFIER: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/approvalnotifiers/oncall";
const SECRET: &str = "/api/v1/namespaces/ns/secrets/hook";
const BY_NOTIFIER: &str = "?&fieldManager=hitl-operator-notifier";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events?";

/// A receiver on loopback answering each POST with the next status of `answers` (then 200),
/// keeping `(content type, body)` of each.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<(String, Value)>>>,
}

async fn receiver(answers: Vec<u16>) -> Receiver {
    receiver_saying(answers, "").await
}

/// [`receiver`], whose answers carry `text` as their body.
async fn receiver_saying(answers: Vec<u16>, text: &'static str) -> Receiver {
    let got = Arc::new(Mutex::new(Vec::new()));
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let got = got.clone();
            move |headers: HeaderMap, body: String| async move {
                let kind = headers["content-type"].to_str().unwrap().to_owned();
                got.lock()
                    .unwrap()
                    .push((kind, serde_json::from_str(&body).unwrap()));
                let status = answers.lock().unwrap().next().unwrap_or(200);
                (StatusCode::from_u16(status).unwrap(), text)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver { url, got }
}

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

fn notifier(max_attempts: u32) -> ApprovalNotifier {
    yaml(&format!(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: ApprovalNotifier
metadata: {{name: oncall, namespace: ns, uid: notifier-uid, resourceVersion: "40"}}
spec:
  channel: {{type: Webhook, urlFrom: {{name: hook, key: url}}}}
  maxAttempts: {max_attempts}
"#
    ))
}

fn secret(url: &str) -> Value {
    let mut data = std::collections::BTreeMap::new();
    data.insert(
        "url".to_owned(),
        k8s_openapi::ByteString(url.as_bytes().to_vec()),
    );
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("hook".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    serde_json::to_value(secret).unwrap()
}

/// A Pending request whose status is what the reconciler would write (so it writes none),
/// with `records` in `status.notifications`, at resourceVersion `rv`.
fn request(rv: &str, records: Value) -> ApprovalRequest {
    let mut r: Value = serde_json::to_value(yaml::<ApprovalRequest>(&format!(
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
  argumentsPreview: {{path: /data/report.csv, token: "[REDACTED]"}}
  argumentsSha256: "{sha}"
  argumentsBytes: 52
  requestedBy: system:serviceaccount:ns:a
  expiresAt: "{expires}"
status:
  phase: Pending
  message: waiting for a decision until {expires}
"#,
        created = at(0),
        expires = at(3600),
        sha = "a".repeat(64),
    )))
    .unwrap();
    r["status"]["notifications"] = records;
    serde_json::from_value(r).unwrap()
}

fn with_rv(request: &ApprovalRequest, rv: &str, records: Value) -> Value {
    let mut r = serde_json::to_value(request).unwrap();
    r["metadata"]["resourceVersion"] = json!(rv);
    r["status"]["notifications"] = records;
    r
}

/// The requests of one attempt at a message about `cached` whose notifier is `notifier`: the
/// Secret, the request re-read, the attempt recorded (`started`), its outcome (`finished`),
/// then the notifier's counters.
fn one_attempt(
    url: &str,
    cached: &ApprovalRequest,
    started: &Value,
    finished: &Value,
    notifier: &ApprovalNotifier,
) -> Vec<Exchange> {
    let notifier = serde_json::to_value(notifier).unwrap();
    vec![
        expect(Method::GET, SECRET, secret(url)),
        expect(Method::GET, REQUEST, serde_json::to_value(cached).unwrap()),
        expect(
            Method::PATCH,
            &format!("{REQUEST}/status{BY_NOTIFIER}"),
            with_rv(cached, "6", started.clone()),
        ),
        expect(
            Method::PATCH,
            &format!("{REQUEST}/status{BY_NOTIFIER}"),
            with_rv(cached, "7", finished.clone()),
        ),
        expect(Method::GET, NOTIFIER, notifier.clone()),
        expect(
            Method::PATCH,
            &format!("{NOTIFIER}/status{BY_NOTIFIER}"),
            notifier,
        ),
    ]
}

/// The cache: the Agent, `cached` and `notifier`; notifiers may reach the receivers on
/// loopback (`--notifier-allow-cidrs=127.0.0.0/8`).
fn cache_of(cached: &ApprovalRequest, notifier: ApprovalNotifier) -> Cache {
    Cache {
        agents: vec![agent()],
        approvals: vec![cached.clone()],
        notifiers: vec![notifier],
        notifier_destinations: Destinations::new(vec!["127.0.0.0/8".parse().unwrap()]),
        ..Cache::default()
    }
}

#[tokio::test]
async fn a_message_is_recorded_before_it_is_sent_then_marked_delivered() {
    let hook = receiver(vec![]).await;
    let held = request("5", json!([]));
    let started = json!([{"notifier": "oncall", "event": "created", "attempts": 1,
                          "lastAttemptAt": at(600).to_string()}]);
    let mut delivered = started.clone();
    delivered[0]["deliveredAt"] = json!(at(600).to_string());
    let script = one_attempt(&hook.url, &held, &started, &delivered, &notifier(5));
    let cache = cache_of(&held, notifier(5));
    let (result, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(600));
        async move { (reconcile(cached(held), ctx.clone()).await, ctx) }
    })
    .await;
    let (action, ctx) = result;
    assert_eq!(
        action.unwrap(),
        Action::requeue(Duration::from_secs(2)),
        "look again for the next message"
    );
    assert_eq!(
        requests[2].body,
        json!({"metadata": {"resourceVersion": "5"}, "status": {"notifications": started}}),
        "the attempt, guarded by the resourceVersion read"
    );
    assert_eq!(
        requests[3].body,
        json!({"metadata": {"resourceVersion": "6"}, "status": {"notifications": delivered}})
    );
    assert_eq!(requests[5].body["metadata"]["resourceVersion"], "40");
    assert_eq!(requests[5].body["status"]["delivered"], 1);
    assert_eq!(
        requests[5].body["status"]["lastDelivery"]["event"],
        "created"
    );
    let got = hook.got.lock().unwrap();
    assert_eq!(got.len(), 1);
    let (kind, event) = &got[0];
    assert_eq!(kind, "application/cloudevents+json");
    assert_eq!(event["id"], "request-uid/created");
    assert_eq!(event["data"]["argumentsPreview"]["token"], "[REDACTED]");
    assert!(
        ctx.metrics
            .encode()
            .contains("hitl_notifications_total{outcome=\"delivered\"} 1")
    );
}

#[tokio::test]
async fn nothing_is_sent_when_the_request_changed_since_it_was_read() {
    let hook = receiver(vec![]).await;
    let held = request("5", json!([]));
    let script = vec![
        expect(Method::GET, SECRET, secret(&hook.url)),
        expect(Method::GET, REQUEST, serde_json::to_value(&held).unwrap()),
        failure(
            Method::PATCH,
            &format!("{REQUEST}/status{BY_NOTIFIER}"),
            StatusCode::CONFLICT,
        ),
    ];
    let cache = cache_of(&held, notifier(5));
    let (action, _) = run_script(script, |client| {
        let ctx = cache.context(client, at(600));
        async move { reconcile(cached(held), ctx).await }
    })
    .await;
    // The change brings its own reconcile; until then, the next look is a minute away at most.
    assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(61)));
    assert!(
        hook.got.lock().unwrap().is_empty(),
        "an attempt that was not recorded is not made"
    );
}

#[tokio::test]
async fn an_attempt_waits_out_its_backoff() {
    let held = request(
        "5",
        json!([{"notifier": "oncall", "event": "created", "attempts": 2,
                "lastAttemptAt": at(598).to_string(), "lastError": "HTTP 503"}]),
    );
    let cache = cache_of(&held, notifier(5));
    let (action, requests) = run_script(vec![], |client| {
        let ctx = cache.context(client, at(600));
        async move { reconcile(cached(held), ctx).await }
    })
    .await;
    // Two failures: 4 s after the last attempt (at 602), plus the requeue's second.
    assert_eq!(action.unwrap(), Action::requeue(Duration::from_secs(3)));
    assert!(requests.is_empty());
}

#[tokio::test]
async fn the_last_failed_attempt_gives_the_message_up_and_says_so() {
    let hook = receiver(vec![503]).await;
    let before = json!([{"notifier": "oncall", "event": "created", "attempts": 2,
                         "lastAttemptAt": at(500).to_string(), "lastError": "HTTP 503"}]);
    let held = request("5", before);
    let mut started = json!([{"notifier": "oncall", "event": "created", "attempts": 3,
                              "lastAttemptAt": at(600).to_string(), "lastError": "HTTP 503"}]);
    let mut script = one_attempt(&hook.url, &held, &started, &started, &notifier(3));
    script.push(expect(Method::POST, EVENTS, event_created()));
    let cache = cache_of(&held, notifier(3));
    let (result, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(600));
        async move { (reconcile(cached(held), ctx.clone()).await, ctx) }
    })
    .await;
    let (action, ctx) = result;
    action.unwrap();
    started[0]["lastError"] = json!("HTTP 503 Service Unavailable");
    assert_eq!(
        requests[3].body["status"]["notifications"], started,
        "the outcome recorded"
    );
    assert_eq!(requests[5].body["status"]["failures"], 1);
    assert_eq!(
        requests[5].body["status"]["lastFailure"]["error"],
        "HTTP 503 Service Unavailable"
    );
    assert_eq!(requests[6].body["reason"], "DeliveryFailed");
    assert_eq!(requests[6].body["regarding"]["kind"], "ApprovalNotifier");
    assert_eq!(hook.got.lock().unwrap().len(), 1);
    assert!(
        ctx.metrics
            .encode()
            .contains("hitl_notifications_total{outcome=\"given_up\"} 1")
    );
}

/// The last attempt of a message whose receiver answers 500 with a secret in the body: given
/// up, with the error recorded in every place it goes.
async fn give_up_against(
    hook: &Receiver,
    cache: Cache,
    held: ApprovalRequest,
) -> (Vec<Recorded>, Value) {
    let started = json!([{"notifier": "oncall", "event": "created", "attempts": 1,
                          "lastAttemptAt": at(600).to_string()}]);
    let mut script = one_attempt(&hook.url, &held, &started, &started, &notifier(1));
    script.push(expect(Method::POST, EVENTS, event_created()));
    let (action, requests) = run_script(script, |client| {
        let ctx = cache.context(client, at(600));
        async move { reconcile(cached(held), ctx).await }
    })
    .await;
    action.unwrap();
    let record = requests[3].body["status"]["notifications"][0].clone();
    (requests, record)
}

#[tokio::test]
async fn an_error_answer_leaves_no_byte_of_its_body_in_the_records() {
    const SECRET: &str =
        r#"{"AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG"}"#;
    let hook = receiver_saying(vec![500], SECRET).await;
    let held = request("5", json!([]));
    let (requests, record) = give_up_against(&hook, cache_of(&held, notifier(1)), held).await;
    assert_eq!(record["lastError"], "HTTP 500 Internal Server Error");
    assert_eq!(
        requests[5].body["status"]["lastFailure"]["error"],
        "HTTP 500 Internal Server Error"
    );
    assert_eq!(
        requests[6].body["note"],
        "gave up created about ApprovalRequest r1 after 1 attempts: HTTP 500 Internal Server Error"
    );
    for request in &requests {
        let written = request.body.to_string();
        assert!(
            !written.contains("ASIAEXAMPLE") && !written.contains("wJalrXUtnFEMI"),
            "{written}"
        );
    }
    assert_eq!(hook.got.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_loopback_url_is_refused_by_default_and_the_record_says_why() {
    let hook = receiver(vec![]).await;
    let held = request("5", json!([]));
    let cache = Cache {
        notifier_destinations: Destinations::default(),
        ..cache_of(&held, notifier(1))
    };
    let (_, record) = give_up_against(&hook, cache, held).await;
    assert_eq!(
        record["lastError"],
        "refused: 127.0.0.1 is loopback (not in --notifier-allow-cidrs)"
    );
    assert!(hook.got.lock().unwrap().is_empty(), "nothing was sent");
}
