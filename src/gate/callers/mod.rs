//! Who calls a shared gate (a ToolGate, gate.json `callers`): every HTTP request to an MCP
//! route must carry `Authorization: Bearer <token>`, which the apiserver verifies
//! (TokenReview, with the gate's own client) for one of `callers.audiences`; then the
//! `users`/`groups` allow-lists decide. The verified identity is the call's caller: it goes
//! into the ApprovalRequests the gate creates, binds the sessions the caller begins, and
//! keys grants, the open-request cap and `max_calls_per_minute`.
//!
//! Fail closed: no token, a token the apiserver does not accept for those audiences, a caller
//! not allowed, or a TokenReview that fails (apiserver down, an error, no answer within
//! [`REVIEW_TIMEOUT`]) refuse the request before anything is read, forwarded or created.
//! Verified identities are cached by the hash of the token ([`cache`]); concurrent first
//! requests with one token share one TokenReview.

pub mod cache;
pub mod rate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use tokio::sync::OnceCell;

use self::cache::{
    MAX_CACHED_TOKENS, MAX_CACHED_TOKENS_PER_CALLER, TokenCache, TokenKey, jwt_expiry, token_key,
    trusted_until,
};
use self::rate::{CallLimits, MAX_TRACKED_CALLERS};
use super::decision::Clock;
use super::jsonrpc;
use crate::api::approval_request::Caller;
use crate::contract::gate_config::CallerPolicy;

/// How long the gate waits for the apiserver's TokenReview before refusing the request.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest bearer token the gate sends to the apiserver (ServiceAccount tokens are about
/// 1 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 << 10;

/// JSON-RPC error code of a request without a token the apiserver accepts (HTTP 401).
pub const UNAUTHENTICATED: i64 = -32030;
/// JSON-RPC error code of a verified caller the allow-lists do not name (HTTP 403).
pub const FORBIDDEN: i64 = -32031;
/// JSON-RPC error code of a request whose token the gate could not verify (HTTP 503).
pub const UNVERIFIED: i64 = -32032;
/// JSON-RPC error code of a `tools/call` over the caller's `max_calls_per_minute`.
pub const RATE_LIMITED: i64 = -32033;
/// JSON-RPC error code of a request naming an MCP session that is not the caller's (HTTP 404).
pub const UNKNOWN_SESSION: i64 = -32034;

/// Why a request to a shared gate is refused before it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No bearer token, or one the apiserver does not accept for the gate's audiences: 401.
    Unauthenticated(String),
    /// A verified caller that `callers.users` and `callers.groups` do not allow: 403.
    Forbidden(String),
    /// The token could not be verified (the TokenReview failed): 503.
    Unverified(String),
}

impl Refused {
    /// The HTTP answer: 401 (with `WWW-Authenticate: Bearer`), 403 or 503, and a JSON-RPC
    /// error (id null: the message was not read) saying why.
    pub fn response(&self) -> Response<Body> {
        let (status, code, why) = match self {
            Self::Unauthenticated(why) => (StatusCode::UNAUTHORIZED, UNAUTHENTICATED, why),
            Self::Forbidden(why) => (StatusCode::FORBIDDEN, FORBIDDEN, why),
            Self::Unverified(why) => (StatusCode::SERVICE_UNAVAILABLE, UNVERIFIED, why),
        };
        let body = jsonrpc::error_response(&Value::Null, code, &format!("approval gate: {why}"));
        let mut resp = Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .expect("static response parts are valid");
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer error="invalid_token""#),
            );
        }
        resp
    }
}

/// The bearer token of a request: exactly one `Authorization` header, scheme `Bearer` (any
/// case), a token of visible ASCII at most [`MAX_TOKEN_BYTES`] long.
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, String> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(
            match headers.get_all(header::AUTHORIZATION).iter().count() {
                0 => {
                    "no Authorization header: a shared gate needs `Authorization: Bearer <token>` \
                  with a Kubernetes token for its audience"
                        .into()
                }
                n => format!("{n} Authorization headers; send exactly one"),
            },
        );
    };
    let value = value
        .to_str()
        .map_err(|_| "the Authorization header is not visible ASCII".to_string())?;
    let token = match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => return Err("the Authorization header is not `Bearer <token>`".into()),
    };
    if token.is_empty()
        || token.len() > MAX_TOKEN_BYTES
        || !token.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(format!(
            "the bearer token is empty, longer than {MAX_TOKEN_BYTES} bytes or not one word"
        ));
    }
    Ok(token)
}

/// Whether the apiserver's `verified` audiences name one of the gate's `wanted`.
pub fn audience_accepted(wanted: &[String], verified: &[String]) -> bool {
    verified.iter().any(|a| wanted.contains(a))
}

/// Why `caller` may not call under `policy`, if it may not: with `users` and `groups` both
/// empty any verified caller may; otherwise its username must be in `users` or one of its
/// groups in `groups`.
pub fn not_allowed(policy: &CallerPolicy, caller: &Caller) -> Option<String> {
    if policy.users.is_empty() && policy.groups.is_empty() {
        return None;
    }
    let allowed = policy.users.contains(&caller.username)
        || caller.groups.iter().any(|g| policy.groups.contains(g));
    (!allowed).then(|| {
        format!(
            "caller {} is not allowed to use this gate (callers.users and callers.groups name neither it nor a group of it)",
            caller.username
        )
    })
}

/// The identity in a TokenReview answer, if it authenticated the token for one of `wanted`;
/// otherwise why not.
pub fn reviewed(review: &TokenReview, wanted: &[String]) -> Result<Caller, String> {
    let status = review
        .status
        .as_ref()
        .ok_or("the apiserver's TokenReview has no status")?;
    if status.authenticated != Some(true) {
        let why = status
            .error
            .as_deref()
            .filter(|e| !e.is_empty())
            .unwrap_or("not authenticated");
        return Err(format!("the apiserver does not accept the token: {why}"));
    }
    let verified = status.audiences.as_deref().unwrap_or_default();
    if !audience_accepted(wanted, verified) {
        return Err(format!(
            "the token is not for this gate's audiences ({})",
            wanted.join(", ")
        ));
    }
    let user = status.user.as_ref();
    let username = user
        .and_then(|u| u.username.clone())
        .filter(|u| !u.is_empty())
        .ok_or("the apiserver's TokenReview names no user")?;
    Ok(Caller {
        username,
        uid: user.and_then(|u| u.uid.clone()).filter(|u| !u.is_empty()),
        groups: user.and_then(|u| u.groups.clone()).unwrap_or_default(),
    })
}

/// The result of one token's review, shared by the requests that waited on it.
type Review = Result<Arc<Caller>, Refused>;

/// A shared gate's callers: verifies them, caches what it verified and counts their calls.
pub struct Callers {
    policy: CallerPolicy,
    api: Api<TokenReview>,
    clock: Arc<dyn Clock>,
    cache: Mutex<TokenCache>,
    in_flight: Mutex<HashMap<TokenKey, Arc<OnceCell<Review>>>>,
    limits: Option<Mutex<CallLimits>>,
}

impl std::fmt::Debug for Callers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callers")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Callers {
    /// The callers of a gate with `policy`, verified through `client` (its ServiceAccount
    /// needs `create` on `tokenreviews.authentication.k8s.io`), cached by `clock`. An error
    /// names the field of a policy that would refuse every caller.
    pub fn new(
        policy: &CallerPolicy,
        client: kube::Client,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, (String, String)> {
        if policy.audiences.is_empty() || policy.audiences.iter().any(String::is_empty) {
            return Err((
                "callers.audiences".into(),
                "must name at least one audience, none empty: a token is verified for them".into(),
            ));
        }
        if policy.max_calls_per_minute == Some(0) {
            return Err((
                "callers.max_calls_per_minute".into(),
                "0: must be at least 1 (no caller could ever call); leave it out for no limit"
                    .into(),
            ));
        }
        Ok(Self {
            policy: policy.clone(),
            api: Api::all(client),
            clock,
            cache: Mutex::new(TokenCache::new(
                MAX_CACHED_TOKENS,
                MAX_CACHED_TOKENS_PER_CALLER,
            )),
            in_flight: Mutex::default(),
            limits: policy
                .max_calls_per_minute
                .map(|n| Mutex::new(CallLimits::new(n, MAX_TRACKED_CALLERS))),
        })
    }

    /// The caller of a request with `headers`: its bearer token verified (from the cache, or
    /// by one TokenReview shared with concurrent requests bearing the same token), then
    /// allowed by the allow-lists.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Caller>, Refused> {
        let token = bearer_token(headers).map_err(Refused::Unauthenticated)?;
        let key = token_key(token);
        let cached = self
            .cache
            .lock()
            .expect("token cache lock")
            .get(&key, self.clock.now());
        let caller = match cached {
            Some(caller) => caller,
            None => self.verify_once(key, token).await?,
        };
        match not_allowed(&self.policy, &caller) {
            Some(why) => {
                tracing::info!(caller = %caller.username, "refused: caller not allowed");
                Err(Refused::Forbidden(why))
            }
            None => Ok(caller),
        }
    }

    /// Verifies `token` (whose key is `key`) with one TokenReview for every request that
    /// asks while it runs.
    async fn verify_once(&self, key: TokenKey, token: &str) -> Review {
        let cell = self
            .in_flight
            .lock()
            .expect("in-flight lock")
            .entry(key)
            .or_default()
            .clone();
        let review = cell.get_or_init(|| self.verify(key, token)).await.clone();
        let mut in_flight = self.in_flight.lock().expect("in-flight lock");
        if in_flight.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            in_flight.remove(&key);
        }
        review
    }

    /// Asks the apiserver about `token` and caches an identity it verified.
    async fn verify(&self, key: TokenKey, token: &str) -> Review {
        let review = TokenReview {
            spec: TokenReviewSpec {
                audiences: Some(self.policy.audiences.clone()),
                token: Some(token.to_owned()),
            },
            ..Default::default()
        };
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            self.api.create(&PostParams::default(), &review),
        )
        .await;
        let answer = match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "TokenReview failed; refusing the request");
                return Err(Refused::Unverified(format!(
                    "cannot verify the caller's token: the apiserver's TokenReview failed ({e})"
                )));
            }
            Err(_) => {
                tracing::warn!(
                    timeout_seconds = REVIEW_TIMEOUT.as_secs(),
                    "TokenReview timed out; refusing the request"
                );
                return Err(Refused::Unverified(format!(
                    "cannot verify the caller's token: the apiserver did not answer the TokenReview within {} s",
                    REVIEW_TIMEOUT.as_secs()
                )));
            }
        };
        let caller = Arc::new(reviewed(&answer, &self.policy.audiences).map_err(|why| {
            tracing::info!(%why, "refused: token not accepted");
            Refused::Unauthenticated(why)
        })?);
        let now = self.clock.now();
        let until = trusted_until(jwt_expiry(token), now);
        self.cache
            .lock()
            .expect("token cache lock")
            .insert(key, caller.clone(), until, now);
        tracing::debug!(caller = %caller.username, %until, "caller verified");
        Ok(caller)
    }

    /// Takes one `tools/call` of `caller` at `now` under `callers.max_calls_per_minute`:
    /// `Ok`, or the text refusing it.
    pub fn admit_call(&self, caller: &str, now: Instant) -> Result<(), String> {
        self.take(caller, now).map_err(|(limit, wait)| {
            format!(
                "approval gate: caller {caller} is over its limit of {limit} tools/call per minute (callers.max_calls_per_minute); the call was not forwarded; retry in {wait} s"
            )
        })
    }

    /// Takes one new session (an `initialize`, an SSE stream opened) of `caller` at `now`
    /// from the same budget as its calls, so that no caller begins sessions without end:
    /// `Ok`, or the text refusing it.
    pub fn admit_session(&self, caller: &str, now: Instant) -> Result<(), String> {
        self.take(caller, now).map_err(|(limit, wait)| {
            format!(
                "approval gate: caller {caller} is over its limit of {limit} calls per minute (callers.max_calls_per_minute, which counts each new session too); the session was not begun; retry in {wait} s"
            )
        })
    }

    /// Takes one from `caller`'s budget: `Ok`, or the limit and the seconds to wait.
    fn take(&self, caller: &str, now: Instant) -> Result<(), (u32, u64)> {
        let Some(limits) = &self.limits else {
            return Ok(());
        };
        let mut limits = limits.lock().expect("call limits lock");
        limits
            .take(caller, now)
            .map_err(|wait| (limits.per_minute(), wait.as_secs().max(1)))
    }
}

#[cfg(test)]
mod tests;
