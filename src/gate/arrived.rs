//! Taking the part of an upstream body that has already arrived before relaying it.
//!
//! hyper's client hands a response body over one chunk per turn of the runtime: its connection
//! task passes a chunk on only once the previous one was taken. A relay that first polls the
//! body while writing the client's response therefore finds one chunk ready, then none, and
//! writes the head and each chunk to the client separately, each write waking the client for
//! a fragment of the answer. An MCP answer (a priming event, the message and the end of the
//! body) has usually arrived whole with its head, so taking what is already here first lets
//! the head, the events and the end of the body go to the client in one write.
//!
//! Nothing is waited for: taking stops at the first chunk that is not there after the runtime
//! had a turn to hand it over, at the end of the body, at an error, or after
//! [`MAX_ARRIVED_BYTES`]. The bytes and their order are unchanged.

use std::future::poll_fn;
use std::io;
use std::task::Poll;

use bytes::Bytes;
use futures::{Stream, StreamExt};

/// The most taken ahead of the relay, 64 KiB: more than an MCP answer usually holds, and a
/// bound on what the gate holds for a body that keeps arriving as fast as it is read.
pub const MAX_ARRIVED_BYTES: usize = 64 << 10;

/// `body` with the chunks that have already arrived taken up front (see the module docs): the
/// same items in the same order, the first of them ready at once.
pub async fn arrived_first<S>(body: S) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'static,
{
    let mut body = Box::pin(body.fuse());
    let mut arrived = Vec::new();
    let mut bytes = 0;
    // Whether the runtime had a turn since the body was last found without a chunk.
    let mut had_turn = false;
    poll_fn(|cx| {
        while bytes < MAX_ARRIVED_BYTES {
            match body.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    bytes += chunk.len();
                    arrived.push(Ok(chunk));
                    had_turn = false;
                }
                Poll::Ready(Some(Err(e))) => {
                    arrived.push(Err(e));
                    break;
                }
                Poll::Ready(None) => break,
                Poll::Pending if had_turn => break,
                Poll::Pending => {
                    // Let the tasks already woken (the connection's among them) run once.
                    had_turn = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(())
    })
    .await;
    futures::stream::iter(arrived).chain(body)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::SinkExt;

    use super::*;

    async fn next_now<S: Stream<Item = io::Result<Bytes>> + Unpin>(s: &mut S) -> Option<Bytes> {
        futures::FutureExt::now_or_never(s.next())
            .flatten()
            .map(|r| r.unwrap())
    }

    #[tokio::test]
    async fn chunks_handed_over_one_per_turn_are_all_taken() {
        // A channel without room, as hyper's body channel: the sender hands over one chunk,
        // then waits until it is taken.
        let (mut tx, rx) = futures::channel::mpsc::channel::<io::Result<Bytes>>(0);
        tokio::spawn(async move {
            for part in ["event: message\n", "data: {}\n\n", "data: 2\n\n"] {
                tx.send(Ok(Bytes::from(part))).await.unwrap();
            }
        });
        let mut body = Box::pin(arrived_first(rx).await);
        let mut got = Vec::new();
        while let Some(chunk) = next_now(&mut body).await {
            got.extend_from_slice(&chunk);
        }
        assert_eq!(got, b"event: message\ndata: {}\n\ndata: 2\n\n");
        assert!(futures::FutureExt::now_or_never(body.next()).is_some_and(|end| end.is_none()));
    }

    #[tokio::test(start_paused = true)]
    async fn what_has_not_arrived_is_not_waited_for() {
        let later = futures::stream::once(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Bytes::from("later"))
        });
        let body = futures::stream::iter([Ok(Bytes::from("now"))]).chain(later);
        let started = tokio::time::Instant::now();
        let mut body = Box::pin(arrived_first(body).await);
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(next_now(&mut body).await, Some(Bytes::from("now")));
        assert!(futures::FutureExt::now_or_never(body.next()).is_none());
        assert_eq!(body.next().await.unwrap().unwrap(), "later");
        assert!(body.next().await.is_none());
    }

    #[tokio::test]
    async fn a_body_that_keeps_coming_is_taken_only_up_to_the_limit() {
        let pulled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = pulled.clone();
        let endless = futures::stream::repeat_with(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Bytes::from(vec![b'x'; 1000]))
        });
        let mut body = Box::pin(arrived_first(endless).await);
        let taken = MAX_ARRIVED_BYTES.div_ceil(1000);
        assert_eq!(pulled.load(std::sync::atomic::Ordering::SeqCst), taken);
        for _ in 0..taken + 3 {
            assert_eq!(next_now(&mut body).await.unwrap().len(), 1000);
        }
    }

    #[tokio::test]
    async fn an_error_is_relayed_in_its_place_and_ends_the_taking() {
        let body = futures::stream::iter([
            Ok(Bytes::from("a")),
            Err(io::Error::other("broke")),
            Ok(Bytes::from("b")),
        ]);
        let got: Vec<_> = arrived_first(body)
            .await
            .map(|r| r.map_err(|e| e.to_string()))
            .collect()
            .await;
        assert_eq!(
            got,
            [
                Ok(Bytes::from("a")),
                Err("broke".to_string()),
                Ok(Bytes::from("b"))
            ]
        );
    }
}
