//! A [`kube::Client`] against a script: the exact requests expected, in order, each with its
//! answer. A request out of script (method, path and query, and the body or `Content-Type`
//! when the script names them), an extra one or a missing one fails the test.

use std::future::Future;

use http::{Method, StatusCode};
use kube::Client;
use serde_json::{Value, json};

use crate::mock::{self, ApiMock, Call};

/// One request the client is expected to make, and the answer it gets.
pub struct Exchange {
    method: Method,
    path: String,
    body: Option<Value>,
    content_type: Option<&'static str>,
    status: u16,
    response: Value,
}

/// Expects `method path` (path with query) and answers 200 with `response`.
pub fn expect(method: Method, path: &str, response: Value) -> Exchange {
    Exchange {
        method,
        path: path.to_string(),
        body: None,
        content_type: None,
        status: 200,
        response,
    }
}

/// Expects `GET path` and answers 404.
pub fn not_found(path: &str) -> Exchange {
    failure(Method::GET, path, StatusCode::NOT_FOUND)
}

/// Expects `method path` and answers with the error `status` (a `Status` naming its reason).
pub fn failure(method: Method, path: &str, status: StatusCode) -> Exchange {
    let reason = status
        .canonical_reason()
        .unwrap_or_default()
        .replace(' ', "");
    expect(
        method,
        path,
        crate::status(status.as_u16(), &reason, "refused"),
    )
    .status(status.as_u16())
}

/// Expects a create (`POST path`) and answers 409 AlreadyExists.
pub fn already_exists(path: &str) -> Exchange {
    let mut exchange = failure(Method::POST, path, StatusCode::CONFLICT);
    exchange.response["reason"] = json!("AlreadyExists");
    exchange
}

impl Exchange {
    /// Also expects this JSON body (`Null`: no body).
    pub fn body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }

    /// Also expects this `Content-Type`.
    pub fn content_type(mut self, content_type: &'static str) -> Self {
        self.content_type = Some(content_type);
        self
    }

    /// Answers with `status` instead of 200.
    pub fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Checks that `call` is this exchange (request `index` of the script), answers it, and
    /// returns what was made.
    fn answer(self, call: Call, index: usize, before: &[Recorded]) -> Recorded {
        let (method, uri) = (&call.method, call.uri.as_str());
        assert_eq!(
            (method, uri),
            (&self.method, self.path.as_str()),
            "request {index} out of script; body: {:#}\nafter: {before:#?}",
            call.body
        );
        if let Some(expected) = self.content_type {
            assert_eq!(
                call.headers["content-type"], expected,
                "Content-Type of request {index}"
            );
        }
        if let Some(expected) = &self.body {
            assert_eq!(&call.body, expected, "body of request {index}");
        }
        call.reply.respond(self.status, &self.response);
        Recorded {
            method: call.method,
            body: call.body,
        }
    }
}

/// A request the client made.
#[derive(Debug)]
pub struct Recorded {
    /// HTTP method.
    pub method: Method,
    /// JSON body, `Null` if none.
    pub body: Value,
}

impl Recorded {
    /// Whether this request changes something in the cluster.
    pub fn is_write(&self) -> bool {
        self.method != Method::GET
    }
}

/// Runs `work` with a client (namespace `default`) whose apiserver must receive exactly
/// `script`, in order, before `work` ends. Returns `work`'s output and the requests made.
pub async fn run_script<F, T>(
    script: Vec<Exchange>,
    work: impl FnOnce(Client) -> F,
) -> (T, Vec<Recorded>)
where
    F: Future<Output = T>,
{
    let (client, mut api) = mock::pair("default");
    let work = work(client);
    tokio::pin!(work);
    let mut script = script.into_iter();
    let mut recorded = Vec::new();
    loop {
        tokio::select! {
            output = &mut work => {
                let left: Vec<String> = script.map(|e| format!("{} {}", e.method, e.path)).collect();
                assert!(left.is_empty(), "requests expected but not made: {left:#?}\nmade: {recorded:#?}");
                return (output, recorded);
            }
            call = api.next() => {
                let Some(exchange) = script.next() else {
                    panic!("unexpected request {} {}\nbody: {:#}\nafter: {recorded:#?}", call.method, call.uri, call.body);
                };
                let made = exchange.answer(call, recorded.len(), &recorded);
                recorded.push(made);
            }
        }
    }
}

/// A client (namespace `default`) whose apiserver answers `script` in order, and the task
/// checking it: it fails when a request is out of script or missing, or when one more comes
/// before every client is dropped. Await the task after dropping the clients.
pub fn spawn_script(script: Vec<Exchange>) -> (Client, tokio::task::JoinHandle<Vec<Recorded>>) {
    let (client, api) = mock::pair("default");
    (client, tokio::spawn(serve(script, api)))
}

async fn serve(script: Vec<Exchange>, mut api: ApiMock) -> Vec<Recorded> {
    let mut recorded = Vec::new();
    for (index, exchange) in script.into_iter().enumerate() {
        let call = api
            .try_next()
            .await
            .unwrap_or_else(|| panic!("request {index} never came"));
        let made = exchange.answer(call, index, &recorded);
        recorded.push(made);
    }
    if let Some(call) = api.try_next().await {
        panic!(
            "an unexpected extra request was sent: {} {}",
            call.method, call.uri
        );
    }
    recorded
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(client: Client, path: &str) -> Result<Value, kube::Error> {
        let request = http::Request::get(path).body(Vec::new()).unwrap();
        client.request::<Value>(request).await
    }

    #[tokio::test]
    async fn a_scripted_request_gets_its_answer_and_is_recorded() {
        let (answer, made) = run_script(
            vec![expect(Method::GET, "/api/v1/namespaces", json!({"a": 1})).body(Value::Null)],
            |client| get(client, "/api/v1/namespaces"),
        )
        .await;
        assert_eq!(answer.unwrap(), json!({"a": 1}));
        assert_eq!(made.len(), 1);
        assert!(!made[0].is_write());
    }

    #[tokio::test]
    #[should_panic(expected = "requests expected but not made")]
    async fn a_request_never_made_fails_the_test() {
        run_script(vec![not_found("/api/v1/namespaces/a")], |_| async {}).await;
    }

    #[tokio::test]
    #[should_panic(expected = "out of script")]
    async fn a_request_out_of_script_fails_the_test() {
        let _ = run_script(vec![not_found("/api/v1/namespaces/a")], |client| {
            get(client, "/api/v1/namespaces/b")
        })
        .await;
    }
}
