//! The CRD's guarantees for edit-then-approve (`spec.edit`, `spec.editApprovals`,
//! `status.editedArgumentsSha256`), checked offline with the apiserver's CEL (kube-cel): every
//! way to set one at creation, remove, null, replace or rewind it is refused.

use hitl_operator::validate::Schemas;
use serde_json::{Value, json};

const SHA: &str = "0b52e1b2c7c7b7d5f5d0a3c2e0b1a4f6c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4";
const EDITED_SHA: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const PATCH: &str = r#"[{"op":"replace","path":"/path","value":"/tmp/b"}]"#;

fn errors(object: &Value, old: Option<&Value>) -> Vec<String> {
    match Schemas::shared().validate(object, old) {
        Ok(()) => Vec::new(),
        Err(invalid) => invalid.lines(),
    }
}

/// Refused, with a line holding `expected`.
fn refused(object: &Value, old: Option<&Value>, expected: &str) {
    let found = errors(object, old);
    assert!(
        found.iter().any(|line| line.contains(expected)),
        "expected {expected:?} among {found:#?}"
    );
}

fn accepted(object: &Value, old: Option<&Value>) {
    assert_eq!(errors(object, old), Vec::<String>::new());
}

fn request() -> Value {
    json!({
        "apiVersion": "kagent.dev/v1alpha2",
        "kind": "ApprovalRequest",
        "metadata": {"name": "r1", "namespace": "default"},
        "spec": {
            "agentRef": {"name": "file-agent"},
            "toolServer": {"kind": "RemoteMCPServer", "name": "filesystem-server", "namespace": "default"},
            "toolName": "delete_file",
            "argumentsPreview": {"path": "/data/report.csv"},
            "argumentsSha256": SHA,
            "argumentsBytes": 29,
            "requestedBy": "system:serviceaccount:default:file-agent",
            "expiresAt": "2026-11-22T01:00:00Z"
        },
        "status": {"phase": "Pending"}
    })
}

fn set(mut object: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    object.pointer_mut(parent).unwrap()[key] = value;
    object
}

fn unset(mut object: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    object
        .pointer_mut(parent)
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove(key);
    object
}

fn edit_by(by: &str) -> Value {
    json!({"patch": PATCH, "editedBy": by, "reason": "narrower"})
}

/// `object` edited by alice, with the approvals of the edited call by `approvers`.
fn edited(object: Value, approvers: &[&str]) -> Value {
    let object = set(object, "/spec/edit", edit_by("alice"));
    if approvers.is_empty() {
        return object;
    }
    let approvals: Vec<Value> = approvers
        .iter()
        .map(|by| json!({"approvedBy": by, "reason": "ok"}))
        .collect();
    set(object, "/spec/editApprovals", json!(approvals))
}

fn approve(object: Value, by: &str) -> Value {
    set(
        object,
        "/spec/decision",
        json!({"type": "Approve", "decidedBy": by}),
    )
}

fn quorum(object: Value, approvers: &[&str]) -> Value {
    let object = set(object, "/spec/requiredApprovals", json!(2));
    if approvers.is_empty() {
        return object;
    }
    let approvals: Vec<Value> = approvers
        .iter()
        .map(|by| json!({"approvedBy": by, "reason": "ok"}))
        .collect();
    set(object, "/spec/approvals", json!(approvals))
}

#[test]
fn an_edit_with_the_editors_approval_and_decision_is_accepted() {
    let old = request();
    accepted(&approve(edited(request(), &["alice"]), "alice"), Some(&old));
    // The edit alone first, the approval and decision later.
    let alone = edited(request(), &[]);
    accepted(&alone, Some(&old));
    accepted(
        &approve(edited(request(), &["alice"]), "alice"),
        Some(&alone),
    );
}

#[test]
fn no_edit_at_creation() {
    refused(
        &edited(request(), &[]),
        None,
        "spec.edit cannot be set when the request is created",
    );
    refused(
        &set(
            request(),
            "/spec/editApprovals",
            json!([{"approvedBy": "bob"}]),
        ),
        None,
        "spec.editApprovals cannot be set when the request is created",
    );
}

#[test]
fn the_edit_is_write_once() {
    let old = edited(request(), &[]);
    const ONCE: &str = "spec.edit is write-once";
    // Removed, nulled, replaced (by another editor, another patch, another reason).
    refused(&unset(old.clone(), "/spec/edit"), Some(&old), ONCE);
    refused(
        &set(old.clone(), "/spec/edit", Value::Null),
        Some(&old),
        ONCE,
    );
    refused(
        &set(old.clone(), "/spec/edit", edit_by("mallory")),
        Some(&old),
        ONCE,
    );
    refused(
        &set(old.clone(), "/spec/edit/patch", json!("[]")),
        Some(&old),
        ONCE,
    );
    refused(&unset(old.clone(), "/spec/edit/reason"), Some(&old), ONCE);
}

#[test]
fn no_edit_after_the_decision_nor_on_a_grant() {
    let decided = approve(request(), "bob");
    refused(
        &set(decided.clone(), "/spec/edit", edit_by("alice")),
        Some(&decided),
        "spec.edit cannot be added once spec.decision is set",
    );
    let granted = set(
        request(),
        "/spec/grant",
        json!({"name": "g", "grantedBy": "bob"}),
    );
    refused(
        &set(granted.clone(), "/spec/edit", edit_by("alice")),
        Some(&granted),
        "a request decided by a grant (spec.grant) takes no edit",
    );
}

#[test]
fn the_quorum_starts_again_on_the_edit() {
    // Bob and Carol approved the original; Alice edits it: their approvals do not count.
    let original = quorum(request(), &["bob", "carol"]);
    let old = edited(original.clone(), &["alice"]);
    accepted(&old, Some(&original));
    const NEEDS: &str =
        "an Approve decision on an edited request (spec.edit) needs spec.requiredApprovals";
    refused(&approve(old.clone(), "alice"), Some(&old), NEEDS);
    refused(&approve(old.clone(), "bob"), Some(&old), NEEDS);
    // Bob approves the edited call: two approvals of it, his decision counts.
    let both = edited(original.clone(), &["alice", "bob"]);
    accepted(&approve(both.clone(), "bob"), Some(&old));
    // Even needing one approval, the edited call's approver must be in editApprovals.
    let one = edited(request(), &[]);
    refused(&approve(one.clone(), "bob"), Some(&one), NEEDS);
    refused(
        &set(
            request(),
            "/spec/editApprovals",
            json!([{"approvedBy": "bob"}]),
        ),
        Some(&request()),
        "spec.editApprovals needs spec.edit",
    );
}

#[test]
fn edit_approvals_are_append_only_and_close_with_the_decision() {
    let old = edited(request(), &["alice", "bob"]);
    const APPEND: &str = "spec.editApprovals is append-only";
    refused(&edited(request(), &["alice"]), Some(&old), APPEND);
    refused(
        &unset(old.clone(), "/spec/editApprovals"),
        Some(&old),
        APPEND,
    );
    // A null: the apiserver drops it (then: removed); offline CEL cannot evaluate the rule on
    // it. Refused either way.
    assert!(
        !errors(
            &set(old.clone(), "/spec/editApprovals", Value::Null),
            Some(&old)
        )
        .is_empty()
    );
    refused(&edited(request(), &["alice", "carol"]), Some(&old), APPEND);
    let decided = approve(old.clone(), "bob");
    refused(
        &approve(edited(request(), &["alice", "bob", "carol"]), "bob"),
        Some(&decided),
        "spec.editApprovals cannot change once spec.decision is set",
    );
}

#[test]
fn the_edited_binding_is_written_once_with_the_consumption() {
    let approved = approve(edited(request(), &["alice"]), "alice");
    let consumed = set(
        approved.clone(),
        "/status",
        json!({"phase": "Executed", "consumedAt": "2026-11-22T00:10:00Z", "consumedBy": "gate-0",
               "editedArgumentsSha256": EDITED_SHA}),
    );
    accepted(&consumed, Some(&approved));
    const ONCE: &str = "status.editedArgumentsSha256 is write-once";
    refused(
        &unset(consumed.clone(), "/status/editedArgumentsSha256"),
        Some(&consumed),
        ONCE,
    );
    refused(
        &set(
            consumed.clone(),
            "/status/editedArgumentsSha256",
            Value::Null,
        ),
        Some(&consumed),
        ONCE,
    );
    refused(
        &set(
            consumed.clone(),
            "/status/editedArgumentsSha256",
            json!(SHA),
        ),
        Some(&consumed),
        ONCE,
    );
    refused(&unset(consumed.clone(), "/status"), Some(&consumed), ONCE);
    // Not without the consumption, nor on a request without an edit.
    refused(
        &set(
            approved.clone(),
            "/status",
            json!({"editedArgumentsSha256": EDITED_SHA}),
        ),
        Some(&approved),
        "status.editedArgumentsSha256 may only be set on an edited request, with status.consumedAt",
    );
    let plain = approve(request(), "alice");
    refused(
        &set(
            plain.clone(),
            "/status",
            json!({"phase": "Executed", "consumedAt": "2026-11-22T00:10:00Z", "editedArgumentsSha256": EDITED_SHA}),
        ),
        Some(&plain),
        "status.editedArgumentsSha256 may only be set on an edited request",
    );
    refused(
        &set(
            consumed.clone(),
            "/status/editedArgumentsSha256",
            json!("xyz"),
        ),
        Some(&approved),
        "editedArgumentsSha256",
    );
}
