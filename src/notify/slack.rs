//! Approving from Slack: the checks on an interaction Slack sends when someone presses the
//! Approve or Deny button of a message (signature, age, replay), what it asks for, and who that
//! person is in Kubernetes, by the cluster admin's mapping. The decision itself is written by
//! impersonating that user (`controller::slack`), so RBAC and the admission policies judge it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use sha2::Sha256;

use crate::api::approval_request::DecisionType;

/// `action_id` of the Approve button.
pub const APPROVE: &str = "hitl_approve";
/// `action_id` of the Deny button.
pub const DENY: &str = "hitl_deny";
/// Oldest (and furthest in the future) request timestamp accepted, as Slack recommends.
pub const MAX_AGE: Duration = Duration::from_secs(300);

/// Why an interaction was refused before it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// No `X-Slack-Request-Timestamp` or `X-Slack-Signature`, or not in their format.
    Unsigned,
    /// The timestamp is more than [`MAX_AGE`] away from now.
    Stale,
    /// The signature is not the signing secret's.
    Forged,
    /// The same signed request came before.
    Replayed,
}

impl Rejection {
    /// What the log says.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unsigned => "missing or malformed X-Slack-Request-Timestamp / X-Slack-Signature",
            Self::Stale => "request timestamp more than 5 minutes from now",
            Self::Forged => "signature does not match the signing secret",
            Self::Replayed => "request already received (replay)",
        }
    }
}

/// Verifies Slack's request signatures (`v0=` HMAC-SHA256 of `v0:{timestamp}:{body}` with the
/// app's signing secret) and remembers the signatures it accepted for [`MAX_AGE`], so the same
/// request is not taken twice.
pub struct Verifier {
    key: Hmac<Sha256>,
    seen: Mutex<HashMap<Vec<u8>, Timestamp>>,
}

impl Verifier {
    /// A verifier for the signing secret `secret`.
    pub fn new(secret: &[u8]) -> Self {
        Self {
            key: Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length"),
            seen: Mutex::default(),
        }
    }

    /// Whether `body`, sent with headers `timestamp` and `signature`, is a fresh request from
    /// Slack at `now`.
    pub fn verify(
        &self,
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
        now: Timestamp,
    ) -> Result<(), Rejection> {
        let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
            return Err(Rejection::Unsigned);
        };
        let seconds: i64 = timestamp.parse().map_err(|_| Rejection::Unsigned)?;
        let signature = signature
            .strip_prefix("v0=")
            .and_then(|hex_digits| hex::decode(hex_digits).ok())
            .ok_or(Rejection::Unsigned)?;
        let sent = Timestamp::from_second(seconds).map_err(|_| Rejection::Unsigned)?;
        if now.duration_since(sent).abs() > SignedDuration::try_from(MAX_AGE).unwrap_or_default() {
            return Err(Rejection::Stale);
        }
        let mut mac = self.key.clone();
        mac.update(format!("v0:{timestamp}:").as_bytes());
        mac.update(body);
        mac.verify_slice(&signature)
            .map_err(|_| Rejection::Forged)?;
        let mut seen = self.seen.lock().expect("not poisoned");
        let horizon = now - SignedDuration::try_from(MAX_AGE * 2).unwrap_or_default();
        seen.retain(|_, at| *at > horizon);
        if seen.insert(signature, now).is_some() {
            return Err(Rejection::Replayed);
        }
        Ok(())
    }
}

/// What a button press asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interaction {
    /// The Slack user ID of who pressed it.
    pub slack_user: String,
    /// Their Slack username, for the reason text.
    pub slack_name: String,
    /// Approve or Deny.
    pub decision: DecisionType,
    /// Namespace of the ApprovalRequest.
    pub namespace: String,
    /// Name of the ApprovalRequest.
    pub name: String,
    /// Where Slack takes a reply to the person.
    pub response_url: Option<String>,
}

#[derive(Deserialize)]
struct Form {
    payload: String,
}

#[derive(Deserialize)]
struct Payload {
    #[serde(rename = "type")]
    kind: String,
    user: User,
    #[serde(default)]
    actions: Vec<Action>,
    #[serde(default)]
    response_url: Option<String>,
}

#[derive(Deserialize)]
struct User {
    id: String,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct Action {
    action_id: String,
    #[serde(default)]
    value: Option<String>,
}

/// Reads a `block_actions` interaction (form field `payload`, JSON) of one of our buttons.
pub fn parse(body: &[u8]) -> Result<Interaction, String> {
    let form: Form = serde_urlencoded::from_bytes(body)
        .map_err(|e| format!("not a Slack interaction form: {e}"))?;
    let payload: Payload = serde_json::from_str(&form.payload)
        .map_err(|e| format!("not a Slack interaction payload: {e}"))?;
    if payload.kind != "block_actions" {
        return Err(format!(
            "interaction type {:?} is not handled (block_actions is)",
            payload.kind
        ));
    }
    let action = payload
        .actions
        .first()
        .ok_or("the interaction carries no action")?;
    let decision = match action.action_id.as_str() {
        APPROVE => DecisionType::Approve,
        DENY => DecisionType::Deny,
        other => {
            return Err(format!(
                "action {other:?} is not one of this operator's buttons"
            ));
        }
    };
    let (namespace, name) = action
        .value
        .as_deref()
        .and_then(|v| v.split_once('/'))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .ok_or("the button's value is not namespace/name")?;
    Ok(Interaction {
        slack_name: payload
            .user
            .username
            .or(payload.user.name)
            .unwrap_or_else(|| payload.user.id.clone()),
        slack_user: payload.user.id,
        decision,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        response_url: payload.response_url,
    })
}

/// The Kubernetes identity a Slack user acts as.
#[derive(Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Person {
    /// Kubernetes username (as `kubectl auth whoami` shows it).
    pub user: String,
    /// Groups to impersonate with it (those that grant the user's RBAC), if any.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// Slack user ID to Kubernetes identity: the cluster admin's mapping (the chart's
/// `slack.users`, mounted from a ConfigMap).
pub type Mapping = BTreeMap<String, Person>;

/// Reads a mapping (YAML or JSON).
pub fn mapping(text: &str) -> Result<Mapping, String> {
    serde_saphyr::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";

    fn sign(timestamp: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
        mac.update(format!("v0:{timestamp}:").as_bytes());
        mac.update(body);
        format!("v0={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn slacks_documented_example_verifies() {
        // The example of Slack's "Verifying requests from Slack" guide.
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let verifier = Verifier::new(SECRET);
        let now = Timestamp::from_second(1531420618).unwrap();
        let signature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(
            verifier.verify(Some("1531420618"), Some(signature), body, now),
            Ok(())
        );
        assert_eq!(sign("1531420618", body), signature);
    }

    #[test]
    fn forged_stale_replayed_and_unsigned_requests_are_refused() {
        let verifier = Verifier::new(SECRET);
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let body = b"payload=%7B%7D";
        let fresh = "1800000000";
        let good = sign(fresh, body);
        assert_eq!(
            verifier.verify(Some(fresh), Some(&good), b"payload=%7B%22x%22%7D", now),
            Err(Rejection::Forged),
            "another body"
        );
        assert_eq!(
            verifier.verify(Some("1799999999"), Some(&good), body, now),
            Err(Rejection::Forged),
            "another timestamp"
        );
        let other = Verifier::new(b"not the secret");
        assert_eq!(
            other.verify(Some(fresh), Some(&good), body, now),
            Err(Rejection::Forged)
        );
        let old = "1799999699";
        assert_eq!(
            verifier.verify(Some(old), Some(&sign(old, body)), body, now),
            Err(Rejection::Stale)
        );
        let ahead = "1800000301";
        assert_eq!(
            verifier.verify(Some(ahead), Some(&sign(ahead, body)), body, now),
            Err(Rejection::Stale)
        );
        for (ts, sig) in [
            (None, Some(good.as_str())),
            (Some(fresh), None),
            (Some("soon"), Some(good.as_str())),
            (Some(fresh), Some("v1=00")),
        ] {
            assert_eq!(
                verifier.verify(ts, sig, body, now),
                Err(Rejection::Unsigned)
            );
        }
        assert_eq!(verifier.verify(Some(fresh), Some(&good), body, now), Ok(()));
        assert_eq!(
            verifier.verify(Some(fresh), Some(&good), body, now),
            Err(Rejection::Replayed)
        );
    }

    fn form(payload: serde_json::Value) -> Vec<u8> {
        serde_urlencoded::to_string([("payload", payload.to_string())])
            .unwrap()
            .into_bytes()
    }

    #[test]
    fn a_button_press_names_the_person_the_decision_and_the_request() {
        let body = form(serde_json::json!({
            "type": "block_actions",
            "user": {"id": "U0ALICE", "username": "alice.s"},
            "actions": [{"action_id": "hitl_deny", "value": "team-a/helper-delete-file-1"}],
            "response_url": "https://hooks.slack.com/actions/T0/1/abc"
        }));
        assert_eq!(
            parse(&body),
            Ok(Interaction {
                slack_user: "U0ALICE".into(),
                slack_name: "alice.s".into(),
                decision: DecisionType::Deny,
                namespace: "team-a".into(),
                name: "helper-delete-file-1".into(),
                response_url: Some("https://hooks.slack.com/actions/T0/1/abc".into()),
            })
        );
        let other = form(
            serde_json::json!({"type": "block_actions", "user": {"id": "U1"},
            "actions": [{"action_id": "something_else", "value": "a/b"}]}),
        );
        assert!(
            parse(&other)
                .unwrap_err()
                .contains("not one of this operator's buttons")
        );
        let bad_value = form(
            serde_json::json!({"type": "block_actions", "user": {"id": "U1"},
            "actions": [{"action_id": "hitl_approve", "value": "no-slash"}]}),
        );
        assert!(parse(&bad_value).unwrap_err().contains("namespace/name"));
        assert!(parse(b"payload=not-json").is_err());
    }

    #[test]
    fn the_mapping_names_users_and_their_groups() {
        let m = mapping(
            "U0ALICE: {user: alice, groups: [approvers]}\nU0BOB: {user: bob@example.com}\n",
        )
        .unwrap();
        assert_eq!(
            m["U0ALICE"],
            Person {
                user: "alice".into(),
                groups: vec!["approvers".into()]
            }
        );
        assert!(m["U0BOB"].groups.is_empty());
        assert!(
            mapping("U1: {user: a, group: x}").is_err(),
            "a misspelt field is an error"
        );
    }
}
