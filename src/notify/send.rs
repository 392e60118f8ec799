//! Sending one message: an HTTP POST with a bounded time, where only a 2xx answer counts.
//!
//! A failure is described by its class only (`HTTP 500 Internal Server Error`, `connection
//! refused`, `refused: 169.254.169.254 is link-local …`): the description lands in the
//! request's `status.notifications[].lastError`, which the agent can read, so it never holds a
//! byte of the answer (its body is never read), nor of the URL beyond its host (a credential).

use std::error::Error as _;
use std::time::Duration;

use serde_json::Value;

use super::message::CLOUD_EVENT_CONTENT_TYPE;
use crate::api::approval_notifier::ChannelType;
use crate::egress::RedirectRefused;
use crate::egress::destination::{Refusal, RestrictedClient};

/// Longest time one attempt may take.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// POSTs `body` to `url` as `channel` wants it. `Err` says why the attempt failed, in words
/// fit for `status.notifications[].lastError`.
pub async fn post(
    http: &RestrictedClient,
    channel: ChannelType,
    url: &str,
    body: &Value,
) -> Result<(), String> {
    let content_type = match channel {
        ChannelType::Webhook => CLOUD_EVENT_CONTENT_TYPE,
        ChannelType::Slack => "application/json",
    };
    let url = reqwest::Url::parse(url).map_err(|e| format!("invalid URL: {e}"))?;
    let response = http
        .post(url)
        .map_err(|refusal| refusal.to_string())?
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .body(body.to_string())
        .timeout(ATTEMPT_TIMEOUT)
        .send()
        .await
        .map_err(|e| describe(&e))?;
    match response.status() {
        status if status.is_success() => Ok(()),
        status => Err(format!("HTTP {status}")),
    }
}

/// The class of a failed request: what the operator's own checks refused, a timeout, the
/// kind of an I/O error (`connection refused`), a TLS failure (whose details may quote the
/// peer's certificate) or an HTTP protocol error.
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return format!("no answer within {}s", ATTEMPT_TIMEOUT.as_secs());
    }
    let mut cause = error.source();
    while let Some(current) = cause {
        if let Some(refusal) = current.downcast_ref::<Refusal>() {
            return refusal.to_string();
        }
        if let Some(refused) = current.downcast_ref::<RedirectRefused>() {
            // The other origin comes from the answer's Location: not repeated.
            return match refused {
                RedirectRefused::OtherOrigin { from, .. } => format!(
                    "redirected to another origin (from {from}); notifiers follow redirects \
                     only within the origin of their URL"
                ),
                RedirectRefused::TooMany => refused.to_string(),
            };
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return describe_io(io);
        }
        if let Some(http) = current.downcast_ref::<hyper::Error>()
            && http.source().is_none()
        {
            return http.to_string();
        }
        cause = current.source();
    }
    "the request failed".into()
}

/// The kind of an I/O error, or that it is a TLS failure (an I/O error wrapping, perhaps in
/// another I/O error, a rustls error).
fn describe_io(error: &std::io::Error) -> String {
    match error.get_ref() {
        Some(inner) if inner.is::<rustls::Error>() => "TLS handshake failed".into(),
        Some(inner) => match inner.downcast_ref::<std::io::Error>() {
            Some(io) => describe_io(io),
            None => error.kind().to_string(),
        },
        None => error.kind().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::routing::post as route_post;
    use serde_json::json;

    use super::*;
    use crate::egress::destination::Destinations;

    /// What a receiver got: `(path, content type, body)` of each request.
    type Got = Arc<Mutex<Vec<(String, String, String)>>>;

    /// A receiver on 127.0.0.1: `/hook` answers `status` with `answer` as its body, `/moved` a
    /// 307 to `location`.
    async fn receiver(status: StatusCode, answer: &'static str, location: String) -> (String, Got) {
        let got = Got::default();
        let record = |got: &Got, path: &str, headers: &HeaderMap, body: String| {
            let kind = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            got.lock()
                .unwrap()
                .push((path.to_owned(), kind.to_owned(), body));
        };
        let app = Router::new()
            .route(
                "/hook",
                route_post({
                    let got = got.clone();
                    move |headers: HeaderMap, body: String| async move {
                        record(&got, "/hook", &headers, body);
                        (status, answer)
                    }
                }),
            )
            .route(
                "/moved",
                route_post({
                    let got = got.clone();
                    move |headers: HeaderMap, body: String| async move {
                        record(&got, "/moved", &headers, body);
                        (
                            StatusCode::TEMPORARY_REDIRECT,
                            [(header::LOCATION, location)],
                        )
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (origin, got)
    }

    /// The notifiers' client with loopback allowed, as the tests' receivers need.
    fn loopback_allowed() -> RestrictedClient {
        RestrictedClient::new(Destinations::new(vec!["127.0.0.0/8".parse().unwrap()]))
    }

    fn message() -> Value {
        json!({"id": "request-uid/created"})
    }

    #[tokio::test]
    async fn an_error_answer_is_recorded_by_its_status_alone() {
        const SECRET: &str = "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        let (origin, got) =
            receiver(StatusCode::INTERNAL_SERVER_ERROR, SECRET, String::new()).await;
        let error = post(
            &loopback_allowed(),
            ChannelType::Webhook,
            &format!("{origin}/hook"),
            &message(),
        )
        .await
        .unwrap_err();
        assert_eq!(error, "HTTP 500 Internal Server Error");
        assert_eq!(got.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_redirect_to_another_origin_is_refused_and_the_other_origin_gets_nothing() {
        let (other, reached) = receiver(StatusCode::OK, "", String::new()).await;
        let (origin, got) = receiver(StatusCode::OK, "", format!("{other}/hook")).await;
        let error = post(
            &loopback_allowed(),
            ChannelType::Webhook,
            &format!("{origin}/moved"),
            &message(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            error,
            format!(
                "redirected to another origin (from {origin}); notifiers follow redirects only \
                 within the origin of their URL"
            )
        );
        assert!(
            !error.contains(&other),
            "the Location is part of the answer"
        );
        assert_eq!(got.lock().unwrap().len(), 1);
        assert!(
            reached.lock().unwrap().is_empty(),
            "nothing reached {other}"
        );
    }

    #[tokio::test]
    async fn a_redirect_within_the_origin_is_followed_with_the_message() {
        let (origin, got) = receiver(StatusCode::OK, "", "/hook".into()).await;
        post(
            &loopback_allowed(),
            ChannelType::Slack,
            &format!("{origin}/moved"),
            &message(),
        )
        .await
        .unwrap();
        let body = message().to_string();
        assert_eq!(
            *got.lock().unwrap(),
            [
                ("/moved".into(), "application/json".into(), body.clone()),
                ("/hook".into(), "application/json".into(), body),
            ]
        );
    }

    #[tokio::test]
    async fn loopback_is_refused_by_default_by_address_and_by_name() {
        let (origin, got) = receiver(StatusCode::OK, "", String::new()).await;
        let http = RestrictedClient::new(Destinations::default());
        let error = post(
            &http,
            ChannelType::Webhook,
            &format!("{origin}/hook"),
            &message(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            error,
            "refused: 127.0.0.1 is loopback (not in --notifier-allow-cidrs)"
        );
        let port = origin.rsplit(':').next().unwrap();
        let error = post(
            &http,
            ChannelType::Webhook,
            &format!("http://localhost:{port}/hook"),
            &message(),
        )
        .await
        .unwrap_err();
        assert!(
            error.starts_with("refused: localhost resolves to ")
                && error.ends_with(", which is loopback (not in --notifier-allow-cidrs)"),
            "{error}"
        );
        assert!(got.lock().unwrap().is_empty(), "nothing was sent");
    }

    #[tokio::test]
    async fn the_unspecified_address_is_refused_even_with_loopback_allowed() {
        let (origin, got) = receiver(StatusCode::OK, "", String::new()).await;
        let port = origin.rsplit(':').next().unwrap();
        let error = post(
            &loopback_allowed(),
            ChannelType::Webhook,
            &format!("http://0.0.0.0:{port}/hook"),
            &message(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            error,
            "refused: 0.0.0.0 is unspecified (not in --notifier-allow-cidrs)"
        );
        assert!(
            got.lock().unwrap().is_empty(),
            "Linux would have connected it to 127.0.0.1"
        );
    }

    #[tokio::test]
    async fn the_metadata_address_is_refused_before_any_connection() {
        let http = RestrictedClient::new(Destinations::default());
        for url in [
            "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
            "http://[::ffff:169.254.169.254]/computeMetadata/v1/",
        ] {
            let error = post(&http, ChannelType::Webhook, url, &message())
                .await
                .unwrap_err();
            assert!(error.starts_with("refused: "), "{url}: {error}");
            assert!(
                error.contains("169.254.169.254 is link-local"),
                "{url}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_says_so() {
        let error = post(
            &loopback_allowed(),
            ChannelType::Webhook,
            "https://no-such-host.invalid/hook",
            &message(),
        )
        .await
        .unwrap_err();
        assert!(
            error.starts_with("cannot resolve no-such-host.invalid: "),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_closed_port_is_a_refused_connection() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let error = post(
            &loopback_allowed(),
            ChannelType::Webhook,
            &format!("http://127.0.0.1:{port}/hook"),
            &message(),
        )
        .await
        .unwrap_err();
        assert_eq!(error, "connection refused");
    }

    #[tokio::test]
    async fn a_connection_closed_without_an_answer_says_so() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request).await;
        });
        let error = post(
            &loopback_allowed(),
            ChannelType::Webhook,
            &format!("http://{addr}/hook"),
            &message(),
        )
        .await
        .unwrap_err();
        assert_eq!(error, "connection closed before message completed");
    }

    #[tokio::test]
    async fn a_tls_failure_is_recorded_without_the_peers_words() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const SECRET: &str = "HTTP/1.1 200 OK\r\n\r\ninternal-token=s3cr3t";
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut hello = [0u8; 512];
            let _ = stream.read(&mut hello).await;
            let _ = stream.write_all(SECRET.as_bytes()).await;
        });
        let error = post(
            &loopback_allowed(),
            ChannelType::Webhook,
            &format!("https://{addr}/hook"),
            &message(),
        )
        .await
        .unwrap_err();
        assert_eq!(error, "TLS handshake failed");
    }
}
