//! Verifying callers: the token a request bears, what a TokenReview answer must say, the
//! allow-lists, one review for concurrent requests, the cache by an injected clock, and the
//! refusals' HTTP answers.

use std::sync::Mutex as StdMutex;

use hitl_test_kit::mock;
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};
use serde_json::json;

use super::*;

fn policy(users: &[&str], groups: &[&str]) -> CallerPolicy {
    CallerPolicy {
        audiences: vec!["hitl-gate".into()],
        users: users.iter().map(|s| s.to_string()).collect(),
        groups: groups.iter().map(|s| s.to_string()).collect(),
        max_calls_per_minute: None,
    }
}

fn caller(name: &str, groups: &[&str]) -> Caller {
    Caller {
        username: name.into(),
        uid: None,
        groups: groups.iter().map(|s| s.to_string()).collect(),
    }
}

fn headers(values: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        h.append(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
    }
    h
}

/// A clock the test moves.
struct Manual(StdMutex<Timestamp>);
impl Clock for Manual {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}

fn at(s: &str) -> Arc<Manual> {
    Arc::new(Manual(StdMutex::new(s.parse().unwrap())))
}

fn answer(authenticated: bool, audiences: &[&str], user: &str) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
        "spec": {}, "status": {"authenticated": authenticated, "audiences": audiences,
        "user": {"username": user, "uid": "uid-1", "groups": ["system:serviceaccounts", "team"]}}})
}

#[test]
fn the_bearer_token_is_one_authorization_header_of_scheme_bearer() {
    assert_eq!(bearer_token(&headers(&["Bearer abc.def"])), Ok("abc.def"));
    assert_eq!(bearer_token(&headers(&["bearer abc"])), Ok("abc"));
    for bad in [
        vec![],
        vec!["Basic YWxpY2U6cHc="],
        vec!["Bearer"],
        vec!["Bearer "],
        vec!["Bearer a b"],
        vec!["Bearer a", "Bearer b"],
    ] {
        assert!(bearer_token(&headers(&bad)).is_err(), "{bad:?}");
    }
    let long = format!("Bearer {}", "x".repeat(MAX_TOKEN_BYTES + 1));
    assert!(bearer_token(&headers(&[&long])).is_err());
}

#[test]
fn only_a_verified_audience_of_the_gate_is_accepted() {
    let wanted = vec!["hitl-gate".to_string(), "other".to_string()];
    assert!(audience_accepted(&wanted, &["other".into()]));
    assert!(!audience_accepted(
        &wanted,
        &["https://kubernetes.default.svc".into()]
    ));
    assert!(!audience_accepted(&wanted, &[]));
}

#[test]
fn a_review_counts_only_authenticated_for_the_gates_audience_with_a_user() {
    let wanted = vec!["hitl-gate".to_string()];
    let review = |status: Option<TokenReviewStatus>| TokenReview {
        status,
        ..Default::default()
    };
    let ok = TokenReviewStatus {
        authenticated: Some(true),
        audiences: Some(vec!["hitl-gate".into()]),
        user: Some(UserInfo {
            username: Some("system:serviceaccount:team:bot".into()),
            uid: Some("u1".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            ..Default::default()
        }),
        error: None,
    };
    assert_eq!(
        reviewed(&review(Some(ok.clone())), &wanted),
        Ok(Caller {
            username: "system:serviceaccount:team:bot".into(),
            uid: Some("u1".into()),
            groups: vec!["system:serviceaccounts".into()],
        })
    );
    let refused = |status: TokenReviewStatus| reviewed(&review(Some(status)), &wanted).unwrap_err();
    let why = refused(TokenReviewStatus {
        authenticated: Some(false),
        error: Some("token has expired".into()),
        ..ok.clone()
    });
    assert!(why.contains("token has expired"), "{why}");
    // The apiserver's own audience (a token made for the apiserver) is not the gate's.
    let why = refused(TokenReviewStatus {
        audiences: Some(vec!["https://kubernetes.default.svc".into()]),
        ..ok.clone()
    });
    assert!(
        why.contains("not for this gate's audiences (hitl-gate)"),
        "{why}"
    );
    refused(TokenReviewStatus {
        audiences: None,
        ..ok.clone()
    });
    refused(TokenReviewStatus {
        user: None,
        ..ok.clone()
    });
    refused(TokenReviewStatus {
        authenticated: None,
        ..ok
    });
    assert!(reviewed(&review(None), &wanted).is_err());
}

#[test]
fn the_allow_lists_name_users_or_groups_and_empty_lists_allow_anyone() {
    let bot = caller(
        "system:serviceaccount:team:bot",
        &["system:serviceaccounts", "team"],
    );
    assert_eq!(not_allowed(&policy(&[], &[]), &bot), None);
    assert_eq!(
        not_allowed(&policy(&["system:serviceaccount:team:bot"], &[]), &bot),
        None
    );
    assert_eq!(not_allowed(&policy(&[], &["team"]), &bot), None);
    assert_eq!(not_allowed(&policy(&["alice"], &["team"]), &bot), None);
    let why = not_allowed(&policy(&["alice"], &["admins"]), &bot).unwrap();
    assert!(why.contains("system:serviceaccount:team:bot"), "{why}");
    assert!(not_allowed(&policy(&[], &["admins"]), &bot).is_some());
}

#[tokio::test]
async fn refusals_answer_401_403_or_503_with_a_json_rpc_error() {
    let resp = Refused::Unauthenticated("no token".into()).response();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.headers()[header::WWW_AUTHENTICATE],
        r#"Bearer error="invalid_token""#
    );
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": UNAUTHENTICATED, "message": "approval gate: no token"}})
    );
    let resp = Refused::Forbidden("not allowed".into()).response();
    assert_eq!(resp.status(), 403);
    assert!(resp.headers().get(header::WWW_AUTHENTICATE).is_none());
    assert_eq!(Refused::Unverified("down".into()).response().status(), 503);
}

#[tokio::test]
async fn a_policy_that_refuses_everyone_is_refused() {
    let (client, _mock) = mock::pair("team");
    let clock = at("2026-11-28T10:00:00Z");
    let mut p = policy(&[], &[]);
    p.audiences.clear();
    assert_eq!(
        Callers::new(&p, client.clone(), clock.clone())
            .unwrap_err()
            .0,
        "callers.audiences"
    );
    let mut p = policy(&[], &[]);
    p.max_calls_per_minute = Some(0);
    assert_eq!(
        Callers::new(&p, client, clock).unwrap_err().0,
        "callers.max_calls_per_minute"
    );
}

#[tokio::test]
async fn concurrent_requests_share_one_review_and_the_cache_holds_until_the_bound() {
    let (client, mut api) = mock::pair("team");
    let clock = at("2026-11-28T10:00:00Z");
    let callers = Arc::new(Callers::new(&policy(&[], &[]), client, clock.clone()).unwrap());
    let ask = || {
        let callers = callers.clone();
        tokio::spawn(async move { callers.authenticate(&headers(&["Bearer opaque"])).await })
    };
    let (first, second) = (ask(), ask());
    let call = api.next().await;
    assert_eq!(call.method, "POST");
    assert_eq!(call.uri, "/apis/authentication.k8s.io/v1/tokenreviews?");
    assert_eq!(
        call.body["spec"],
        json!({"audiences": ["hitl-gate"], "token": "opaque"})
    );
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    call.reply.respond(
        201,
        &answer(true, &["hitl-gate"], "system:serviceaccount:team:bot"),
    );
    for request in [first, second] {
        let caller = request.await.unwrap().unwrap();
        assert_eq!(caller.username, "system:serviceaccount:team:bot");
        assert_eq!(caller.uid.as_deref(), Some("uid-1"));
    }
    assert!(api.is_idle(), "one review for both");
    // Cached: no review until the bound (the opaque token has no exp).
    *clock.0.lock().unwrap() = "2026-11-28T10:09:59Z".parse().unwrap();
    callers
        .authenticate(&headers(&["Bearer opaque"]))
        .await
        .unwrap();
    assert!(api.is_idle());
    // Past it, the apiserver is asked again, and its refusal now counts.
    *clock.0.lock().unwrap() = "2026-11-28T10:10:00Z".parse().unwrap();
    let again = tokio::spawn({
        let callers = callers.clone();
        async move { callers.authenticate(&headers(&["Bearer opaque"])).await }
    });
    let call = api.next().await;
    call.reply.respond(201, &answer(false, &[], ""));
    assert!(matches!(
        again.await.unwrap(),
        Err(Refused::Unauthenticated(_))
    ));
}

#[tokio::test]
async fn a_jwt_is_trusted_no_longer_than_its_exp() {
    use base64::Engine;
    let (client, mut api) = mock::pair("team");
    let clock = at("2026-11-28T10:00:00Z");
    let exp = "2026-11-28T10:02:00Z"
        .parse::<Timestamp>()
        .unwrap()
        .as_second();
    let b64 = |s: String| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let token = format!(
        "{}.{}.sig",
        b64("{}".into()),
        b64(format!(r#"{{"exp":{exp}}}"#))
    );
    let bearer = format!("Bearer {token}");
    let callers = Arc::new(Callers::new(&policy(&[], &[]), client, clock.clone()).unwrap());
    let ask = || {
        let (callers, bearer) = (callers.clone(), bearer.clone());
        tokio::spawn(async move { callers.authenticate(&headers(&[&bearer])).await })
    };
    let first = ask();
    api.next()
        .await
        .reply
        .respond(201, &answer(true, &["hitl-gate"], "bot"));
    first.await.unwrap().unwrap();
    *clock.0.lock().unwrap() = "2026-11-28T10:01:59Z".parse().unwrap();
    ask().await.unwrap().unwrap();
    assert!(api.is_idle());
    *clock.0.lock().unwrap() = "2026-11-28T10:02:00Z".parse().unwrap();
    let late = ask();
    api.next().await.reply.respond(201, &answer(false, &[], ""));
    assert!(late.await.unwrap().is_err());
}

#[tokio::test]
async fn a_failing_review_refuses_and_is_not_cached() {
    let (client, mut api) = mock::pair("team");
    let clock = at("2026-11-28T10:00:00Z");
    let callers = Arc::new(Callers::new(&policy(&["alice"], &[]), client, clock).unwrap());
    let ask = || {
        let callers = callers.clone();
        tokio::spawn(async move { callers.authenticate(&headers(&["Bearer t"])).await })
    };
    let first = ask();
    api.next().await.reply.respond(
        500,
        &hitl_test_kit::status(500, "InternalError", "etcd down"),
    );
    match first.await.unwrap() {
        Err(Refused::Unverified(why)) => assert!(why.contains("TokenReview failed"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Verified the next time, but not allowed: 403, and cached as the identity it is.
    let second = ask();
    api.next()
        .await
        .reply
        .respond(201, &answer(true, &["hitl-gate"], "mallory"));
    assert!(matches!(second.await.unwrap(), Err(Refused::Forbidden(_))));
    assert!(matches!(ask().await.unwrap(), Err(Refused::Forbidden(_))));
    assert!(api.is_idle());
}

#[tokio::test]
async fn each_caller_has_its_own_call_budget() {
    let (client, _api) = mock::pair("team");
    let mut p = policy(&[], &[]);
    p.max_calls_per_minute = Some(2);
    let callers = Callers::new(&p, client, at("2026-11-28T10:00:00Z")).unwrap();
    let now = Instant::now();
    assert!(callers.admit_call("a", now).is_ok());
    assert!(callers.admit_call("a", now).is_ok());
    let why = callers.admit_call("a", now).unwrap_err();
    assert_eq!(
        why,
        "approval gate: caller a is over its limit of 2 tools/call per minute (callers.max_calls_per_minute); the call was not forwarded; retry in 30 s"
    );
    assert!(callers.admit_call("b", now).is_ok());
}
