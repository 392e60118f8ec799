//! One stream read by several controllers: Secrets and ConfigMaps are watched once, not once
//! per controller that maps their changes to objects of its own.

use std::future::Future;

use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};

/// How many items a reader may lag behind before the source waits for it.
const LAG: usize = 64;

/// Splits `source` into `N` streams that each receive every item, in order. Nothing is
/// dropped: once a reader lags [`LAG`] items behind, the source waits for it. A reader that is
/// dropped no longer counts. The returned future drives the source; it ends when the source
/// ends (and then so do the readers) or when every reader is gone.
pub fn fan_out<T, S, const N: usize>(
    source: S,
) -> (
    impl Future<Output = ()> + Send + 'static,
    [impl Stream<Item = T> + Send + 'static; N],
)
where
    T: Clone + Send + 'static,
    S: Stream<Item = T> + Send + 'static,
{
    let mut senders = Vec::with_capacity(N);
    let receivers = std::array::from_fn(|_| {
        let (sender, receiver) = mpsc::channel::<T>(LAG);
        senders.push(sender);
        receiver
    });
    let drive = async move {
        let mut source = std::pin::pin!(source);
        while !senders.is_empty() {
            let Some(item) = source.next().await else {
                return;
            };
            let mut open = Vec::with_capacity(senders.len());
            for mut sender in senders {
                if sender.send(item.clone()).await.is_ok() {
                    open.push(sender);
                }
            }
            senders = open;
        }
    };
    (drive, receivers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_reader_receives_every_item_in_order() {
        let (drive, readers) = fan_out::<_, _, 3>(futures::stream::iter(0..200));
        let drive = tokio::spawn(drive);
        let received = futures::future::join_all(
            readers
                .into_iter()
                .map(|reader| reader.collect::<Vec<u32>>()),
        )
        .await;
        drive.await.unwrap();
        for items in received {
            assert_eq!(items, (0..200).collect::<Vec<_>>());
        }
    }

    #[tokio::test]
    async fn a_dropped_reader_holds_up_no_one_and_the_last_one_stops_the_source() {
        let (drive, [dropped, kept]) = fan_out(futures::stream::iter(0..).take(1000));
        let drive = tokio::spawn(drive);
        drop(dropped);
        assert_eq!(kept.take(500).count().await, 500);
        // The last reader is gone: the source, still holding items, is not read further.
        tokio::time::timeout(std::time::Duration::from_secs(5), drive)
            .await
            .expect("the source stops once no reader is left")
            .unwrap();
    }
}
