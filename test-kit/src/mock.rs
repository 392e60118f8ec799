//! A [`kube::Client`] whose apiserver is the test: [`pair`] gives the client and an [`ApiMock`]
//! that takes its requests one at a time ([`ApiMock::next`]) for the test to check and answer.

use futures::FutureExt;
use http::{HeaderMap, Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::Value;
use tower_test::mock;

/// A client whose default namespace is `namespace`, and the mock receiving its requests.
pub fn pair(namespace: &str) -> (Client, ApiMock) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, namespace), ApiMock(handle))
}

/// The apiserver side of [`pair`].
pub struct ApiMock(mock::Handle<Request<Body>, Response<Body>>);

impl ApiMock {
    /// The next request; fails the test if every client is gone first.
    pub async fn next(&mut self) -> Call {
        self.try_next().await.expect("a request")
    }

    /// The next request, or `None` once every client is dropped.
    pub async fn try_next(&mut self) -> Option<Call> {
        let (request, send) = self.0.next_request().await?;
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("request body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON request body")
        };
        Some(Call {
            method: parts.method,
            uri: parts.uri.to_string(),
            headers: parts.headers,
            body,
            reply: Reply(send),
        })
    }

    /// Whether no request is waiting right now (it does not wait for one).
    pub fn is_idle(&mut self) -> bool {
        self.0.next_request().now_or_never().is_none()
    }
}

/// A request the client sent, and the means to answer it.
pub struct Call {
    /// Its method.
    pub method: Method,
    /// Its path and query, e.g. `/api/v1/namespaces/ns/pods?&limit=5`.
    pub uri: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its JSON body; `Null` when it has none.
    pub body: Value,
    /// Where its answer goes.
    pub reply: Reply,
}

impl Call {
    /// (method, path and query, JSON body, reply), for destructuring.
    pub fn parts(self) -> (Method, String, Value, Reply) {
        (self.method, self.uri, self.body, self.reply)
    }
}

/// The answer channel of one [`Call`].
pub struct Reply(mock::SendResponse<Response<Body>>);

impl Reply {
    /// Answers with `code` and the JSON `body`.
    pub fn respond(self, code: u16, body: &Value) {
        self.bytes(code, serde_json::to_vec(body).unwrap());
    }

    /// Answers 200 with a watch stream of `events` (`(type, object)`), which then ends.
    pub fn watch(self, events: &[(&str, Value)]) {
        self.bytes(200, crate::watch_lines(events));
    }

    /// Answers with `code` and the raw `body`.
    pub fn bytes(self, code: u16, body: Vec<u8>) {
        self.0.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(body))
                .unwrap(),
        );
    }
}
