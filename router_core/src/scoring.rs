//! Scoring: the cost of sending a request to each engine, in the spirit of Dynamo's
//! `prefill_load * (prefill_blocks - overlap) + decode_blocks`, with every term in tokens so the
//! weights are comparable:
//!
//! ```text
//! prefill_cost = prefill_weight * uncached_prompt_tokens + queue_weight * queued_prefill_tokens
//! decode_cost  = decode_weight  * (unfinished_tokens + router_tokens)
//! kv_cost      = kv_weight      * kv_pressure * uncached_prompt_tokens
//! cost         = prefill_cost + decode_cost + kv_cost
//! ```
//!
//! `kv_pressure` is the fraction of the engine's KV pages requests hold (pages only the prefix
//! cache holds are free on demand) once this prompt's uncached
//! pages are allocated, so new KV costs more where KV is scarce (up to double at weight 1 on a
//! full engine, more when it would have to evict). `router_tokens` is work the router dispatched
//! that the engine's last Stats cannot include yet (so back-to-back requests spread out, and
//! no request is counted on both sides once Stats shows it).

use crate::engine_table::{EngineLoad, Role};
use crate::error::{Result, RouterCoreError};

/// The weights of the cost terms (all finite, >= 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreWeights {
    pub prefill: f64,
    pub queue: f64,
    pub decode: f64,
    pub kv: f64,
}

impl Default for ScoreWeights {
    fn default() -> Self {
        ScoreWeights {
            prefill: 1.0,
            queue: 1.0,
            decode: 1.0,
            kv: 1.0,
        }
    }
}

impl ScoreWeights {
    pub fn new(prefill: f64, queue: f64, decode: f64, kv: f64) -> Result<Self> {
        for (name, w) in [
            ("prefill", prefill),
            ("queue", queue),
            ("decode", decode),
            ("kv", kv),
        ] {
            if !(w.is_finite() && w >= 0.0) {
                return Err(RouterCoreError::InvalidArgument(format!(
                    "{name}_weight must be a finite number >= 0, got {w}"
                )));
            }
        }
        Ok(ScoreWeights {
            prefill,
            queue,
            decode,
            kv,
        })
    }
}

/// One engine's score and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub engine_id: u32,
    pub matched_tokens: u64,
    pub uncached_tokens: u64,
    pub cost: f64,
    pub prefill_cost: f64,
    pub decode_cost: f64,
    pub kv_cost: f64,
    pub kv_pressure: f64,
}

/// Scores `load` for a prompt of `prompt_tokens` of which it holds `matched_tokens`.
pub fn score_engine(
    load: &EngineLoad,
    prompt_tokens: u64,
    matched_tokens: u64,
    block_size: u64,
    weights: &ScoreWeights,
) -> Candidate {
    let matched_tokens = matched_tokens.min(prompt_tokens);
    let uncached = prompt_tokens - matched_tokens;
    let uncached_f = uncached as f64;
    let prefill_cost =
        weights.prefill * uncached_f + weights.queue * load.queued_prefill_tokens as f64;
    let decode_cost =
        weights.decode * load.unfinished_tokens.saturating_add(load.router_tokens) as f64;
    let kv_pressure = load.kv_pressure(uncached.div_ceil(block_size.max(1)));
    let kv_cost = weights.kv * kv_pressure * uncached_f;
    Candidate {
        engine_id: load.engine_id,
        matched_tokens,
        uncached_tokens: uncached,
        cost: prefill_cost + decode_cost + kv_cost,
        prefill_cost,
        decode_cost,
        kv_cost,
        kv_pressure,
    }
}

/// Candidates for every healthy engine serving `role`, cheapest first (ties: fewer in-flight
/// requests, then lower engine id). `matched_blocks(engine_id)` gives the index's match.
pub fn rank<'a>(
    loads: impl Iterator<Item = &'a EngineLoad>,
    role: Option<Role>,
    prompt_tokens: u64,
    block_size: u64,
    weights: &ScoreWeights,
    matched_blocks: impl Fn(u32) -> u64,
) -> Vec<Candidate> {
    let mut scored: Vec<Candidate> = Vec::new();
    let mut keys: Vec<(u64, u64, u32, u32)> = Vec::new();
    for load in loads.filter(|load| load.healthy && load.role.serves(role)) {
        let matched = matched_blocks(load.engine_id).saturating_mul(block_size);
        let cand = score_engine(load, prompt_tokens, matched, block_size, weights);
        keys.push((
            ordered_bits(cand.cost),
            load.inflight,
            cand.engine_id,
            scored.len() as u32,
        ));
        scored.push(cand);
    }
    // Sorting small integer keys, then gathering, is several times cheaper than sorting the
    // candidates themselves at hundreds of engines. Engine ids are unique: one order.
    keys.sort_unstable();
    keys.into_iter()
        .map(|(_, _, _, i)| scored[i as usize].clone())
        .collect()
}

/// An f64's bits, mapped so that unsigned integer order equals `f64::total_cmp` order.
fn ordered_bits(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_table::{EngineTable, StatsUpdate};

    fn table() -> EngineTable {
        let mut t = EngineTable::new();
        for (id, role, unfinished) in [
            (0, Role::Prefill, 0),
            (1, Role::Decode, 500),
            (2, Role::Any, 0),
        ] {
            t.upsert(id, role);
            let stats = StatsUpdate {
                queued_prefill_tokens: 0,
                running_decodes: 0,
                queued_requests: 0,
                unfinished_tokens: unfinished,
                kv_pages_used: 0,
                kv_pages_evictable: 0,
                kv_pages_total: 100,
                decode_step_ms: 0.0,
                decode_context_tokens: 0,
                latency_model: vec![],
                prefill_chunk_size: 0,
            };
            t.update_stats(id, &stats).unwrap();
        }
        t
    }

    #[test]
    fn prefix_overlap_beats_an_idle_cold_engine_until_load_grows() {
        let t = table();
        let w = ScoreWeights::default();
        // Engine 1 holds 1600 of 2000 tokens but has 500 tokens of work: 400 + 500 < 2000.
        let matched = |id: u32| if id == 1 { 100 } else { 0 };
        let ranked = rank(t.all(), None, 2000, 16, &w, matched);
        assert_eq!(
            ranked.iter().map(|c| c.engine_id).collect::<Vec<_>>(),
            vec![1, 0, 2]
        );
        assert_eq!(ranked[0].matched_tokens, 1600);
        assert_eq!(ranked[0].prefill_cost, 400.0);
        assert_eq!(ranked[0].decode_cost, 500.0);
        assert_eq!(ranked[0].kv_pressure, 0.25);
        assert_eq!(ranked[0].kv_cost, 100.0);
        assert_eq!(ranked[0].cost, 1000.0);
        // Role filter: decode work may go to engine 1 or the "any" engine 2, never prefill-only 0.
        let ranked = rank(t.all(), Some(Role::Decode), 2000, 16, &w, |_| 0);
        assert_eq!(
            ranked.iter().map(|c| c.engine_id).collect::<Vec<_>>(),
            vec![2, 1]
        );
    }

    #[test]
    fn unhealthy_engines_are_not_candidates() {
        let mut t = table();
        t.set_health(0, false).unwrap();
        let ranked = rank(t.all(), None, 10, 16, &ScoreWeights::default(), |_| 0);
        assert!(ranked.iter().all(|c| c.engine_id != 0));
    }

    #[test]
    fn ordered_bits_follow_total_order() {
        let xs = [
            f64::NEG_INFINITY,
            -2.5,
            -0.0,
            0.0,
            1e-300,
            1.0,
            3.5e9,
            f64::INFINITY,
        ];
        for pair in xs.windows(2) {
            assert!(ordered_bits(pair[0]) < ordered_bits(pair[1]), "{pair:?}");
        }
    }

    #[test]
    fn weights_are_validated() {
        assert!(ScoreWeights::new(1.0, -1.0, 0.0, 0.0).is_err());
        assert!(ScoreWeights::new(f64::NAN, 1.0, 0.0, 0.0).is_err());
        assert!(ScoreWeights::new(0.0, 0.0, 0.0, 0.0).is_ok());
    }
}
