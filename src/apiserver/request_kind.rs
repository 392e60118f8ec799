//! What a request to the apiserver is, named as kube-apiserver's own `apiserver_request_total`
//! names it: a verb (GET, LIST, WATCH, POST, PUT, PATCH, APPLY, DELETE) and a resource, with its
//! subresource. The controller counts its own requests by these
//! (`hitl_apiserver_requests_total`), so its share of the apiserver's work is its own figure,
//! not one inferred from counters every client adds to.

use http::header::CONTENT_TYPE;
use http::{Method, Request};

/// The verb and resource of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestKind {
    /// The apiserver's verb: a GET of a collection is a LIST (or a WATCH with `watch=true`),
    /// a PATCH with a server-side apply body an APPLY.
    pub verb: &'static str,
    /// The resource's plural, `/` and the subresource if any (`agents/status`); `other` for a
    /// path that names none (discovery, `/version`).
    pub resource: String,
}

impl RequestKind {
    /// The kind of `request`.
    pub fn of<B>(request: &Request<B>) -> Self {
        let path = request.uri().path();
        let query = request.uri().query().unwrap_or_default();
        let (resource, named) = resource_of(path);
        let verb = match *request.method() {
            Method::GET if query.split('&').any(|pair| pair == "watch=true") => "WATCH",
            Method::GET if !named => "LIST",
            Method::GET => "GET",
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::DELETE => "DELETE",
            Method::PATCH
                if request.headers().get(CONTENT_TYPE).is_some_and(|value| {
                    value.as_bytes().starts_with(b"application/apply-patch")
                }) =>
            {
                "APPLY"
            }
            Method::PATCH => "PATCH",
            _ => "OTHER",
        };
        Self { verb, resource }
    }
}

/// The resource (with its subresource) a path names, and whether it names one object.
fn resource_of(path: &str) -> (String, bool) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // Past `/api/<version>` or `/apis/<group>/<version>`.
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return ("other".into(), true),
    };
    // `namespaces/<ns>/<resource>...` is namespaced; `namespaces` and `namespaces/<name>`
    // (and `namespaces/<name>/<subresource>`, such as a Namespace's status) name Namespaces.
    let rest = match rest {
        ["namespaces", _namespace, resource, tail @ ..] if !is_namespace_subresource(resource) => {
            let mut rest = vec![*resource];
            rest.extend_from_slice(tail);
            rest
        }
        rest => rest.to_vec(),
    };
    match rest.as_slice() {
        [] => ("other".into(), true),
        [resource] => ((*resource).into(), false),
        [resource, _name] => ((*resource).into(), true),
        [resource, _name, subresource, ..] => (format!("{resource}/{subresource}"), true),
    }
}

/// The subresources of a Namespace itself.
fn is_namespace_subresource(segment: &str) -> bool {
    matches!(segment, "status" | "finalize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(method: Method, uri: &str, content_type: Option<&str>) -> (&'static str, String) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let kind = RequestKind::of(&request.body(()).unwrap());
        (kind.verb, kind.resource)
    }

    #[test]
    fn requests_are_named_as_the_apiserver_counts_them() {
        let apply = Some("application/apply-patch+yaml");
        let cases = [
            (
                kind(
                    Method::GET,
                    "/apis/apps/v1/namespaces/a/deployments/x",
                    None,
                ),
                ("GET", "deployments"),
            ),
            (
                kind(Method::GET, "/api/v1/namespaces/a/secrets?&limit=100", None),
                ("LIST", "secrets"),
            ),
            (
                kind(
                    Method::GET,
                    "/api/v1/secrets?&watch=true&resourceVersion=5",
                    None,
                ),
                ("WATCH", "secrets"),
            ),
            (
                kind(
                    Method::PATCH,
                    "/apis/kagent.dev/v1alpha2/namespaces/a/agents/x/status?&force=true",
                    apply,
                ),
                ("APPLY", "agents/status"),
            ),
            (
                kind(
                    Method::PATCH,
                    "/api/v1/namespaces/a/services/x",
                    Some("application/merge-patch+json"),
                ),
                ("PATCH", "services"),
            ),
            (
                kind(
                    Method::POST,
                    "/apis/events.k8s.io/v1/namespaces/a/events?",
                    None,
                ),
                ("POST", "events"),
            ),
            (
                kind(
                    Method::DELETE,
                    "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles/x",
                    None,
                ),
                ("DELETE", "roles"),
            ),
            (
                kind(Method::GET, "/api/v1/namespaces/a", None),
                ("GET", "namespaces"),
            ),
            (
                kind(Method::GET, "/api/v1/namespaces?&watch=true", None),
                ("WATCH", "namespaces"),
            ),
            (
                kind(Method::PUT, "/api/v1/namespaces/a/status", None),
                ("PUT", "namespaces/status"),
            ),
            (
                kind(
                    Method::POST,
                    "/apis/authentication.k8s.io/v1/tokenreviews",
                    None,
                ),
                ("POST", "tokenreviews"),
            ),
            (kind(Method::GET, "/version", None), ("GET", "other")),
        ];
        for (got, (verb, resource)) in cases {
            assert_eq!(got, (verb, resource.to_string()));
        }
    }
}
