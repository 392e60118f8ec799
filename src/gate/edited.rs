//! An edited approval, judged by the gate before anything runs (docs/approvers.md, "Edit, then
//! approve"): the approver's patch ([`crate::edit`]) applied to the call's full arguments, and
//! refused if the approval rule that made the call wait forbids it (its `edits`), it touches a
//! redacted value other than whole, cannot apply, changes an argument the client mirrors in a
//! request header, leaves arguments the tool's listed input schema does not accept (or the
//! gate knows no usable schema for the tool), or makes a call the Agent's rules deny, that
//! needs more approvals than were given for it, or that a rule asks for whose `edits` forbid
//! it. What passes is the edited call: its binding hash, the message the gate forwards, and the
//! paths the approver changed.

use bytes::Bytes;
use json_patch::Patch;
use serde_json::Value;

use super::approval::GatedCall;
use super::hash;
use super::jsonrpc::ToolCall;
use super::policy::{PolicyCall, PolicyVerdict};
use super::upstream::Upstream;
use crate::api::approval_request::ApprovalRequest;
use crate::edit::{self, EditRefusal};

/// A call as the approver's edit made it.
#[derive(Clone, Debug)]
pub struct EditedCall {
    /// Binding hash of the edited arguments (`status.editedArgumentsSha256`).
    pub binding: String,
    /// The message the gate forwards: the client's, with the edited arguments.
    pub body: Bytes,
    /// The argument paths the edit changed.
    pub paths: Vec<String>,
}

/// Judges the edit of `request`, approved for `call` (held as `gated_call`, whose message as
/// the gate forwards it is `body`, in MCP session `session`) on `up`: the edited call, or why
/// it must not run.
pub async fn judge(
    up: &Upstream,
    call: &ToolCall,
    gated_call: &GatedCall,
    request: &ApprovalRequest,
    body: &Bytes,
    session: Option<&str>,
) -> Result<EditedCall, EditRefusal> {
    let Some(edit) = request.spec.edit.as_deref() else {
        return Err(refusal("the request carries no edit"));
    };
    let patch = edit::parse(&edit.patch)?;
    if let Some(rule) = request.spec.rule.as_deref() {
        check_rule(up, &call.name, rule, &patch)?;
    }
    edit::check_redacted(&patch, &gated_call.preview)?;
    let tree = call
        .arguments
        .tree()
        .await
        .map_err(|why| refusal(&format!("the arguments cannot be read to apply it: {why}")))?;
    let edited = edit::apply(tree.value(), &patch)?;
    if let Some(headers) = up.param_headers.of(&call.name) {
        for header in headers.iter() {
            let pointer = pointer(&header.path);
            if tree.value().pointer(&pointer) != edited.pointer(&pointer) {
                return Err(EditRefusal {
                    path: Some(pointer),
                    reason: format!(
                        "the client mirrors this argument in the request header {}; the gate does not rewrite headers, so it cannot be edited",
                        header.header
                    ),
                });
            }
        }
    }
    drop(tree);
    let schema = up.tool_definitions.input_schema(&call.name).ok_or_else(|| {
        refusal(
            "the tool's input schema is not known to the gate (no tools/list seen); edits are refused",
        )
    })?;
    let validator = schema
        .validator()
        .map_err(|why| refusal(&format!("{why}; edits are refused")))?;
    edit::check_schema(&validator, &edited, &gated_call.preview)?;
    let arguments = serde_json::to_vec(&edited).expect("a JSON value serializes");
    let body = with_arguments(body, call.arguments.json(), &arguments)?;
    match up.policy.decide(&PolicyCall {
        tool: &call.name,
        args: &edited,
        message_bytes: body.len(),
        session,
        annotations: up.tool_definitions.facts(&call.name),
    }) {
        PolicyVerdict::Deny { rule } => {
            return Err(refusal(&format!(
                "the Agent's approval rule '{rule}' denies the edited call"
            )));
        }
        PolicyVerdict::NotOffered => {
            return Err(refusal("the tool is not offered"));
        }
        PolicyVerdict::RequireApproval {
            rule,
            required_approvals,
            ..
        } => {
            if let Some(asking) = rule
                .as_deref()
                .filter(|r| Some(*r) != request.spec.rule.as_deref())
            {
                check_rule(up, &call.name, asking, &patch)?;
            }
            let given = request.approvers().len();
            if usize::try_from(required_approvals).unwrap_or(usize::MAX) > given {
                return Err(refusal(&format!(
                    "the edited call needs {required_approvals} approvals ({}), and {given} were given for it",
                    rule.map_or("requireApproval".to_owned(), |r| format!("rule '{r}'"))
                )));
            }
        }
        PolicyVerdict::Forward { .. } => {}
    }
    let binding = hash::digest(&up.shared.key, &edited)
        .map_err(|e| {
            refusal(&format!(
                "the edited arguments cannot be canonicalized: {e}"
            ))
        })?
        .binding;
    Ok(EditedCall {
        binding,
        body,
        paths: edit::changed_paths(&patch),
    })
}

/// Refuses the edit when the `edits` of the approval rule named `rule` about `tool` forbid it,
/// or when the gate has no such rule (it cannot tell what the rule allows).
fn check_rule(up: &Upstream, tool: &str, rule: &str, patch: &Patch) -> Result<(), EditRefusal> {
    match up.policy.rule_edits(tool, rule) {
        None => Err(refusal(&format!(
            "the approval rule '{rule}' is not among the gate's rules for tool '{tool}'; edits are refused"
        ))),
        Some(None) => Ok(()),
        Some(Some(edits)) => edit::check_rule(patch, rule, edits),
    }
}

/// A refusal of the edit as a whole.
fn refusal(reason: &str) -> EditRefusal {
    EditRefusal {
        path: None,
        reason: reason.to_owned(),
    }
}

/// The JSON pointer of a chain of object keys.
fn pointer(path: &[String]) -> String {
    path.iter()
        .map(|key| format!("/{}", key.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// `body`, the `tools/call` message the gate wrote, with its arguments (`written`, a slice of
/// it, or the gate's `{}` for absent ones) replaced by `arguments`: spliced in place, so the
/// rest of the message stays byte for byte; absent arguments are set in `params`.
fn with_arguments(body: &Bytes, written: &[u8], arguments: &[u8]) -> Result<Bytes, EditRefusal> {
    let base = body.as_ptr() as usize;
    let start = (written.as_ptr() as usize).wrapping_sub(base);
    if start <= body.len() && start + written.len() <= body.len() && !written.is_empty() {
        let mut out = Vec::with_capacity(body.len() - written.len() + arguments.len());
        out.extend_from_slice(&body[..start]);
        out.extend_from_slice(arguments);
        out.extend_from_slice(&body[start + written.len()..]);
        return Ok(Bytes::from(out));
    }
    let mut message: Value = serde_json::from_slice(body)
        .map_err(|e| refusal(&format!("the call's message cannot be rewritten: {e}")))?;
    let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
        return Err(refusal("the call's message has no params to rewrite"));
    };
    params.insert(
        "arguments".into(),
        serde_json::from_slice(arguments).expect("the gate's own JSON parses"),
    );
    Ok(Bytes::from(
        serde_json::to_vec(&message).expect("a JSON value serializes"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_spliced_into_the_message_as_written() {
        let body = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"a":1},"_meta":{"x":18446744073709551615}}}"#,
        );
        let start = body.windows(7).position(|w| w == br#"{"a":1}"#).unwrap();
        let written = &body[start..start + 7];
        let out = with_arguments(&body, written, br#"{"a":2,"b":"c"}"#).unwrap();
        assert_eq!(
            &out[..],
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"a":2,"b":"c"},"_meta":{"x":18446744073709551615}}}"#
        );
    }

    #[test]
    fn absent_arguments_are_set_in_params() {
        let body = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}"#,
        );
        let out = with_arguments(&body, b"{}", br#"{"a":2}"#).unwrap();
        let message: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(message["params"]["arguments"], serde_json::json!({"a": 2}));
        assert_eq!(message["params"]["name"], "t");
    }

    #[test]
    fn pointers_escape_keys() {
        assert_eq!(pointer(&["a/b".into(), "c~d".into()]), "/a~1b/c~0d");
    }
}
