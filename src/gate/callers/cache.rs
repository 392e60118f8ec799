//! The identities the apiserver verified, by token: a bounded cache so that a caller's every
//! request does not cost a TokenReview. Keyed by the SHA-256 of the token, so the cache never
//! holds a token; an entry lives until the token's own expiry (`exp` of its JWT payload, read
//! only after the apiserver accepted the token) but at most [`MAX_VERIFIED_FOR`], so a token
//! the apiserver stops accepting before its `exp` (its ServiceAccount or Pod deleted, a
//! legacy Secret token removed) stops working at the gate within that bound. One caller holds
//! at most [`MAX_CACHED_TOKENS_PER_CALLER`] entries: a caller minting tokens without end
//! forgets its own, and a full cache takes one from the caller holding the most, never
//! making another caller's next request cost a TokenReview.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use jiff::{SignedDuration, Timestamp};
use sha2::{Digest, Sha256};

use crate::api::approval_request::Caller;
use crate::gate::caller_quota::CallerQuota;

/// The longest a verified token is trusted without asking the apiserver again: a
/// ServiceAccount deleted (or a token otherwise revoked) is refused by the gate at most this
/// long after the apiserver stops accepting it.
pub const MAX_VERIFIED_FOR: SignedDuration = SignedDuration::from_mins(10);

/// Most tokens remembered; past it the oldest entry is forgotten (its next request costs a
/// TokenReview again). An entry is a hash, a username and groups: well under 1 KiB each.
pub const MAX_CACHED_TOKENS: usize = 4096;

/// Most tokens remembered of one caller (a client rotating a projected token holds one or two
/// at a time).
pub const MAX_CACHED_TOKENS_PER_CALLER: usize = 16;

/// The cache's key of a token: its SHA-256.
pub type TokenKey = [u8; 32];

/// The key of `token`.
pub fn token_key(token: &str) -> TokenKey {
    Sha256::digest(token.as_bytes()).into()
}

/// The `exp` claim of a JWT's payload, if `token` is a JWT that has one. The signature is not
/// checked: call this only for a token the apiserver has accepted.
pub fn jwt_expiry(token: &str) -> Option<Timestamp> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?;
    let seconds = exp.as_i64().or_else(|| exp.as_f64().map(|f| f as i64))?;
    Timestamp::from_second(seconds).ok()
}

/// Until when a token verified at `now` may be trusted without asking again: its `exp`, but at
/// most [`MAX_VERIFIED_FOR`] from `now`.
pub fn trusted_until(expiry: Option<Timestamp>, now: Timestamp) -> Timestamp {
    let bound = now.checked_add(MAX_VERIFIED_FOR).unwrap_or(Timestamp::MAX);
    expiry.map_or(bound, |exp| exp.min(bound))
}

/// One verified token.
struct Entry {
    caller: Arc<Caller>,
    until: Timestamp,
}

/// Verified identities by token key, at most `capacity`, at most `per_caller` of one caller;
/// a caller past its quota forgets its own oldest, a full cache the oldest of the caller
/// holding the most.
pub struct TokenCache {
    capacity: usize,
    per_caller: usize,
    entries: HashMap<TokenKey, Entry>,
    /// The keys by insertion, each with its caller's username.
    order: CallerQuota<TokenKey, String>,
}

impl TokenCache {
    /// An empty cache of at most `capacity` tokens, `per_caller` of one caller.
    pub fn new(capacity: usize, per_caller: usize) -> Self {
        Self {
            capacity,
            per_caller,
            entries: HashMap::new(),
            order: CallerQuota::new(capacity),
        }
    }

    /// The identity verified for `key`, if it is still trusted at `now`; an entry past its
    /// time is forgotten.
    pub fn get(&mut self, key: &TokenKey, now: Timestamp) -> Option<Arc<Caller>> {
        let entry = self.entries.get(key)?;
        if now < entry.until {
            return Some(entry.caller.clone());
        }
        self.entries.remove(key);
        self.order.forget(key);
        None
    }

    /// Remembers that `key` is `caller` until `until`; nothing when that is not after `now`.
    /// Past the caller's quota its oldest entries are forgotten; past the capacity, those of
    /// the caller holding the most.
    pub fn insert(&mut self, key: TokenKey, caller: Arc<Caller>, until: Timestamp, now: Timestamp) {
        if until <= now || self.capacity == 0 {
            return;
        }
        let username = caller.username.clone();
        self.entries.insert(key, Entry { caller, until });
        for forgotten in self.order.touch(key, username, self.per_caller) {
            self.entries.remove(&forgotten);
        }
    }

    /// How many tokens are remembered.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        debug_assert_eq!(self.entries.len(), self.order.len());
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn caller(name: &str) -> Arc<Caller> {
        Arc::new(Caller {
            username: name.into(),
            ..Default::default()
        })
    }

    /// A JWT (unsigned: the cache never checks signatures) with `payload`.
    fn jwt(payload: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", b64(r#"{"alg":"RS256"}"#), b64(payload))
    }

    #[test]
    fn the_key_is_a_hash_and_not_the_token() {
        let key = token_key("secret-token");
        assert_eq!(key, token_key("secret-token"));
        assert_ne!(key, token_key("secret-token2"));
        assert!(!hex::encode(key).contains("secret"));
    }

    #[test]
    fn exp_is_read_from_the_payload_of_a_jwt_only() {
        assert_eq!(
            jwt_expiry(&jwt(r#"{"aud":["gate"],"exp":1800000000}"#)),
            Some(Timestamp::from_second(1_800_000_000).unwrap())
        );
        assert_eq!(
            jwt_expiry(&jwt(r#"{"exp":1800000000.5}"#)),
            Some(Timestamp::from_second(1_800_000_000).unwrap())
        );
        // Legacy Secret tokens have no exp; opaque tokens are no JWT at all.
        assert_eq!(jwt_expiry(&jwt(r#"{"sub":"x"}"#)), None);
        assert_eq!(jwt_expiry("opaque-token"), None);
        assert_eq!(jwt_expiry("a.b"), None);
        assert_eq!(jwt_expiry(&format!("{}.extra", jwt(r#"{"exp":1}"#))), None);
        assert_eq!(jwt_expiry("a.!!!.c"), None);
    }

    #[test]
    fn a_token_is_trusted_until_its_exp_but_never_longer_than_the_bound() {
        let now = t("2026-11-28T10:00:00Z");
        let soon = t("2026-11-28T10:03:00Z");
        assert_eq!(trusted_until(Some(soon), now), soon);
        let late = t("2026-11-29T10:00:00Z");
        assert_eq!(trusted_until(Some(late), now), t("2026-11-28T10:10:00Z"));
        assert_eq!(trusted_until(None, now), t("2026-11-28T10:10:00Z"));
    }

    #[test]
    fn entries_expire_by_the_injected_clock() {
        let mut cache = TokenCache::new(8, 8);
        let now = t("2026-11-28T10:00:00Z");
        let key = token_key("a");
        cache.insert(key, caller("alice"), t("2026-11-28T10:10:00Z"), now);
        assert_eq!(
            cache.get(&key, t("2026-11-28T10:09:59Z")).unwrap().username,
            "alice"
        );
        assert!(cache.get(&key, t("2026-11-28T10:10:00Z")).is_none());
        // Forgotten, not just hidden.
        assert_eq!(cache.remembered(), 0);
        // A token already past its time is not remembered.
        cache.insert(key, caller("alice"), now, now);
        assert!(cache.get(&key, now).is_none());
    }

    #[test]
    fn past_its_capacity_the_oldest_entry_is_forgotten() {
        let mut cache = TokenCache::new(2, 2);
        let now = t("2026-11-28T10:00:00Z");
        let until = t("2026-11-28T10:05:00Z");
        for name in ["a", "b", "c"] {
            cache.insert(token_key(name), caller(name), until, now);
        }
        assert_eq!(cache.remembered(), 2);
        assert!(cache.get(&token_key("a"), now).is_none());
        assert!(cache.get(&token_key("b"), now).is_some());
        assert!(cache.get(&token_key("c"), now).is_some());
        // Verified again, an entry becomes the newest.
        cache.insert(token_key("b"), caller("b"), until, now);
        cache.insert(token_key("d"), caller("d"), until, now);
        assert!(cache.get(&token_key("c"), now).is_none());
        assert!(cache.get(&token_key("b"), now).is_some());
    }

    /// Issue 54: one caller minting tokens without end forgets its own, never another's.
    #[test]
    fn a_caller_past_its_quota_forgets_its_own_tokens_only() {
        let mut cache = TokenCache::new(8, 3);
        let now = t("2026-11-28T10:00:00Z");
        let until = t("2026-11-28T10:05:00Z");
        cache.insert(token_key("alice-1"), caller("alice"), until, now);
        for n in 0..100 {
            cache.insert(token_key(&format!("bob-{n}")), caller("bob"), until, now);
        }
        assert!(cache.get(&token_key("alice-1"), now).is_some());
        assert_eq!(cache.remembered(), 4);
        assert!(cache.get(&token_key("bob-99"), now).is_some());
        assert!(cache.get(&token_key("bob-96"), now).is_none());
        // Full: carol's token costs the caller holding the most (bob), not alice.
        let mut cache = TokenCache::new(4, 3);
        cache.insert(token_key("alice-1"), caller("alice"), until, now);
        for n in 0..3 {
            cache.insert(token_key(&format!("bob-{n}")), caller("bob"), until, now);
        }
        cache.insert(token_key("carol-1"), caller("carol"), until, now);
        assert!(cache.get(&token_key("alice-1"), now).is_some());
        assert!(cache.get(&token_key("carol-1"), now).is_some());
        assert!(cache.get(&token_key("bob-0"), now).is_none());
        assert_eq!(cache.remembered(), 4);
    }
}
