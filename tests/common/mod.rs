//! The in-process fake apiserver shared by the gate's tests (tests/gate) and the inbox's browser
//! test (tests/inbox.rs).
#![allow(dead_code)]

pub mod fake_apiserver;

pub use fake_apiserver::FakeApi;

/// Polls `f` until it returns `Some`, for at most ~30 s.
pub async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..600 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}
