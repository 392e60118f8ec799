//! The note telling the model that an approver edited its call ([`super::outcome::edited_note`]):
//! a text item added last to the `content` of the call's result, so the agent does not retry
//! the original (docs/approvers.md, "Edit, then approve").
//!
//! On Streamable HTTP the answer comes back on the call's own POST, which watches for it
//! ([`super::continuation::Watch`]). On HTTP+SSE (2024-11-05) it comes on the session's event
//! stream, in no fixed order with the POST's `202`: the note is [`PendingNotes::expect`]ed
//! before the call is forwarded, and the stream adds it to the answer with the call's id.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Deserialize;
use serde_json::Value;

/// Most notes one session waits to add at a time: beyond it the oldest is dropped (its call's
/// answer, if it ever comes, is relayed without the note).
const MAX_PENDING: usize = 64;

/// `message` with `note` added as the last item of `result.content`, when `message` is the
/// result of the call `id` with a content list; `None` otherwise (relay it as it came).
pub fn add(message: &[u8], id: &Value, note: &str) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(message).ok()?;
    if value.get("id") != Some(id) {
        return None;
    }
    let content = value
        .get_mut("result")?
        .get_mut("content")?
        .as_array_mut()?;
    content.push(serde_json::json!({"type": "text", "text": note}));
    Some(serde_json::to_vec(&value).expect("a JSON value serializes"))
}

/// The notes an HTTP+SSE session adds to answers still to come on its event stream, by the
/// JSON-RPC id of the call.
#[derive(Default)]
pub struct PendingNotes {
    /// Whether any note waits: what every other event of the stream costs is reading it.
    any: AtomicBool,
    notes: Mutex<Vec<(Value, String)>>,
}

/// The id of a JSON-RPC message, read without building the rest of it.
#[derive(Deserialize)]
struct IdOnly {
    id: Option<Value>,
}

impl PendingNotes {
    /// Adds `note` to the answer to call `id` when it comes. Called before the call is
    /// forwarded, so that no answer can arrive before its note is known.
    pub fn expect(&self, id: Value, note: String) {
        let mut notes = self.notes.lock().expect("notes lock");
        if notes.len() >= MAX_PENDING {
            notes.remove(0);
        }
        notes.push((id, note));
        self.any.store(true, Ordering::Release);
    }

    /// `message` (the data of one event of the stream) with its note added, when it answers a
    /// call with a note waiting (which is then used up); `None` otherwise.
    pub fn amend(&self, message: &[u8]) -> Option<Vec<u8>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let id = serde_json::from_slice::<IdOnly>(message).ok()?.id?;
        let mut notes = self.notes.lock().expect("notes lock");
        let at = notes.iter().position(|(waiting, _)| *waiting == id)?;
        let amended = add(message, &id, &notes[at].1)?;
        notes.remove(at);
        self.any.store(!notes.is_empty(), Ordering::Release);
        Some(amended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(id: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id,
            "result": {"content": [{"type": "text", "text": "done"}]}}))
        .unwrap()
    }

    fn texts(message: &[u8]) -> Vec<String> {
        let v: Value = serde_json::from_slice(message).unwrap();
        v["result"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["text"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn the_note_goes_last_on_the_answer_to_its_call_only() {
        let amended = add(&result(json!(7)), &json!(7), "edited").unwrap();
        assert_eq!(texts(&amended), ["done", "edited"]);
        assert_eq!(add(&result(json!(8)), &json!(7), "edited"), None);
        assert_eq!(add(&result(json!("7")), &json!(7), "edited"), None);
        let error = br#"{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"x"}}"#;
        assert_eq!(add(error, &json!(7), "edited"), None, "no content list");
        assert_eq!(add(b"not json", &json!(7), "edited"), None);
    }

    #[test]
    fn a_pending_note_is_added_once_to_its_answer_on_the_stream() {
        let notes = PendingNotes::default();
        assert_eq!(notes.amend(&result(json!(1))), None, "nothing waits");
        notes.expect(json!("a"), "note a".into());
        notes.expect(json!(2), "note 2".into());
        assert_eq!(
            notes.amend(&result(json!(1))),
            None,
            "another call's answer"
        );
        assert_eq!(
            notes.amend(br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#),
            None
        );
        let amended = notes.amend(&result(json!(2))).unwrap();
        assert_eq!(texts(&amended), ["done", "note 2"]);
        assert_eq!(notes.amend(&result(json!(2))), None, "used up");
        assert_eq!(
            texts(&notes.amend(&result(json!("a"))).unwrap()),
            ["done", "note a"]
        );
        assert!(!notes.any.load(Ordering::Acquire), "nothing waits any more");
    }

    #[test]
    fn at_most_so_many_notes_wait() {
        let notes = PendingNotes::default();
        for i in 0..=MAX_PENDING {
            notes.expect(json!(i), format!("note {i}"));
        }
        assert_eq!(
            notes.amend(&result(json!(0))),
            None,
            "the oldest was dropped"
        );
        assert!(notes.amend(&result(json!(MAX_PENDING))).is_some());
    }
}
