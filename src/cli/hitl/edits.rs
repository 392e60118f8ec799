//! `kubectl hitl approve --patch | --edit`: the edit a person makes with their approval,
//! checked on the request's preview before anything is written (docs/approvers.md, "Edit, then
//! approve"). The gate checks it again on the full arguments; this only catches mistakes early.

use std::process::Command;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::Value;

use super::ApproveArgs;
use super::error::CommandError;
use crate::api::approval_request::{ApprovalRequest, MAX_EDIT_PATCH_BYTES};
use crate::decide::EditAsked;
use crate::edit;

/// The edit `args` ask for on their one request, or the line saying why it cannot be made: the
/// request is missing or has no preview, the caller lacks the RBAC verb `edit` on its Agent or
/// ToolGate, or the patch does not parse, touches a redacted value other than whole, or does
/// not apply to the preview (each naming the path and the reason).
pub async fn asked(
    client: &Client,
    api: &Api<ApprovalRequest>,
    args: &ApproveArgs,
) -> Result<Result<EditAsked, String>, CommandError> {
    let [name] = args.targets.names.as_slice() else {
        return Ok(Err(
            "--patch and --edit approve one request at a time".into()
        ));
    };
    let Some(request) = api.get_opt(name).await? else {
        return Ok(Err(format!("approvalrequest/{name} not found")));
    };
    let preview = match editable(client, &request).await {
        Ok(preview) => preview,
        Err(line) => return Ok(Err(line)),
    };
    let patch = match &args.patch {
        Some(patch) => patch.clone(),
        None => match edited_in_editor(&Value::Object(preview.clone()))? {
            Ok(Some(patch)) => patch,
            Ok(None) => return Ok(Err("nothing was edited; nothing was written".into())),
            Err(line) => return Ok(Err(line)),
        },
    };
    Ok(check(&patch, preview)
        .map(|()| EditAsked { patch })
        .map_err(|why| format!("approvalrequest/{name}: the edit cannot be made: {why}")))
}

/// The preview of `request`'s call, which the caller may edit, or the line saying why they
/// cannot: it has no preview, or they lack the RBAC verb `edit` on its Agent or ToolGate.
pub async fn editable<'r>(
    client: &Client,
    request: &'r ApprovalRequest,
) -> Result<&'r serde_json::Map<String, Value>, String> {
    let name = kube::ResourceExt::name_any(request);
    let Some(preview) = request.spec.arguments_preview.as_deref() else {
        return Err(format!(
            "approvalrequest/{name} has no argumentsPreview to edit"
        ));
    };
    match missing_edit_right(client, request).await {
        Some(missing) => Err(format!(
            "approvalrequest/{name}: you may not edit its call: {missing}; nothing was written"
        )),
        None => Ok(preview),
    }
}

/// The RBAC permission to edit `request`'s calls the caller lacks, asked of the apiserver
/// (SelfSubjectAccessReview) before an editor opens: the verb `edit` on the request's Agent or
/// ToolGate, as the admission policy checks it. `None` when it is held, or when the apiserver
/// could not say (the admission policy still decides).
async fn missing_edit_right(client: &Client, request: &ApprovalRequest) -> Option<String> {
    let namespace = kube::ResourceExt::namespace(request).unwrap_or_default();
    let resource = request.spec.agent_ref.kind().plural();
    let agent = &request.spec.agent_ref.name;
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some("kagent.dev".into()),
                resource: Some(resource.into()),
                namespace: Some(namespace.clone()),
                name: Some(agent.clone()),
                verb: Some("edit".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &review).await {
        Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => None,
        Ok(_) => Some(format!(
            "the RBAC verb edit on {resource}/{agent} in namespace {namespace} is needed (docs/approvers.md, \"Edit, then approve\")"
        )),
        Err(e) => {
            tracing::debug!(error = %e, "cannot ask whether the edit is allowed; admission decides");
            None
        }
    }
}

/// Why `patch` cannot edit the call whose preview is `preview`, if it cannot. What the plugin
/// cannot know is checked by the gate only: the tool's listed input schema and the approval
/// rule's `edits` (docs/approvers.md, "Edit, then approve").
pub fn check(patch: &str, preview: &serde_json::Map<String, Value>) -> Result<(), String> {
    if patch.len() > MAX_EDIT_PATCH_BYTES {
        return Err(format!(
            "the patch is {} bytes; at most {MAX_EDIT_PATCH_BYTES} are allowed",
            patch.len()
        ));
    }
    let parsed = edit::parse(patch).map_err(|e| e.to_string())?;
    edit::check_redacted(&parsed, preview).map_err(|e| e.to_string())?;
    edit::apply(&Value::Object(preview.clone()), &parsed).map_err(|e| e.to_string())?;
    Ok(())
}

/// Opens `$VISUAL`, else `$EDITOR`, else `vi`, on `preview` as pretty JSON: the patch from it
/// to what was saved, `None` when nothing changed, or the line saying what went wrong.
fn edited_in_editor(preview: &Value) -> Result<Result<Option<String>, String>, CommandError> {
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let path = std::env::temp_dir().join(format!(
        "hitl-edit-{}-{:08x}.json",
        std::process::id(),
        getrandom::u32().unwrap_or_default()
    ));
    let text = serde_json::to_string_pretty(preview).expect("a JSON value serializes");
    std::fs::write(&path, format!("{text}\n"))?;
    // The editor may carry arguments (`code --wait`): split on whitespace, as git does.
    let mut words = editor.split_whitespace();
    let program = words.next().unwrap_or("vi");
    let status = Command::new(program).args(words).arg(&path).status();
    let saved = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            return Ok(Err(format!(
                "the editor {editor:?} could not be started: {e}"
            )));
        }
    };
    if !status.success() {
        return Ok(Err(format!(
            "the editor {editor:?} exited with {status}; nothing was written"
        )));
    }
    let edited: Value = match serde_json::from_str(&saved?) {
        Ok(edited) => edited,
        Err(e) => return Ok(Err(format!("the edited arguments are not JSON: {e}"))),
    };
    Ok(Ok(edit::diff(preview, &edited)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_name_the_path_and_the_reason() {
        let preview = json!({"path": "/tmp/a", "token": "[REDACTED]"});
        let preview = preview.as_object().unwrap();
        check(
            r#"[{"op":"replace","path":"/path","value":"/tmp/b"}]"#,
            preview,
        )
        .unwrap();
        check(
            r#"[{"op":"replace","path":"/token","value":"new"}]"#,
            preview,
        )
        .unwrap();
        assert_eq!(
            check(r#"[{"op":"copy","from":"/token","path":"/path"}]"#, preview).unwrap_err(),
            "at /token: a redacted value may not be copied elsewhere"
        );
        assert!(
            check(r#"[{"op":"remove","path":"/missing"}]"#, preview)
                .unwrap_err()
                .starts_with("at /missing: operation 1 (remove) cannot be applied")
        );
        assert!(
            check("not json", preview)
                .unwrap_err()
                .contains("not a JSON Patch")
        );
    }
}
