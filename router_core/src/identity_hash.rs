//! A pass-through hasher for maps keyed by block hashes: the keys are already xxh3 outputs, so
//! hashing them again (SipHash by default) would only cost time on the per-request path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Returns the u64 key itself as its hash.
#[derive(Default, Clone, Copy)]
pub struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are expected; fold anything else in so the hasher stays correct.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map keyed by block hashes.
pub type BlockMap<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

/// An empty [`BlockMap`].
pub fn block_map<V>() -> BlockMap<V> {
    BlockMap::default()
}
