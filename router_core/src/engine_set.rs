//! A compact set of engine slots (dense indexes the prefix index assigns to engine ids): one
//! inline word for the first 64 slots, a boxed bitmap beyond that. One per indexed block, so its
//! size is most of the index's memory.

/// Set of engine slots holding one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineSet {
    /// Slots 0..64.
    Inline(u64),
    /// Any slots; word w holds slots 64*w .. 64*w+64.
    Wide(Box<[u64]>),
}

impl Default for EngineSet {
    fn default() -> Self {
        EngineSet::Inline(0)
    }
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
            EngineSet::Wide(words) => words.get(w).copied().unwrap_or(0),
        }
    }

    pub fn contains(&self, slot: usize) -> bool {
        self.word(slot / 64) & (1u64 << (slot % 64)) != 0
    }

    /// Adds `slot`; returns true if it was absent.
    pub fn insert(&mut self, slot: usize) -> bool {
        let (w, bit) = (slot / 64, 1u64 << (slot % 64));
        if let EngineSet::Inline(bits) = self {
            if w == 0 {
                let added = *bits & bit == 0;
                *bits |= bit;
                return added;
            }
            let mut words = vec![0u64; w + 1];
            words[0] = *bits;
            *self = EngineSet::Wide(words.into_boxed_slice());
        }
        if let EngineSet::Wide(words) = self {
            if words.len() <= w {
                let mut grown = vec![0u64; w + 1];
                grown[..words.len()].copy_from_slice(words);
                *words = grown.into_boxed_slice();
            }
            let added = words[w] & bit == 0;
            words[w] |= bit;
            return added;
        }
        false
    }

    /// Removes `slot`; returns true if it was present.
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
            EngineSet::Wide(words) => words.iter().all(|w| *w == 0),
        }
    }

    /// Heap bytes owned beyond the enum itself (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        match self {
            EngineSet::Inline(_) => 0,
            EngineSet::Wide(words) => words.len() * 8,
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
}
