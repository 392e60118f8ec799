//! The operator's outgoing HTTP clients: tool discovery, notifier messages and replies to Slack.
//! Their requests carry credentials (a RemoteMCPServer's `headersFrom` headers, a webhook URL),
//! so every client sends a request only to the origin it was made for: it ignores
//! `HTTP_PROXY`/`HTTPS_PROXY`, and follows a redirect only within the origin (scheme, host,
//! port) of the first request, at most [`MAX_REDIRECTS`] times; a redirect to another origin is
//! an error ([`RedirectRefused`]) and nothing is sent there. reqwest's own policy would follow
//! it, dropping only `Authorization`, `Cookie` and `Proxy-Authorization` on the way.
//!
//! Notifiers, whose URL anyone who may create a Secret and an ApprovalNotifier chooses, get a
//! client that also refuses some destinations ([`destination`]). The gate has its own HTTP
//! stack with the same redirect rule (`gate::upstream`).

pub mod destination;

use std::borrow::Cow;

use reqwest::Url;
use reqwest::redirect::{Action, Attempt, Policy};

/// The most redirects one request follows (reqwest's default, and the gate's).
pub const MAX_REDIRECTS: usize = 10;

/// A redirect the operator's clients do not follow.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RedirectRefused {
    /// The redirect leads out of the first request's origin.
    #[error(
        "redirected to another origin (from {from} to {to}); only redirects within the origin \
         of the request are followed, since it may carry credentials"
    )]
    OtherOrigin {
        /// The origin of the first request, such as `https://mcp.example.com`.
        from: String,
        /// The origin the redirect leads to (from the answer's `Location`).
        to: String,
    },
    /// More than [`MAX_REDIRECTS`] redirects in a row.
    #[error("redirected more than {MAX_REDIRECTS} times")]
    TooMany,
}

/// The client for tool discovery and Slack replies: no proxy, redirects only within the
/// origin of the first request.
pub fn client() -> reqwest::Client {
    builder()
        .build()
        .expect("a reqwest client with a TLS provider installed builds")
}

/// [`client`]'s settings, for clients that add their own.
fn builder() -> reqwest::ClientBuilder {
    // reqwest is built without a default TLS provider and panics unless one is installed.
    crate::tls::install_provider();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(Policy::custom(within_origin))
}

/// The redirect policy of [`client`].
fn within_origin(attempt: Attempt) -> Action {
    // reqwest lists every URL requested so far, the first request's first.
    let from = attempt.previous().first().map(Url::origin);
    let to = attempt.url().origin();
    if from.as_ref() != Some(&to) {
        let refused = RedirectRefused::OtherOrigin {
            from: from.map(|o| o.ascii_serialization()).unwrap_or_default(),
            to: to.ascii_serialization(),
        };
        return attempt.error(refused);
    }
    if attempt.previous().len() > MAX_REDIRECTS {
        return attempt.error(RedirectRefused::TooMany);
    }
    attempt.follow()
}

/// `url`, written on an object of `namespace` (a tool server's, a notifier's Secret), as that
/// namespace's pods reach it. A host of one DNS label (`http://filesystem-mcp:3000/mcp`) names
/// a Service of the namespace, which the pods' DNS search path finds and the controller's (in
/// its own namespace) would not, or would find in the operator's namespace: it becomes
/// `<host>.<namespace>.svc`. Any other URL (dotted names, IP addresses, `localhost`) is used
/// as written.
pub fn as_namespace_pods_reach<'a>(url: &'a str, namespace: &str) -> Cow<'a, str> {
    let Ok(mut parsed) = Url::parse(url) else {
        return Cow::Borrowed(url);
    };
    let Some(host) = parsed.domain() else {
        return Cow::Borrowed(url);
    };
    if namespace.is_empty() || host.contains('.') || host.eq_ignore_ascii_case("localhost") {
        return Cow::Borrowed(url);
    }
    let qualified = format!("{host}.{namespace}.svc");
    match parsed.set_host(Some(&qualified)) {
        Ok(()) => Cow::Owned(parsed.into()),
        Err(_) => Cow::Borrowed(url),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::extract::Path;
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::any;

    use super::*;

    #[test]
    fn a_one_label_host_is_a_service_of_the_objects_namespace() {
        for (written, reached) in [
            (
                "http://filesystem-mcp:3000/mcp",
                "http://filesystem-mcp.team-a.svc:3000/mcp",
            ),
            ("https://FS/mcp?x=1", "https://fs.team-a.svc/mcp?x=1"),
            ("http://fs.tools:3000/mcp", "http://fs.tools:3000/mcp"),
            (
                "http://fs.team-a.svc.cluster.local/mcp",
                "http://fs.team-a.svc.cluster.local/mcp",
            ),
            ("http://fs./mcp", "http://fs./mcp"),
            ("http://localhost:3000/mcp", "http://localhost:3000/mcp"),
            ("http://10.96.0.12:3000/mcp", "http://10.96.0.12:3000/mcp"),
            ("http://[fd00::1]:3000/mcp", "http://[fd00::1]:3000/mcp"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(
                as_namespace_pods_reach(written, "team-a"),
                reached,
                "{written}"
            );
        }
        assert_eq!(
            as_namespace_pods_reach("http://fs:3000/mcp", ""),
            "http://fs:3000/mcp"
        );
    }

    /// What a test server received: `(path, X-Api-Key)` of each request.
    type Seen = Arc<Mutex<Vec<(String, String)>>>;

    /// A server on loopback that records each request and answers `/go/N` with a 307 to
    /// `target` + `/go/N-1` (`/go/0`: to `target` + `/end`), anything else with 200.
    async fn server(target: Option<String>) -> (String, Seen) {
        let seen = Seen::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let target = target.unwrap_or_else(|| origin.clone());
        let app = Router::new()
            .route(
                "/go/{n}",
                any({
                    let seen = seen.clone();
                    move |Path(n): Path<u32>, headers: HeaderMap| async move {
                        seen.lock()
                            .unwrap()
                            .push((format!("/go/{n}"), api_key(&headers)));
                        let next = match n {
                            0 => format!("{target}/end"),
                            n => format!("{target}/go/{}", n - 1),
                        };
                        (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, next)])
                    }
                }),
            )
            .fallback({
                let seen = seen.clone();
                move |uri: axum::http::Uri, headers: HeaderMap| async move {
                    seen.lock()
                        .unwrap()
                        .push((uri.path().to_owned(), api_key(&headers)));
                    "reached".into_response()
                }
            });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (origin, seen)
    }

    fn api_key(headers: &HeaderMap) -> String {
        headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// The innermost cause of `error`: the policy's own error for a refused redirect.
    fn innermost(error: &reqwest::Error) -> String {
        let mut cause: &dyn std::error::Error = error;
        while let Some(source) = cause.source() {
            cause = source;
        }
        cause.to_string()
    }

    #[tokio::test]
    async fn a_redirect_to_another_origin_sends_nothing_there() {
        let (other, reached) = server(None).await;
        let (origin, seen) = server(Some(other.clone())).await;
        let error = client()
            .post(format!("{origin}/go/0"))
            .header("x-api-key", "k-123")
            .body("{}")
            .send()
            .await
            .unwrap_err();
        assert!(error.is_redirect(), "{error:?}");
        assert_eq!(
            innermost(&error),
            RedirectRefused::OtherOrigin {
                from: origin.clone(),
                to: other.clone()
            }
            .to_string()
        );
        assert!(innermost(&error).starts_with(&format!(
            "redirected to another origin (from {origin} to {other})"
        )));
        assert_eq!(*seen.lock().unwrap(), [("/go/0".into(), "k-123".into())]);
        assert!(
            reached.lock().unwrap().is_empty(),
            "the other origin got no request, so no X-Api-Key"
        );
    }

    #[tokio::test]
    async fn redirects_within_the_origin_are_followed_with_the_request_headers() {
        let (origin, seen) = server(None).await;
        let response = client()
            .post(format!("{origin}/go/{}", MAX_REDIRECTS - 1))
            .header("x-api-key", "k-123")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.text().await.unwrap(), "reached");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), MAX_REDIRECTS + 1, "{seen:?}");
        assert_eq!(
            seen.last().unwrap(),
            &("/end".to_owned(), "k-123".to_owned())
        );
        assert!(seen.iter().all(|(_, key)| key == "k-123"), "{seen:?}");
    }

    #[tokio::test]
    async fn more_redirects_than_the_limit_are_an_error() {
        let (origin, seen) = server(None).await;
        let error = client()
            .get(format!("{origin}/go/{MAX_REDIRECTS}"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(innermost(&error), "redirected more than 10 times");
        assert_eq!(seen.lock().unwrap().len(), MAX_REDIRECTS + 1);
    }
}
