//! Server-sent events, as far as the gate and tool discovery need them: splitting a byte
//! stream into whole events, reading an event's type and data, and rewriting an event's data.
//! Events the gate does not change are passed on as the exact bytes received.

use std::borrow::Cow;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};

use crate::budget::{Budget, Share};

/// The longest event the splitter holds, 16 MiB (terminator included). A longer one ends the
/// stream with [`EventTooLarge`] rather than being buffered without bound: an MCP message that
/// large is not a message an agent can use.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// An event longer than [`MAX_EVENT_BYTES`].
#[derive(Debug, thiserror::Error)]
#[error("an event is longer than {} MiB, the limit", MAX_EVENT_BYTES >> 20)]
pub struct EventTooLarge;

impl From<EventTooLarge> for std::io::Error {
    fn from(e: EventTooLarge) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// An event that could not be held within a memory budget: the budget stayed spent for the
/// whole wait ([`charged_events`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "an upstream event could not be held within the approval gate's memory budget ({} MiB): \
     it stayed spent for {} s; the stream is cut",
    .budget >> 20,
    .waited.as_secs()
)]
pub struct OverBudget {
    /// The budget, in bytes.
    pub budget: usize,
    /// How long the event waited for its share.
    pub waited: Duration,
}

impl From<OverBudget> for std::io::Error {
    fn from(e: OverBudget) -> Self {
        std::io::Error::other(e)
    }
}

/// Splits a byte stream into complete events (each with its terminating blank line). It
/// remembers how far it has looked, so each byte is scanned once however the stream is cut:
/// splitting is linear in the stream's length. Events that lie whole in one chunk are slices
/// of that chunk, not copies; only an event cut across chunks is gathered in a buffer.
#[derive(Default, Debug)]
pub struct Splitter {
    /// The start of an event cut across chunks, with the chunks after it; empty when the last
    /// chunk ended at the end of an event.
    buf: BytesMut,
    /// The part of the last chunk not yet split, while `buf` is empty.
    chunk: Bytes,
    /// How much of the unsplit bytes (`chunk` or `buf`) has been scanned for the end of their
    /// first event.
    scanned: usize,
    /// Whether the scan stopped inside a line (rather than at the start of one).
    mid_line: bool,
}

impl Splitter {
    /// Adds a chunk; [`Self::next_event`] then returns the events it completes.
    pub fn push(&mut self, chunk: Bytes) {
        if self.buf.is_empty() && self.chunk.is_empty() {
            self.chunk = chunk;
        } else {
            self.gather();
            self.buf.extend_from_slice(&chunk);
        }
    }

    /// The next complete event of what was pushed, if any; fails once an event is longer than
    /// [`MAX_EVENT_BYTES`].
    pub fn next_event(&mut self) -> Result<Option<Bytes>, EventTooLarge> {
        let event = if self.buf.is_empty() {
            let end = event_end(&self.chunk, &mut self.scanned, &mut self.mid_line);
            end.map(|end| self.chunk.split_to(end))
        } else {
            let end = event_end(&self.buf, &mut self.scanned, &mut self.mid_line);
            end.map(|end| self.buf.split_to(end).freeze())
        };
        match event {
            Some(event) if event.len() > MAX_EVENT_BYTES => Err(EventTooLarge),
            Some(event) => Ok(Some(event)),
            None => {
                // The rest starts an event that a later chunk ends: keep it.
                self.gather();
                if self.buf.len() > MAX_EVENT_BYTES {
                    return Err(EventTooLarge);
                }
                Ok(None)
            }
        }
    }

    /// Moves the unsplit part of the last chunk into the buffer.
    fn gather(&mut self) {
        if !self.chunk.is_empty() {
            self.buf.extend_from_slice(&std::mem::take(&mut self.chunk));
        }
    }

    /// The bytes pushed and not yet given out as events.
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.chunk.len()
    }

    /// What is left when the stream ends (an unterminated event), if anything.
    pub fn finish(mut self) -> Option<Bytes> {
        self.gather();
        (!self.buf.is_empty()).then(|| self.buf.freeze())
    }
}

/// Where the first complete event of `buf` ends (after its blank line), scanning on from
/// `scanned`, where the last call stopped (`mid_line` saying whether that was inside a line);
/// the scan starts afresh after an event.
fn event_end(buf: &[u8], scanned: &mut usize, mid_line: &mut bool) -> Option<usize> {
    let mut i = *scanned;
    while i < buf.len() {
        // A `\r` ending the buffer may be the start of `\r\n`: look again at it next time.
        let Some(t) = terminator(buf, i) else {
            break;
        };
        if t == 0 {
            // Inside a line: on to its end.
            *mid_line = true;
            i = memchr::memchr2(b'\n', b'\r', &buf[i..]).map_or(buf.len(), |n| i + n);
        } else if *mid_line {
            *mid_line = false;
            i += t;
        } else {
            // A blank line: the end of the event (or, before any field, a lone terminator,
            // passed on as an event of its own).
            *scanned = 0;
            return Some(i + t);
        }
    }
    *scanned = i;
    None
}

/// A byte stream cut into whole events (the last one may be unterminated); an error, or an
/// event longer than [`MAX_EVENT_BYTES`], ends it.
pub fn events<E: From<EventTooLarge> + Send + 'static>(
    stream: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, E>> + Send {
    Events {
        stream: Box::pin(stream),
        splitter: Some(Splitter::default()),
    }
}

/// See [`events`].
struct Events<S> {
    stream: Pin<Box<S>>,
    /// `None` once the stream has ended.
    splitter: Option<Splitter>,
}

impl<S, E> Stream for Events<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: From<EventTooLarge>,
{
    type Item = Result<Bytes, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            let Some(splitter) = this.splitter.as_mut() else {
                return Poll::Ready(None);
            };
            match splitter.next_event() {
                Ok(Some(event)) => return Poll::Ready(Some(Ok(event))),
                Ok(None) => {}
                Err(e) => {
                    this.splitter = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
            match ready!(this.stream.as_mut().poll_next(cx)) {
                Some(Ok(chunk)) => splitter.push(chunk),
                Some(Err(e)) => {
                    this.splitter = None;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    let rest = this.splitter.take().and_then(Splitter::finish);
                    return Poll::Ready(rest.map(Ok));
                }
            }
        }
    }
}

/// [`events`], with the bytes the stream holds charged to `budget`: twice the bytes of the
/// event being gathered (its bytes, and the copy a rewritten event is written into), growing
/// chunk by chunk, and of the events given out until the next one is asked for (they have then
/// been relayed). Each chunk's share is taken before the next chunk is read; when the budget
/// stays spent for `wait`, the stream ends with [`OverBudget`]. So however many streams carry
/// however large events (up to [`MAX_EVENT_BYTES`]), what they hold stays within the budget,
/// but for the one chunk each has just read.
pub fn charged_events<E>(
    stream: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
    budget: Budget,
    wait: Duration,
) -> impl Stream<Item = Result<Bytes, E>> + Send
where
    E: From<EventTooLarge> + From<OverBudget> + Send + 'static,
{
    let total = budget.total();
    let state = Charged {
        stream: Box::pin(stream),
        splitter: Some(Splitter::default()),
        share: Share::new(budget),
    };
    futures::stream::unfold(state, move |mut st| async move {
        loop {
            let splitter = st.splitter.as_mut()?;
            match splitter.next_event() {
                // Its share stays held until the next chunk is read.
                Ok(Some(event)) => return Some((Ok(event), st)),
                Ok(None) => {}
                Err(e) => {
                    st.splitter = None;
                    return Some((Err(e.into()), st));
                }
            }
            // The events given out were taken: what is held now is what is being gathered.
            st.share.shrink_to(2 * splitter.buffered());
            match st.stream.next().await {
                Some(Ok(chunk)) => {
                    splitter.push(chunk);
                    let charge = 2 * splitter.buffered();
                    if !st.share.grow_to(charge, wait).await {
                        st.splitter = None;
                        let over = OverBudget {
                            budget: total,
                            waited: wait,
                        };
                        return Some((Err(over.into()), st));
                    }
                }
                Some(Err(e)) => {
                    st.splitter = None;
                    return Some((Err(e), st));
                }
                None => {
                    let rest = st.splitter.take().and_then(Splitter::finish);
                    return rest.map(|rest| (Ok(rest), st));
                }
            }
        }
    })
}

/// See [`charged_events`].
struct Charged<S> {
    stream: Pin<Box<S>>,
    /// `None` once the stream has ended.
    splitter: Option<Splitter>,
    /// The share of the budget the stream holds.
    share: Share,
}

/// Length of the line terminator at `i`: `Some(0)` if none, `None` if undecidable yet (a `\r`
/// that ends the buffer may be the start of `\r\n`).
fn terminator(buf: &[u8], i: usize) -> Option<usize> {
    match buf.get(i) {
        Some(b'\n') => Some(1),
        Some(b'\r') => match buf.get(i + 1) {
            Some(b'\n') => Some(2),
            Some(_) => Some(1),
            None => None,
        },
        _ => Some(0),
    }
}

/// The event's non-empty lines: what lies between `\n`, `\r` and `\r\n` terminators.
fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = event;
    std::iter::from_fn(move || {
        loop {
            if rest.is_empty() {
                return None;
            }
            let end = memchr::memchr2(b'\n', b'\r', rest).unwrap_or(rest.len());
            let line = &rest[..end];
            rest = rest.get(end + 1..).unwrap_or_default();
            if !line.is_empty() {
                return Some(line);
            }
        }
    })
}

fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(name)?.strip_prefix(b":")?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

/// The event's type (`event:` field; `message` when absent).
pub fn event_type(event: &[u8]) -> &[u8] {
    lines(event)
        .filter_map(|l| field(l, b"event"))
        .last()
        .unwrap_or(b"message")
}

/// The event's data: its `data:` lines joined by `\n` (borrowed from the event when it has
/// one). `None` when it has none.
pub fn data(event: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut out: Option<Cow<[u8]>> = None;
    for d in lines(event).filter_map(|l| field(l, b"data")) {
        match &mut out {
            Some(o) => {
                let o = o.to_mut();
                o.push(b'\n');
                o.extend_from_slice(d);
            }
            None => out = Some(Cow::Borrowed(d)),
        }
    }
    out
}

/// The event with its data replaced by `new_data`; its other fields are kept.
pub fn with_data(event: &[u8], new_data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(event.len() + new_data.len());
    for l in lines(event).filter(|l| field(l, b"data").is_none()) {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    for d in new_data.split(|b| *b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(d.strip_suffix(b"\r").unwrap_or(d));
        out.push(b'\n');
    }
    out.push(b'\n');
    out.into()
}

/// A `message` event carrying `data`.
pub fn message(data: &[u8]) -> Bytes {
    with_data(b"event: message\n", data)
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    /// Pushes `chunk` and takes the events it completes.
    fn push(s: &mut Splitter, chunk: &[u8]) -> Result<Vec<Bytes>, EventTooLarge> {
        s.push(Bytes::copy_from_slice(chunk));
        std::iter::from_fn(|| s.next_event().transpose()).collect()
    }

    #[test]
    fn splits_across_chunks_and_terminators() {
        let mut s = Splitter::default();
        assert!(push(&mut s, b"event: message\nda").unwrap().is_empty());
        assert_eq!(
            push(&mut s, b"ta: {}\n\nid: 1\r").unwrap(),
            vec![Bytes::from_static(b"event: message\ndata: {}\n\n")]
        );
        assert!(push(&mut s, b"\ndata: a\r").unwrap().is_empty());
        assert_eq!(
            push(&mut s, b"\n\r\ndata: b\r\r").unwrap(),
            vec![Bytes::from_static(b"id: 1\r\ndata: a\r\n\r\n"),]
        );
        assert_eq!(
            push(&mut s, b": c").unwrap(),
            vec![Bytes::from_static(b"data: b\r\r")]
        );
        assert_eq!(s.finish(), Some(Bytes::from_static(b": c")));
    }

    #[test]
    fn an_8_mib_event_in_small_chunks_is_split_whole() {
        let payload = "x".repeat(8 << 20);
        let stream = format!("event: message\r\ndata: {payload}\r\n\r\ndata: next\n\n: tail");
        let mut s = Splitter::default();
        let mut events = Vec::new();
        for chunk in stream.as_bytes().chunks(4096) {
            events.extend(push(&mut s, chunk).unwrap());
        }
        assert_eq!(events.len(), 2);
        assert_eq!(event_type(&events[0]), b"message");
        assert_eq!(data(&events[0]).unwrap(), payload.as_bytes());
        assert_eq!(events[0].len(), payload.len() + 26);
        assert_eq!(&events[1][..], b"data: next\n\n");
        assert_eq!(s.finish(), Some(Bytes::from_static(b": tail")));
    }

    #[tokio::test]
    async fn an_event_past_the_limit_ends_the_stream_with_an_error() {
        let chunk = Bytes::from(vec![b'x'; 1 << 20]);
        let mut chunks = vec![Ok(Bytes::from_static(b"data: small\n\ndata: "))];
        chunks.extend((0..=MAX_EVENT_BYTES >> 20).map(|_| Ok(chunk.clone())));
        chunks.push(Ok(Bytes::from_static(b"\n\ndata: after\n\n")));
        let got: Vec<_> = events(futures::stream::iter(chunks))
            .map(|r: std::io::Result<Bytes>| r.map_err(|e| e.to_string()))
            .collect()
            .await;
        assert_eq!(
            got,
            [
                Ok(Bytes::from_static(b"data: small\n\n")),
                Err("an event is longer than 16 MiB, the limit".to_string())
            ]
        );
        // Up to the limit is fine, in one chunk as in many.
        let mut s = Splitter::default();
        let whole = [
            b"data: ".as_slice(),
            &vec![b'y'; MAX_EVENT_BYTES - 8],
            b"\n\n",
        ]
        .concat();
        assert_eq!(push(&mut s, &whole).unwrap(), [Bytes::from(whole)]);
    }

    #[test]
    fn reads_and_rewrites_data() {
        let ev = b"event: endpoint\r\nid: 7\ndata: /messages?\ndata:sessionId=1\n\n";
        assert_eq!(event_type(ev), b"endpoint");
        assert_eq!(event_type(b"data: x\n\n"), b"message");
        assert_eq!(&*data(ev).unwrap(), b"/messages?\nsessionId=1");
        assert_eq!(data(b": comment\n\n"), None);
        assert_eq!(
            &with_data(ev, b"{\n}")[..],
            b"event: endpoint\nid: 7\ndata: {\ndata: }\n\n"
        );
        assert_eq!(&message(b"{}")[..], b"event: message\ndata: {}\n\n");
    }
}
