//! The benchmark workload, shared by the criterion benches and the percentile pass (and
//! mirrored by `switchyard bench router-core`): E engines, about 1M distinct indexed blocks in
//! 2k-token documents that share a 512-token system prompt; each request is the first 1024
//! tokens of a random document plus 1024 new tokens.

use router_core::engine_table::{Role, StatsUpdate};
use router_core::hashing::block_hashes;
use router_core::router::{lock, RouterCore};
use router_core::scoring::ScoreWeights;

pub const BLOCK: usize = 16;
pub const PROMPT_TOKENS: usize = 2048;
pub const SHARED_TOKENS: usize = 512;
pub const SEED: u64 = 0x5eed;

/// Deterministic pseudo-random token ids (SplitMix64), below a 49152-token vocabulary.
pub fn tokens(stream: u64, n: usize) -> Vec<u32> {
    let mut state = stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % 49_152) as u32
        })
        .collect()
}

pub fn document(doc: u64) -> Vec<u32> {
    let mut toks = tokens(0, SHARED_TOKENS);
    toks.extend(tokens(doc + 1, PROMPT_TOKENS - SHARED_TOKENS));
    toks
}

/// A core with `engines` engines (every one holds the system prompt) and `total_blocks`
/// distinct blocks; returns it with the number of documents indexed.
pub fn populated_core(engines: u32, total_blocks: usize) -> (RouterCore, u64) {
    let core = RouterCore::new(BLOCK, SEED, ScoreWeights::default(), 1 << 24, 120.0)
        .expect("valid config");
    let shared_blocks = SHARED_TOKENS / BLOCK;
    let per_doc = PROMPT_TOKENS / BLOCK - shared_blocks;
    let docs = (total_blocks - shared_blocks).div_ceil(per_doc) as u64;
    {
        let mut table = lock(&core.table);
        let mut index = lock(&core.index);
        for e in 0..engines {
            table.upsert(e, Role::Any);
            let stats = StatsUpdate {
                queued_prefill_tokens: u64::from(e % 7) * 100,
                running_decodes: u64::from(e % 5),
                queued_requests: 0,
                unfinished_tokens: u64::from(e % 11) * 50,
                kv_pages_used: u64::from(e % 13) * 100,
                kv_pages_evictable: 0,
                kv_pages_total: 4096,
                decode_step_ms: 10.0,
                decode_context_tokens: u64::from(e % 5) * 1500,
                latency_model: [
                    ("const", 2.0),
                    ("prefill_tokens", 0.05),
                    ("prefill_attention", 1e-6),
                    ("decode_seqs", 0.5),
                    ("decode_context", 1e-4),
                ]
                .iter()
                .map(|(t, c)| (t.to_string(), *c))
                .collect(),
                prefill_chunk_size: 512,
            };
            table.update_stats(e, &stats).expect("known engine");
            index.add_engine(e, false);
        }
        let mut seq = vec![0u64; engines as usize];
        for doc in 0..docs {
            let hashes = block_hashes(&document(doc), BLOCK, SEED).expect("valid block size");
            let e = (doc % u64::from(engines)) as u32;
            seq[e as usize] += 1;
            let s = seq[e as usize];
            index
                .apply_events(e, s, s, &hashes, &[])
                .expect("known engine");
        }
        for e in 0..engines {
            let s = seq[e as usize] + 1;
            let hashes = block_hashes(&document(0), BLOCK, SEED).expect("valid block size");
            index
                .apply_events(e, s, s, &hashes[..shared_blocks], &[])
                .expect("known engine");
        }
    }
    (core, docs)
}

/// Request `i`: the first half of a document plus fresh tokens.
pub fn request(i: u64, docs: u64) -> Vec<u32> {
    let mut toks = document((i * 7919) % docs);
    toks.truncate(PROMPT_TOKENS / 2);
    toks.extend(tokens(1_000_000 + i, PROMPT_TOKENS / 2));
    toks
}

/// p50 and p99 of `samples` (nanoseconds).
pub fn percentiles(samples: &mut [u64]) -> (u64, u64) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

/// A synthetic byte-level vocabulary shaped like SmolLM2's (49152 tokens, most "Ġword").
pub fn synthetic_tokenizer_json() -> String {
    let mut vocab = serde_json::Map::new();
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    let mut id = 0u64;
    for b in 0u8..=255 {
        let ch = if (b'!'..=b'~').contains(&b) {
            char::from(b).to_string()
        } else {
            format!("<{b}>")
        };
        vocab.insert(ch, id.into());
        id += 1;
    }
    let mut n = 0usize;
    while id < 49_152 {
        let mut word = String::from(if n.is_multiple_of(3) { "" } else { "Ġ" });
        let mut k = n;
        for _ in 0..(3 + n % 6) {
            word.push(char::from(letters[k % 26]));
            k = k / 26 + 7;
        }
        if !vocab.contains_key(&word) {
            vocab.insert(word, id.into());
            id += 1;
        }
        n += 1;
    }
    serde_json::json!({"model": {"type": "BPE", "vocab": vocab, "merges": []},
                       "decoder": {"type": "ByteLevel"}})
    .to_string()
}
