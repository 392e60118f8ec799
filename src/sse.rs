//! Server-sent events, as far as the gate and tool discovery need them: splitting a byte
//! stream into whole events, reading an event's type and data, and rewriting an event's data.
//! Events the gate does not change are passed on as the exact bytes received.

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};

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

/// Splits a byte stream into complete events (each with its terminating blank line). It
/// remembers how far it has looked, so each byte is scanned once however the stream is cut:
/// splitting is linear in the stream's length.
#[derive(Default, Debug)]
pub struct Splitter {
    buf: BytesMut,
    /// How much of `buf` has been scanned for the end of its first event.
    scanned: usize,
    /// Whether the scan stopped inside a line (rather than at the start of one).
    mid_line: bool,
}

impl Splitter {
    /// Adds a chunk and returns the events it completes; fails once an event is longer than
    /// [`MAX_EVENT_BYTES`].
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Bytes>, EventTooLarge> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.event_end() {
            if end > MAX_EVENT_BYTES {
                return Err(EventTooLarge);
            }
            events.push(self.buf.split_to(end).freeze());
        }
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        Ok(events)
    }

    /// What is left when the stream ends (an unterminated event), if anything.
    pub fn finish(self) -> Option<Bytes> {
        (!self.buf.is_empty()).then(|| self.buf.freeze())
    }

    /// Where the first complete event of the buffer ends (after its blank line), scanning on
    /// from where the last call stopped; the scan starts afresh after an event.
    fn event_end(&mut self) -> Option<usize> {
        let mut i = self.scanned;
        while i < self.buf.len() {
            // A `\r` ending the buffer may be the start of `\r\n`: look again at it next time.
            let Some(t) = terminator(&self.buf, i) else {
                break;
            };
            if t == 0 {
                self.mid_line = true;
                i += 1;
            } else if self.mid_line {
                self.mid_line = false;
                i += t;
            } else {
                // A blank line: the end of the event (or, before any field, a lone terminator,
                // passed on as an event of its own).
                self.scanned = 0;
                return Some(i + t);
            }
        }
        self.scanned = i;
        None
    }
}

/// A byte stream cut into whole events (the last one may be unterminated); an error, or an
/// event longer than [`MAX_EVENT_BYTES`], ends it.
pub fn events<E: From<EventTooLarge> + Send + 'static>(
    stream: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, E>> + Send {
    futures::stream::unfold(
        (stream.boxed(), Some(Splitter::default())),
        |(mut stream, mut splitter)| async move {
            let split = splitter.as_mut()?;
            let items: Vec<Result<Bytes, E>> = match stream.next().await {
                Some(Ok(chunk)) => match split.push(&chunk) {
                    Ok(events) => events.into_iter().map(Ok).collect(),
                    Err(e) => {
                        return Some((futures::stream::iter(vec![Err(e.into())]), (stream, None)));
                    }
                },
                Some(Err(e)) => return Some((futures::stream::iter(vec![Err(e)]), (stream, None))),
                None => splitter.take()?.finish().into_iter().map(Ok).collect(),
            };
            Some((futures::stream::iter(items), (stream, splitter)))
        },
    )
    .flatten()
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

fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    event
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .flat_map(|l| l.split(|b| *b == b'\r'))
        .filter(|l| !l.is_empty())
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

/// The event's data: its `data:` lines joined by `\n`. `None` when it has none.
pub fn data(event: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for d in lines(event).filter_map(|l| field(l, b"data")) {
        match &mut out {
            Some(o) => {
                o.push(b'\n');
                o.extend_from_slice(d);
            }
            None => out = Some(d.to_vec()),
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
    use super::*;

    #[test]
    fn splits_across_chunks_and_terminators() {
        let mut s = Splitter::default();
        assert!(s.push(b"event: message\nda").unwrap().is_empty());
        assert_eq!(
            s.push(b"ta: {}\n\nid: 1\r").unwrap(),
            vec![Bytes::from_static(b"event: message\ndata: {}\n\n")]
        );
        assert!(s.push(b"\ndata: a\r").unwrap().is_empty());
        assert_eq!(
            s.push(b"\n\r\ndata: b\r\r").unwrap(),
            vec![Bytes::from_static(b"id: 1\r\ndata: a\r\n\r\n"),]
        );
        assert_eq!(
            s.push(b": c").unwrap(),
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
            events.extend(s.push(chunk).unwrap());
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
        assert_eq!(s.push(&whole).unwrap(), [Bytes::from(whole)]);
    }

    #[test]
    fn reads_and_rewrites_data() {
        let ev = b"event: endpoint\r\nid: 7\ndata: /messages?\ndata:sessionId=1\n\n";
        assert_eq!(event_type(ev), b"endpoint");
        assert_eq!(event_type(b"data: x\n\n"), b"message");
        assert_eq!(data(ev).unwrap(), b"/messages?\nsessionId=1");
        assert_eq!(data(b": comment\n\n"), None);
        assert_eq!(
            &with_data(ev, b"{\n}")[..],
            b"event: endpoint\nid: 7\ndata: {\ndata: }\n\n"
        );
        assert_eq!(&message(b"{}")[..], b"event: message\ndata: {}\n\n");
    }
}
