//! `kubectl hitl ui`: a web inbox on 127.0.0.1 for the ApprovalRequests the user can see,
//! acting with the user's own kubeconfig identity. No credentials of its own and no session
//! store: the page gets a live list (a watch, relayed as server-sent events) and sends
//! decisions, which are written exactly as `kubectl hitl approve|deny` writes them, so RBAC and
//! the admission policies judge them the same way. [`guard`] says what a request must show;
//! [`edit`] is "Edit & approve".

pub mod edit;
pub mod guard;
pub mod rows;

use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use jiff::Timestamp;
use kube::Client;
use kube::api::Api;
use kube::runtime::{reflector, watcher};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use self::guard::{Access, Guard};
use crate::api::approval_request::{ApprovalRequest, DecisionType};
use crate::apiserver::backoff::BackoffWhileFailing;
use crate::apiserver::paging::paged;
use crate::decide::{self, Outcome};

/// Most requests one decision may name (a batch is one agent's pending requests).
pub const MAX_BATCH: usize = 100;
/// Longest reason, as the CRD allows.
const MAX_REASON: usize = 1024;
/// How often the list is sent again without a change, so phases that follow from the clock
/// (expiry) are told even when nothing is written.
const REFRESH: Duration = Duration::from_secs(15);

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/inbox.js");
const STYLE: &str = include_str!("assets/inbox.css");
const ICON: &str = include_str!("assets/icon.svg");

/// Which requests the inbox shows and may decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One namespace.
    Namespace(String),
    /// Every namespace (needs list and watch cluster-wide).
    All,
}

impl Scope {
    fn api(&self, client: Client) -> Api<ApprovalRequest> {
        match self {
            Self::Namespace(ns) => Api::namespaced(client, ns),
            Self::All => Api::all(client),
        }
    }

    fn covers(&self, namespace: &str) -> bool {
        match self {
            Self::Namespace(ns) => ns == namespace,
            Self::All => true,
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Namespace(ns) => format!("namespace {ns}"),
            Self::All => "all namespaces".to_owned(),
        }
    }
}

/// What the page receives on every change: who acts, where, and the rows.
#[derive(Serialize)]
struct Snapshot<'a> {
    user: &'a str,
    scope: &'a str,
    rows: Vec<rows::Row>,
    /// Why the list may be stale (the watch failed and is retried).
    error: Option<String>,
}

/// A decision the page asks for.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionForm {
    decision: DecisionType,
    #[serde(default)]
    reason: Option<String>,
    requests: Vec<Target>,
    /// An edit to approve with (the JSON Patch the inbox reviewed): one request, Approve only.
    #[serde(default)]
    patch: Option<String>,
}

/// One request a decision names.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Target {
    namespace: String,
    name: String,
}

/// What happened to one named request.
#[derive(Serialize)]
struct DecisionResult {
    namespace: String,
    name: String,
    ok: bool,
    message: String,
}

#[derive(Clone)]
struct Shared {
    guard: Arc<Guard>,
    client: Client,
    scope: Arc<Scope>,
    user: Arc<str>,
    snapshots: watch::Receiver<Arc<str>>,
}

/// A bound inbox, ready to serve.
pub struct Inbox {
    listener: tokio::net::TcpListener,
    router: Router,
    watch: tokio::task::JoinHandle<()>,
    /// The address to open, with the token in the fragment (never sent to any server).
    pub url: String,
}

impl Inbox {
    /// Binds 127.0.0.1:`port` (0: any free port) and starts watching `scope` as `user` (the
    /// caller's username, which becomes `decidedBy`).
    pub async fn bind(
        client: Client,
        scope: Scope,
        user: String,
        port: u16,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        let addr: SocketAddr = listener.local_addr()?;
        let guard = Guard::random(addr.port())?;
        let url = format!("http://{addr}/#token={}", guard.token());
        let (tx, snapshots) = watch::channel(Arc::<str>::from(""));
        let watch = tokio::spawn(relay(
            scope.api(client.clone()),
            user.clone(),
            scope.describe(),
            tx,
        ));
        let shared = Shared {
            guard: Arc::new(guard),
            client,
            scope: Arc::new(scope),
            user: user.into(),
            snapshots,
        };
        let router = Router::new()
            .route("/", get(page))
            .route("/inbox.js", get(script))
            .route("/inbox.css", get(style))
            .route("/icon.svg", get(icon))
            .route("/events", get(events))
            .route("/api/decisions", post(decisions))
            .route("/api/edits", post(edit::review))
            .layer(axum::middleware::map_response(harden))
            .with_state(shared);
        Ok(Self {
            listener,
            router,
            watch,
            url,
        })
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let served = axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await;
        self.watch.abort();
        served
    }
}

/// `kubectl hitl ui`: binds, prints the address, opens it unless told not to, and serves until
/// interrupted.
pub async fn run(
    client: Client,
    scope: Scope,
    user: String,
    args: &super::UiArgs,
    out: &mut dyn std::io::Write,
) -> Result<bool, super::error::CommandError> {
    check_scope(&client, &scope).await?;
    let inbox = Inbox::bind(client, scope.clone(), user.clone(), args.port).await?;
    writeln!(
        out,
        "Approval inbox for {user} ({}): {}\nThe address holds a secret token: do not share it. Press Ctrl-C to stop.",
        scope.describe(),
        inbox.url
    )?;
    out.flush()?;
    if !args.no_open {
        open_browser(&inbox.url);
    }
    inbox
        .serve(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(true)
}

/// Refuses to start an inbox that could show nothing: the caller cannot list ApprovalRequests
/// in `scope` (say, `-A` without a cluster-wide grant).
pub async fn check_scope(client: &Client, scope: &Scope) -> Result<(), super::error::CommandError> {
    let probe = kube::api::ListParams::default().limit(1);
    match scope.api(client.clone()).list_metadata(&probe).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Err(super::error::CommandError::CannotList(format!(
                "you cannot list approvalrequests in {}: {}; choose a namespace where you can \
                 (-n NAMESPACE), or ask for the hitl-viewer or hitl-approver role there",
                scope.describe(),
                status.message
            )))
        }
        Err(e) => Err(e.into()),
    }
}

/// Asks the desktop to open `url`; silently does nothing where there is no desktop.
fn open_browser(url: &str) {
    for opener in ["xdg-open", "open"] {
        let spawned = std::process::Command::new(opener)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if spawned.is_ok() {
            return;
        }
    }
}

/// Watches the requests and publishes a snapshot on every change and every [`REFRESH`].
async fn relay(
    api: Api<ApprovalRequest>,
    user: String,
    scope: String,
    tx: watch::Sender<Arc<str>>,
) {
    let (reader, writer) = reflector::store();
    let mut changes = reflector(writer, watcher(api, paged()))
        .backoff_while_failing()
        .boxed();
    let mut tick = tokio::time::interval(REFRESH);
    let (mut listed, mut error) = (false, None);
    loop {
        tokio::select! {
            change = changes.next() => match change {
                None => return,
                Some(Ok(event)) => {
                    listed |= matches!(event, watcher::Event::InitDone);
                    error = None;
                }
                Some(Err(e)) => error = Some(format!("the list may be out of date: {}", why(&e))),
            },
            _ = tick.tick() => {}
        }
        if !listed && error.is_none() {
            continue;
        }
        let state = reader.state();
        let snapshot = Snapshot {
            user: &user,
            scope: &scope,
            rows: rows::snapshot(state.iter().map(|r| r.as_ref()), Timestamp::now()),
            error: error.clone(),
        };
        let json = serde_json::to_string(&snapshot).expect("a snapshot serializes");
        tx.send_if_modified(|current| {
            let changed = **current != *json;
            if changed {
                *current = json.into();
            }
            changed
        });
    }
}

/// The apiserver's own message when it refused, else the error.
fn why(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.message.clone(),
        watcher::Error::WatchError(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Adds the headers every answer carries: no caching, no framing, no referrer, no sniffing, and
/// a content security policy that allows only the inbox's own script and style.
async fn harden(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

fn asset(
    shared: &Shared,
    method: &Method,
    headers: &HeaderMap,
    kind: &'static str,
    body: &'static str,
) -> Response {
    match shared.guard.check(Access::Asset, method, headers, None) {
        Ok(()) => ([(header::CONTENT_TYPE, kind)], body).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

async fn page(State(shared): State<Shared>, method: Method, headers: HeaderMap) -> Response {
    asset(&shared, &method, &headers, "text/html; charset=utf-8", PAGE)
}

async fn script(State(shared): State<Shared>, method: Method, headers: HeaderMap) -> Response {
    asset(
        &shared,
        &method,
        &headers,
        "text/javascript; charset=utf-8",
        SCRIPT,
    )
}

async fn style(State(shared): State<Shared>, method: Method, headers: HeaderMap) -> Response {
    asset(&shared, &method, &headers, "text/css; charset=utf-8", STYLE)
}

async fn icon(State(shared): State<Shared>, method: Method, headers: HeaderMap) -> Response {
    asset(&shared, &method, &headers, "image/svg+xml", ICON)
}

/// The live list: the current snapshot, then one event per change.
async fn events(
    State(shared): State<Shared>,
    method: Method,
    headers: HeaderMap,
    Query(query): Query<TokenQuery>,
) -> Response {
    let token = query.token.as_deref();
    if let Err(refusal) = shared.guard.check(Access::Read, &method, &headers, token) {
        return refusal.into_response();
    }
    Sse::new(snapshots(shared.snapshots.clone()))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn snapshots(rx: watch::Receiver<Arc<str>>) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold((rx, true), |(mut rx, first)| async move {
        if !first {
            rx.changed().await.ok()?;
        }
        // Empty until the watch has listed.
        loop {
            let current = rx.borrow_and_update().clone();
            if !current.is_empty() {
                let event = Event::default().event("snapshot").data(&*current);
                return Some((Ok(event), (rx, false)));
            }
            rx.changed().await.ok()?;
        }
    })
}

/// The form a write (a decision, an edit to review) sends, once the guard let it through; else
/// the answer refusing it (`what` names the form in it).
fn written_form<T: serde::de::DeserializeOwned>(
    shared: &Shared,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
    what: &str,
) -> Result<T, Box<Response>> {
    shared
        .guard
        .check(Access::Write, method, headers, None)
        .map_err(|refusal| Box::new(refusal.into_response()))?;
    serde_json::from_slice(body).map_err(|e| {
        Box::new((StatusCode::BAD_REQUEST, format!("not a {what}: {e}")).into_response())
    })
}

/// Decides the named requests in order, as `kubectl hitl approve|deny NAME...` would.
async fn decisions(
    State(shared): State<Shared>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form: DecisionForm = match written_form(&shared, &method, &headers, &body, "decision") {
        Ok(form) => form,
        Err(refusal) => return *refusal,
    };
    let reason = form
        .reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    let problem = if form.requests.is_empty() || form.requests.len() > MAX_BATCH {
        Some(format!("a decision names 1 to {MAX_BATCH} requests"))
    } else if reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > MAX_REASON)
    {
        Some(format!("the reason is longer than {MAX_REASON} characters"))
    } else if form.decision == DecisionType::Deny && reason.is_none() {
        Some("a denial needs a reason: the agent is told it".to_owned())
    } else if form.patch.is_some()
        && (form.decision != DecisionType::Approve || form.requests.len() != 1)
    {
        Some("an edit approves one request".to_owned())
    } else {
        None
    };
    if let Some(problem) = problem {
        return (StatusCode::BAD_REQUEST, problem).into_response();
    }
    let request = decide::Request {
        decision_type: form.decision,
        reason,
        user: shared.user.to_string(),
        edit: form.patch.map(|patch| decide::EditAsked { patch }),
    };
    let mut results = Vec::with_capacity(form.requests.len());
    for target in form.requests {
        let result = match &request.edit {
            Some(asked) => match edit::recheck(&shared, &target, &asked.patch).await {
                Ok(()) => decide_one(&shared, &target, &request).await,
                Err(message) => DecisionResult {
                    namespace: target.namespace.clone(),
                    name: target.name.clone(),
                    ok: false,
                    message,
                },
            },
            None => decide_one(&shared, &target, &request).await,
        };
        results.push(result);
    }
    axum::Json(serde_json::json!({ "results": results })).into_response()
}

async fn decide_one(shared: &Shared, target: &Target, request: &decide::Request) -> DecisionResult {
    let (ok, message) = if !shared.scope.covers(&target.namespace) {
        (
            false,
            format!(
                "error: approvalrequest/{} is in namespace {}, outside this inbox ({})",
                target.name,
                target.namespace,
                shared.scope.describe()
            ),
        )
    } else {
        let api = Api::namespaced(shared.client.clone(), &target.namespace);
        let names = [target.name.clone()];
        match decide::decide_names(&api, &names, request, Timestamp::now()).await {
            Ok(outcomes) => {
                let outcome = outcomes.into_iter().next().unwrap_or(Outcome::NotFound {
                    name: target.name.clone(),
                });
                (
                    outcome.is_success(),
                    outcome.describe(&target.namespace, &request.user),
                )
            }
            Err(e) => (false, format!("error: {e}")),
        }
    };
    DecisionResult {
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        ok,
        message,
    }
}
