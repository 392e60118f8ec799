//! Server-sent events, as far as the gate and tool discovery need them: splitting a byte
//! stream into whole events, reading an event's type and data, and rewriting an event's data.
//! Events the gate does not change are passed on as the exact bytes received.

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};

/// Splits a byte stream into complete events (each with its terminating blank line).
#[derive(Default, Debug)]
pub struct Splitter {
    buf: BytesMut,
}

impl Splitter {
    /// Adds a chunk and returns the events it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Bytes> {
        self.buf.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = event_end(&self.buf) {
            events.push(self.buf.split_to(end).freeze());
        }
        events
    }

    /// What is left when the stream ends (an unterminated event), if anything.
    pub fn finish(self) -> Option<Bytes> {
        (!self.buf.is_empty()).then(|| self.buf.freeze())
    }
}

/// A byte stream cut into whole events (the last one may be unterminated); an error ends it.
pub fn events<E: Send + 'static>(
    stream: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, E>> + Send {
    futures::stream::unfold(
        (stream.boxed(), Some(Splitter::default())),
        |(mut stream, mut splitter)| async move {
            let split = splitter.as_mut()?;
            let items: Vec<Result<Bytes, E>> = match stream.next().await {
                Some(Ok(chunk)) => split.push(&chunk).into_iter().map(Ok).collect(),
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

/// Where the first complete event of `buf` ends (after its blank line).
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    let mut line_start = true;
    while i < buf.len() {
        let t = terminator(buf, i)?;
        if t == 0 {
            line_start = false;
            i += 1;
            continue;
        }
        if line_start && i > 0 {
            return Some(i + t);
        }
        if line_start {
            // A blank line before any field: a lone terminator, skip it as its own event.
            return Some(t);
        }
        line_start = true;
        i += t;
    }
    None
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
        assert!(s.push(b"event: message\nda").is_empty());
        assert_eq!(
            s.push(b"ta: {}\n\nid: 1\r"),
            vec![Bytes::from_static(b"event: message\ndata: {}\n\n")]
        );
        assert!(s.push(b"\ndata: a\r").is_empty());
        assert_eq!(
            s.push(b"\n\r\ndata: b\r\r"),
            vec![Bytes::from_static(b"id: 1\r\ndata: a\r\n\r\n"),]
        );
        assert_eq!(s.push(b": c"), vec![Bytes::from_static(b"data: b\r\r")]);
        assert_eq!(s.finish(), Some(Bytes::from_static(b": c")));
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
