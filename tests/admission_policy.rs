//! Evaluates the CEL of the admission policies the chart ships, with kube-cel.
//!
//! The policies come from `tests/chart/rendered/admission-policy.<variant>.yaml`, which
//! `tests/chart/test_chart.py` checks byte-for-byte against what Helm renders from the chart, so
//! the expressions tested here are the shipped ones. kube-cel has no `authorizer` variable: the
//! validation that uses it is asserted to compile and to be exactly the expected RBAC check; every
//! other match condition and validation is evaluated for allowed and denied cases. Any expression
//! that errors (instead of returning a bool) fails the test: under `failurePolicy: Fail` an error
//! denies with an unhelpful message, so the expressions must be total on valid objects.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use hitl_operator::api::ApprovalRequest;
use kube::CustomResourceExt;
use kube::core::cel::cel::Program;
use kube::core::cel::{AdmissionRequest, VapEvaluator, VapExpression};
use serde_json::{Value, json};

const AGENT_SA: &str = "system:serviceaccount:team-a:helper";
const OTHER_SA: &str = "system:serviceaccount:team-a:other-agent";
const CONTROLLER: &str = "system:serviceaccount:hitl-system:hitl-hitl-operator";
/// The resource whose RBAC verbs cover a request or grant: by the kind its agentRef names.
const RESOURCE: &str = "has(object.spec.agentRef.kind) && object.spec.agentRef.kind == 'ToolGate' ? 'toolgates' : 'agents'";
const AUTHORIZER_CHECK: &str = "authorizer.group('kagent.dev').resource((has(object.spec.agentRef.kind) && object.spec.agentRef.kind == 'ToolGate' ? 'toolgates' : 'agents')).namespace(object.metadata.namespace).name(object.spec.agentRef.name).check('approve').allowed()";

/// One ValidatingAdmissionPolicy, split the way the tests evaluate it.
struct Policy {
    match_conditions: Vec<String>,
    /// Validations kube-cel can evaluate.
    validations: Vec<VapExpression>,
    /// Validations that need `authorizer`.
    authorizer: Vec<String>,
    /// Their messageExpressions (which kube-cel can evaluate).
    authorizer_messages: Vec<String>,
}

/// What admission does with one request.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// A match condition is false: the policy does not apply.
    NotMatched,
    /// Every evaluable validation passed.
    Allowed,
    /// These messages come back to the user.
    Denied(Vec<String>),
}

fn load(variant: &str) -> HashMap<String, Policy> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/chart/rendered/admission-policy.{variant}.yaml"
    ));
    let text = std::fs::read_to_string(&path).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&text).unwrap();
    docs.into_iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .map(|d| {
            let name = d["metadata"]["name"].as_str().unwrap();
            let short = name.strip_prefix("hitl-hitl-operator-approval-").unwrap();
            let spec = &d["spec"];
            let match_conditions = spec["matchConditions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|m| m["expression"].as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            let (mut validations, mut authorizer) = (Vec::new(), Vec::new());
            let mut authorizer_messages = Vec::new();
            for v in spec["validations"].as_array().unwrap() {
                let expression = v["expression"].as_str().unwrap().to_owned();
                if expression.contains("authorizer") {
                    authorizer.push(expression);
                    if let Some(m) = v["messageExpression"].as_str() {
                        authorizer_messages.push(m.to_owned());
                    }
                } else {
                    validations.push(VapExpression {
                        expression,
                        message: v["message"].as_str().map(str::to_owned),
                        message_expression: v["messageExpression"].as_str().map(str::to_owned),
                    });
                }
            }
            (
                short.to_owned(),
                Policy {
                    match_conditions,
                    validations,
                    authorizer,
                    authorizer_messages,
                },
            )
        })
        .collect()
}

fn admit(
    policy: &Policy,
    operation: &str,
    username: &str,
    object: &Value,
    old: Option<&Value>,
) -> Verdict {
    admit_in_groups(policy, operation, username, &[], object, old)
}

/// [`admit`] for a user in `groups`.
fn admit_in_groups(
    policy: &Policy,
    operation: &str,
    username: &str,
    groups: &[&str],
    object: &Value,
    old: Option<&Value>,
) -> Verdict {
    let mut builder = VapEvaluator::builder()
        .object(object.clone())
        .request(AdmissionRequest {
            operation: operation.into(),
            username: username.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            namespace: "team-a".into(),
            name: "helper-delete-file-1".into(),
            ..Default::default()
        });
    if let Some(old) = old {
        builder = builder.old_object(old.clone());
    }
    let evaluator = builder.build();
    let conditions: Vec<VapExpression> = policy
        .match_conditions
        .iter()
        .map(|e| VapExpression {
            expression: e.clone(),
            message: None,
            message_expression: None,
        })
        .collect();
    for r in evaluator.evaluate(&conditions) {
        assert_no_error(&r.expression, r.message.as_deref());
        if !r.passed {
            return Verdict::NotMatched;
        }
    }
    let denied: Vec<String> = evaluator
        .evaluate(&policy.validations)
        .into_iter()
        .filter(|r| !r.passed)
        .map(|r| {
            assert_no_error(&r.expression, r.message.as_deref());
            r.message.unwrap()
        })
        .collect();
    if denied.is_empty() {
        Verdict::Allowed
    } else {
        Verdict::Denied(denied)
    }
}

fn assert_no_error(expression: &str, message: Option<&str>) {
    if let Some(m) = message {
        assert!(
            !m.starts_with("evaluation error")
                && !m.starts_with("expression returned non-boolean")
                && !m.starts_with("failed to compile"),
            "{expression}: {m}"
        );
    }
}

fn denied_with(verdict: Verdict, needle: &str) {
    match verdict {
        Verdict::Denied(messages) => assert!(
            messages.iter().any(|m| m.contains(needle)),
            "expected a message containing {needle:?}, got {messages:?}"
        ),
        other => panic!("expected a denial containing {needle:?}, got {other:?}"),
    }
}

/// A pending request created by the agent's ServiceAccount.
fn request() -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "ApprovalRequest",
        "metadata": {"name": "helper-delete-file-1", "namespace": "team-a",
                     "labels": {"kagent.dev/agent": "helper"}},
        "spec": {
            "agentRef": {"name": "helper"},
            "toolServer": {"kind": "RemoteMCPServer", "name": "fs", "namespace": "team-a"},
            "toolName": "delete_file",
            "argumentsPreview": {"path": "/data/report.csv"},
            "argumentsSha256": "a".repeat(64),
            "argumentsBytes": 29,
            "requestedBy": AGENT_SA,
            "expiresAt": "2026-11-22T01:00:00Z"
        }
    })
}

fn decided(mut object: Value, kind: &str, by: &str) -> Value {
    object["spec"]["decision"] = json!({"type": kind, "reason": "ok", "decidedBy": by});
    object
}

fn with_status(mut object: Value, status: Value) -> Value {
    object["status"] = status;
    object
}

// ------------------------------------------------------------------ requester (CREATE)

#[test]
fn requester_must_be_the_creator() {
    let p = &load("default")["requester"];
    assert_eq!(
        admit(p, "CREATE", AGENT_SA, &request(), None),
        Verdict::Allowed
    );
    denied_with(
        admit(p, "CREATE", OTHER_SA, &request(), None),
        &format!("spec.requestedBy must be the creating user {OTHER_SA}"),
    );
    denied_with(
        admit(p, "CREATE", "alice", &request(), None),
        "creating user alice",
    );
}

// ------------------------------------------------------------------ decisions

#[test]
fn authorizer_check_is_its_own_validation_and_compiles() {
    for variant in ["default", "permissive"] {
        let p = &load(variant)["decision"];
        assert_eq!(p.authorizer, vec![AUTHORIZER_CHECK.to_owned()]);
        Program::compile(AUTHORIZER_CHECK).expect("the authorizer expression parses");
        for v in &p.validations {
            assert!(!v.expression.contains("authorizer"));
        }
    }
}

#[test]
fn policy_applies_only_when_the_decision_is_set_or_changed() {
    let p = &load("default")["decision"];
    let pending = request();
    // Creating a request without a decision, or touching labels, is not a decision.
    assert_eq!(
        admit(p, "CREATE", AGENT_SA, &pending, None),
        Verdict::NotMatched
    );
    let mut relabeled = pending.clone();
    relabeled["metadata"]["labels"]["extra"] = json!("x");
    assert_eq!(
        admit(p, "UPDATE", AGENT_SA, &relabeled, Some(&pending)),
        Verdict::NotMatched
    );
    let approved = decided(pending.clone(), "Approve", "alice");
    let mut approved_relabeled = approved.clone();
    approved_relabeled["metadata"]["labels"]["extra"] = json!("x");
    assert_eq!(
        admit(
            p,
            "UPDATE",
            CONTROLLER,
            &approved_relabeled,
            Some(&approved)
        ),
        Verdict::NotMatched
    );
    // Setting it, changing it, or creating with one all match.
    assert_eq!(
        admit(p, "UPDATE", "alice", &approved, Some(&pending)),
        Verdict::Allowed
    );
    let changed = decided(pending.clone(), "Deny", "bob");
    assert_eq!(
        admit(p, "UPDATE", "bob", &changed, Some(&approved)),
        Verdict::Allowed
    );
    denied_with(
        admit(p, "UPDATE", "alice", &changed, Some(&approved)),
        "decidedBy",
    );
    denied_with(
        admit(
            p,
            "CREATE",
            AGENT_SA,
            &decided(pending, "Approve", AGENT_SA),
            None,
        ),
        "cannot decide",
    );
}

#[test]
fn decided_by_must_be_the_caller() {
    let p = &load("default")["decision"];
    let pending = request();
    assert_eq!(
        admit(
            p,
            "UPDATE",
            "alice",
            &decided(pending.clone(), "Deny", "alice"),
            Some(&pending)
        ),
        Verdict::Allowed
    );
    denied_with(
        admit(
            p,
            "UPDATE",
            "alice",
            &decided(pending.clone(), "Approve", "bob"),
            Some(&pending),
        ),
        "spec.decision.decidedBy must be your username alice",
    );
    denied_with(
        admit(
            p,
            "UPDATE",
            "alice",
            &decided(pending.clone(), "Approve", ""),
            Some(&pending),
        ),
        "decidedBy",
    );
}

#[test]
fn requester_and_service_accounts_cannot_decide_by_default() {
    let p = &load("default")["decision"];
    let pending = request();
    denied_with(
        admit(
            p,
            "UPDATE",
            AGENT_SA,
            &decided(pending.clone(), "Approve", AGENT_SA),
            Some(&pending),
        ),
        "the identity that requested a tool call cannot decide it",
    );
    denied_with(
        admit(
            p,
            "UPDATE",
            OTHER_SA,
            &decided(pending.clone(), "Approve", OTHER_SA),
            Some(&pending),
        ),
        "ServiceAccounts cannot decide",
    );
    // A person who requested the call cannot decide it either.
    let mut own = pending.clone();
    own["spec"]["requestedBy"] = json!("alice");
    denied_with(
        admit(
            p,
            "UPDATE",
            "alice",
            &decided(own.clone(), "Approve", "alice"),
            Some(&own),
        ),
        "cannot decide",
    );
}

#[test]
fn requester_and_service_accounts_may_decide_when_configured() {
    let p = &load("permissive")["decision"];
    let pending = request();
    assert_eq!(
        admit(
            p,
            "UPDATE",
            AGENT_SA,
            &decided(pending.clone(), "Approve", AGENT_SA),
            Some(&pending)
        ),
        Verdict::Allowed
    );
    assert_eq!(
        admit(
            p,
            "UPDATE",
            OTHER_SA,
            &decided(pending.clone(), "Deny", OTHER_SA),
            Some(&pending)
        ),
        Verdict::Allowed
    );
    // decidedBy still has to be the caller.
    denied_with(
        admit(
            p,
            "UPDATE",
            AGENT_SA,
            &decided(pending.clone(), "Approve", "alice"),
            Some(&pending),
        ),
        "decidedBy",
    );
}

// ------------------------------------------------------------------ quorum

/// A pending request needing two approvals, approved so far by `approvers`.
fn quorum(approvers: &[&str]) -> Value {
    let mut object = request();
    object["spec"]["requiredApprovals"] = json!(2);
    if !approvers.is_empty() {
        object["spec"]["approvals"] = approvers
            .iter()
            .map(|by| json!({"approvedBy": by, "reason": "ok"}))
            .collect();
    }
    object
}

#[test]
fn the_quorum_policy_checks_rbac_through_the_authorizer() {
    for variant in ["default", "permissive"] {
        let p = &load(variant)["quorum"];
        assert_eq!(p.authorizer, vec![AUTHORIZER_CHECK.to_owned()]);
    }
}

#[test]
fn the_quorum_policy_applies_only_when_approvals_are_added() {
    let p = &load("default")["quorum"];
    let pending = quorum(&[]);
    assert_eq!(
        admit(p, "CREATE", AGENT_SA, &pending, None),
        Verdict::NotMatched
    );
    let one = quorum(&["alice"]);
    let mut relabeled = one.clone();
    relabeled["metadata"]["labels"]["extra"] = json!("x");
    assert_eq!(
        admit(p, "UPDATE", CONTROLLER, &relabeled, Some(&one)),
        Verdict::NotMatched
    );
    // A Deny on a request with approvals adds none.
    assert_eq!(
        admit(
            p,
            "UPDATE",
            "carol",
            &decided(one.clone(), "Deny", "carol"),
            Some(&one)
        ),
        Verdict::NotMatched
    );
}

#[test]
fn each_person_adds_their_own_approval_one_at_a_time() {
    let p = &load("default")["quorum"];
    assert_eq!(
        admit(
            p,
            "UPDATE",
            "alice",
            &quorum(&["alice"]),
            Some(&quorum(&[]))
        ),
        Verdict::Allowed
    );
    // Others' earlier approvals are not the caller's to vouch for, and need not be.
    assert_eq!(
        admit(
            p,
            "UPDATE",
            "bob",
            &quorum(&["alice", "bob"]),
            Some(&quorum(&["alice"]))
        ),
        Verdict::Allowed
    );
    denied_with(
        admit(p, "UPDATE", "alice", &quorum(&["bob"]), Some(&quorum(&[]))),
        "each new entry of spec.approvals must have approvedBy your username alice",
    );
    // Two at once: someone else's among them, and more than one.
    let verdict = admit(
        p,
        "UPDATE",
        "alice",
        &quorum(&["alice", "mallory"]),
        Some(&quorum(&[])),
    );
    denied_with(verdict, "add one approval per write");
    // Approvals with the request: the requester's, refused (the CRD refuses any).
    denied_with(
        admit(p, "CREATE", AGENT_SA, &quorum(&[AGENT_SA]), None),
        "the identity that requested a tool call cannot approve it",
    );
    denied_with(
        admit(p, "CREATE", AGENT_SA, &quorum(&["alice"]), None),
        "approvedBy your username",
    );
}

#[test]
fn requester_and_service_accounts_cannot_approve_by_default() {
    let p = &load("default")["quorum"];
    let pending = quorum(&[]);
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &quorum(&[AGENT_SA]), Some(&pending)),
        "the identity that requested a tool call cannot approve it",
    );
    denied_with(
        admit(p, "UPDATE", OTHER_SA, &quorum(&[OTHER_SA]), Some(&pending)),
        "ServiceAccounts cannot approve ApprovalRequests",
    );
    let permissive = &load("permissive")["quorum"];
    assert_eq!(
        admit(
            permissive,
            "UPDATE",
            OTHER_SA,
            &quorum(&[OTHER_SA]),
            Some(&pending)
        ),
        Verdict::Allowed
    );
    denied_with(
        admit(
            permissive,
            "UPDATE",
            OTHER_SA,
            &quorum(&["alice"]),
            Some(&pending),
        ),
        "approvedBy your username",
    );
}

#[test]
fn the_final_approve_is_by_one_of_the_approvers() {
    let p = &load("default")["decision"];
    let one = quorum(&["alice"]);
    // The approval completing the quorum and the decision in one write.
    assert_eq!(
        admit(
            p,
            "UPDATE",
            "bob",
            &decided(quorum(&["alice", "bob"]), "Approve", "bob"),
            Some(&one)
        ),
        Verdict::Allowed
    );
    // Recorded later by an approver who is in the list.
    let both = quorum(&["alice", "bob"]);
    assert_eq!(
        admit(
            p,
            "UPDATE",
            "alice",
            &decided(both.clone(), "Approve", "alice"),
            Some(&both)
        ),
        Verdict::Allowed
    );
    denied_with(
        admit(
            p,
            "UPDATE",
            "carol",
            &decided(both.clone(), "Approve", "carol"),
            Some(&both),
        ),
        "needs your own approval in spec.approvals",
    );
    // Anyone with the verb may deny; a request needing one approval is decided as before.
    assert_eq!(
        admit(
            p,
            "UPDATE",
            "carol",
            &decided(one.clone(), "Deny", "carol"),
            Some(&one)
        ),
        Verdict::Allowed
    );
    assert_eq!(
        admit(
            p,
            "UPDATE",
            "carol",
            &decided(request(), "Approve", "carol"),
            Some(&request())
        ),
        Verdict::Allowed
    );
}

// ------------------------------------------------------------------ status subresource

fn approved_with_status() -> Value {
    with_status(
        decided(request(), "Approve", "alice"),
        json!({
            "phase": "Approved",
            "decidedAt": "2026-11-22T00:30:00Z",
            "conditions": [{"type": "Decided", "status": "True", "reason": "Approved",
                            "message": "approved by alice",
                            "lastTransitionTime": "2026-11-22T00:30:00Z"}],
            "message": "approved by alice"
        }),
    )
}

fn consumed(mut object: Value) -> Value {
    object["status"]["consumedAt"] = json!("2026-11-22T00:31:00Z");
    object["status"]["consumedBy"] = json!("helper-7d9f-abcde");
    object["status"]["phase"] = json!("Executed");
    object
}

#[test]
fn requester_may_record_consumption() {
    let p = &load("default")["status"];
    let old = approved_with_status();
    assert_eq!(
        admit(p, "UPDATE", AGENT_SA, &consumed(old.clone()), Some(&old)),
        Verdict::Allowed
    );
    // Before the controller wrote any status.
    let bare = decided(request(), "Approve", "alice");
    let first = with_status(
        bare.clone(),
        json!({"consumedAt": "2026-11-22T00:31:00Z", "consumedBy": "pod", "phase": "Executed"}),
    );
    assert_eq!(
        admit(p, "UPDATE", AGENT_SA, &first, Some(&bare)),
        Verdict::Allowed
    );
    // What the gate writes when the controller has not recorded the decision yet.
    let gate = with_status(
        bare.clone(),
        json!({"phase": "Executed", "consumedAt": "2026-11-22T00:31:00Z", "consumedBy": "pod",
               "decidedAt": "2026-11-22T00:31:00Z",
               "message": "Approved call forwarded by pod"}),
    );
    assert_eq!(
        admit(p, "UPDATE", AGENT_SA, &gate, Some(&bare)),
        Verdict::Allowed
    );
    let mut with_message = consumed(old.clone());
    with_message["status"]["message"] = json!("Approved call forwarded by pod");
    assert_eq!(
        admit(p, "UPDATE", AGENT_SA, &with_message, Some(&old)),
        Verdict::Allowed
    );
    // consumedAt alone, phase left to the controller.
    let mut only_time = old.clone();
    only_time["status"]["consumedAt"] = json!("2026-11-22T00:31:00Z");
    assert_eq!(
        admit(p, "UPDATE", AGENT_SA, &only_time, Some(&old)),
        Verdict::Allowed
    );
}

#[test]
fn requester_may_not_write_controller_fields() {
    let p = &load("default")["status"];
    let old = approved_with_status();

    let mut phase = old.clone();
    phase["status"]["phase"] = json!("Denied");
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &phase, Some(&old)),
        "status.phase may only be set to Executed",
    );

    let mut executed_unconsumed = old.clone();
    executed_unconsumed["status"]["phase"] = json!("Executed");
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &executed_unconsumed, Some(&old)),
        "together with status.consumedAt",
    );

    let mut removed = old.clone();
    removed["status"].as_object_mut().unwrap().remove("phase");
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &removed, Some(&old)),
        "status.phase",
    );

    let mut set_pending = decided(request(), "Approve", "alice");
    let bare = set_pending.clone();
    set_pending["status"] = json!({"phase": "Approved"});
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &set_pending, Some(&bare)),
        "status.phase",
    );

    let mut conditions = consumed(old.clone());
    conditions["status"]["conditions"][0]["status"] = json!("False");
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &conditions, Some(&old)),
        "status.conditions",
    );

    let mut decided_at = consumed(old.clone());
    decided_at["status"]
        .as_object_mut()
        .unwrap()
        .remove("decidedAt");
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &decided_at, Some(&old)),
        "status.decidedAt",
    );

    let mut moved = consumed(old.clone());
    moved["status"]["decidedAt"] = json!("2026-11-22T00:00:01Z");
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &moved, Some(&old)),
        "status.decidedAt",
    );

    let bare = decided(request(), "Approve", "alice");
    let added = with_status(
        bare.clone(),
        json!({"conditions": [{"type": "Decided", "status": "True", "reason": "Approved",
                               "message": "m", "lastTransitionTime": "2026-11-22T00:30:00Z"}]}),
    );
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &added, Some(&bare)),
        "status.conditions",
    );

    // Delivery records are the controller's: the agent cannot forge or erase one (to have a
    // message sent again, or never).
    let record = json!([{"notifier": "oncall", "event": "created", "attempts": 1,
                          "deliveredAt": "2026-11-22T00:00:02Z"}]);
    let mut forged = consumed(old.clone());
    forged["status"]["notifications"] = record.clone();
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &forged, Some(&old)),
        "status.notifications",
    );
    let mut notified = old.clone();
    notified["status"]["notifications"] = record;
    let mut erased = consumed(notified.clone());
    erased["status"]
        .as_object_mut()
        .unwrap()
        .remove("notifications");
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &erased, Some(&notified)),
        "status.notifications",
    );
    assert_eq!(
        admit(
            p,
            "UPDATE",
            AGENT_SA,
            &consumed(notified.clone()),
            Some(&notified)
        ),
        Verdict::Allowed,
        "consuming leaves the records as they are"
    );
}

#[test]
fn only_the_requester_may_consume() {
    let p = &load("default")["status"];
    let old = approved_with_status();
    denied_with(
        admit(p, "UPDATE", OTHER_SA, &consumed(old.clone()), Some(&old)),
        "only the agent that requested the tool call",
    );
    denied_with(
        admit(p, "UPDATE", "alice", &consumed(old.clone()), Some(&old)),
        "only the agent",
    );
}

#[test]
fn status_owners_are_exempt() {
    let old = approved_with_status();
    let mut rewritten = old.clone();
    rewritten["status"] = json!({"phase": "Expired", "message": "expired before a decision"});
    let default = &load("default")["status"];
    assert_eq!(
        admit(default, "UPDATE", CONTROLLER, &rewritten, Some(&old)),
        Verdict::NotMatched
    );
    denied_with(
        admit(default, "UPDATE", "ops-admin", &rewritten, Some(&old)),
        "only the agent",
    );
    let permissive = &load("permissive")["status"];
    assert_eq!(
        admit(permissive, "UPDATE", "ops-admin", &rewritten, Some(&old)),
        Verdict::NotMatched
    );
    assert_eq!(
        admit(permissive, "UPDATE", CONTROLLER, &rewritten, Some(&old)),
        Verdict::NotMatched
    );
}

/// Every status field of the CRD is either one the requester may write or one a status-policy
/// expression constrains: a new field must be classified, or this fails.
#[test]
fn status_policy_covers_every_status_field() {
    let crd = serde_json::to_value(ApprovalRequest::crd()).unwrap();
    let fields: BTreeSet<String> = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        ["properties"]["status"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    // editedArgumentsSha256: the gate writes it with consumedAt; the CRD keeps it write-once.
    let writable = [
        "consumedAt",
        "consumedBy",
        "message",
        "editedArgumentsSha256",
    ];
    let policy = &load("default")["status"];
    let constrained: BTreeSet<String> = fields
        .iter()
        .filter(|f| {
            let needle = format!("object.status.{f}");
            policy
                .validations
                .iter()
                .any(|v| v.expression.contains(&needle))
        })
        .cloned()
        .collect();
    for field in &fields {
        assert!(
            writable.contains(&field.as_str()) || constrained.contains(field),
            "status field {field} is neither writable by agents nor constrained by the status policy"
        );
    }
    assert_eq!(
        constrained,
        [
            "conditions",
            "consumedAt",
            "decidedAt",
            "escalations",
            "notifications",
            "phase",
            "tier"
        ]
        .map(String::from)
        .into()
    );
}

// ------------------------------------------------------------------ shared gates (ToolGate)

/// `object` as a shared gate's: its agentRef the ToolGate `shared`, and, for a request, made
/// by `caller`.
fn of_toolgate(mut object: Value, caller: Option<&str>) -> Value {
    object["spec"]["agentRef"] = json!({"name": "shared", "kind": "ToolGate"});
    if let Some(caller) = caller {
        object["spec"]["caller"] =
            json!({"username": caller, "groups": ["system:serviceaccounts"]});
    }
    object
}

/// What `expression` evaluates to (a string) on `object` for `username`. kube-cel's `object`
/// has no `metadata.namespace` (as in CRD rules), so the request's namespace stands in for it.
fn string_of(expression: &str, object: &Value, username: &str) -> String {
    let expression = &expression.replace("object.metadata.namespace", "request.namespace");
    let evaluator = VapEvaluator::builder()
        .object(object.clone())
        .request(AdmissionRequest {
            operation: "UPDATE".into(),
            username: username.into(),
            namespace: "team-a".into(),
            ..Default::default()
        })
        .build();
    let results = evaluator.evaluate(&[VapExpression {
        expression: format!("({expression}) == ''"),
        message: None,
        message_expression: Some(expression.to_owned()),
    }]);
    let message = results[0].message.clone().unwrap();
    assert_no_error(expression, Some(&message));
    message
}

#[test]
fn approving_checks_the_verb_on_the_kind_the_agent_ref_names() {
    let gate_check = AUTHORIZER_CHECK.replace("check('approve')", "check('gate')");
    for (policy, check, says) in [
        (
            "decision",
            AUTHORIZER_CHECK.to_owned(),
            "may not decide: it needs the RBAC verb approve on",
        ),
        (
            "quorum",
            AUTHORIZER_CHECK.to_owned(),
            "may not approve: it needs the RBAC verb approve on",
        ),
        (
            "grant",
            AUTHORIZER_CHECK.to_owned(),
            "may not grant: it needs the RBAC verb approve on",
        ),
        ("grant-status", gate_check, "(the verb gate on"),
    ] {
        let p = &load("default")[policy];
        assert_eq!(p.authorizer, std::slice::from_ref(&check), "{policy}");
        assert!(check.contains(&format!(".resource(({RESOURCE}))")));
        Program::compile(&check).unwrap();
        let object = if policy.starts_with("grant") {
            grant("alice", "2026-11-24T11:00:00Z")
        } else {
            request()
        };
        let [message] = &p.authorizer_messages[..] else {
            panic!("{policy}: one messageExpression");
        };
        let agent = string_of(message, &object, "bob");
        assert!(
            agent.contains(&format!("{says} agents.kagent.dev/helper")),
            "{agent}"
        );
        let shared = string_of(message, &of_toolgate(object, None), "bob");
        assert!(
            shared.contains(&format!("{says} toolgates.kagent.dev/shared")),
            "{shared}"
        );
    }
    // The kind decides the resource: Agent when unset.
    let resource = |object: &Value| string_of(RESOURCE, object, "bob");
    assert_eq!(resource(&request()), "agents");
    let mut explicit = request();
    explicit["spec"]["agentRef"]["kind"] = json!("Agent");
    assert_eq!(resource(&explicit), "agents");
    assert_eq!(
        resource(&of_toolgate(request(), Some(OTHER_SA))),
        "toolgates"
    );
}

#[test]
fn the_caller_never_decides_or_approves_its_own_call() {
    // Even where the requester and ServiceAccounts may decide (permissive).
    for variant in ["default", "permissive"] {
        let policies = load(variant);
        for caller in [OTHER_SA, "bob"] {
            let pending = of_toolgate(request(), Some(caller));
            denied_with(
                admit(
                    &policies["decision"],
                    "UPDATE",
                    caller,
                    &decided(pending.clone(), "Approve", caller),
                    Some(&pending),
                ),
                "the caller of a tool call (spec.caller) cannot decide it",
            );
            let mut approving = pending.clone();
            approving["spec"]["requiredApprovals"] = json!(2);
            approving["spec"]["approvals"] = json!([{"approvedBy": caller}]);
            denied_with(
                admit(
                    &policies["quorum"],
                    "UPDATE",
                    caller,
                    &approving,
                    Some(&pending),
                ),
                "the caller of a tool call (spec.caller) cannot approve it",
            );
        }
        // Someone else decides it as before.
        let pending = of_toolgate(request(), Some("bob"));
        assert_eq!(
            admit(
                &policies["decision"],
                "UPDATE",
                "alice",
                &decided(pending.clone(), "Deny", "alice"),
                Some(&pending),
            ),
            Verdict::Allowed,
            "{variant}"
        );
    }
}

#[test]
fn a_caller_never_grants_its_own_calls() {
    let p = &load("default")["grant"];
    let mut g = of_toolgate(grant("bob", "2026-11-24T11:00:00Z"), None);
    g["spec"]["caller"] = json!("bob");
    denied_with(
        admit(p, "CREATE", "bob", &g, None),
        "cannot be given by that caller",
    );
    g["spec"]["grantedBy"] = json!("alice");
    assert_eq!(admit(p, "CREATE", "alice", &g, None), Verdict::Allowed);
}

// ------------------------------------------------------------------ grants (CREATE)

/// A grant alice gives, as the apiserver sees it at admission (creationTimestamp already set).
fn grant(granted_by: &str, expires_at: &str) -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "ApprovalGrant",
        "metadata": {"name": "helper-delete-file-x", "namespace": "team-a",
                     "creationTimestamp": "2026-11-24T10:00:00Z"},
        "spec": {
            "agentRef": {"name": "helper"},
            "toolServer": {"kind": "RemoteMCPServer", "name": "fs", "namespace": "team-a"},
            "toolName": "delete_file",
            "expiresAt": expires_at,
            "reason": "cleanup",
            "grantedBy": granted_by
        }
    })
}

#[test]
fn the_grant_policy_checks_rbac_through_the_authorizer() {
    let p = &load("default")["grant"];
    assert_eq!(p.authorizer, [AUTHORIZER_CHECK]);
    Program::compile(AUTHORIZER_CHECK).unwrap();
    assert!(p.match_conditions.is_empty());
}

#[test]
fn a_person_grants_in_their_own_name_within_the_longest_lifetime() {
    let p = &load("default")["grant"];
    let in_an_hour = "2026-11-24T11:00:00Z";
    assert_eq!(
        admit(p, "CREATE", "alice", &grant("alice", in_an_hour), None),
        Verdict::Allowed
    );
    // Exactly the longest lifetime is allowed; a second more is not.
    assert_eq!(
        admit(
            p,
            "CREATE",
            "alice",
            &grant("alice", "2026-11-25T10:00:00Z"),
            None
        ),
        Verdict::Allowed
    );
    denied_with(
        admit(
            p,
            "CREATE",
            "alice",
            &grant("alice", "2026-11-25T10:00:01Z"),
            None,
        ),
        "at most 24h after the grant's creation",
    );
    denied_with(
        admit(
            p,
            "CREATE",
            "alice",
            &grant("alice", "2026-11-24T10:00:00Z"),
            None,
        ),
        "must lie in the future",
    );
    // A forged grantedBy.
    denied_with(
        admit(p, "CREATE", "mallory", &grant("alice", in_an_hour), None),
        "spec.grantedBy must be your username mallory",
    );
    // A ServiceAccount, the agent's own among them, even in its own name.
    for sa in [AGENT_SA, OTHER_SA] {
        denied_with(
            admit(p, "CREATE", sa, &grant(sa, in_an_hour), None),
            "ServiceAccounts (agents among them) cannot grant",
        );
    }
}

/// A grant's status after `uses` uses.
fn used_grant(uses: Option<i64>) -> Value {
    let mut g = grant("alice", "2026-11-24T11:00:00Z");
    if let Some(uses) = uses {
        g["status"] =
            json!({"uses": uses, "lastUsedAt": "2026-11-24T10:30:00Z", "lastUsedBy": "r"});
    }
    g
}

#[test]
fn only_the_gate_of_the_grants_own_agent_records_its_uses() {
    let p = &load("default")["grant-status"];
    // The authorizer check (evaluated by the apiserver; kube-cel has no authorizer): the verb
    // `gate` on the grant's own Agent, which only that Agent's gate Role holds.
    assert_eq!(
        p.authorizer,
        [AUTHORIZER_CHECK.replace("check('approve')", "check('gate')")]
    );
    Program::compile(&p.authorizer[0]).unwrap();
    // The controller is exempt; everyone else is held to one use per write.
    assert_eq!(
        admit(
            p,
            "UPDATE",
            CONTROLLER,
            &used_grant(Some(0)),
            Some(&used_grant(Some(3)))
        ),
        Verdict::NotMatched
    );
    for (old, new) in [(None, Some(1)), (Some(1), Some(2))] {
        assert_eq!(
            admit(
                p,
                "UPDATE",
                AGENT_SA,
                &used_grant(new),
                Some(&used_grant(old))
            ),
            Verdict::Allowed,
            "{old:?} -> {new:?}"
        );
    }
    for (old, new) in [
        (None, Some(2)),
        (Some(1), Some(3)),
        (Some(1), Some(1)),
        (Some(1), None),
    ] {
        denied_with(
            admit(
                p,
                "UPDATE",
                AGENT_SA,
                &used_grant(new),
                Some(&used_grant(old)),
            ),
            "status.uses rises by exactly 1",
        );
    }
}

// ---- Deadlines that escalate (issue 60) ----

/// A pending request whose tier 1 is group `oncall` and tier 2 user `boss`, at `tier`.
fn escalating(tier: Option<i64>) -> Value {
    let mut r = request();
    r["spec"]["escalation"] = json!({"steps": [
        {"tier": 1, "at": "2026-11-22T00:10:00Z", "approvers": {"groups": ["oncall"]}},
        {"tier": 2, "at": "2026-11-22T00:30:00Z", "approvers": {"users": ["boss"]}}
    ]});
    if let Some(tier) = tier {
        r["status"] = json!({"phase": "Pending", "tier": tier});
    }
    r
}

#[test]
fn a_tier_approver_decides_only_from_their_tier_on() {
    let p = &load("default")["decision"];
    for tier in [None, Some(0), Some(1)] {
        let pending = escalating(tier);
        let approved = decided(pending.clone(), "Approve", "boss");
        denied_with(
            admit(p, "UPDATE", "boss", &approved, Some(&pending)),
            &format!(
                "boss may decide only from escalation tier 2 on (spec.escalation), which begins at 2026-11-22T00:30:00Z; the request is at tier {}",
                tier.unwrap_or(0)
            ),
        );
    }
    let pending = escalating(Some(2));
    let approved = decided(pending.clone(), "Approve", "boss");
    assert_eq!(
        admit(p, "UPDATE", "boss", &approved, Some(&pending)),
        Verdict::Allowed
    );
    // A group's member: from tier 1 on.
    let pending = escalating(None);
    let denied = decided(pending.clone(), "Deny", "carol");
    denied_with(
        admit_in_groups(p, "UPDATE", "carol", &["oncall"], &denied, Some(&pending)),
        "carol may decide only from escalation tier 1 on",
    );
    let pending = escalating(Some(1));
    let denied = decided(pending.clone(), "Deny", "carol");
    assert_eq!(
        admit_in_groups(p, "UPDATE", "carol", &["oncall"], &denied, Some(&pending)),
        Verdict::Allowed
    );
}

#[test]
fn people_in_no_step_keep_their_right_at_every_tier() {
    let p = &load("default")["decision"];
    for tier in [None, Some(1), Some(2)] {
        let pending = escalating(tier);
        let approved = decided(pending.clone(), "Approve", "alice");
        assert_eq!(
            admit_in_groups(p, "UPDATE", "alice", &["team"], &approved, Some(&pending)),
            Verdict::Allowed,
            "tier {tier:?}"
        );
    }
}

#[test]
fn a_tier_approver_adds_an_approval_only_from_their_tier_on() {
    let p = &load("default")["quorum"];
    let mut pending = escalating(Some(1));
    pending["spec"]["requiredApprovals"] = json!(2);
    let mut approving = pending.clone();
    approving["spec"]["approvals"] = json!([{"approvedBy": "boss"}]);
    denied_with(
        admit(p, "UPDATE", "boss", &approving, Some(&pending)),
        "boss may approve only from escalation tier 2 on",
    );
    pending["status"]["tier"] = json!(2);
    approving["status"]["tier"] = json!(2);
    assert_eq!(
        admit(p, "UPDATE", "boss", &approving, Some(&pending)),
        Verdict::Allowed
    );
}

#[test]
fn the_requester_cannot_write_the_tier_or_its_records() {
    let p = &load("default")["status"];
    let old = escalating(Some(1));
    let mut raised = old.clone();
    raised["status"]["tier"] = json!(2);
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &raised, Some(&old)),
        "status.tier is the controller's",
    );
    let mut removed = old.clone();
    removed["status"].as_object_mut().unwrap().remove("tier");
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &removed, Some(&old)),
        "status.tier is the controller's",
    );
    let mut records = old.clone();
    records["status"]["escalations"] =
        json!([{"tier": 1, "at": "2026-11-22T00:10:00Z", "by": "forged"}]);
    denied_with(
        admit(p, "UPDATE", AGENT_SA, &records, Some(&old)),
        "status.escalations are the controller's",
    );
}
