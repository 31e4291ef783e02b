//! A compact set of engine slots (dense indexes the prefix index assigns to engine ids), one per
//! indexed block, so its size is most of the index's memory: one inline word for slots 0..64; up
//! to `FEW` slots of any number listed inline; a boxed bitmap beyond that (two words in all). In a large fleet most
//! blocks are held by one engine or a few, whose slots are mostly past 64: listed, they cost no
//! heap, where a bitmap wide enough for slot 1,000 is a 128-byte allocation per block (at 1,024
//! engines under KV churn that was most of the router's memory; docs/benchmarks.md "One router,
//! N engines").

/// Slots a set lists inline before it becomes a bitmap.
pub const FEW: usize = 3;

/// A bitmap's words behind one thin pointer, so that the set stays two words: with the block's
/// hash, 24 bytes a table slot.
pub type WideWords = Box<Box<[u64]>>;

/// Set of engine slots holding one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineSet {
    /// Slots 0..64.
    Inline(u64),
    /// At most `FEW` slots of any number: the first `len` of `slots`, unordered, distinct.
    Few { len: u8, slots: [u32; FEW] },
    /// Any slots; word w holds slots 64*w .. 64*w+64.
    Wide(WideWords),
}

impl Default for EngineSet {
    fn default() -> Self {
        EngineSet::Inline(0)
    }
}

/// A bitmap wide enough for every one of `slots`, holding them all.
fn bitmap(slots: impl Iterator<Item = usize>) -> WideWords {
    let slots: Vec<usize> = slots.collect();
    let words = slots.iter().map(|s| s / 64 + 1).max().unwrap_or(1);
    let mut bits = vec![0u64; words];
    for slot in slots {
        bits[slot / 64] |= 1u64 << (slot % 64);
    }
    Box::new(bits.into_boxed_slice())
}

/// The slots set in an inline word.
fn inline_slots(bits: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |i| bits & (1u64 << i) != 0)
}

impl EngineSet {
    /// Word `w` of the bitmap (0 beyond its length).
    #[inline]
    pub fn word(&self, w: usize) -> u64 {
        match self {
            EngineSet::Inline(bits) => {
                if w == 0 {
                    *bits
                } else {
                    0
                }
            }
            EngineSet::Few { len, slots } => slots[..*len as usize]
                .iter()
                .filter(|&&s| s as usize / 64 == w)
                .fold(0, |word, &s| word | 1u64 << (s % 64)),
            EngineSet::Wide(words) => words.get(w).copied().unwrap_or(0),
        }
    }

    pub fn contains(&self, slot: usize) -> bool {
        self.word(slot / 64) & (1u64 << (slot % 64)) != 0
    }

    /// Adds `slot`; returns true if it was absent.
    pub fn insert(&mut self, slot: usize) -> bool {
        if self.contains(slot) {
            return false;
        }
        let (w, bit) = (slot / 64, 1u64 << (slot % 64));
        match self {
            EngineSet::Inline(bits) if w == 0 => *bits |= bit,
            EngineSet::Inline(bits) => {
                let held = bits.count_ones() as usize;
                *self = if held < FEW {
                    let mut listed = [0u32; FEW];
                    for (i, s) in inline_slots(*bits).chain([slot]).enumerate() {
                        listed[i] = s as u32;
                    }
                    EngineSet::Few {
                        len: held as u8 + 1,
                        slots: listed,
                    }
                } else {
                    EngineSet::Wide(bitmap(inline_slots(*bits).chain([slot])))
                };
            }
            EngineSet::Few { len, slots } if (*len as usize) < FEW && slot <= u32::MAX as usize => {
                slots[*len as usize] = slot as u32;
                *len += 1;
            }
            EngineSet::Few { len, slots } => {
                let listed = slots[..*len as usize].iter().map(|&s| s as usize);
                *self = EngineSet::Wide(bitmap(listed.chain([slot])));
            }
            EngineSet::Wide(words) => {
                if words.len() <= w {
                    let mut grown = vec![0u64; w + 1];
                    grown[..words.len()].copy_from_slice(words);
                    **words = grown.into_boxed_slice();
                }
                words[w] |= bit;
            }
        }
        true
    }

    /// Removes `slot`; returns true if it was present. (A bitmap stays one: the index accounts
    /// its heap until the set is empty.)
    pub fn remove(&mut self, slot: usize) -> bool {
        let (w, bit) = (slot / 64, 1u64 << (slot % 64));
        match self {
            EngineSet::Inline(bits) => {
                let present = w == 0 && *bits & bit != 0;
                if present {
                    *bits &= !bit;
                }
                present
            }
            EngineSet::Few { len, slots } => {
                let n = *len as usize;
                match slots[..n].iter().position(|&s| s as usize == slot) {
                    Some(at) => {
                        slots[at] = slots[n - 1];
                        *len -= 1;
                        true
                    }
                    None => false,
                }
            }
            EngineSet::Wide(words) => match words.get_mut(w) {
                Some(word) if *word & bit != 0 => {
                    *word &= !bit;
                    true
                }
                _ => false,
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            EngineSet::Inline(bits) => *bits == 0,
            EngineSet::Few { len, .. } => *len == 0,
            EngineSet::Wide(words) => words.iter().all(|w| *w == 0),
        }
    }

    /// Heap bytes owned beyond the enum itself (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        match self {
            EngineSet::Inline(_) | EngineSet::Few { .. } => 0,
            EngineSet::Wide(words) => std::mem::size_of::<Box<[u64]>>() + words.len() * 8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_across_the_inline_boundary() {
        let mut set = EngineSet::default();
        assert!(set.insert(3));
        assert!(!set.insert(3));
        assert!(set.insert(200));
        assert!(set.contains(3) && set.contains(200) && !set.contains(64));
        assert_eq!(set.word(3), 1u64 << (200 % 64));
        assert!(set.remove(3));
        assert!(!set.remove(3));
        assert!(set.remove(200));
        assert!(set.is_empty());
        assert!(!set.remove(1000));
    }

    #[test]
    fn a_few_high_slots_are_listed_without_a_bitmap() {
        let mut set = EngineSet::default();
        assert!(set.insert(1000) && set.insert(5) && !set.insert(1000));
        assert_eq!(set.heap_bytes(), 0);
        assert!(matches!(set, EngineSet::Few { len: 2, .. }));
        assert!(set.contains(1000) && set.contains(5) && !set.contains(6));
        assert_eq!(set.word(1000 / 64), 1u64 << (1000 % 64));
        assert_eq!(set.word(0), 1u64 << 5);
        assert!(set.remove(5) && !set.remove(5) && set.contains(1000));
        // Past FEW slots it becomes a bitmap holding all of them.
        for slot in [70, 300, 900] {
            assert!(set.insert(slot));
        }
        assert!(matches!(set, EngineSet::Wide(_)) && set.heap_bytes() == 16 + 16 * 8);
        for slot in [1000, 70, 300, 900] {
            assert!(set.contains(slot) && set.remove(slot));
        }
        assert!(set.is_empty());
        // Many low slots, then a high one: a bitmap at once.
        let mut low = EngineSet::default();
        for slot in 0..10 {
            low.insert(slot);
        }
        assert!(low.insert(500) && matches!(low, EngineSet::Wide(_)));
        assert!((0..10).chain([500]).all(|s| low.contains(s)));
    }

    #[test]
    fn the_set_stays_two_words() {
        assert_eq!(std::mem::size_of::<EngineSet>(), 16);
    }
}
