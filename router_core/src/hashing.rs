//! Block hashing: the one definition of a KV block's identity, shared by engines (KV events,
//! prefix cache) and the router (prefix index).
//!
//! hash[i] = xxh3_64_with_seed(parent_le_u64 ++ tokens_of_block_i as little-endian u32, seed)
//! with parent = 0 for the first block and hash[i-1] after. Only full blocks are hashed. xxh3 is
//! specified byte-for-byte, so every process and platform computes the same values, and a slow
//! Python reference (tests/router_core/hash_reference.py) can check this implementation.

use crate::error::{Result, RouterCoreError};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Domain prefix so a model seed never equals a plain hash of the model id used elsewhere.
const MODEL_SEED_DOMAIN: &[u8] = b"switchyard-model-seed:";

/// Largest block size accepted; a block this big would make every prompt one block anyway.
pub const MAX_BLOCK_SIZE: usize = 1 << 20;

/// Checks a block size before hashing with it.
pub fn validate_block_size(block_size: usize) -> Result<()> {
    if block_size == 0 || block_size > MAX_BLOCK_SIZE {
        return Err(RouterCoreError::InvalidArgument(format!(
            "block_size must be in 1..={MAX_BLOCK_SIZE}, got {block_size}"
        )));
    }
    Ok(())
}

/// Chained hashes of the full blocks of `tokens` (`tokens.len() / block_size` of them).
pub fn block_hashes(tokens: &[u32], block_size: usize, seed: u64) -> Result<Vec<u64>> {
    validate_block_size(block_size)?;
    let full = tokens.len() / block_size * block_size;
    if full == 0 {
        return Ok(Vec::new());
    }
    // All full blocks as little-endian bytes once (a plain copy on little-endian machines), then
    // per block one 8-byte parent write and one memcpy into the hashed buffer.
    let bytes: Vec<u8> = tokens[..full]
        .iter()
        .flat_map(|t| t.to_le_bytes())
        .collect();
    let block_bytes = 4 * block_size;
    let mut buf = vec![0u8; 8 + block_bytes];
    let mut hashes = Vec::with_capacity(full / block_size);
    let mut parent: u64 = 0;
    for block in bytes.chunks_exact(block_bytes) {
        buf[..8].copy_from_slice(&parent.to_le_bytes());
        buf[8..].copy_from_slice(block);
        parent = xxh3_64_with_seed(&buf, seed);
        hashes.push(parent);
    }
    Ok(hashes)
}

/// The per-model seed: same model id, same seed, in every process.
pub fn model_seed(model_id: &str) -> u64 {
    let mut buf = Vec::with_capacity(MODEL_SEED_DOMAIN.len() + model_id.len());
    buf.extend_from_slice(MODEL_SEED_DOMAIN);
    buf.extend_from_slice(model_id.as_bytes());
    xxh3_64(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_full_blocks_are_hashed() {
        let toks: Vec<u32> = (0..10).collect();
        assert_eq!(block_hashes(&toks, 4, 0).unwrap().len(), 2);
        assert_eq!(block_hashes(&toks[..3], 4, 0).unwrap().len(), 0);
    }

    #[test]
    fn chain_depends_on_prefix_and_seed() {
        let a = block_hashes(&[1, 2, 3, 4], 2, 7).unwrap();
        let b = block_hashes(&[9, 2, 3, 4], 2, 7).unwrap();
        assert_ne!(
            a[1], b[1],
            "second block hash must depend on the first block"
        );
        let c = block_hashes(&[1, 2, 3, 4], 2, 8).unwrap();
        assert_ne!(a[0], c[0]);
        // A prefix hashes to a prefix of the hashes.
        assert_eq!(block_hashes(&[1, 2], 2, 7).unwrap()[0], a[0]);
    }

    #[test]
    fn known_value_is_stable() {
        // Pinned so an accidental change of the definition is caught (engines and routers
        // of different builds must agree).
        let mut buf = Vec::new();
        buf.extend_from_slice(&0u64.to_le_bytes());
        buf.extend_from_slice(&1u32.to_le_bytes());
        buf.extend_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            block_hashes(&[1, 2], 2, 3).unwrap()[0],
            xxh3_64_with_seed(&buf, 3)
        );
    }

    #[test]
    fn bad_block_size_is_an_error() {
        assert!(block_hashes(&[1], 0, 0).is_err());
        assert!(block_hashes(&[1], MAX_BLOCK_SIZE + 1, 0).is_err());
    }

    #[test]
    fn model_seed_is_deterministic() {
        assert_eq!(model_seed("a"), model_seed("a"));
        assert_ne!(model_seed("a"), model_seed("b"));
    }
}
