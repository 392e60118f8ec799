//! Backing off a watch while the apiserver does not answer it. kube's `default_backoff` waits
//! 0.8 s after an error, doubling up to 30 s (client-go's reflector's figures), but it starts
//! again from 0.8 s after every event, and a watcher begins every attempt to list with an
//! `Init` event. So a watch that cannot list (the apiserver unreachable, the list refused)
//! was retried every 0.8–1.6 s for as long as it failed: measured on a gate whose apiserver was
//! down, and reported to kube-rs users before (kube-runtime 5.0.0). [`BackoffWhileFailing`]
//! starts again only after an event that the apiserver answered.

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event};

/// A watch retried as kube's `default_backoff` intends: see the module's documentation.
pub trait BackoffWhileFailing<K>: Stream<Item = watcher::Result<Event<K>>> + Sized {
    /// This watch with a wait after each error: 0.8 s, doubling up to 30 s (each with up to
    /// as much again of jitter), back to 0.8 s once an object, a deletion or the end of a list
    /// came from the apiserver.
    fn backoff_while_failing(self) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
    where
        Self: Send + 'static,
        K: Send + 'static,
    {
        let waits = DefaultBackoff::default();
        futures::stream::unfold(
            (self.boxed(), waits, None),
            |(mut events, mut waits, wait)| async move {
                if let Some(wait) = wait {
                    tokio::time::sleep(wait).await;
                }
                let event = events.next().await?;
                let wait = match &event {
                    Err(_) => waits.next(),
                    // Sent before every attempt to list, answered or not.
                    Ok(Event::Init) => None,
                    Ok(_) => {
                        waits.reset();
                        None
                    }
                };
                Some((event, (events, waits, wait)))
            },
        )
    }
}

impl<K, S: Stream<Item = watcher::Result<Event<K>>>> BackoffWhileFailing<K> for S {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::stream;
    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::time::Instant;

    use super::*;

    fn failed_list() -> watcher::Result<Event<ConfigMap>> {
        Err(watcher::Error::NoResourceVersion)
    }

    /// When each event of `events` came out of the backed-off watch, from the first.
    async fn arrivals(events: Vec<watcher::Result<Event<ConfigMap>>>) -> Vec<Duration> {
        let start = Instant::now();
        stream::iter(events)
            .backoff_while_failing()
            .map(|_| start.elapsed())
            .collect()
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn failing_lists_are_retried_ever_later() {
        // What a watcher yields while its lists fail: Init, then the error, again and again.
        let events = (0..7)
            .flat_map(|_| [Ok(Event::Init), failed_list()])
            .collect();
        let at = arrivals(events).await;
        let errors: Vec<Duration> = at.iter().skip(1).step_by(2).copied().collect();
        let waits: Vec<Duration> = errors.windows(2).map(|w| w[1] - w[0]).collect();
        // 0.8, 1.6, 3.2, 6.4, 12.8 and 25.6 s, each with up to as much again of jitter.
        let least = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6];
        assert_eq!(waits.len(), least.len());
        for (wait, least) in waits.iter().zip(least) {
            let least = Duration::from_secs_f64(least);
            assert!(
                *wait >= least && *wait <= least * 2,
                "waits {waits:?}: {wait:?} is not between {least:?} and twice that"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_answered_list_starts_the_waits_again() {
        let mut events: Vec<_> = (0..4)
            .flat_map(|_| [Ok(Event::Init), failed_list()])
            .collect();
        // The list succeeds (an empty one: only its end), then the watch fails.
        events.extend([
            Ok(Event::Init),
            Ok(Event::InitDone),
            failed_list(),
            Ok(Event::Init),
        ]);
        let at = arrivals(events).await;
        // After four failures the wait had grown to 6.4 s at least; the error after the
        // answered list waits 0.8 s, up to 1.6 with jitter.
        let grown = at[8] - at[7];
        assert!(grown >= Duration::from_secs_f64(6.4), "{at:?}");
        let again = at[11] - at[10];
        assert!(
            again >= Duration::from_millis(800) && again <= Duration::from_millis(1600),
            "{at:?}"
        );
    }
}
