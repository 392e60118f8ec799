//! The MCP sessions this gate process saw begin, per tool server, so that an ApprovalGrant for
//! one session (`spec.sessionId`) covers only calls of a session that really began here, not
//! whatever `Mcp-Session-Id` a client sends (docs/policies.md, "What a session grant
//! guarantees").
//!
//! A session begins at the gate when the upstream assigns its id: the `Mcp-Session-Id` header
//! of a successful answer to an `initialize` the gate relayed (Streamable HTTP), or the gate's
//! own id for an SSE stream it opened (HTTP+SSE). It ends when the client deletes it
//! (an HTTP `DELETE` the gate relays) or the SSE stream closes. Only a grant that names a
//! session looks here, so calls that no such grant covers pay nothing for it.
//!
//! On a shared gate (a ToolGate) a session is also its caller's: the ledger records who began
//! it, and only that caller's requests may use it ([`SessionLedger::began`] with the caller);
//! the transports refuse anyone else's request naming it as they refuse an unknown session.
//!
//! Memory is bounded: at most [`MAX_SESSIONS`] ids, each at most [`MAX_SESSION_ID_BYTES`]
//! bytes (no grant can name a longer one). On a shared gate each caller holds at most
//! [`MAX_SESSIONS_PER_CALLER`] of them: a caller past its quota forgets its own least recently
//! used session, and when the ledger is full the caller holding the most gives one up, so one
//! caller beginning sessions without end never forgets another caller's. Nothing survives a
//! restart of the gate: sessions begun before it are unknown to it, and their grants cover
//! nothing until the client begins a new session. Both fail closed: the call waits for a person.

use std::sync::{LazyLock, Mutex};

use super::caller_quota::CallerQuota;

/// Most sessions remembered per gate process. An entry holds the server's namespace and name
/// and the id, a few hundred bytes at most, so the ledger stays under about 3 MiB.
pub const MAX_SESSIONS: usize = 4096;

/// Most sessions one caller of a shared gate holds in the ledger (an Agent's gate has one
/// client, which may hold them all).
pub const MAX_SESSIONS_PER_CALLER: usize = 256;

/// Longest session id remembered, the longest an ApprovalGrant's `sessionId` may be.
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// A bounded set of (tool server, session id), each caller's least recently begun or used
/// evicted first.
pub struct SessionLedger {
    per_caller: usize,
    /// The keys ([`key`]) by last use, each with the caller who began it (none on an Agent's
    /// gate).
    inner: Mutex<CallerQuota<String, Option<String>>>,
}

/// The ledger's key of session `id` of the server `namespace/name` (neither holds a space).
fn key(namespace: &str, name: &str, id: &str) -> String {
    format!("{namespace}/{name} {id}")
}

impl SessionLedger {
    /// A ledger remembering at most `capacity` sessions, at most `per_caller` of one caller of
    /// a shared gate.
    pub fn new(capacity: usize, per_caller: usize) -> Self {
        Self {
            per_caller,
            inner: Mutex::new(CallerQuota::new(capacity)),
        }
    }

    /// Records that session `id` of the server `namespace/name` began at this gate, for
    /// `caller` on a shared gate (again, it becomes the most recent, and its caller's). Past
    /// the caller's quota its own least recently used session is forgotten; past the capacity,
    /// that of the caller holding the most. An id longer than [`MAX_SESSION_ID_BYTES`], or
    /// empty, is not recorded: no grant can name it.
    pub fn begin(&self, namespace: &str, name: &str, id: &str, caller: Option<&str>) {
        if id.is_empty() || id.len() > MAX_SESSION_ID_BYTES {
            return;
        }
        let quota = if caller.is_some() {
            self.per_caller
        } else {
            usize::MAX
        };
        let mut recent = self.inner.lock().expect("session ledger lock");
        recent.touch(key(namespace, name, id), caller.map(String::from), quota);
    }

    /// Forgets session `id` of the server `namespace/name` (the client deleted it, or its
    /// stream closed).
    pub fn end(&self, namespace: &str, name: &str, id: &str) {
        let mut recent = self.inner.lock().expect("session ledger lock");
        recent.forget(&key(namespace, name, id));
    }

    /// Whether session `id` of the server `namespace/name` began at this gate, by `caller`
    /// (none on an Agent's gate), and has not ended or been forgotten; if so it becomes the
    /// most recently used. Another caller's session is as unknown as one that never began.
    pub fn began(&self, namespace: &str, name: &str, id: &str, caller: Option<&str>) -> bool {
        let key = key(namespace, name, id);
        let mut recent = self.inner.lock().expect("session ledger lock");
        match recent.caller_of(&key) {
            Some(began_by) if began_by.as_deref() == caller => {}
            _ => return false,
        }
        recent.touch(key, caller.map(String::from), usize::MAX);
        true
    }
}

/// This gate process's ledger: the sessions its routes saw begin.
pub fn ledger() -> &'static SessionLedger {
    static LEDGER: LazyLock<SessionLedger> =
        LazyLock::new(|| SessionLedger::new(MAX_SESSIONS, MAX_SESSIONS_PER_CALLER));
    &LEDGER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_counts_for_its_server_from_its_beginning_to_its_end() {
        let ledger = SessionLedger::new(8, 8);
        assert!(!ledger.began("tools", "fs", "s1", None));
        ledger.begin("tools", "fs", "s1", None);
        assert!(ledger.began("tools", "fs", "s1", None));
        // Another server's session by the same id is another session.
        assert!(!ledger.began("tools", "db", "s1", None));
        assert!(!ledger.began("other", "fs", "s1", None));
        ledger.end("tools", "fs", "s1");
        assert!(!ledger.began("tools", "fs", "s1", None));
        // Ending what never began changes nothing.
        ledger.end("tools", "fs", "never");
    }

    #[test]
    fn ids_no_grant_can_name_are_not_recorded() {
        let ledger = SessionLedger::new(8, 8);
        let long = "x".repeat(MAX_SESSION_ID_BYTES + 1);
        ledger.begin("tools", "fs", &long, None);
        assert!(!ledger.began("tools", "fs", &long, None));
        ledger.begin("tools", "fs", "", None);
        assert!(!ledger.began("tools", "fs", "", None));
        let longest = "x".repeat(MAX_SESSION_ID_BYTES);
        ledger.begin("tools", "fs", &longest, None);
        assert!(ledger.began("tools", "fs", &longest, None));
    }

    #[test]
    fn past_its_capacity_the_least_recently_used_is_forgotten() {
        let ledger = SessionLedger::new(3, 3);
        for id in ["a", "b", "c"] {
            ledger.begin("tools", "fs", id, None);
        }
        // A use makes "a" recent; "b" is now the oldest.
        assert!(ledger.began("tools", "fs", "a", None));
        ledger.begin("tools", "fs", "d", None);
        assert!(!ledger.began("tools", "fs", "b", None));
        for id in ["a", "c", "d"] {
            assert!(ledger.began("tools", "fs", id, None), "{id}");
        }
        // Beginning one again does not count it twice.
        ledger.begin("tools", "fs", "d", None);
        ledger.begin("tools", "fs", "e", None);
        let kept = ["a", "c", "d", "e"]
            .iter()
            .filter(|id| ledger.began("tools", "fs", id, None))
            .count();
        assert_eq!(kept, 3);
    }

    #[test]
    fn a_shared_gates_session_is_its_callers_only() {
        let ledger = SessionLedger::new(8, 8);
        ledger.begin("tools", "fs", "s1", Some("alice"));
        assert!(ledger.began("tools", "fs", "s1", Some("alice")));
        assert!(!ledger.began("tools", "fs", "s1", Some("bob")));
        assert!(!ledger.began("tools", "fs", "s1", None));
        // An Agent's gate session has no caller: no caller of a shared gate owns it.
        ledger.begin("tools", "fs", "s2", None);
        assert!(ledger.began("tools", "fs", "s2", None));
        assert!(!ledger.began("tools", "fs", "s2", Some("alice")));
        // Bob's attempt changed nothing: the session is still alice's.
        assert!(ledger.began("tools", "fs", "s1", Some("alice")));
    }

    #[test]
    fn many_sessions_stay_within_the_capacity() {
        let ledger = SessionLedger::new(MAX_SESSIONS, MAX_SESSIONS_PER_CALLER);
        for n in 0..MAX_SESSIONS * 3 {
            ledger.begin("tools", "fs", &format!("s{n}"), None);
        }
        let recent = ledger.inner.lock().unwrap();
        assert_eq!(recent.len(), MAX_SESSIONS);
        assert!(recent.consistent());
        drop(recent);
        assert!(ledger.began("tools", "fs", &format!("s{}", MAX_SESSIONS * 3 - 1), None));
        assert!(!ledger.began("tools", "fs", "s0", None));
    }

    #[test]
    fn a_caller_past_its_quota_forgets_its_own_sessions_only() {
        let ledger = SessionLedger::new(8, 3);
        ledger.begin("tools", "fs", "a1", Some("alice"));
        for n in 0..100 {
            ledger.begin("tools", "fs", &format!("b{n}"), Some("bob"));
        }
        assert!(ledger.began("tools", "fs", "a1", Some("alice")));
        let bobs = (0..100)
            .filter(|n| ledger.began("tools", "fs", &format!("b{n}"), Some("bob")))
            .count();
        assert_eq!(bobs, 3, "bob keeps his quota, his most recent");
        assert!(ledger.began("tools", "fs", "b99", Some("bob")));
    }

    #[test]
    fn a_full_ledger_forgets_a_session_of_the_caller_holding_the_most() {
        let ledger = SessionLedger::new(6, 4);
        for n in 0..2 {
            ledger.begin("tools", "fs", &format!("a{n}"), Some("alice"));
        }
        for n in 0..4 {
            ledger.begin("tools", "fs", &format!("b{n}"), Some("bob"));
        }
        // Full: carol's first session costs bob (4 held), not alice (2).
        ledger.begin("tools", "fs", "c0", Some("carol"));
        for id in ["a0", "a1"] {
            assert!(ledger.began("tools", "fs", id, Some("alice")), "{id}");
        }
        assert!(ledger.began("tools", "fs", "c0", Some("carol")));
        assert!(!ledger.began("tools", "fs", "b0", Some("bob")));
        let recent = ledger.inner.lock().unwrap();
        assert_eq!(recent.len(), 6);
        assert!(recent.consistent());
    }
}
