//! The cached objects of one kind in one namespace, by name: entries sorted by name in one
//! vector, their names back to back in one string. A hash map of boxed names took more per
//! object (a 64-byte bucket in a table at most seven eighths full, usually far less, and a heap
//! block per name; docs/performance-history.md#controller-caches-and-memory); this
//! takes the entry, 8 bytes for where its name is, and the name's bytes.
//!
//! A lookup is a binary search (about 14 comparisons of names at 10 000). An insertion in the
//! middle moves the entries after it; a list arrives sorted by name (the apiserver lists in key
//! order), so filling a cache from a list only appends.

/// Values of type `V` by name.
pub struct Names<V> {
    /// Every name, back to back; an entry refers to its name by [`Span`].
    text: String,
    /// Bytes of `text` no entry refers to any more (names removed).
    unused: usize,
    /// The entries, sorted by name.
    slots: Vec<Slot<V>>,
}

struct Slot<V> {
    name: Span,
    value: V,
}

/// Where a name is in [`Names::text`].
#[derive(Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
}

impl<V> Default for Names<V> {
    fn default() -> Self {
        Self {
            text: String::new(),
            unused: 0,
            slots: Vec::new(),
        }
    }
}

/// Unused text below this many bytes is never compacted away.
const COMPACT_AFTER: usize = 4096;

impl<V> Names<V> {
    fn name(&self, span: Span) -> &str {
        let start = span.start as usize;
        &self.text[start..start + span.len as usize]
    }

    /// Where `name` is in the slots, or where it would go.
    fn position(&self, name: &str) -> Result<usize, usize> {
        self.slots
            .binary_search_by(|slot| self.name(slot.name).cmp(name))
    }

    /// The value cached as `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        let index = self.position(name).ok()?;
        Some(&self.slots[index].value)
    }

    /// Whether a value is cached as `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// Caches `value` as `name`, replacing what was cached as `name`.
    pub fn insert(&mut self, name: &str, value: V) {
        match self.position(name) {
            Ok(index) => self.slots[index].value = value,
            Err(index) => {
                let name = self.push_text(name);
                if self.slots.len() == self.slots.capacity() {
                    self.slots.reserve_exact(self.slots.len() / 8 + 4);
                }
                self.slots.insert(index, Slot { name, value });
            }
        }
    }

    /// Removes and returns what was cached as `name`.
    pub fn remove(&mut self, name: &str) -> Option<V> {
        let index = self.position(name).ok()?;
        let slot = self.slots.remove(index);
        self.unused += slot.name.len as usize;
        if self.unused >= COMPACT_AFTER && self.unused * 2 >= self.text.len() {
            self.compact();
        }
        Some(slot.value)
    }

    /// The names and values, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.slots
            .iter()
            .map(|slot| (self.name(slot.name), &slot.value))
    }

    /// How many values are cached.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Gives back the room reserved for more entries and names (after a list).
    pub fn shrink_to_fit(&mut self) {
        self.slots.shrink_to_fit();
        self.text.shrink_to_fit();
    }

    /// Appends `name` to the text (compacted first if it would not fit in 4 GiB).
    fn push_text(&mut self, name: &str) -> Span {
        let end = |text: &str| u32::try_from(text.len() + name.len());
        if end(&self.text).is_err() {
            self.compact();
        }
        end(&self.text).expect("the names of one namespace take less than 4 GiB");
        if self.text.capacity() - self.text.len() < name.len() {
            // An eighth more at a time, as the entries grow, not twice as much: a namespace of
            // 10 000 objects grows by a few kilobytes when one more is created.
            self.text
                .reserve_exact(self.text.len() / 8 + name.len() + 64);
        }
        let span = Span {
            start: self.text.len() as u32,
            len: name.len() as u32,
        };
        self.text.push_str(name);
        span
    }

    /// Rewrites the text with only the names of the entries.
    fn compact(&mut self) {
        let mut text = String::with_capacity(self.text.len() - self.unused);
        for slot in &mut self.slots {
            let start = slot.name.start as usize;
            let name = &self.text[start..start + slot.name.len as usize];
            slot.name.start = u32::try_from(text.len()).expect("fewer bytes than before");
            text.push_str(name);
        }
        self.text = text;
        self.unused = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the entries are sorted by name, each name once.
    fn sorted<V>(names: &Names<V>) -> bool {
        names
            .slots
            .windows(2)
            .all(|pair| names.name(pair[0].name) < names.name(pair[1].name))
    }

    #[test]
    fn values_are_found_by_name_in_any_order_of_insertion() {
        let mut names = Names::default();
        for (i, name) in ["m", "b", "z", "a", "mm", "c"].into_iter().enumerate() {
            names.insert(name, i);
        }
        assert!(sorted(&names));
        assert_eq!(names.len(), 6);
        assert_eq!(names.get("mm"), Some(&4));
        assert_eq!(names.get("a"), Some(&3));
        assert_eq!(names.get("n"), None);
        assert!(names.contains("z") && !names.contains(""));
        let listed: Vec<&str> = names.iter().map(|(name, _)| name).collect();
        assert_eq!(listed, ["a", "b", "c", "m", "mm", "z"]);

        names.insert("b", 10);
        assert_eq!(names.get("b"), Some(&10), "an insert replaces");
        assert_eq!(names.len(), 6);
        assert_eq!(names.remove("b"), Some(10));
        assert_eq!(names.remove("b"), None);
        assert_eq!(names.get("b"), None);
        assert_eq!(names.get("c"), Some(&5));
    }

    #[test]
    fn removing_most_names_compacts_the_text_and_keeps_the_rest() {
        let mut names = Names::default();
        let name = |i: usize| format!("agent-{i:05}-approval-gate");
        for i in 0..2000 {
            names.insert(&name(i), i);
        }
        let full = names.text.len();
        for i in (0..2000).filter(|i| i % 10 != 0) {
            assert_eq!(names.remove(&name(i)), Some(i));
        }
        assert!(
            names.text.len() < full / 2,
            "{} of {full} bytes",
            names.text.len()
        );
        assert_eq!(names.len(), 200);
        for i in 0..2000 {
            let expected = (i % 10 == 0).then_some(i);
            assert_eq!(names.get(&name(i)).copied(), expected, "{}", name(i));
        }
        assert!(sorted(&names));
    }

    #[test]
    fn one_more_name_grows_the_room_by_an_eighth_not_twice() {
        let mut names = Names::default();
        let name = |i: usize| format!("agent-{i:05}");
        for i in 0..1000 {
            names.insert(&name(i), ());
        }
        names.shrink_to_fit();
        names.insert(&name(1000), ());
        assert!(names.text.capacity() <= names.text.len() * 9 / 8 + 128);
        assert!(names.slots.capacity() <= names.slots.len() * 9 / 8 + 4);
    }

    #[test]
    fn an_entry_takes_its_value_and_eight_bytes() {
        assert_eq!(std::mem::size_of::<Slot<u64>>(), 16);
    }
}
