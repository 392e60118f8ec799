//! `callers.max_calls_per_minute`: each caller of a shared gate may make at most that many
//! `tools/call`s a minute. A token bucket per caller: `limit` calls at once, then one more
//! every `60 / limit` seconds. The time is passed in, so the tests need no clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most callers whose buckets are kept; past it the buckets that are full again (they hold
/// nothing a fresh one would not) are dropped, then those closest to full (forgetting one
/// gives its caller back at most what it had not used).
pub const MAX_TRACKED_CALLERS: usize = 4096;

/// One caller's bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// The call budgets of every caller.
#[derive(Debug)]
pub struct CallLimits {
    per_minute: u32,
    capacity: usize,
    buckets: HashMap<String, Bucket>,
}

impl CallLimits {
    /// At most `per_minute` calls a minute per caller (at least 1), for at most `capacity`
    /// callers at a time.
    pub fn new(per_minute: u32, capacity: usize) -> Self {
        Self {
            per_minute: per_minute.max(1),
            capacity: capacity.max(1),
            buckets: HashMap::new(),
        }
    }

    /// The limit, calls per minute.
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    fn refill(&self, bucket: &mut Bucket, now: Instant) {
        let rate = f64::from(self.per_minute) / 60.0;
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(f64::from(self.per_minute));
        bucket.updated = now;
    }

    /// Takes one call of `caller` at `now`: `Ok`, or how long until the next call is allowed.
    pub fn take(&mut self, caller: &str, now: Instant) -> Result<(), Duration> {
        if !self.buckets.contains_key(caller) {
            self.make_room(now);
            self.buckets.insert(
                caller.to_owned(),
                Bucket {
                    tokens: f64::from(self.per_minute),
                    updated: now,
                },
            );
        }
        let mut bucket = self.buckets.remove(caller).expect("inserted above");
        self.refill(&mut bucket, now);
        let answer = if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let rate = f64::from(self.per_minute) / 60.0;
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        };
        self.buckets.insert(caller.to_owned(), bucket);
        answer
    }

    /// Room for one more caller: full buckets go first, then those closest to full.
    fn make_room(&mut self, now: Instant) {
        if self.buckets.len() < self.capacity {
            return;
        }
        let full = f64::from(self.per_minute);
        let rate = full / 60.0;
        let tokens = |b: &Bucket| {
            let elapsed = now.saturating_duration_since(b.updated).as_secs_f64();
            (b.tokens + elapsed * rate).min(full)
        };
        self.buckets.retain(|_, b| tokens(b) < full);
        while self.buckets.len() >= self.capacity {
            let Some(fullest) = self
                .buckets
                .iter()
                .max_by(|(_, a), (_, b)| tokens(a).total_cmp(&tokens(b)))
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.buckets.remove(&fullest);
        }
    }

    /// How many callers have a bucket.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_caller_gets_its_limit_then_one_call_per_share_of_a_minute() {
        let start = Instant::now();
        let mut limits = CallLimits::new(3, 16);
        for _ in 0..3 {
            assert_eq!(limits.take("alice", start), Ok(()));
        }
        // The fourth within the minute waits 20 s (60 / 3).
        assert_eq!(limits.take("alice", start), Err(Duration::from_secs(20)));
        // Another caller has a budget of its own.
        assert_eq!(limits.take("bob", start), Ok(()));
        // 20 s later one more call of alice's is allowed, and only one.
        let later = start + Duration::from_secs(20);
        assert_eq!(limits.take("alice", later), Ok(()));
        assert!(limits.take("alice", later).is_err());
        // A quiet minute refills the bucket, never beyond the limit.
        let much_later = start + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(limits.take("alice", much_later), Ok(()));
        }
        assert!(limits.take("alice", much_later).is_err());
    }

    #[test]
    fn a_refused_call_does_not_use_up_the_budget() {
        let start = Instant::now();
        let mut limits = CallLimits::new(1, 16);
        assert_eq!(limits.take("alice", start), Ok(()));
        for s in [1, 10, 59] {
            assert!(
                limits
                    .take("alice", start + Duration::from_secs(s))
                    .is_err()
            );
        }
        assert_eq!(
            limits.take("alice", start + Duration::from_secs(60)),
            Ok(())
        );
    }

    #[test]
    fn the_buckets_kept_are_bounded_and_busy_callers_keep_theirs() {
        let start = Instant::now();
        let mut limits = CallLimits::new(2, 3);
        limits.take("busy", start).unwrap();
        limits.take("busy", start).unwrap();
        for n in 0..10 {
            limits
                .take(&format!("caller-{n}"), start + Duration::from_millis(n))
                .unwrap();
            assert!(limits.tracked() <= 3);
        }
        // The busy caller's empty bucket was kept while others came and went.
        assert!(
            limits
                .take("busy", start + Duration::from_millis(20))
                .is_err()
        );
    }
}
