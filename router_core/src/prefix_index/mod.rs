//! The prefix index: for a request's block hashes, how many leading blocks each engine holds.
//!
//! One map from block hash to the set of engines holding it; matching walks the request's hashes
//! once, intersecting the set of engines still matching (a bitmap), so the cost is one map
//! lookup per block plus one AND per 64 engines. Engines feed it in one of two modes:
//! - event-driven: `apply_events`/`apply_snapshot` from the engine's KV event stream; a gap in
//!   sequence numbers marks the engine stale until a snapshot replaces its view (events keep
//!   being applied meanwhile, and the stale view keeps answering matches: best effort);
//! - approximate: `record_routed` remembers what the router sent there, forgotten after a TTL.
//!
//! Memory is bounded by `max_blocks` distinct hashes; blocks beyond it are not indexed (counted
//! in `dropped_blocks`), which can only under-report matches.

mod ttl;

use crate::engine_set::EngineSet;
use crate::error::{Result, RouterCoreError};
use crate::identity_hash::{block_map, BlockMap};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
pub use ttl::{expiry_bucket, TtlBlocks};

/// How one engine feeds the index.
#[derive(Debug)]
enum Feed {
    Events { last_seq: u64, stale: bool },
    Approximate(TtlBlocks),
}

#[derive(Debug)]
struct EngineEntry {
    slot: usize,
    feed: Feed,
}

/// Which engines hold which blocks.
#[derive(Debug)]
pub struct PrefixIndex {
    max_blocks: usize,
    approx_ttl_s: f64,
    blocks: BlockMap<EngineSet>,
    engines: HashMap<u32, EngineEntry>,
    /// slot -> engine id; freed slots are reused.
    slots: Vec<Option<u32>>,
    /// Bitmap of occupied slots: the starting set of a match.
    occupied: Vec<u64>,
    /// slot -> blocks it holds (by slot, so the per-block path needs no engine-map lookup).
    slot_blocks: Vec<usize>,
    wide_heap_bytes: usize,
    dropped_blocks: u64,
}

impl PrefixIndex {
    pub fn new(max_blocks: usize, approx_ttl_s: f64) -> Result<Self> {
        if max_blocks == 0 {
            return Err(RouterCoreError::InvalidArgument(
                "max_blocks must be > 0".into(),
            ));
        }
        if !(approx_ttl_s.is_finite() && approx_ttl_s > 0.0) {
            return Err(RouterCoreError::InvalidArgument(format!(
                "approx_ttl_s must be a positive number, got {approx_ttl_s}"
            )));
        }
        Ok(PrefixIndex {
            max_blocks,
            approx_ttl_s,
            blocks: block_map(),
            engines: HashMap::new(),
            slots: Vec::new(),
            occupied: Vec::new(),
            slot_blocks: Vec::new(),
            wide_heap_bytes: 0,
            dropped_blocks: 0,
        })
    }

    /// Adds an engine (no-op when it exists in the same mode; a mode change forgets its blocks).
    pub fn add_engine(&mut self, engine_id: u32, approximate: bool) {
        if let Some(entry) = self.engines.get(&engine_id) {
            if matches!(entry.feed, Feed::Approximate(_)) == approximate {
                return;
            }
            self.remove_engine(engine_id);
        }
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some(engine_id);
        if self.occupied.len() <= slot / 64 {
            self.occupied.resize(slot / 64 + 1, 0);
        }
        self.occupied[slot / 64] |= 1u64 << (slot % 64);
        if self.slot_blocks.len() <= slot {
            self.slot_blocks.resize(slot + 1, 0);
        }
        self.slot_blocks[slot] = 0;
        let feed = if approximate {
            Feed::Approximate(TtlBlocks::new())
        } else {
            Feed::Events {
                last_seq: 0,
                stale: false,
            }
        };
        self.engines.insert(engine_id, EngineEntry { slot, feed });
    }

    /// Removes an engine and every block it held (no-op when unknown).
    pub fn remove_engine(&mut self, engine_id: u32) {
        let Some(entry) = self.engines.remove(&engine_id) else {
            return;
        };
        self.clear_slot(entry.slot);
        self.slots[entry.slot] = None;
        self.occupied[entry.slot / 64] &= !(1u64 << (entry.slot % 64));
    }

    pub fn has_engine(&self, engine_id: u32) -> bool {
        self.engines.contains_key(&engine_id)
    }

    /// Applies one KV event batch; false when `first_seq` skips past the last seen + 1 (a gap:
    /// the engine is stale until `apply_snapshot`). Batches already seen are ignored. Within a
    /// batch, evictions apply before stores.
    pub fn apply_events(
        &mut self,
        engine_id: u32,
        first_seq: u64,
        last_seq: u64,
        stored: &[u64],
        evicted: &[u64],
    ) -> Result<bool> {
        if first_seq > last_seq {
            return Err(RouterCoreError::InvalidArgument(format!(
                "first_seq {first_seq} > last_seq {last_seq}"
            )));
        }
        let entry = self.event_entry(engine_id)?;
        let Feed::Events {
            last_seq: seen,
            stale,
        } = &mut entry.feed
        else {
            return Err(not_event_driven(engine_id));
        };
        if last_seq <= *seen {
            return Ok(true);
        }
        let gap = first_seq > seen.saturating_add(1);
        *seen = last_seq;
        *stale |= gap;
        let slot = entry.slot;
        for &hash in evicted {
            self.unset(slot, hash);
        }
        for &hash in stored {
            let _indexed = self.set(slot, hash);
        }
        Ok(!gap)
    }

    /// Replaces an engine's view with the full set it holds as of `last_seq`; clears staleness.
    pub fn apply_snapshot(&mut self, engine_id: u32, last_seq: u64, stored: &[u64]) -> Result<()> {
        let entry = self.event_entry(engine_id)?;
        if !matches!(entry.feed, Feed::Events { .. }) {
            return Err(not_event_driven(engine_id));
        }
        entry.feed = Feed::Events {
            last_seq,
            stale: false,
        };
        let slot = entry.slot;
        self.clear_slot(slot);
        for &hash in stored {
            let _indexed = self.set(slot, hash);
        }
        Ok(())
    }

    pub fn is_stale(&self, engine_id: u32) -> Result<bool> {
        match self.engines.get(&engine_id) {
            Some(EngineEntry {
                feed: Feed::Events { stale, .. },
                ..
            }) => Ok(*stale),
            Some(_) => Ok(false),
            None => Err(RouterCoreError::UnknownEngine(engine_id)),
        }
    }

    /// The last KV event sequence number applied for an event-driven engine (0 before any).
    pub fn last_seq(&self, engine_id: u32) -> Result<u64> {
        match self.engines.get(&engine_id) {
            Some(EngineEntry {
                feed: Feed::Events { last_seq, .. },
                ..
            }) => Ok(*last_seq),
            Some(_) => Ok(0),
            None => Err(RouterCoreError::UnknownEngine(engine_id)),
        }
    }

    /// Approximate mode: `hashes` were sent to `engine_id` at `now_s` (monotonic seconds); they
    /// count as held until the TTL passes. A no-op for event-driven engines (events are truth).
    pub fn record_routed(&mut self, engine_id: u32, hashes: &[u64], now_s: f64) -> Result<()> {
        self.purge_expired(now_s);
        let ttl = self.approx_ttl_s;
        let entry = self
            .engines
            .get_mut(&engine_id)
            .ok_or(RouterCoreError::UnknownEngine(engine_id))?;
        let slot = entry.slot;
        let Feed::Approximate(ttl_blocks) = &mut entry.feed else {
            return Ok(());
        };
        let bucket = expiry_bucket(now_s, ttl);
        // Borrow the TTL state out so `set` can update the shared table meanwhile.
        let mut ttl_blocks = std::mem::take(ttl_blocks);
        for &hash in hashes {
            if ttl_blocks.contains(hash) || self.set(slot, hash) {
                ttl_blocks.record(hash, bucket);
            }
        }
        if let Some(EngineEntry {
            feed: Feed::Approximate(state),
            ..
        }) = self.engines.get_mut(&engine_id)
        {
            *state = ttl_blocks;
        }
        Ok(())
    }

    /// Forgets approximate-mode blocks whose TTL has passed by `now_s`.
    pub fn purge_expired(&mut self, now_s: f64) {
        let ttl = self.approx_ttl_s;
        let mut expired: Vec<(usize, u64)> = Vec::new();
        for entry in self.engines.values_mut() {
            if let Feed::Approximate(ttl_blocks) = &mut entry.feed {
                if ttl_blocks.has_expired(now_s, ttl) {
                    let slot = entry.slot;
                    ttl_blocks.purge(now_s, ttl, |h| expired.push((slot, h)));
                }
            }
        }
        for (slot, hash) in expired {
            self.unset(slot, hash);
        }
    }

    /// engine id -> number of leading `hashes` it holds, for engines holding at least one.
    pub fn match_prefix(&self, hashes: &[u64]) -> Vec<(u32, usize)> {
        let mut active = self.occupied.clone();
        let mut out = Vec::new();
        let mut depth = 0usize;
        for hash in hashes {
            let Some(holders) = self.blocks.get(hash) else {
                break;
            };
            let mut any = 0u64;
            for (w, word) in active.iter_mut().enumerate() {
                let keep = *word & holders.word(w);
                if depth > 0 {
                    self.push_slots(w, *word & !keep, depth, &mut out);
                }
                *word = keep;
                any |= keep;
            }
            if any == 0 {
                return out;
            }
            depth += 1;
        }
        if depth > 0 {
            for (w, word) in active.iter().enumerate() {
                self.push_slots(w, *word, depth, &mut out);
            }
        }
        out
    }

    /// Distinct block hashes indexed.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks the index believes `engine_id` holds.
    pub fn engine_blocks(&self, engine_id: u32) -> Result<usize> {
        self.engines
            .get(&engine_id)
            .map(|e| self.slot_blocks.get(e.slot).copied().unwrap_or(0))
            .ok_or(RouterCoreError::UnknownEngine(engine_id))
    }

    /// Blocks not indexed because the index was full.
    pub fn dropped_blocks(&self) -> u64 {
        self.dropped_blocks
    }

    /// Approximate bytes the index holds (tables at capacity plus heap bitmaps and TTL state).
    pub fn memory_bytes(&self) -> usize {
        let table = self.blocks.capacity() * (std::mem::size_of::<(u64, EngineSet)>() + 1);
        let ttl: usize = self
            .engines
            .values()
            .map(|e| match &e.feed {
                Feed::Approximate(t) => t.memory_bytes(),
                Feed::Events { .. } => 0,
            })
            .sum();
        let engines = self.engines.capacity() * (std::mem::size_of::<(u32, EngineEntry)>() + 1);
        std::mem::size_of::<Self>() + table + self.wide_heap_bytes + ttl + engines
    }

    pub fn engine_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.engines.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn event_entry(&mut self, engine_id: u32) -> Result<&mut EngineEntry> {
        self.engines
            .get_mut(&engine_id)
            .ok_or(RouterCoreError::UnknownEngine(engine_id))
    }

    fn push_slots(&self, w: usize, mut bits: u64, depth: usize, out: &mut Vec<(u32, usize)>) {
        while bits != 0 {
            let slot = w * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(Some(engine_id)) = self.slots.get(slot) {
                out.push((*engine_id, depth));
            }
        }
    }

    fn engine_at(&mut self, slot: usize) -> Option<&mut EngineEntry> {
        let engine_id = self.slots.get(slot).copied().flatten()?;
        self.engines.get_mut(&engine_id)
    }

    /// Marks `hash` held by `slot`; false when the index is full and the hash is new.
    fn set(&mut self, slot: usize, hash: u64) -> bool {
        let full = self.blocks.len() >= self.max_blocks;
        let set = match self.blocks.entry(hash) {
            Entry::Occupied(held) => held.into_mut(),
            Entry::Vacant(_) if full => {
                self.dropped_blocks += 1;
                return false;
            }
            Entry::Vacant(new) => new.insert(EngineSet::default()),
        };
        let before = set.heap_bytes();
        let added = set.insert(slot);
        self.wide_heap_bytes = self.wide_heap_bytes + set.heap_bytes() - before;
        if added {
            if let Some(count) = self.slot_blocks.get_mut(slot) {
                *count += 1;
            }
        }
        true
    }

    fn unset(&mut self, slot: usize, hash: u64) {
        let Some(set) = self.blocks.get_mut(&hash) else {
            return;
        };
        if !set.remove(slot) {
            return;
        }
        if set.is_empty() {
            self.wide_heap_bytes -= set.heap_bytes();
            self.blocks.remove(&hash);
        }
        if let Some(count) = self.slot_blocks.get_mut(slot) {
            *count = count.saturating_sub(1);
        }
    }

    /// Removes `slot` from every block (one pass over the table; snapshots and removals only).
    fn clear_slot(&mut self, slot: usize) {
        let held = self.slot_blocks.get(slot).copied().unwrap_or(0);
        if held > 0 {
            let mut freed = 0usize;
            self.blocks.retain(|_, set| {
                set.remove(slot);
                let keep = !set.is_empty();
                if !keep {
                    freed += set.heap_bytes();
                }
                keep
            });
            self.wide_heap_bytes -= freed;
        }
        if let Some(count) = self.slot_blocks.get_mut(slot) {
            *count = 0;
        }
        if let Some(entry) = self.engine_at(slot) {
            if let Feed::Approximate(ttl_blocks) = &mut entry.feed {
                ttl_blocks.drain();
            }
        }
    }
}

fn not_event_driven(engine_id: u32) -> RouterCoreError {
    RouterCoreError::InvalidArgument(format!(
        "engine {engine_id} is in approximate mode; it takes record_routed, not KV events"
    ))
}

#[cfg(test)]
mod tests;
