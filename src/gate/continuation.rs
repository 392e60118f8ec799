//! Input-required rounds of a gated call (MCP 2026-07-28). A server may answer a `tools/call`
//! with `resultType: "input_required"`: questions for the client (`inputRequests`) and its own
//! state (`requestState`). The client then sends the same call again with its answers
//! (`inputResponses`) and that state echoed. For a gated tool the gate treats that retry as the
//! continuation of the call a person approved, not as a new call:
//!
//! - when an approved call's answer is `input_required`, the gate notes a [`Continuation`]:
//!   the tool, the binding hash of the approved arguments, the call's session and the
//!   `requestState` the server sent;
//! - a retry (a `tools/call` with `requestState` or `inputResponses`) of a gated tool is
//!   forwarded without asking only if it takes such a continuation: the same `requestState`
//!   (or none, if the server sent none) and session, then the same tool and the same arguments.
//!   Taking it removes it, so each continuation passes once; a retry that finds none, or whose
//!   tool or arguments differ (the continuation is then used up too), is refused and not
//!   forwarded. Its own answer may be `input_required` again, noting the next round's
//!   continuation.
//!
//! So one approval runs one call, with as many input rounds as its server asks for, each
//! round exactly once; the answers to the server's questions come from the client, as they
//! would without the gate. Continuations live [`CONTINUATION_TTL`] and at most
//! [`MAX_CONTINUATIONS`] are kept per server, at most [`MAX_CONTINUATIONS_PER_CALLER`] of one
//! caller of a shared gate: past its quota a caller's own oldest goes, past the server's bound
//! the oldest of the caller holding the most, never another caller's for one at its quota.
//! They are in this gate's
//! memory only, so after a restart (or on another replica) a retry is refused and the call
//! must be made again from its first round, which asks for a new approval.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::edit_note;
use super::jsonrpc;
use super::upstream::Upstream;

/// How long a continuation can be taken after the answer that allowed it.
pub const CONTINUATION_TTL: Duration = Duration::from_secs(600);

/// The most continuations kept per server.
pub const MAX_CONTINUATIONS: usize = 1024;

/// The most continuations kept per server for one caller of a shared gate (an Agent's gate
/// has one client, which may hold them all).
pub const MAX_CONTINUATIONS_PER_CALLER: usize = 64;

/// The next round an approved call may take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continuation {
    /// The tool called.
    pub tool: String,
    /// The binding hash of the approved arguments ([`super::hash::ArgsDigest::binding`]).
    pub binding: String,
    /// The call's MCP session, if it had one.
    pub session: Option<String>,
    /// The call's caller on a shared gate: only its own retries take the continuation.
    pub caller: Option<String>,
    /// The `requestState` of the server's `input_required` answer, if it sent one.
    pub request_state: Option<String>,
    /// The ApprovalRequest (or ApprovalGrant) that approved the call.
    pub approved_by: String,
}

/// The continuations of one server.
#[derive(Debug, Default)]
pub struct Continuations(Mutex<VecDeque<(Instant, Continuation)>>);

impl Continuations {
    /// Notes `next`, allowed at `now`. Expired continuations are dropped, then, past its
    /// caller's quota, that caller's oldest, and past [`MAX_CONTINUATIONS`] the oldest of the
    /// caller holding the most.
    pub fn offer(&self, next: Continuation, now: Instant) {
        let mut kept = self.0.lock().expect("continuations lock");
        kept.retain(|(at, _)| now.saturating_duration_since(*at) < CONTINUATION_TTL);
        let quota = if next.caller.is_some() {
            MAX_CONTINUATIONS_PER_CALLER
        } else {
            MAX_CONTINUATIONS
        };
        make_room(&mut kept, &next.caller, quota, MAX_CONTINUATIONS);
        kept.push_back((now, next));
    }

    /// Takes (removes) the live continuation with this `request_state`, `session` and
    /// `caller`, if any.
    pub fn take(
        &self,
        request_state: Option<&str>,
        session: Option<&str>,
        caller: Option<&str>,
        now: Instant,
    ) -> Option<Continuation> {
        let mut kept = self.0.lock().expect("continuations lock");
        kept.retain(|(at, _)| now.saturating_duration_since(*at) < CONTINUATION_TTL);
        let at = kept.iter().position(|(_, c)| {
            c.request_state.as_deref() == request_state
                && c.session.as_deref() == session
                && c.caller.as_deref() == caller
        })?;
        kept.remove(at).map(|(_, c)| c)
    }
}

/// Drops from `kept` (oldest first) until one more of `caller` fits: `caller`'s own oldest
/// while it holds `quota`, then the oldest of whoever holds the most while `kept` holds
/// `capacity`.
fn make_room(
    kept: &mut VecDeque<(Instant, Continuation)>,
    caller: &Option<String>,
    quota: usize,
    capacity: usize,
) {
    let oldest_of = |kept: &VecDeque<(Instant, Continuation)>, who: &Option<String>| {
        kept.iter().position(|(_, c)| &c.caller == who)
    };
    while kept.iter().filter(|(_, c)| &c.caller == caller).count() >= quota {
        let Some(at) = oldest_of(kept, caller) else {
            break;
        };
        kept.remove(at);
    }
    while kept.len() >= capacity {
        let mut held: HashMap<&Option<String>, usize> = HashMap::new();
        for (_, c) in kept.iter() {
            *held.entry(&c.caller).or_default() += 1;
        }
        let Some(most) = held
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(who, _)| who.clone())
        else {
            break;
        };
        let Some(at) = oldest_of(kept, &most) else {
            break;
        };
        kept.remove(at);
    }
}

/// Watches the answer to an approved call (or to one of its continuations) for an
/// `input_required` result, and notes the continuation it allows on its server before the
/// answer is relayed, so the client's retry finds it.
pub struct Watch {
    up: Arc<Upstream>,
    /// The JSON-RPC id of the call whose answer is watched.
    id: Value,
    /// The continuation to note, but for its `requestState`.
    next: Continuation,
    /// A note to add to the call's result as a text content item (a call that ran with an
    /// approver's edit says so: [`super::outcome::edited_note`]).
    note: Option<String>,
}

impl Watch {
    /// Watches the answer to the call `id` of `next.tool` on `up`; `next` is the continuation
    /// to note (its `request_state` is replaced by the answer's).
    pub fn new(up: Arc<Upstream>, id: Value, next: Continuation) -> Self {
        Self {
            up,
            id,
            next,
            note: None,
        }
    }

    /// The watch, adding `note` to the call's result ([`Self::amend`]).
    pub fn with_note(mut self, note: Option<String>) -> Self {
        self.note = note;
        self
    }

    /// `message` with the note added as the last item of `result.content`, when there is a
    /// note and `message` is the result of the watched call with a content list; `None`
    /// otherwise (the message is relayed as it came).
    pub fn amend(&self, message: &[u8]) -> Option<Vec<u8>> {
        edit_note::add(message, &self.id, self.note.as_deref()?)
    }

    /// The JSON-RPC id of the call whose answer is watched.
    pub fn id(&self) -> &Value {
        &self.id
    }

    /// Looks at one message of the answer.
    pub fn see(&self, message: &[u8]) {
        let Some(request_state) = input_required(message, &self.id) else {
            return;
        };
        tracing::info!(server = %self.up.label, tool = %self.next.tool, approved_by = %self.next.approved_by,
            "approved call needs input; its next round may continue it once");
        self.up.continuations.offer(
            Continuation {
                request_state,
                ..self.next.clone()
            },
            Instant::now(),
        );
    }
}

/// Whether a retry of `tool` with arguments bound to `binding` may go on the continuation it
/// took: the name of what approved it, or why not.
pub fn check(taken: Option<Continuation>, tool: &str, binding: &str) -> Result<String, String> {
    let Some(taken) = taken else {
        return Err(
            "it continues no call this gate approved: its requestState is unknown, \
                    was already used, or expired"
                .into(),
        );
    };
    if taken.tool != tool {
        return Err(format!(
            "its requestState continues a call of tool '{}', not this one; that continuation \
             is now used up",
            taken.tool
        ));
    }
    if taken.binding != binding {
        return Err(
            "its arguments differ from the approved call's; that continuation is now used up"
                .into(),
        );
    }
    Ok(taken.approved_by)
}

/// If `message` (one JSON-RPC message of the answer to the call with id `id`) is an
/// `input_required` result for that call: the `requestState` it carries, if any. A message the
/// gate cannot read as JSON, another id, or a `requestState` that is not a string allows no
/// continuation.
pub fn input_required(message: &[u8], id: &Value) -> Option<Option<String>> {
    // Most answers are not: only those mentioning it are read, field by field, without a tree
    // of the rest.
    memchr::memmem::find(message, b"input_required")?;
    let value = |raw: &serde_json::value::RawValue| serde_json::from_str::<Value>(raw.get()).ok();
    // An id is a string or a number: one longer than any the gate keeps is not this call's.
    let answer_id = jsonrpc::field(message, "id").ok()??;
    if answer_id.get().len() > MAX_ID_BYTES || value(answer_id).as_ref() != Some(id) {
        return None;
    }
    let result = jsonrpc::field(message, "result").ok()??.get().as_bytes();
    let result_type = jsonrpc::field(result, "resultType").ok()??;
    if serde_json::from_str::<String>(result_type.get()).ok()? != "input_required" {
        return None;
    }
    match jsonrpc::field(result, "requestState").ok()? {
        None => Some(None),
        Some(state) => match value(state)? {
            Value::String(state) => Some(Some(state)),
            _ => None,
        },
    }
}

/// The longest JSON-RPC id of an answer [`input_required`] reads as a tree.
const MAX_ID_BYTES: usize = 1024;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn continuation(state: Option<&str>) -> Continuation {
        Continuation {
            tool: "wipe_dir".into(),
            binding: "b1".into(),
            session: None,
            caller: None,
            request_state: state.map(String::from),
            approved_by: "req-1".into(),
        }
    }

    #[test]
    fn a_continuation_is_taken_once() {
        let kept = Continuations::default();
        let now = Instant::now();
        kept.offer(continuation(Some("s1")), now);
        assert_eq!(kept.take(Some("s2"), None, None, now), None);
        assert_eq!(
            kept.take(Some("s1"), Some("other-session"), None, now),
            None
        );
        assert_eq!(
            kept.take(Some("s1"), None, Some("another-caller"), now),
            None
        );
        assert_eq!(
            kept.take(Some("s1"), None, None, now),
            Some(continuation(Some("s1")))
        );
        assert_eq!(kept.take(Some("s1"), None, None, now), None, "used up");
        assert!(kept.0.lock().unwrap().is_empty());
    }

    #[test]
    fn continuations_expire_and_are_bounded() {
        let kept = Continuations::default();
        let then = Instant::now();
        kept.offer(continuation(Some("old")), then);
        let later = then + CONTINUATION_TTL;
        assert_eq!(kept.take(Some("old"), None, None, later), None);
        for i in 0..MAX_CONTINUATIONS + 5 {
            kept.offer(continuation(Some(&format!("s{i}"))), later);
        }
        assert_eq!(kept.0.lock().unwrap().len(), MAX_CONTINUATIONS);
        assert_eq!(
            kept.take(Some("s0"), None, None, later),
            None,
            "the oldest went"
        );
        assert!(kept.take(Some("s5"), None, None, later).is_some());
    }

    #[test]
    fn one_caller_at_its_quota_keeps_the_others_continuations() {
        let kept = Continuations::default();
        let now = Instant::now();
        let of = |caller: &str, state: String| Continuation {
            caller: Some(caller.into()),
            ..continuation(Some(&state))
        };
        kept.offer(of("alice", "a".into()), now);
        for i in 0..MAX_CONTINUATIONS * 2 {
            kept.offer(of("bob", format!("b{i}")), now);
        }
        assert_eq!(
            kept.0.lock().unwrap().len(),
            MAX_CONTINUATIONS_PER_CALLER + 1
        );
        assert!(kept.take(Some("a"), None, Some("alice"), now).is_some());
        let newest = format!("b{}", MAX_CONTINUATIONS * 2 - 1);
        assert!(kept.take(Some(&newest), None, Some("bob"), now).is_some());
        assert!(kept.take(Some("b0"), None, Some("bob"), now).is_none());
    }

    #[test]
    fn only_the_same_tool_and_arguments_go_on() {
        let taken = || Some(continuation(Some("s")));
        assert_eq!(check(taken(), "wipe_dir", "b1"), Ok("req-1".into()));
        assert!(
            check(taken(), "wipe_dir", "b2")
                .unwrap_err()
                .contains("arguments differ")
        );
        assert!(
            check(taken(), "delete_file", "b1")
                .unwrap_err()
                .contains("tool 'wipe_dir'")
        );
        assert!(
            check(None, "wipe_dir", "b1")
                .unwrap_err()
                .contains("continues no call")
        );
    }

    #[test]
    fn input_required_answers_are_recognised() {
        let id = json!(4);
        let answer = |result: Value| {
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 4, "result": result})).unwrap()
        };
        assert_eq!(
            input_required(
                &answer(
                    json!({"resultType": "input_required", "requestState": "v1.x", "inputRequests": {}})
                ),
                &id
            ),
            Some(Some("v1.x".into()))
        );
        assert_eq!(
            input_required(
                &answer(json!({"resultType": "input_required", "inputRequests": {}})),
                &id
            ),
            Some(None)
        );
        // Another call's answer, a complete result, a state that is not a string, not JSON.
        assert_eq!(
            input_required(
                &answer(json!({"resultType": "input_required", "requestState": "s"})),
                &json!("4")
            ),
            None
        );
        assert_eq!(
            input_required(
                &answer(
                    json!({"resultType": "complete", "content": [{"type": "text", "text": "input_required"}]})
                ),
                &id
            ),
            None
        );
        assert_eq!(
            input_required(
                &answer(json!({"resultType": "input_required", "requestState": 7})),
                &id
            ),
            None
        );
        assert_eq!(input_required(b"{\"input_required\"", &id), None);
    }
}
