//! "Edit & approve" in the inbox. The page sends the arguments as the approver edited them; the
//! inbox answers with the JSON Patch from the request's preview to them and the values it
//! changes, for the approver to review; only then does the page approve with that patch, which
//! is checked again before it is written. The checks are those of `kubectl hitl approve --edit`
//! ([`edits`]): the RBAC verb `edit`, the redacted values, the patch applying to the preview.
//! The gate checks the edit again on the full arguments, with the rule's `edits` and the tool's
//! input schema, before anything runs.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use kube::api::Api;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Shared, Target, written_form};
use crate::api::approval_request::ApprovalRequest;
use crate::cli::hitl::edits;
use crate::edit::{self, Change};
use crate::visible::visible;

/// Longest edited arguments text the page may send (a preview is far smaller).
const MAX_ARGUMENTS_TEXT: usize = 256 * 1024;

/// The arguments an approver edited, to review.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditForm {
    namespace: String,
    name: String,
    /// The edited arguments, JSON text.
    arguments: String,
}

/// What the page shows before the approver approves with an edit.
#[derive(Serialize)]
struct Review {
    /// The JSON Patch to approve with.
    patch: String,
    /// Each value it changes, with hidden characters written out.
    changes: Vec<Change>,
}

/// `POST /api/edits`: the patch and the changes of an edit, or `{"refusal": LINE}` naming the
/// request, the path and why it cannot be made (an answer, as a decision's refusal is).
pub(super) async fn review(
    State(shared): State<Shared>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form: EditForm = match written_form(&shared, &method, &headers, &body, "edit") {
        Ok(form) => form,
        Err(refusal) => return *refusal,
    };
    if form.arguments.len() > MAX_ARGUMENTS_TEXT {
        return (
            StatusCode::BAD_REQUEST,
            format!("the edited arguments are longer than {MAX_ARGUMENTS_TEXT} bytes"),
        )
            .into_response();
    }
    let target = Target {
        namespace: form.namespace,
        name: form.name,
    };
    match reviewed(&shared, &target, &form.arguments).await {
        Ok(review) => axum::Json(review).into_response(),
        Err(line) => axum::Json(serde_json::json!({ "refusal": line })).into_response(),
    }
}

async fn reviewed(shared: &Shared, target: &Target, arguments: &str) -> Result<Review, String> {
    let request = editable_request(shared, target).await?;
    let preview = editable_preview(shared, &request).await?;
    let edited: Value = serde_json::from_str(arguments)
        .map_err(|e| format!("the edited arguments are not JSON: {e}"))?;
    let original = Value::Object(preview.clone());
    let Some(patch) = edit::diff(&original, &edited) else {
        return Err("nothing was edited: approve it as it is, or change a value".into());
    };
    refusal_of(&patch, preview, &target.name)?;
    let parsed = edit::parse(&patch).map_err(|e| e.to_string())?;
    let changes = edit::changes(&original, &edited, &parsed)
        .into_iter()
        .map(|c| Change {
            path: visible(&c.path).into_owned(),
            before: c.before.map(|v| visible(&v).into_owned()),
            after: c.after.map(|v| visible(&v).into_owned()),
        })
        .collect();
    Ok(Review { patch, changes })
}

/// Checks `patch` on `target` again, as it is about to be written with an approval: `Ok` when
/// the caller may edit the call and the patch applies to its preview, else the line saying why.
pub(super) async fn recheck(shared: &Shared, target: &Target, patch: &str) -> Result<(), String> {
    let request = editable_request(shared, target).await?;
    let preview = editable_preview(shared, &request).await?;
    refusal_of(patch, preview, &target.name)
}

async fn editable_request(shared: &Shared, target: &Target) -> Result<ApprovalRequest, String> {
    if !shared.scope.covers(&target.namespace) {
        return Err(format!(
            "error: approvalrequest/{} is in namespace {}, outside this inbox ({})",
            target.name,
            target.namespace,
            shared.scope.describe()
        ));
    }
    let api: Api<ApprovalRequest> = Api::namespaced(shared.client.clone(), &target.namespace);
    match api.get_opt(&target.name).await {
        Ok(Some(request)) => Ok(request),
        Ok(None) => Err(format!(
            "error: approvalrequest/{} not found in namespace {}",
            target.name, target.namespace
        )),
        Err(e) => Err(format!("error: {e}")),
    }
}

async fn editable_preview<'r>(
    shared: &Shared,
    request: &'r ApprovalRequest,
) -> Result<&'r Map<String, Value>, String> {
    edits::editable(&shared.client, request)
        .await
        .map_err(|line| format!("error: {line}"))
}

fn refusal_of(patch: &str, preview: &Map<String, Value>, name: &str) -> Result<(), String> {
    edits::check(patch, preview)
        .map_err(|why| format!("error: approvalrequest/{name}: the edit cannot be made: {why}"))
}
