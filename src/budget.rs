//! A budget of bytes in memory shared by the requests of one process: each reserves what it
//! will hold before it reads it, and gives it back when it lets go. The session store
//! ([`crate::sessions::http`]) waits for its share; the gate ([`crate::gate::memory`]) waits a
//! little, then refuses (HTTP 503), so that no request waits behind another's approval.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of one unit of a [`Budget`].
const UNIT: usize = 1024;

/// The bytes requests may hold at once. A reservation larger than the whole budget takes the
/// whole budget (it then runs alone). Reservations are served in order: a large one that waits
/// holds back the smaller ones behind it, which is what keeps it from starving.
#[derive(Clone, Debug)]
pub struct Budget {
    units: Arc<Semaphore>,
    total_units: usize,
}

/// A share of a [`Budget`], given back when dropped.
pub type Reservation = OwnedSemaphorePermit;

impl Budget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Self {
        let total_units = (bytes / UNIT).max(1);
        Self {
            units: Arc::new(Semaphore::new(total_units)),
            total_units,
        }
    }

    /// Waits until `bytes` (at most the whole budget) are free, and holds them.
    pub async fn reserve(&self, bytes: usize) -> Reservation {
        self.units
            .clone()
            .acquire_many_owned(self.units_of(bytes))
            .await
            .expect("the budget's semaphore is never closed")
    }

    /// [`Self::reserve`], waiting at most `wait`: `None` when the bytes were not free by then.
    /// Bytes free now are taken without setting up the wait (freed bytes go to the
    /// reservations waiting first, so this takes nothing one of them needs).
    pub async fn reserve_within(&self, bytes: usize, wait: Duration) -> Option<Reservation> {
        if let Some(now) = self.try_reserve(bytes) {
            return Some(now);
        }
        tokio::time::timeout(wait, self.reserve(bytes)).await.ok()
    }

    /// Holds `bytes` (at most the whole budget) if they are free now, without waiting.
    pub fn try_reserve(&self, bytes: usize) -> Option<Reservation> {
        self.units
            .clone()
            .try_acquire_many_owned(self.units_of(bytes))
            .ok()
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        self.units.available_permits() * UNIT
    }

    /// The whole budget, in bytes.
    pub fn total(&self) -> usize {
        self.total_units * UNIT
    }

    fn units_of(&self, bytes: usize) -> u32 {
        let units = bytes.div_ceil(UNIT).clamp(1, self.total_units);
        u32::try_from(units).unwrap_or(u32::MAX)
    }
}

/// A share of a [`Budget`] that grows and shrinks with what its holder holds (an event being
/// read from a stream, which grows chunk by chunk): nothing at first.
#[derive(Debug)]
pub struct Share {
    budget: Budget,
    held: Option<Reservation>,
}

impl Share {
    /// An empty share of `budget`.
    pub fn new(budget: Budget) -> Self {
        Self { budget, held: None }
    }

    /// The bytes it holds now.
    pub fn bytes(&self) -> usize {
        self.held.as_ref().map_or(0, |r| r.num_permits() * UNIT)
    }

    /// Holds at least `bytes` (at most the whole budget), taking what is missing now if it is
    /// free, or else waiting at most `wait` for it: `false` when it was not free by then (the
    /// share is then as it was).
    pub async fn grow_to(&mut self, bytes: usize, wait: Duration) -> bool {
        let have = self.held.as_ref().map_or(0, |r| r.num_permits());
        let want = self.budget.units_of(bytes) as usize;
        let Some(missing) = want.checked_sub(have).filter(|m| *m > 0) else {
            return true;
        };
        let missing = u32::try_from(missing).unwrap_or(u32::MAX);
        let units = &self.budget.units;
        let more = match units.clone().try_acquire_many_owned(missing) {
            Ok(more) => more,
            Err(_) => {
                let acquire = units.clone().acquire_many_owned(missing);
                match tokio::time::timeout(wait, acquire).await {
                    Ok(more) => more.expect("the budget's semaphore is never closed"),
                    Err(_) => return false,
                }
            }
        };
        match &mut self.held {
            Some(held) => held.merge(more),
            None => self.held = Some(more),
        }
        true
    }

    /// Gives back what it holds beyond `bytes`.
    pub fn shrink_to(&mut self, bytes: usize) {
        let keep = if bytes == 0 {
            0
        } else {
            self.budget.units_of(bytes) as usize
        };
        let Some(held) = &mut self.held else {
            return;
        };
        if keep == 0 {
            self.held = None;
        } else if let Some(excess) = held.num_permits().checked_sub(keep).filter(|e| *e > 0) {
            drop(held.split(excess));
        }
    }
}

/// A response body that holds a share of a [`Budget`] until its bytes are gone: the body
/// itself, and each data frame it gave out. hyper drops a body as soon as it has taken the last
/// frame, before writing that frame out, and keeps the frame in its write buffer for as long as
/// the client takes to read it: the frame's bytes keep the share until hyper lets them go.
pub struct HoldingBody<B> {
    body: B,
    reservation: Option<Arc<Reservation>>,
}

impl<B> HoldingBody<B> {
    /// `body`, holding `reservation` (if any) as long as it or a frame it gave out lives.
    pub fn new(body: B, reservation: Option<Reservation>) -> Self {
        Self {
            body,
            reservation: reservation.map(Arc::new),
        }
    }
}

/// A frame's bytes, holding the share of the body they came from.
struct HeldBytes {
    bytes: Bytes,
    _reservation: Arc<Reservation>,
}

impl AsRef<[u8]> for HeldBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for HoldingBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        let Some(reservation) = &self.reservation else {
            return polled;
        };
        polled.map_ok(|frame| {
            frame.map_data(|bytes| {
                Bytes::from_owner(HeldBytes {
                    bytes,
                    _reservation: reservation.clone(),
                })
            })
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reservation_waits_while_others_hold_the_budget() {
        let budget = Budget::new(64 << 10);
        let held = budget.reserve(48 << 10).await;
        let mut waiting = Box::pin(budget.reserve(32 << 10));
        assert!(futures::poll!(&mut waiting).is_pending());
        drop(held);
        let second = waiting.await;
        // Larger than the whole budget: it takes it all, and runs alone.
        let mut alone = Box::pin(budget.reserve(1 << 30));
        assert!(futures::poll!(&mut alone).is_pending());
        drop(second);
        let all = alone.await;
        assert_eq!(budget.available(), 0);
        drop(all);
        assert_eq!(budget.available(), 64 << 10);
    }

    #[tokio::test(start_paused = true)]
    async fn a_share_grows_within_the_budget_and_gives_back_what_it_no_longer_holds() {
        let budget = Budget::new(64 << 10);
        let mut share = Share::new(budget.clone());
        assert!(share.grow_to(10 << 10, Duration::from_secs(1)).await);
        assert!(share.grow_to(20 << 10, Duration::from_secs(1)).await);
        // Already held: nothing more taken.
        assert!(share.grow_to(15 << 10, Duration::from_secs(1)).await);
        assert_eq!((share.bytes(), budget.available()), (20 << 10, 44 << 10));
        // Past what is free: it waits, gives up, and stays as it was.
        let other = budget.reserve(40 << 10).await;
        assert!(!share.grow_to(30 << 10, Duration::from_secs(1)).await);
        assert_eq!((share.bytes(), budget.available()), (20 << 10, 4 << 10));
        // Freed while it waits: it grows.
        let grown = share.grow_to(30 << 10, Duration::from_secs(2));
        let freed = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(other);
        };
        let (got, ()) = tokio::join!(grown, freed);
        assert!(got);
        assert_eq!(budget.available(), 34 << 10);
        // More than the whole budget: it holds the whole budget, no more.
        assert!(share.grow_to(1 << 20, Duration::from_secs(1)).await);
        assert_eq!((share.bytes(), budget.available()), (64 << 10, 0));
        share.shrink_to(5 << 10);
        assert_eq!((share.bytes(), budget.available()), (5 << 10, 59 << 10));
        share.shrink_to(0);
        assert_eq!((share.bytes(), budget.available()), (0, 64 << 10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_wait_gives_up_and_leaves_the_budget_as_it_was() {
        let budget = Budget::new(64 << 10);
        let held = budget.reserve(60 << 10).await;
        assert!(
            budget
                .reserve_within(8 << 10, Duration::from_secs(2))
                .await
                .is_none()
        );
        assert_eq!(budget.available(), 4 << 10);
        // Freed while it waits: granted.
        let late = budget.reserve_within(8 << 10, Duration::from_secs(2));
        let freed = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(held);
        };
        let (got, ()) = tokio::join!(late, freed);
        assert!(got.is_some());
        assert_eq!(budget.available(), 56 << 10);
        // Without waiting: granted only when free now.
        assert!(budget.try_reserve(60 << 10).is_none());
        let now = budget.try_reserve(56 << 10);
        assert!(now.is_some());
        assert_eq!(budget.available(), 0);
    }

    #[tokio::test]
    async fn a_body_holds_its_share_until_the_bytes_it_gave_out_are_gone() {
        use http_body_util::{BodyExt, Full};

        let budget = Budget::new(64 << 10);
        let reservation = budget.reserve(16 << 10).await;
        let mut body =
            HoldingBody::new(Full::new(Bytes::from_static(b"answer")), Some(reservation));
        let frame = body.frame().await.unwrap().unwrap();
        assert!(body.is_end_stream());
        // The body is done, as hyper sees it, and dropped; its bytes are still to be written.
        drop(body);
        let bytes = frame.into_data().unwrap();
        assert_eq!(&bytes[..], b"answer");
        assert_eq!(budget.available(), 48 << 10);
        let written = bytes.clone();
        drop(bytes);
        assert_eq!(budget.available(), 48 << 10);
        drop(written);
        assert_eq!(budget.available(), 64 << 10);
    }
}
