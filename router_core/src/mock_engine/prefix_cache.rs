//! The mock engine's pretend prefix cache: which full blocks of which prompts it has "seen". It
//! holds block hashes only (no KV), so PrepRecv/MatchPrefix answer like a real engine and
//! KVEvents feed the router's prefix index with the hashes real engines send. With a capacity it
//! evicts the blocks it stored first once full (the router benchmark's KV churn); without, never.

use crate::hashing::block_hashes;
use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use tokio::sync::watch;

/// Stored-block events kept for subscribers; one further behind gets a snapshot instead.
const RETAINED_EVENTS: usize = 1024;

/// One store: its sequence number, the hashes it added and those it evicted to make room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub seq: u64,
    pub stored: Vec<u64>,
    pub evicted: Vec<u64>,
}

#[derive(Default)]
struct Held {
    hashes: HashSet<u64>,
    /// The held hashes, first stored first (what a full cache evicts next).
    order: VecDeque<u64>,
    events: VecDeque<StoredEvent>,
    last_seq: u64,
}

pub struct MockPrefixCache {
    block_size: usize,
    seed: u64,
    /// Blocks held at most (0: no bound, never evicts).
    capacity: usize,
    held: Mutex<Held>,
    /// The last sequence number, for KVEvents subscribers to wait on.
    changed: watch::Sender<u64>,
}

/// What a subscriber that has seen events up to some sequence number should send next.
#[derive(Debug, PartialEq, Eq)]
pub enum EventsAfter {
    Events(Vec<StoredEvent>),
    /// The subscriber fell behind the retained window: the full set, as of `last_seq`.
    Snapshot {
        last_seq: u64,
        hashes: Vec<u64>,
    },
}

impl MockPrefixCache {
    /// `capacity` blocks at most (0: no bound).
    pub fn new(block_size: usize, seed: u64, capacity: usize) -> Self {
        MockPrefixCache {
            block_size,
            seed,
            capacity,
            held: Mutex::new(Held::default()),
            changed: watch::Sender::new(0),
        }
    }

    fn hashes(&self, tokens: &[u32]) -> Vec<u64> {
        // block_size was validated with the config, so hashing cannot fail.
        block_hashes(tokens, self.block_size, self.seed).unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic while holding the lock leaves a consistent set (every update is one insert).
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tokens of `tokens` covered by the longest run of held leading blocks.
    pub fn matched_len(&self, tokens: &[u32]) -> usize {
        let hashes = self.hashes(tokens);
        let held = self.lock();
        hashes
            .iter()
            .take_while(|h| held.hashes.contains(h))
            .count()
            * self.block_size
    }

    /// Marks every full block of `tokens` as held, evicting the oldest beyond the capacity; new
    /// blocks make one event.
    pub fn store(&self, tokens: &[u32]) {
        let hashes = self.hashes(tokens);
        let mut held = self.lock();
        let mut new = Vec::new();
        for hash in hashes {
            if held.hashes.insert(hash) {
                held.order.push_back(hash);
                new.push(hash);
            }
        }
        if new.is_empty() {
            return;
        }
        let mut evicted = Vec::new();
        while self.capacity > 0 && held.order.len() > self.capacity {
            let Some(oldest) = held.order.pop_front() else {
                break;
            };
            held.hashes.remove(&oldest);
            evicted.push(oldest);
        }
        // A block stored and evicted by the same store is in neither list: the index never
        // held it.
        if !evicted.is_empty() {
            let added: HashSet<u64> = new.iter().copied().collect();
            let both: HashSet<u64> = evicted
                .iter()
                .copied()
                .filter(|h| added.contains(h))
                .collect();
            new.retain(|h| !both.contains(h));
            evicted.retain(|h| !both.contains(h));
        }
        held.last_seq += 1;
        let seq = held.last_seq;
        held.events.push_back(StoredEvent {
            seq,
            stored: new,
            evicted,
        });
        if held.events.len() > RETAINED_EVENTS {
            held.events.pop_front();
        }
        drop(held);
        self.changed.send_replace(seq);
    }

    pub fn last_seq(&self) -> u64 {
        self.lock().last_seq
    }

    pub fn num_blocks(&self) -> usize {
        self.lock().hashes.len()
    }

    /// Every held hash (sorted) and the sequence number it is current as of.
    pub fn snapshot(&self) -> (u64, Vec<u64>) {
        let held = self.lock();
        let mut hashes: Vec<u64> = held.hashes.iter().copied().collect();
        hashes.sort_unstable();
        (held.last_seq, hashes)
    }

    /// Events with a sequence number above `seq`.
    pub fn events_after(&self, seq: u64) -> EventsAfter {
        let held = self.lock();
        if seq >= held.last_seq {
            return EventsAfter::Events(Vec::new());
        }
        match held.events.front() {
            Some(first) if first.seq <= seq + 1 => EventsAfter::Events(
                held.events
                    .iter()
                    .filter(|event| event.seq > seq)
                    .cloned()
                    .collect(),
            ),
            _ => {
                drop(held);
                let (last_seq, hashes) = self.snapshot();
                EventsAfter::Snapshot { last_seq, hashes }
            }
        }
    }

    /// A receiver that wakes when a store adds blocks.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(seq: u64, stored: Vec<u64>) -> StoredEvent {
        StoredEvent {
            seq,
            stored,
            evicted: Vec::new(),
        }
    }

    #[test]
    fn a_full_cache_evicts_what_it_stored_first() {
        let cache = MockPrefixCache::new(1, 0, 3);
        cache.store(&[1, 2]);
        cache.store(&[3, 4]);
        let h = |t: &[u32]| block_hashes(t, 1, 0).unwrap();
        let (first, second) = (h(&[1, 2]), h(&[3, 4]));
        assert_eq!(cache.num_blocks(), 3);
        assert_eq!(cache.matched_len(&[1, 2]), 0); // its first block went
        assert_eq!(cache.matched_len(&[3, 4]), 2);
        assert_eq!(
            cache.events_after(1),
            EventsAfter::Events(vec![StoredEvent {
                seq: 2,
                stored: second,
                evicted: vec![first[0]],
            }])
        );
        // A store larger than the whole cache: what it adds and loses at once is in neither list.
        let cache = MockPrefixCache::new(1, 0, 2);
        cache.store(&[7, 8, 9]);
        let all = h(&[7, 8, 9]);
        assert_eq!(
            cache.events_after(0),
            EventsAfter::Events(vec![StoredEvent {
                seq: 1,
                stored: all[1..].to_vec(),
                evicted: vec![],
            }])
        );
    }

    #[test]
    fn matches_whole_held_blocks_only() {
        let cache = MockPrefixCache::new(4, 7, 0);
        let prompt: Vec<u32> = (0..10).collect();
        assert_eq!(cache.matched_len(&prompt), 0);
        cache.store(&prompt);
        assert_eq!(cache.matched_len(&prompt), 8);
        assert_eq!(cache.matched_len(&prompt[..7]), 4);
        let mut other = prompt.clone();
        other[5] = 99; // second block differs
        assert_eq!(cache.matched_len(&other), 4);
        assert_eq!(cache.num_blocks(), 2);
    }

    #[test]
    fn events_carry_only_new_blocks_in_order() {
        let cache = MockPrefixCache::new(2, 0, 0);
        cache.store(&[1, 2, 3, 4]);
        cache.store(&[1, 2, 3, 4]); // nothing new: no event
        cache.store(&[1, 2, 5, 6]);
        assert_eq!(cache.last_seq(), 2);
        let first = block_hashes(&[1, 2, 3, 4], 2, 0).unwrap();
        let second = block_hashes(&[1, 2, 5, 6], 2, 0).unwrap();
        assert_eq!(
            cache.events_after(0),
            EventsAfter::Events(vec![stored(1, first.clone()), stored(2, vec![second[1]])])
        );
        assert_eq!(
            cache.events_after(1),
            EventsAfter::Events(vec![stored(2, vec![second[1]])])
        );
        assert_eq!(cache.events_after(2), EventsAfter::Events(vec![]));
    }

    #[test]
    fn a_subscriber_behind_the_window_gets_a_snapshot() {
        let cache = MockPrefixCache::new(1, 0, 0);
        for t in 0..(RETAINED_EVENTS as u32 + 5) {
            cache.store(&[t]);
        }
        match cache.events_after(1) {
            EventsAfter::Snapshot { last_seq, hashes } => {
                assert_eq!(last_seq, RETAINED_EVENTS as u64 + 5);
                assert_eq!(hashes.len(), RETAINED_EVENTS + 5);
            }
            other => panic!("expected a snapshot, got {other:?}"),
        }
        assert!(
            matches!(cache.events_after(10), EventsAfter::Events(e) if e.len() == RETAINED_EVENTS - 5)
        );
    }

    #[test]
    fn subscribers_wake_on_new_blocks() {
        let cache = MockPrefixCache::new(1, 0, 0);
        let mut rx = cache.subscribe();
        assert!(!rx.has_changed().unwrap());
        cache.store(&[3]);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 1);
    }
}
