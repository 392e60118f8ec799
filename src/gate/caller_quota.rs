//! The order in which keys were last used, each held by a caller, bounded in all and per
//! caller: what the session ledger and the token cache share. A caller past its quota forgets
//! its own least recently used key; past the capacity, the caller holding the most gives one
//! up (of equals, the one whose oldest key is oldest), so one caller filling the structure
//! never evicts another caller's keys while it holds fewer.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;

/// Keys by recency of use and by caller, at most `capacity` in all.
pub struct CallerQuota<K, C> {
    capacity: usize,
    /// Each key's tick of last use and the caller holding it.
    ticks: HashMap<K, (u64, C)>,
    /// Each tick of last use and its key, oldest first.
    by_age: BTreeMap<u64, K>,
    /// The ticks of each caller's keys, oldest first.
    by_caller: HashMap<C, BTreeSet<u64>>,
    next: u64,
}

impl<K: Clone + Eq + Hash, C: Clone + Eq + Hash> CallerQuota<K, C> {
    /// Empty, holding at most `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ticks: HashMap::new(),
            by_age: BTreeMap::new(),
            by_caller: HashMap::new(),
            next: 0,
        }
    }

    /// Makes `key`, held by `caller`, the most recently used (and `caller`'s). Returns the
    /// keys forgotten to stay within `quota` keys of `caller` and the capacity, oldest first.
    pub fn touch(&mut self, key: K, caller: C, quota: usize) -> Vec<K> {
        self.forget(&key);
        self.by_age.insert(self.next, key.clone());
        self.by_caller
            .entry(caller.clone())
            .or_default()
            .insert(self.next);
        self.ticks.insert(key, (self.next, caller.clone()));
        self.next += 1;
        let mut forgotten = Vec::new();
        while self.held_by(&caller) > quota {
            forgotten.extend(self.forget_oldest_of(&caller));
        }
        while self.ticks.len() > self.capacity {
            let Some(largest) = self.largest_holder() else {
                break;
            };
            forgotten.extend(self.forget_oldest_of(&largest));
        }
        forgotten
    }

    /// Makes `key`, if it is held, the most recently used (of all and of its caller), as
    /// [`Self::touch`] with its own caller does, without copying the key or its caller: what a
    /// key's every use costs. Whether it is held.
    pub fn refresh<Q>(&mut self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let Some((tick, caller)) = self.ticks.get_mut(key) else {
            return false;
        };
        if *tick + 1 == self.next {
            // The most recently used already.
            return true;
        }
        let (old, new) = (*tick, self.next);
        self.next += 1;
        *tick = new;
        if let Some(key) = self.by_age.remove(&old) {
            self.by_age.insert(new, key);
        }
        if let Some(ticks) = self.by_caller.get_mut(caller) {
            ticks.remove(&old);
            ticks.insert(new);
        }
        true
    }

    /// Forgets `key`; whether it was held.
    pub fn forget(&mut self, key: &K) -> bool {
        let Some((tick, caller)) = self.ticks.remove(key) else {
            return false;
        };
        self.by_age.remove(&tick);
        if let Some(ticks) = self.by_caller.get_mut(&caller) {
            ticks.remove(&tick);
            if ticks.is_empty() {
                self.by_caller.remove(&caller);
            }
        }
        true
    }

    /// The caller holding `key`, if it is held.
    pub fn caller_of(&self, key: &K) -> Option<&C> {
        self.ticks.get(key).map(|(_, caller)| caller)
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.ticks.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.ticks.is_empty()
    }

    /// How many keys `caller` holds.
    pub fn held_by(&self, caller: &C) -> usize {
        self.by_caller.get(caller).map_or(0, BTreeSet::len)
    }

    /// Forgets the least recently used key of `caller`, and returns it.
    fn forget_oldest_of(&mut self, caller: &C) -> Option<K> {
        let oldest = self
            .by_caller
            .get(caller)
            .and_then(|ticks| ticks.first())
            .and_then(|tick| self.by_age.get(tick))
            .cloned()?;
        self.forget(&oldest);
        Some(oldest)
    }

    /// The caller holding the most keys (of those, the one with the oldest).
    fn largest_holder(&self) -> Option<C> {
        self.by_caller
            .iter()
            .max_by(|(_, a), (_, b)| {
                a.len()
                    .cmp(&b.len())
                    .then_with(|| b.first().cmp(&a.first()))
            })
            .map(|(caller, _)| caller.clone())
    }

    /// Whether the three views agree: every key once by age and once by its caller.
    #[cfg(test)]
    pub fn consistent(&self) -> bool {
        self.by_age.len() == self.ticks.len()
            && self.by_caller.values().map(BTreeSet::len).sum::<usize>() == self.ticks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_past_its_quota_forgets_its_own_oldest_and_a_full_one_the_largest_holders() {
        let mut quota = CallerQuota::new(6);
        for key in ["a0", "a1"] {
            assert!(quota.touch(key, "alice", 4).is_empty());
        }
        for key in ["b0", "b1", "b2", "b3"] {
            assert!(quota.touch(key, "bob", 4).is_empty());
        }
        assert_eq!(quota.touch("b4", "bob", 4), ["b0"]);
        // Full: carol's first key costs bob (4 held), not alice (2).
        assert_eq!(quota.touch("c0", "carol", 4), ["b1"]);
        assert_eq!(quota.len(), 6);
        assert_eq!(quota.held_by(&"alice"), 2);
        assert_eq!(quota.caller_of(&"c0"), Some(&"carol"));
        assert!(quota.consistent());
        // A use makes a key the most recent; touching it again counts it once.
        quota.touch("b2", "bob", 4);
        assert_eq!(quota.touch("b5", "bob", 3), ["b3"]);
        assert!(quota.forget(&"b5"));
        assert!(!quota.forget(&"b5"));
        assert!(quota.consistent());
    }

    #[test]
    fn a_refreshed_key_is_the_last_its_caller_and_the_whole_forget() {
        let mut quota = CallerQuota::new(4);
        for key in ["a0", "a1", "a2"] {
            quota.touch(key.to_string(), "alice", 3);
        }
        assert!(quota.refresh("a0"));
        // The most recent already: nothing moves.
        assert!(quota.refresh("a0"));
        assert!(!quota.refresh("nobody"));
        assert!(quota.consistent());
        // Past alice's quota her oldest goes: a1, no longer a0.
        assert_eq!(quota.touch("a3".to_string(), "alice", 3), ["a1"]);
        quota.touch("b0".to_string(), "bob", 3);
        assert!(quota.refresh("a2"));
        // Past the capacity the largest holder (alice) gives up her oldest: a0.
        assert_eq!(quota.touch("b1".to_string(), "bob", 3), ["a0"]);
        assert!(quota.consistent());
    }
}
