//! Fake kube-apiservers for hitl-operator's tests, usable from its unit tests (`src/`) and its
//! integration tests (`tests/`). Pure JSON over HTTP: the kit knows nothing of the operator's
//! types.
//!
//! - [`mock`]: a [`kube::Client`] whose apiserver is the test itself (tower-test): each request
//!   is taken in turn, checked and answered by hand.
//! - [`script`]: the same client against a script of the exact requests expected, in order, and
//!   their answers; an unexpected, out-of-order or missing request fails the test.
//! - [`fake`]: an in-process HTTP apiserver holding objects in memory: ApprovalRequests and
//!   ApprovalGrants with the rules the gate and `kubectl hitl` rely on (list, get, create,
//!   merge-patch with resourceVersion preconditions, watch), and any other kind in a generic
//!   store (list, watch from a resourceVersion, get, create, merge-patch).
//! - [`postgres`]: a real Postgres (Debian's `postgresql`), started by the test in a throwaway
//!   directory and stopped when dropped, for the session store's tests.

pub mod fake;
pub mod mock;
pub mod postgres;
pub mod script;

use std::time::Duration;

pub use fake::FakeApi;

use serde_json::{Value, json};

/// A `Status` failure body as the apiserver sends it with an error `code`.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

/// A watch response body: one JSON line `{"type", "object"}` per event.
pub fn watch_lines(events: &[(&str, Value)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, object) in events {
        out.extend(serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap());
        out.push(b'\n');
    }
    out
}

/// Polls `f` until it returns `Some`, for at most ~30 s.
pub async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..600 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}
