//! What bounds the gate's memory, whatever its clients and upstreams send (its container is
//! limited to 128 MiB: docs/gate.md, "Memory"):
//!
//! - every message body it holds, a client's POST or an upstream's JSON answer, first reserves
//!   its bytes from one budget of [`IN_FLIGHT_BYTES`] ([`budget`]) and holds them until the
//!   answer to it is sent; a request that finds the budget spent for [`WAIT`] is refused with
//!   HTTP 503 and `Retry-After` ([`busy`]), never read;
//! - a JSON tree (a [`Value`]) is built only of a message of at most [`MAX_TREE_VALUES`]
//!   values, counted first without building anything ([`reserve_tree`]), and reserves its
//!   worst size ([`tree_bytes`]) from the same budget while it lives: a tree of small values
//!   takes up to 90 times its JSON, so it is its values that bound it, not its bytes;
//! - an upstream's event stream holds the bytes of the event it gathers and relays within the
//!   same budget ([`upstream_events`]), as a call held for approval on an HTTP+SSE session
//!   holds its message's share after its POST was answered ([`MessageShare`]);
//! - nesting is bounded by serde_json's recursion limit (127 levels), which every parse
//!   keeps (none disables it).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use bytes::Bytes;
use futures::Stream;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::jsonrpc;
use super::messages::MAX_MESSAGE_BYTES;
use crate::budget::{Budget, HoldingBody, Reservation};
use crate::sse;

/// The bytes of messages and trees the gate holds at once: 40 MiB, room for the largest
/// message (4 MiB, [`MESSAGE_FACTOR`] times) and the largest tree made of it together. With
/// the gate's own footprint and the allocator's slack, its peak stays under 100 MiB, within
/// its container's 128 MiB, whatever it is sent (`tests/gate/memory.rs`; figures in
/// docs/performance.md).
pub const IN_FLIGHT_BYTES: usize = 40 << 20;

/// How long a request waits for its share of the budget before it is refused (HTTP 503).
pub const WAIT: Duration = Duration::from_secs(5);

/// What the `Retry-After` of a refusal for a spent budget says, in seconds.
const RETRY_AFTER_SECONDS: u64 = 1;

/// What a client message holds per byte: the body received, the message as the gate writes
/// it out again ([`jsonrpc::read`]), and the room that copy may grow into.
pub const MESSAGE_FACTOR: usize = 3;

/// The most values (objects, arrays, strings, numbers, booleans, nulls) the gate builds into
/// one JSON tree: 65 536. A message with more (`[0,0,…]` of 128 KiB) is refused where a tree is
/// needed: a `tools/call` held for approval or read by a rule (JSON-RPC error naming the
/// limit), an upstream message that may hold a tool list (not relayed).
pub const MAX_TREE_VALUES: usize = 65_536;

/// What one value of a JSON tree takes at most, besides the bytes of its text: an object's
/// entry (its key, its [`Value`], the order and index of the map) with the room a growing
/// collection leaves. Measured by `cargo bench --bench gate_tree`: 285 bytes for an object of
/// many keys, the costliest shape, 106 for `[0,0,…]`.
pub const BYTES_PER_VALUE: usize = 320;

/// Allocations from which glibc's malloc is to map pages of their own, handed back to the
/// system when freed: 256 KiB ([`map_large_allocations`]).
const MAPPED_FROM: i32 = 256 << 10;

/// Has glibc's malloc map every allocation of [`MAPPED_FROM`] bytes or more (a message, its
/// written copy, a tree's large arrays) on pages of its own, given back when freed. By default
/// the threshold rises to the largest block freed so far (up to 32 MiB), after which messages
/// of megabytes come from the heap, whose freed middle is kept: the gate's resident memory
/// then stays at its worst moment's and grows with the holes between what is still held (the
/// flood of `tests/gate/memory.rs` peaked 16 MiB higher). An operator's
/// `MALLOC_MMAP_THRESHOLD_` wins; elsewhere than Linux with glibc this does nothing.
pub fn map_large_allocations() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        set_mmap_threshold(MAPPED_FROM);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code, reason = "glibc's malloc settings have no safe binding")]
fn set_mmap_threshold(bytes: i32) {
    // SAFETY: mallopt only changes malloc's own settings; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, bytes);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_mmap_threshold(_bytes: i32) {}

/// The budget every message and tree of this gate reserves from.
pub fn budget() -> &'static Budget {
    static BUDGET: OnceLock<Budget> = OnceLock::new();
    BUDGET.get_or_init(|| Budget::new(IN_FLIGHT_BYTES))
}

/// The worst size of the tree of `json`, which holds `values` values.
pub fn tree_bytes(json: &[u8], values: usize) -> usize {
    values
        .saturating_mul(BYTES_PER_VALUE)
        .saturating_add(json.len())
}

/// Why no tree of a JSON text was built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoTree {
    /// More values than [`MAX_TREE_VALUES`].
    #[error(
        "it holds more than {MAX_TREE_VALUES} JSON values, more than the approval gate builds \
         into a tree (its memory limit)"
    )]
    TooManyValues,
    /// Not JSON (why).
    #[error("{0}")]
    Invalid(String),
    /// The budget stayed spent for [`WAIT`].
    #[error(
        "the approval gate is busy: the messages it holds fill its memory budget ({} MiB); \
         retry shortly",
        IN_FLIGHT_BYTES >> 20
    )]
    Busy,
}

/// Counts the values of `json` without building them, refusing past [`MAX_TREE_VALUES`], and
/// reserves the worst size of its tree from the gate's [`budget`]: what a caller holds while
/// it builds and keeps one.
pub async fn reserve_tree(json: &[u8]) -> Result<Reservation, NoTree> {
    reserve_tree_in(budget(), json).await
}

async fn reserve_tree_in(budget: &Budget, json: &[u8]) -> Result<Reservation, NoTree> {
    let values = count_values(json, MAX_TREE_VALUES)?;
    budget
        .reserve_within(tree_bytes(json, values), WAIT)
        .await
        .ok_or(NoTree::Busy)
}

/// [`reserve_tree`] without waiting, for a message the gate reads where it cannot wait (an
/// upstream's event stream): [`NoTree::Busy`] when the budget is spent now.
pub fn try_reserve_tree(json: &[u8]) -> Result<Reservation, NoTree> {
    let values = count_values(json, MAX_TREE_VALUES)?;
    budget()
        .try_reserve(tree_bytes(json, values))
        .ok_or(NoTree::Busy)
}

/// A JSON tree, holding its share of the gate's budget as long as it lives.
#[derive(Debug)]
pub struct Tree {
    value: Value,
    reservation: Reservation,
}

impl Tree {
    /// The tree of `json`, within [`MAX_TREE_VALUES`] and the budget ([`reserve_tree`]).
    pub async fn of(json: &[u8]) -> Result<Self, NoTree> {
        let reservation = reserve_tree(json).await?;
        let value = serde_json::from_slice(json).map_err(|e| NoTree::Invalid(e.to_string()))?;
        Ok(Self { value, reservation })
    }

    /// The tree.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Lets the tree go and keeps its share of the budget, for what was made of it and lives
    /// on (a condition's own copy of the arguments).
    pub fn into_reservation(self) -> Reservation {
        self.reservation
    }
}

/// The number of values in `json`, or why it has none to count: not JSON, or more than `most`.
/// Nothing is built; nesting is bounded as in every parse (serde_json's 127 levels).
pub fn count_values(json: &[u8], most: usize) -> Result<usize, NoTree> {
    let mut counter = Counter { seen: 0, most };
    let mut parser = serde_json::Deserializer::from_slice(json);
    let counted = (&mut counter)
        .deserialize(&mut parser)
        .and_then(|()| parser.end());
    match counted {
        Ok(()) => Ok(counter.seen),
        Err(_) if counter.seen > most => Err(NoTree::TooManyValues),
        Err(e) => Err(NoTree::Invalid(e.to_string())),
    }
}

/// Counts the values it visits; an error once past `most`.
struct Counter {
    seen: usize,
    most: usize,
}

impl Counter {
    fn one<E: de::Error>(&mut self) -> Result<(), E> {
        self.seen += 1;
        if self.seen > self.most {
            return Err(E::custom("too many values"));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for &mut Counter {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Counter {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.one()
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.one()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.one()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.one()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.one()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.one()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.one()?;
        while seq.next_element_seed(&mut *self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.one()?;
        while map.next_key::<de::IgnoredAny>()?.is_some() {
            map.next_value_seed(&mut *self)?;
        }
        Ok(())
    }
}

/// The share of the budget a client's POST reserves before its body is read: its announced
/// length (the longest message when it announces none or more) times [`MESSAGE_FACTOR`].
pub async fn reserve_message(headers: &HeaderMap) -> Option<Reservation> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(MAX_MESSAGE_BYTES, |n| n.min(MAX_MESSAGE_BYTES));
    budget()
        .reserve_within(announced.saturating_mul(MESSAGE_FACTOR), WAIT)
        .await
}

/// How long an upstream's JSON answer waits for its share of the budget: longer than a
/// client's message, as the request it answers was taken (and, for a call, may have run).
pub const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// The share of the budget an upstream's JSON answer (read whole, to filter its tool lists)
/// reserves before it is read: its announced length, or the longest answer
/// ([`super::upstream::MAX_BODY_BYTES`]) when it announces none or more, twice (its bytes and
/// the copy a filtered list is written into); [`NoTree::Busy`] after [`ANSWER_WAIT`].
pub async fn reserve_answer(headers: &HeaderMap) -> Result<Reservation, NoTree> {
    let most = super::upstream::MAX_BODY_BYTES;
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(most, |n| n.min(most));
    budget()
        .reserve_within(announced.saturating_mul(2), ANSWER_WAIT)
        .await
        .ok_or(NoTree::Busy)
}

/// An upstream's event stream cut into events, each held within the gate's [`budget`] while it
/// is gathered and relayed ([`sse::charged_events`]): twice its bytes, waiting at most
/// [`ANSWER_WAIT`] for them, after which the stream is cut ([`sse::OverBudget`]).
pub fn upstream_events(
    stream: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send {
    sse::charged_events(stream, budget().clone(), ANSWER_WAIT)
}

/// A client message's share of the budget, handed to the handler of an HTTP+SSE message
/// endpoint: its POST is answered (202) before a call held for approval is, so the message
/// holds its share as long as the handler holds it, not only until the POST's answer is sent.
#[derive(Clone, Debug)]
pub struct MessageShare(pub Arc<Reservation>);

/// The refusal of a request that found the budget spent: HTTP 503 with `Retry-After`, and a
/// JSON-RPC error saying why.
pub fn busy() -> Response<Body> {
    let body = jsonrpc::error_response(&Value::Null, -32603, &NoTree::Busy.to_string());
    Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS))
        .body(Body::from(body))
        .expect("static response parts are valid")
}

/// `resp` with its body holding `reservation` until it is sent (or its client goes away).
pub fn holding(resp: Response<Body>, reservation: Reservation) -> Response<Body> {
    resp.map(|body| Body::new(HoldingBody::new(body, Some(reservation))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_exactly_up_to_the_limit() {
        assert_eq!(count_values(b"0", 10), Ok(1));
        assert_eq!(
            count_values(br#"{"a":[1,"x",null,{}],"b":true}"#, 10),
            Ok(7)
        );
        assert_eq!(count_values(b"[[[[]]]]", 10), Ok(4));
        // N values pass a limit of N; one more is refused.
        let zeros = |n: usize| format!("[{}]", vec!["0"; n - 1].join(","));
        assert_eq!(count_values(zeros(100).as_bytes(), 100), Ok(100));
        assert_eq!(
            count_values(zeros(101).as_bytes(), 100),
            Err(NoTree::TooManyValues)
        );
        let limit = zeros(MAX_TREE_VALUES);
        assert_eq!(
            count_values(limit.as_bytes(), MAX_TREE_VALUES),
            Ok(MAX_TREE_VALUES)
        );
        let over = zeros(MAX_TREE_VALUES + 1);
        let refused = count_values(over.as_bytes(), MAX_TREE_VALUES).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "it holds more than 65536 JSON values, more than the approval gate builds into a \
             tree (its memory limit)"
        );
    }

    #[test]
    fn counting_keeps_the_parsers_nesting_limit_and_refuses_what_is_not_json() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        // serde_json's limit of 128 lets 127 levels through, as it does for every parse.
        assert_eq!(count_values(nested(127).as_bytes(), 1000), Ok(127));
        assert!(serde_json::from_slice::<Value>(nested(127).as_bytes()).is_ok());
        assert!(serde_json::from_slice::<Value>(nested(128).as_bytes()).is_err());
        assert!(matches!(
            count_values(nested(128).as_bytes(), 1000),
            Err(NoTree::Invalid(why)) if why.starts_with("recursion limit exceeded")
        ));
        assert!(matches!(count_values(b"[1,2", 10), Err(NoTree::Invalid(_))));
        assert!(matches!(count_values(b"1 2", 10), Err(NoTree::Invalid(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_tree_reserves_its_worst_size_while_it_lives() {
        let budget = Budget::new(64 << 10);
        let json = br#"{"a":[1,2,3]}"#;
        let reservation = reserve_tree_in(&budget, json).await.unwrap();
        // Five values of 320 bytes and the text, in units of 1 KiB.
        assert_eq!(tree_bytes(json, 5), 5 * 320 + 13);
        assert_eq!(budget.available(), (64 - 2) << 10);
        // A tree that does not fit waits, then is refused as busy.
        // 200 values: 63 units, more than the 62 free and less than the whole budget.
        let big = format!("[{}]", vec!["0"; 199].join(","));
        assert_eq!(
            reserve_tree_in(&budget, big.as_bytes()).await.unwrap_err(),
            NoTree::Busy
        );
        drop(reservation);
        assert_eq!(budget.available(), 64 << 10);
        assert!(reserve_tree_in(&budget, big.as_bytes()).await.is_ok());
    }

    #[tokio::test]
    async fn a_busy_refusal_says_when_to_retry() {
        let resp = busy();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], -32603);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("memory budget (40 MiB)")
        );
    }
}
