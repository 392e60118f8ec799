//! kagent's session and task API (v0.7.4), as the agent runtime (`kagent-adk`) calls it, on
//! the [`KagentStore`]:
//!
//! | request | answer |
//! |---|---|
//! | `GET /api/sessions` | 200, the user's sessions |
//! | `POST /api/sessions` `{agent_ref, id?, name?}` | 201, the session |
//! | `GET /api/sessions/{id}?limit=&after=` | 200, `{session, events}`; 404 |
//! | `DELETE /api/sessions/{id}` | 200, `{}` |
//! | `POST /api/sessions/{id}/events` `{id, data}` | 201, the event; 404; 403 |
//! | `POST /api/tasks` (an A2A task) | 201, the task |
//! | `GET /api/tasks/{id}` | 200, the task; 404 |
//! | `DELETE /api/tasks/{id}` | 204 |
//!
//! A success is kagent's envelope, `{"error": false, "data": ..., "message": ...}` (`data`
//! left out when it is an empty list, as kagent's `omitempty` does); a failure is
//! `{"error": "<text>"}` with kagent's status for it, or 507 when the store is full
//! ([`StoreError`]). The user is the `user_id` query parameter, else the `X-User-ID` header,
//! else `admin@kagent.dev`, as kagent's controller takes it; the `Authorization` header is not
//! looked at: only the agent's pods reach the gate's listener (loopback in Sidecar placement,
//! the gate's NetworkPolicy in Gateway placement), as for its MCP routes.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde::{Deserialize, Serialize};

use super::{EventQuery, KagentStore, StoreError};
use crate::gate::messages::MAX_MESSAGE_BYTES;

/// Where the store's routes begin; the gate looks for it only when no MCP route matched.
pub const PREFIX: &str = "/api/";

/// The user of a request with neither a `user_id` parameter nor an `X-User-ID` header, as in
/// kagent.
const DEFAULT_USER: &str = "admin@kagent.dev";

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
    #[serde(default)]
    id: String,
    #[serde(default)]
    data: String,
}

/// The body of `GET /api/sessions/{id}`.
#[derive(Serialize)]
struct SessionResponse {
    session: super::SessionView,
    events: Vec<super::EventView>,
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn ok<T: Serialize>(status: StatusCode, data: Option<T>, message: &str) -> Response<Body> {
    ok_sized(status, data, message, 0)
}

/// [`ok`] written into a buffer of `capacity` bytes at first: a large answer written without
/// growing its buffer step by step, which would hold the old and the new buffer at once.
fn ok_sized<T: Serialize>(
    status: StatusCode,
    data: Option<T>,
    message: &str,
    capacity: usize,
) -> Response<Body> {
    let envelope = Envelope {
        error: false,
        data,
        message,
    };
    let mut body = Vec::with_capacity(capacity);
    match serde_json::to_writer(&mut body, &envelope) {
        Ok(()) => json(status, body),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Error marshalling JSON response: {e}"),
        ),
    }
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": message });
    json(status, body.to_string().into_bytes())
}

fn failed(e: &StoreError) -> Response<Body> {
    let status = match e {
        StoreError::BadRequest(_) => StatusCode::BAD_REQUEST,
        StoreError::Forbidden(_) => StatusCode::FORBIDDEN,
        StoreError::NotFound(_) => StatusCode::NOT_FOUND,
        StoreError::Full(why) => {
            tracing::warn!(why = %why, "session store full: write refused");
            StatusCode::INSUFFICIENT_STORAGE
        }
    };
    error(status, e.message())
}

fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut resp = error(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed");
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// The query parameters, decoded; empty when the query cannot be read.
fn query(request: &Request) -> Vec<(String, String)> {
    request
        .uri()
        .query()
        .and_then(|q| serde_urlencoded::from_str(q).ok())
        .unwrap_or_default()
}

fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// The `user_id` parameter, else the `X-User-ID` header.
fn user<'a>(query: &'a [(String, String)], headers: &'a HeaderMap) -> Option<&'a str> {
    param(query, "user_id").or_else(|| {
        headers
            .get("x-user-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
    })
}

async fn body(request: Request) -> Result<Bytes, Response<Body>> {
    match Limited::new(request.into_body(), MAX_MESSAGE_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "Invalid request body: the gate's session store takes bodies of at most {} MiB",
                MAX_MESSAGE_BYTES >> 20
            ),
        )),
        Err(e) => Err(error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid request body: {e}"),
        )),
    }
}

async fn decode<T: for<'de> Deserialize<'de>>(request: Request) -> Result<T, Response<Body>> {
    let bytes = body(request).await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            &format!("Invalid request body: {e}"),
        )
    })
}

/// Answers `request`, whose path begins with [`PREFIX`], from `store`. Each segment of the
/// path is percent-decoded, as kagent's router does (a session's id is the A2A context id,
/// which a client chooses).
pub async fn serve(store: &KagentStore, request: Request) -> Response<Body> {
    let Ok(segments) = request.uri().path()[PREFIX.len()..]
        .split('/')
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(String::from)
        })
        .collect::<Result<Vec<String>, _>>()
    else {
        return error(
            StatusCode::NOT_FOUND,
            "Not found: the path is not UTF-8 once decoded",
        );
    };
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = request.method().clone();
    match segments.as_slice() {
        ["sessions"] => match method {
            Method::GET => list_sessions(store, &request),
            Method::POST => create_session(store, request).await,
            _ => not_allowed("GET,POST"),
        },
        ["sessions", id] if !id.is_empty() => match method {
            Method::GET => get_session(store, &request, id),
            Method::DELETE => {
                let query = query(&request);
                let user = user(&query, request.headers()).unwrap_or(DEFAULT_USER);
                store.delete_session(user, id);
                ok(
                    StatusCode::OK,
                    Some(serde_json::json!({})),
                    "Session deleted successfully",
                )
            }
            _ => not_allowed("GET,DELETE"),
        },
        ["sessions", id, "events"] if !id.is_empty() => match method {
            Method::POST => append_event(store, request, id).await,
            _ => not_allowed("POST"),
        },
        ["tasks"] => match method {
            Method::POST => save_task(store, request).await,
            _ => not_allowed("POST"),
        },
        ["tasks", id] if !id.is_empty() => match method {
            Method::GET => match store.get_task(id) {
                Some(task) => ok(StatusCode::OK, Some(&*task), "Successfully retrieved task"),
                None => error(StatusCode::NOT_FOUND, "Task not found"),
            },
            Method::DELETE => {
                store.delete_task(id);
                let mut resp = Response::new(Body::empty());
                *resp.status_mut() = StatusCode::NO_CONTENT;
                resp
            }
            _ => not_allowed("GET,DELETE"),
        },
        _ => error(
            StatusCode::NOT_FOUND,
            "Not found: the approval gate serves only the agent's sessions and tasks",
        ),
    }
}

fn list_sessions(store: &KagentStore, request: &Request) -> Response<Body> {
    let query = query(request);
    let user = user(&query, request.headers()).unwrap_or(DEFAULT_USER);
    let sessions = store.list_sessions(user);
    let data = (!sessions.is_empty()).then_some(sessions);
    ok(StatusCode::OK, data, "Successfully listed sessions")
}

async fn create_session(store: &KagentStore, request: Request) -> Response<Body> {
    let query = query(&request);
    let user = user(&query, request.headers())
        .unwrap_or(DEFAULT_USER)
        .to_owned();
    let req: SessionRequest = match decode(request).await {
        Ok(req) => req,
        Err(resp) => return resp,
    };
    match store.create_session(
        &user,
        req.agent_ref.as_deref(),
        req.id.as_deref(),
        req.name.as_deref(),
        jiff::Timestamp::now(),
    ) {
        Ok(session) => ok(
            StatusCode::CREATED,
            Some(session),
            "Successfully created session",
        ),
        Err(e) => failed(&e),
    }
}

fn get_session(store: &KagentStore, request: &Request, id: &str) -> Response<Body> {
    let query = query(request);
    let user = user(&query, request.headers()).unwrap_or(DEFAULT_USER);
    let mut events = EventQuery::default();
    if let Some(after) = param(&query, "after") {
        match after.parse() {
            Ok(at) => events.after = Some(at),
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("Failed to parse after timestamp: {e}"),
                );
            }
        }
    }
    if let Some(limit) = param(&query, "limit") {
        match limit.parse() {
            Ok(n) => events.limit = n,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("Failed to parse limit: {e}"),
                );
            }
        }
    }
    match store.get_session(user, id, events) {
        Ok((session, events)) => {
            // Each event's data written out as a JSON string (a quarter more for escapes), and
            // its other fields.
            let data: usize = events.iter().map(|e| e.data.len()).sum();
            let capacity = 1024 + data + data / 4 + 512 * events.len();
            ok_sized(
                StatusCode::OK,
                Some(SessionResponse { session, events }),
                "Successfully retrieved session",
                capacity,
            )
        }
        Err(e) => failed(&e),
    }
}

async fn append_event(store: &KagentStore, request: Request, session: &str) -> Response<Body> {
    let query = query(&request);
    let Some(user) = user(&query, request.headers()).map(str::to_owned) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Failed to get user ID: user_id is required",
        );
    };
    let agent = request
        .headers()
        .get("x-agent-name")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let event: EventRequest = match decode(request).await {
        Ok(event) => event,
        Err(resp) => return resp,
    };
    match store.append_event(
        &user,
        session,
        &agent,
        &event.id,
        &event.data,
        jiff::Timestamp::now(),
    ) {
        Ok(event) => ok(
            StatusCode::CREATED,
            Some(event),
            "Event added to session successfully",
        ),
        Err(e) => failed(&e),
    }
}

async fn save_task(store: &KagentStore, request: Request) -> Response<Body> {
    let task = match decode(request).await {
        Ok(task) => task,
        Err(resp) => return resp,
    };
    match store.save_task(task) {
        Ok(task) => ok(
            StatusCode::CREATED,
            Some(&*task),
            "Successfully created task",
        ),
        Err(e) => failed(&e),
    }
}
