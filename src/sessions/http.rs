//! kagent's session and task API, as kagent's agent runtime (`kagent-adk` 0.7.4 and the 0.10
//! line) calls it at `KAGENT_URL`, served from any [`SessionStore`]:
//!
//! | request | answer |
//! |---|---|
//! | `GET /api/sessions?user_id=` | 200, the user's sessions |
//! | `POST /api/sessions?user_id=` `{agent_ref, id?, name?}` | 201, the session |
//! | `GET /api/sessions/{id}?user_id=&limit=&order=&after=` | 200, `{session, events}`; 404 |
//! | `DELETE /api/sessions/{id}?user_id=` | 200, `{}` |
//! | `POST /api/sessions/{id}/events?user_id=` `{id, data}` | 201, the event; 404 |
//! | `POST /api/tasks` (an A2A task) | 201, the task |
//! | `GET /api/tasks/{id}` | 200, the task; 404 |
//! | `DELETE /api/tasks/{id}` | 204 |
//!
//! A success is kagent's envelope `{"error": false, "data": ..., "message": ...}` (`data` left
//! out when it is an empty list, as kagent's `omitempty` does); a failure is `{"error":
//! "<text>"}` with kagent's status for it, 507 for a quota ([`StoreError::LimitReached`]), 503
//! when the database does not answer.
//!
//! Before anything is read, the request's bearer token (the runtime's projected token) names
//! its Agent ([`Authenticate`]): every statement is scoped to that Agent, so another Agent's
//! session id is simply not found. An `X-Agent-Name` header or an `agent_ref` naming another
//! Agent is refused (403). The user is the `user_id` parameter or the `X-User-Id` header;
//! when both are sent they must agree, each may be sent once, and no other query parameter is
//! taken: kagent's runtime writes the A2A context id into the URL unescaped, so a context id
//! such as `ctx?user_id=alice&` would otherwise choose another user's session.
//!
//! Memory is bounded by construction: a body is read up to `max_body_bytes`, and every request
//! first reserves what it will hold (a body, or the session a read loads) from one budget of
//! `max_in_flight_bytes` ([`Budget`]), waiting while others hold it. Bodies are parsed into
//! the few fields read (a task's id and state), never into a JSON tree.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

pub use crate::budget::Budget;
use crate::budget::HoldingBody;

use super::metrics::{AuthLabels, LimitLabels, Metrics, RequestLabels};
use super::store::{
    AgentKey, EventQuery, EventView, Limit, SessionStore, SessionView, StoreError, TaskRecord,
    check_id,
};

/// Where the API's routes begin.
pub const PREFIX: &str = "/api/";

/// What a request holds in memory per byte it reads or loads: the bytes, the strings parsed
/// from them, and the database driver's copy (a write) or the rows and the JSON written from
/// them (a read).
const WORK_FACTOR: usize = 3;

/// Why a request was refused before the store was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No bearer token, or one that does not prove an Agent's pod: 401.
    Unauthenticated(String),
    /// The request names another Agent: 403.
    Forbidden(String),
    /// The token could not be verified (the apiserver did not answer): 503.
    Unverified(String),
}

impl Refused {
    fn response(&self) -> (&'static str, Response<Body>) {
        match self {
            Self::Unauthenticated(why) => {
                let mut resp = error(StatusCode::UNAUTHORIZED, why);
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(r#"Bearer error="invalid_token""#),
                );
                ("unauthenticated", resp)
            }
            Self::Forbidden(why) => ("forbidden", error(StatusCode::FORBIDDEN, why)),
            Self::Unverified(why) => ("unverified", error(StatusCode::SERVICE_UNAVAILABLE, why)),
        }
    }
}

/// Tells which Agent a bearer token proves: implemented by [`super::auth::PodTokens`]
/// (TokenReview, then the token's pod and its owners).
pub trait Authenticate: Send + Sync + 'static {
    /// The Agent whose pod holds `token`.
    fn agent_of(
        &self,
        token: &str,
    ) -> impl std::future::Future<Output = Result<AgentKey, Refused>> + Send;
}

/// A write refused by a quota, for an Event on its Agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitNotice {
    /// The Agent whose write was refused.
    pub agent: AgentKey,
    /// The quota.
    pub limit: Limit,
    /// The refusal's text.
    pub message: String,
}

/// Bounds of what one request may send, and of what all hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Longest body taken (HTTP 413 past it).
    pub max_body_bytes: usize,
    /// Bytes all requests together may hold ([`Budget`]).
    pub max_in_flight_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 << 20,
            max_in_flight_bytes: 64 << 20,
        }
    }
}

/// The API on a store `S`, authenticating with `A`.
pub struct Api<S, A> {
    store: Arc<S>,
    auth: A,
    bounds: Bounds,
    budget: Budget,
    metrics: Arc<Metrics>,
    notices: Option<mpsc::Sender<LimitNotice>>,
}

/// kagent's envelope of a success.
#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<T>,
    message: &'a str,
}

/// The body of `POST /api/sessions`.
#[derive(Deserialize)]
struct SessionRequest {
    agent_ref: Option<String>,
    name: Option<String>,
    id: Option<String>,
}

/// The body of `POST /api/sessions/{id}/events`.
#[derive(Deserialize)]
struct EventRequest {
    id: String,
    data: String,
}

/// The answer to `GET /api/sessions/{id}`.
#[derive(Serialize)]
struct SessionResponse {
    session: SessionView,
    events: Vec<EventView>,
}

/// The query parameters a request may carry.
#[derive(Default)]
struct Params {
    user_id: Option<String>,
    limit: Option<String>,
    order: Option<String>,
    after: Option<String>,
}

impl Params {
    /// The parameters of `query`: each known one at most once, no other.
    fn parse(query: Option<&str>) -> Result<Self, String> {
        let pairs: Vec<(String, String)> = match query {
            None | Some("") => Vec::new(),
            Some(q) => serde_urlencoded::from_str(q)
                .map_err(|e| format!("the query string cannot be read: {e}"))?,
        };
        let mut params = Self::default();
        for (key, value) in pairs {
            let slot = match key.as_str() {
                "user_id" => &mut params.user_id,
                "limit" => &mut params.limit,
                "order" => &mut params.order,
                "after" => &mut params.after,
                other => {
                    return Err(format!(
                        "unknown query parameter {other:?}: the session API takes user_id, limit, order and after (an id holding ?, & or # would smuggle parameters in)"
                    ));
                }
            };
            if slot.is_some() {
                return Err(format!("query parameter {key} is given more than once"));
            }
            *slot = Some(value);
        }
        Ok(params)
    }
}

fn json(status: StatusCode, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": message });
    json(status, Body::from(body.to_string()))
}

fn bad_request(message: impl AsRef<str>) -> Response<Body> {
    error(StatusCode::BAD_REQUEST, message.as_ref())
}

fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut resp = error(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed");
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// kagent's envelope of a success around `data`, written into a buffer of `capacity` bytes at
/// first, and holding `permit` until the answer has been sent.
fn ok<T: Serialize>(
    status: StatusCode,
    data: Option<T>,
    message: &str,
    capacity: usize,
    permit: Option<OwnedSemaphorePermit>,
) -> Response<Body> {
    let mut body = Vec::with_capacity(capacity);
    let envelope = Envelope {
        error: false,
        data,
        message,
    };
    match serde_json::to_writer(&mut body, &envelope) {
        Ok(()) => json(
            status,
            Body::new(HoldingBody::new(Full::new(Bytes::from(body)), permit)),
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Error marshalling JSON response: {e}"),
        ),
    }
}

/// One header's value: `None` when absent, an error when sent more than once or not text.
fn single_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(format!("header {name} is sent more than once")),
        (Some(v), None) => v
            .to_str()
            .map(Some)
            .map_err(|_| format!("header {name} is not visible ASCII")),
    }
}

/// The bearer token of a request: exactly one `Authorization: Bearer <token>`.
fn bearer(headers: &HeaderMap) -> Result<&str, Refused> {
    let value = single_header(headers, header::AUTHORIZATION.as_str())
        .map_err(Refused::Unauthenticated)?
        .ok_or_else(|| {
            Refused::Unauthenticated(
                "no Authorization header: the session store takes the agent pod's projected token (Authorization: Bearer <token>)".into(),
            )
        })?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err(Refused::Unauthenticated(
            "the Authorization header is not `Bearer <token>`".into(),
        )),
    }
}

/// The route's name for metrics, from the path after [`PREFIX`].
fn route_name(segments: &[&str]) -> &'static str {
    match segments {
        ["sessions"] => "sessions",
        ["sessions", _] => "session",
        ["sessions", _, "events"] => "events",
        ["tasks"] => "tasks",
        ["tasks", _] => "task",
        _ => "other",
    }
}

impl<S: SessionStore, A: Authenticate> Api<S, A> {
    /// The API on `store`; `notices`, when given, receives each write a quota refused.
    pub fn new(
        store: Arc<S>,
        auth: A,
        bounds: Bounds,
        metrics: Arc<Metrics>,
        notices: Option<mpsc::Sender<LimitNotice>>,
    ) -> Self {
        Self {
            store,
            auth,
            budget: Budget::new(bounds.max_in_flight_bytes),
            bounds,
            metrics,
            notices,
        }
    }

    /// The budget the requests share.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Answers `request`.
    pub async fn serve(&self, request: Request) -> Response<Body> {
        let started = Instant::now();
        let path = request.uri().path().to_owned();
        let decoded: Option<Vec<String>> = path.strip_prefix(PREFIX).and_then(|rest| {
            rest.split('/')
                .map(|s| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8()
                        .map(String::from)
                        .ok()
                })
                .collect()
        });
        let segments: Vec<&str> = decoded
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(String::as_str)
            .collect();
        let route = route_name(&segments);
        let resp = match decoded {
            None => error(
                StatusCode::NOT_FOUND,
                "Not found: the session store serves /api/sessions and /api/tasks",
            ),
            Some(_) => self.authenticated(request, &segments).await,
        };
        let labels = RequestLabels {
            route,
            code: resp.status().as_u16(),
        };
        self.metrics.requests.get_or_create(&labels).inc();
        self.metrics
            .request_seconds
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        resp
    }

    async fn authenticated(&self, request: Request, segments: &[&str]) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let headers = &parts.headers;
        let agent = match self.agent(headers).await {
            Ok(agent) => agent,
            Err(refused) => {
                let (reason, resp) = refused.response();
                self.metrics
                    .auth_refusals
                    .get_or_create(&AuthLabels { reason })
                    .inc();
                tracing::info!(reason, path = %parts.uri.path(), "session store: request refused");
                return resp;
            }
        };
        let params = match Params::parse(parts.uri.query()) {
            Ok(params) => params,
            Err(why) => return bad_request(why),
        };
        match segments {
            ["sessions"] => match parts.method {
                Method::GET => self.list_sessions(&agent, headers, &params).await,
                Method::POST => self.create_session(&agent, headers, body, &params).await,
                _ => not_allowed("GET, POST"),
            },
            ["sessions", id] => match parts.method {
                Method::GET => self.get_session(&agent, headers, &params, id).await,
                Method::DELETE => self.delete_session(&agent, headers, &params, id).await,
                _ => not_allowed("GET, DELETE"),
            },
            ["sessions", id, "events"] => match parts.method {
                Method::POST => self.append_event(&agent, headers, body, &params, id).await,
                _ => not_allowed("POST"),
            },
            ["tasks"] => match parts.method {
                Method::POST => self.save_task(&agent, headers, body).await,
                _ => not_allowed("POST"),
            },
            ["tasks", id] => match parts.method {
                Method::GET => self.get_task(&agent, id).await,
                Method::DELETE => match check_id("the task's id", id) {
                    Err(e) => self.failed(&agent, &e),
                    Ok(()) => match self.store.delete_task(&agent, id).await {
                        Ok(()) => {
                            let mut resp = Response::new(Body::empty());
                            *resp.status_mut() = StatusCode::NO_CONTENT;
                            resp
                        }
                        Err(e) => self.failed(&agent, &e),
                    },
                },
                _ => not_allowed("GET, DELETE"),
            },
            _ => error(
                StatusCode::NOT_FOUND,
                "Not found: the session store serves /api/sessions and /api/tasks",
            ),
        }
    }

    /// The Agent the request's token proves, and no other named by `X-Agent-Name`.
    async fn agent(&self, headers: &HeaderMap) -> Result<AgentKey, Refused> {
        let token = bearer(headers)?;
        let agent = self.auth.agent_of(token).await?;
        let named = single_header(headers, "x-agent-name").map_err(Refused::Forbidden)?;
        if let Some(named) = named.filter(|n| !agent.is_named_by(n)) {
            return Err(Refused::Forbidden(format!(
                "X-Agent-Name {named:?} is not the Agent whose pod sent the request ({agent})"
            )));
        }
        Ok(agent)
    }

    /// The answer to a failed statement; a quota's refusal is counted and noticed.
    fn failed(&self, agent: &AgentKey, e: &StoreError) -> Response<Body> {
        let status = match e {
            StoreError::BadRequest(_) => StatusCode::BAD_REQUEST,
            StoreError::NotFound(_) => StatusCode::NOT_FOUND,
            StoreError::LimitReached { limit, message } => {
                self.metrics
                    .limit_refusals
                    .get_or_create(&LimitLabels {
                        limit: limit.as_str(),
                    })
                    .inc();
                tracing::warn!(agent = %agent, limit = limit.as_str(), "session store: {message}");
                if let Some(notices) = &self.notices {
                    // A full queue drops the notice: the metric has counted the refusal.
                    let _ = notices.try_send(LimitNotice {
                        agent: agent.clone(),
                        limit: *limit,
                        message: message.clone(),
                    });
                }
                StatusCode::INSUFFICIENT_STORAGE
            }
            StoreError::Unavailable(why) => {
                tracing::warn!(agent = %agent, "session store: {why}");
                StatusCode::SERVICE_UNAVAILABLE
            }
        };
        error(status, &e.to_string())
    }

    /// The request's user: the `user_id` parameter and the `X-User-Id` header, which must
    /// agree when both are sent; one of them is required.
    fn user<'a>(headers: &'a HeaderMap, params: &'a Params) -> Result<&'a str, String> {
        let header = single_header(headers, "x-user-id")?.filter(|v| !v.is_empty());
        let param = params.user_id.as_deref().filter(|v| !v.is_empty());
        let user = match (param, header) {
            (Some(p), Some(h)) if p != h => {
                return Err(format!(
                    "the user_id parameter {p:?} and the X-User-Id header {h:?} disagree"
                ));
            }
            (Some(user), _) | (None, Some(user)) => user,
            (None, None) => {
                return Err(
                    "Failed to get user ID: user_id is required (a query parameter or X-User-Id)"
                        .into(),
                );
            }
        };
        check_id("user_id", user).map_err(|e| e.to_string())?;
        Ok(user)
    }

    /// The request's user ([`Self::user`]), for a request naming session `id`, whose id is
    /// checked too.
    fn user_of_session<'a>(
        headers: &'a HeaderMap,
        params: &'a Params,
        id: &str,
    ) -> Result<&'a str, String> {
        let user = Self::user(headers, params)?;
        check_id("the session's id", id).map_err(|e| e.to_string())?;
        Ok(user)
    }

    /// Reads the request's body within [`Bounds::max_body_bytes`], holding its share of the
    /// budget, and parses it into `T`.
    async fn body<T: for<'de> Deserialize<'de>>(
        &self,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<(T, Bytes, OwnedSemaphorePermit), Response<Body>> {
        let max = self.bounds.max_body_bytes;
        let announced = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if announced.is_some_and(|n| n > max) {
            return Err(too_large(max));
        }
        let permit = self
            .budget
            .reserve(announced.unwrap_or(max).saturating_mul(WORK_FACTOR))
            .await;
        let bytes = match Limited::new(body, max).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large(max)),
            Err(e) => return Err(bad_request(format!("Invalid request body: {e}"))),
        };
        let parsed = serde_json::from_slice(&bytes)
            .map_err(|e| bad_request(format!("Invalid request body: {e}")))?;
        Ok((parsed, bytes, permit))
    }

    async fn list_sessions(
        &self,
        agent: &AgentKey,
        headers: &HeaderMap,
        params: &Params,
    ) -> Response<Body> {
        let user = match Self::user(headers, params) {
            Ok(user) => user,
            Err(why) => return bad_request(why),
        };
        match self.store.list_sessions(agent, user).await {
            Ok(sessions) => {
                let capacity = 256 * sessions.len();
                let data = (!sessions.is_empty()).then_some(sessions);
                ok(
                    StatusCode::OK,
                    data,
                    "Successfully listed sessions",
                    capacity,
                    None,
                )
            }
            Err(e) => self.failed(agent, &e),
        }
    }

    async fn create_session(
        &self,
        agent: &AgentKey,
        headers: &HeaderMap,
        body: Body,
        params: &Params,
    ) -> Response<Body> {
        let user = match Self::user(headers, params) {
            Ok(user) => user.to_owned(),
            Err(why) => return bad_request(why),
        };
        let (req, _, _permit) = match self.body::<SessionRequest>(headers, body).await {
            Ok(parsed) => parsed,
            Err(resp) => return resp,
        };
        match req.agent_ref.as_deref() {
            None | Some("") => return bad_request("agent_ref is required"),
            Some(named) if !agent.is_named_by(named) => {
                return error(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "agent_ref {named:?} is not the Agent whose pod sent the request ({agent})"
                    ),
                );
            }
            Some(_) => {}
        }
        let id = req.id.as_deref().filter(|id| !id.is_empty());
        match self
            .store
            .create_session(
                agent,
                &user,
                id,
                req.name.as_deref(),
                jiff::Timestamp::now(),
            )
            .await
        {
            Ok(session) => ok(
                StatusCode::CREATED,
                Some(session),
                "Successfully created session",
                512,
                None,
            ),
            Err(e) => self.failed(agent, &e),
        }
    }

    async fn get_session(
        &self,
        agent: &AgentKey,
        headers: &HeaderMap,
        params: &Params,
        id: &str,
    ) -> Response<Body> {
        let user = match Self::user_of_session(headers, params, id) {
            Ok(user) => user,
            Err(why) => return bad_request(why),
        };
        let mut query = EventQuery::default();
        if let Some(after) = params.after.as_deref().filter(|a| !a.is_empty()) {
            match after.parse() {
                Ok(at) => query.after = Some(at),
                Err(e) => return bad_request(format!("Failed to parse after timestamp: {e}")),
            }
        }
        if let Some(limit) = params.limit.as_deref().filter(|l| !l.is_empty()) {
            match limit.parse::<i64>() {
                // As kagent reads it: a limit of 1 or less means every event.
                Ok(n) => query.limit = if n > 1 { n } else { 0 },
                Err(e) => return bad_request(format!("Failed to parse limit: {e}")),
            }
        }
        let descending = match params.order.as_deref() {
            None | Some("" | "asc") => false,
            Some("desc") => true,
            Some(other) => return bad_request(format!("order {other:?}: asc or desc")),
        };
        // Reserve what the read will hold before loading it.
        let size = match self.store.session_size(agent, user, id).await {
            Ok(Some(size)) => size,
            Ok(None) => return self.failed(agent, &StoreError::session_not_found()),
            Err(e) => return self.failed(agent, &e),
        };
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        let permit = self.budget.reserve(size.saturating_mul(WORK_FACTOR)).await;
        match self.store.get_session(agent, user, id, query).await {
            Ok((session, mut events)) => {
                if descending {
                    events.reverse();
                }
                // Each event's data written out as a JSON string (a quarter more for escapes),
                // and its other fields.
                let data: usize = events.iter().map(|e| e.data.len()).sum();
                let capacity = 1024 + data + data / 4 + 512 * events.len();
                ok(
                    StatusCode::OK,
                    Some(SessionResponse { session, events }),
                    "Successfully retrieved session",
                    capacity,
                    Some(permit),
                )
            }
            Err(e) => self.failed(agent, &e),
        }
    }

    async fn delete_session(
        &self,
        agent: &AgentKey,
        headers: &HeaderMap,
        params: &Params,
        id: &str,
    ) -> Response<Body> {
        let user = match Self::user_of_session(headers, params, id) {
            Ok(user) => user,
            Err(why) => return bad_request(why),
        };
        match self.store.delete_session(agent, user, id).await {
            Ok(()) => ok(
                StatusCode::OK,
                Some(serde_json::json!({})),
                "Session deleted successfully",
                128,
                None,
            ),
            Err(e) => self.failed(agent, &e),
        }
    }

    async fn append_event(
        &self,
        agent: &AgentKey,
        headers: &HeaderMap,
        body: Body,
        params: &Params,
        session: &str,
    ) -> Response<Body> {
        let user = match Self::user_of_session(headers, params, session) {
            Ok(user) => user.to_owned(),
            Err(why) => return bad_request(why),
        };
        let (event, _, permit) = match self.body::<EventRequest>(headers, body).await {
            Ok(parsed) => parsed,
            Err(resp) => return resp,
        };
        if let Err(e) = check_id("the event's id", &event.id) {
            return self.failed(agent, &e);
        }
        match self
            .store
            .append_event(
                agent,
                &user,
                session,
                &event.id,
                &event.data,
                jiff::Timestamp::now(),
            )
            .await
        {
            Ok(stored) => {
                let capacity = 512 + stored.data.len() + stored.data.len() / 4;
                ok(
                    StatusCode::CREATED,
                    Some(stored),
                    "Event added to session successfully",
                    capacity,
                    Some(permit),
                )
            }
            Err(e) => self.failed(agent, &e),
        }
    }

    async fn save_task(&self, agent: &AgentKey, headers: &HeaderMap, body: Body) -> Response<Body> {
        let (_, bytes, permit) = match self.body::<serde::de::IgnoredAny>(headers, body).await {
            Ok(parsed) => parsed,
            Err(resp) => return resp,
        };
        let task = match String::from_utf8(bytes.into())
            .map_err(|e| e.to_string())
            .and_then(TaskRecord::from_json)
        {
            Ok(task) => task,
            Err(why) => return bad_request(format!("Invalid request body: {why}")),
        };
        if let Err(e) = check_id("the task's id", &task.id) {
            return self.failed(agent, &e);
        }
        match self
            .store
            .save_task(agent, &task, jiff::Timestamp::now())
            .await
        {
            Ok(()) => {
                let capacity = 128 + task.json.len();
                match RawValue::from_string(task.json) {
                    Ok(raw) => ok(
                        StatusCode::CREATED,
                        Some(raw),
                        "Successfully created task",
                        capacity,
                        Some(permit),
                    ),
                    Err(e) => bad_request(format!("Invalid request body: {e}")),
                }
            }
            Err(e) => self.failed(agent, &e),
        }
    }

    async fn get_task(&self, agent: &AgentKey, id: &str) -> Response<Body> {
        if let Err(e) = check_id("the task's id", id) {
            return self.failed(agent, &e);
        }
        match self.store.get_task(agent, id).await {
            Ok(Some(json)) => {
                let permit = self.budget.reserve(json.len().saturating_mul(2)).await;
                let capacity = json.len() + 128;
                match RawValue::from_string(json) {
                    Ok(raw) => ok(
                        StatusCode::OK,
                        Some(raw),
                        "Successfully retrieved task",
                        capacity,
                        Some(permit),
                    ),
                    Err(e) => error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("the stored task is not JSON: {e}"),
                    ),
                }
            }
            Ok(None) => error(StatusCode::NOT_FOUND, "Task not found"),
            Err(e) => self.failed(agent, &e),
        }
    }
}

fn too_large(max: usize) -> Response<Body> {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "Invalid request body: the session store takes bodies of at most {max} bytes (chart value sessions.maxBodyBytes)"
        ),
    )
}

#[cfg(test)]
mod tests;
