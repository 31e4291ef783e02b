//! TTL bookkeeping for an approximate-mode engine (one that publishes no KV events): the router
//! remembers what it routed there and forgets it after the TTL.
//!
//! Expiry is quantised to buckets of `ttl / BUCKETS_PER_TTL` so that refreshing a hot prefix
//! costs one map write (no queue entry while it stays in the same bucket) and purging is a walk
//! over whole buckets in time order. A block recorded at time t expires at the first bucket
//! boundary at or after t + ttl.

use crate::identity_hash::{block_map, BlockMap};
use std::collections::VecDeque;

/// Expiry resolution: 1/16 of the TTL.
pub const BUCKETS_PER_TTL: f64 = 16.0;

/// Expiry state of one approximate engine's blocks.
#[derive(Debug, Default)]
pub struct TtlBlocks {
    /// block hash -> expiry bucket (the latest one it was recorded in).
    expiry: BlockMap<u64>,
    /// Buckets in time order, each with the hashes recorded into it (some since refreshed).
    buckets: VecDeque<(u64, Vec<u64>)>,
}

/// The bucket a block recorded at `now_s` expires in.
pub fn expiry_bucket(now_s: f64, ttl_s: f64) -> u64 {
    let granularity = ttl_s / BUCKETS_PER_TTL;
    ((now_s + ttl_s) / granularity).ceil().max(0.0) as u64
}

/// Whether a block in `bucket` has expired by `now_s`.
pub fn bucket_expired(bucket: u64, now_s: f64, ttl_s: f64) -> bool {
    (bucket as f64) * (ttl_s / BUCKETS_PER_TTL) <= now_s
}

impl TtlBlocks {
    pub fn new() -> Self {
        TtlBlocks {
            expiry: block_map(),
            buckets: VecDeque::new(),
        }
    }

    pub fn contains(&self, hash: u64) -> bool {
        self.expiry.contains_key(&hash)
    }

    /// Records (or refreshes) `hash` as expiring in `bucket`; true when it was not held before.
    pub fn record(&mut self, hash: u64, bucket: u64) -> bool {
        let previous = self.expiry.insert(hash, bucket);
        if previous == Some(bucket) {
            return false;
        }
        if let Some(old) = previous {
            if old > bucket {
                // Clock went backwards: keep the later expiry, its bucket entry is still queued.
                self.expiry.insert(hash, old);
                return false;
            }
        }
        match self.buckets.back_mut() {
            Some((b, hashes)) if *b >= bucket => hashes.push(hash),
            _ => self.buckets.push_back((bucket, vec![hash])),
        }
        previous.is_none()
    }

    /// Removes every expired block, calling `on_expired` for each one that really left.
    pub fn purge(&mut self, now_s: f64, ttl_s: f64, mut on_expired: impl FnMut(u64)) {
        while let Some((bucket, _)) = self.buckets.front() {
            if !bucket_expired(*bucket, now_s, ttl_s) {
                break;
            }
            let Some((bucket, hashes)) = self.buckets.pop_front() else {
                break;
            };
            for hash in hashes {
                // Only if it was not refreshed into a later bucket meanwhile.
                if self.expiry.get(&hash) == Some(&bucket) {
                    self.expiry.remove(&hash);
                    on_expired(hash);
                }
            }
        }
    }

    /// Whether the next purge at `now_s` would remove anything (cheap check for the hot path).
    pub fn has_expired(&self, now_s: f64, ttl_s: f64) -> bool {
        self.buckets
            .front()
            .is_some_and(|(b, _)| bucket_expired(*b, now_s, ttl_s))
    }

    /// Forgets everything, returning the hashes that were held.
    pub fn drain(&mut self) -> Vec<u64> {
        self.buckets.clear();
        self.expiry.drain().map(|(h, _)| h).collect()
    }

    pub fn len(&self) -> usize {
        self.expiry.len()
    }

    pub fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        let map = self.expiry.capacity() * (std::mem::size_of::<(u64, u64)>() + 1);
        let queued: usize = self
            .buckets
            .iter()
            .map(|(_, v)| v.capacity() * 8 + 32)
            .sum();
        map + queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_after_ttl_and_refresh_extends() {
        let ttl = 16.0;
        let mut t = TtlBlocks::new();
        assert!(t.record(1, expiry_bucket(0.0, ttl)));
        assert!(t.record(2, expiry_bucket(0.0, ttl)));
        assert!(
            !t.record(2, expiry_bucket(8.0, ttl)),
            "refresh is not a new block"
        );
        let mut gone = Vec::new();
        t.purge(15.9, ttl, |h| gone.push(h));
        assert!(gone.is_empty());
        t.purge(16.0, ttl, |h| gone.push(h));
        assert_eq!(gone, vec![1]);
        assert!(t.contains(2));
        t.purge(24.0, ttl, |h| gone.push(h));
        assert_eq!(gone, vec![1, 2]);
        assert_eq!(t.len(), 0);
    }
}
