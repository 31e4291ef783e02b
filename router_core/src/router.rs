//! `RouterCore`: the prefix index, the engine table and the scorer behind one object, so the
//! router makes one call per request: hash the prompt, match it on every engine, then score
//! every eligible engine (`score`) or predict every engine's times (`predict`). The index and
//! table sit behind their own locks (shared with the Python wrappers of each); each call holds
//! each lock only while it reads.

use crate::engine_table::{EngineLoad, EngineTable, Role};
use crate::error::Result;
use crate::error::RouterCoreError;
use crate::hashing::{block_hashes, validate_block_size};
use crate::prediction::{predict_engine, EnginePrediction, PredictParams};
use crate::prefix_index::PrefixIndex;
use crate::scoring::{rank, Candidate, ScoreWeights};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

/// Seconds on a process-wide monotonic clock (the approximate index's TTL runs on it).
pub fn monotonic_s() -> f64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Locks a mutex; a panic elsewhere while holding it leaves plain data, still usable.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One request's scoring: every engine's match and every eligible engine's cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreResult {
    /// Cheapest eligible engine; None when no healthy engine serves the role.
    pub best: Option<u32>,
    pub hashes: Vec<u64>,
    /// Eligible engines, cheapest first.
    pub candidates: Vec<Candidate>,
    /// (engine id, matched blocks) for every engine holding at least one block, eligible or not.
    pub matches: Vec<(u32, usize)>,
    pub block_size: usize,
}

impl ScoreResult {
    /// Prompt tokens `engine_id` holds (0 when none or unknown).
    pub fn matched_tokens(&self, engine_id: u32) -> u64 {
        self.matches
            .iter()
            .find(|(id, _)| *id == engine_id)
            .map_or(0, |(_, blocks)| (*blocks * self.block_size) as u64)
    }
}

/// Matched blocks by engine id for one request: a dense table when ids are small (they are
/// chosen by the router: 0, 1, 2, ...), else a sorted list.
enum MatchLookup {
    Dense(Vec<u32>),
    Sorted(Vec<(u32, usize)>),
}

impl MatchLookup {
    const DENSE_MAX_ID: u32 = 1 << 16;

    fn new(matches: &[(u32, usize)]) -> Self {
        let max_id = matches.iter().map(|(id, _)| *id).max().unwrap_or(0);
        if max_id < Self::DENSE_MAX_ID {
            let mut dense = vec![0u32; max_id as usize + 1];
            for (id, blocks) in matches {
                dense[*id as usize] = u32::try_from(*blocks).unwrap_or(u32::MAX);
            }
            MatchLookup::Dense(dense)
        } else {
            let mut sorted = matches.to_vec();
            sorted.sort_unstable();
            MatchLookup::Sorted(sorted)
        }
    }

    fn get(&self, engine_id: u32) -> u64 {
        match self {
            MatchLookup::Dense(dense) => dense.get(engine_id as usize).map_or(0, |b| u64::from(*b)),
            MatchLookup::Sorted(sorted) => sorted
                .binary_search_by_key(&engine_id, |(id, _)| *id)
                .map_or(0, |i| sorted[i].1 as u64),
        }
    }
}

/// Index + table + default weights (a call may bring its own).
#[derive(Debug)]
pub struct RouterCore {
    block_size: usize,
    seed: u64,
    pub index: Arc<Mutex<PrefixIndex>>,
    pub table: Arc<Mutex<EngineTable>>,
    weights: Mutex<ScoreWeights>,
}

impl RouterCore {
    pub fn new(
        block_size: usize,
        seed: u64,
        weights: ScoreWeights,
        max_blocks: usize,
        approx_ttl_s: f64,
    ) -> Result<Self> {
        validate_block_size(block_size)?;
        Ok(RouterCore {
            block_size,
            seed,
            index: Arc::new(Mutex::new(PrefixIndex::new(max_blocks, approx_ttl_s)?)),
            table: Arc::new(Mutex::new(EngineTable::new())),
            weights: Mutex::new(weights),
        })
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn weights(&self) -> ScoreWeights {
        *lock(&self.weights)
    }

    pub fn set_weights(&self, weights: ScoreWeights) {
        *lock(&self.weights) = weights;
    }

    /// Hash `tokens`, match on every engine, score the healthy engines serving `role` with
    /// `weights` (None = the core's default weights).
    pub fn score(
        &self,
        tokens: &[u32],
        role: Option<Role>,
        weights: Option<&ScoreWeights>,
        now_s: f64,
    ) -> Result<ScoreResult> {
        let hashes = block_hashes(tokens, self.block_size, self.seed)?;
        self.score_hashes(hashes, tokens.len() as u64, role, weights, now_s)
    }

    fn match_all(&self, hashes: &[u64], now_s: f64) -> Vec<(u32, usize)> {
        let mut index = lock(&self.index);
        index.purge_expired(now_s);
        index.match_prefix(hashes)
    }

    /// `score` for a prompt already hashed (`prompt_tokens` long).
    pub fn score_hashes(
        &self,
        hashes: Vec<u64>,
        prompt_tokens: u64,
        role: Option<Role>,
        weights: Option<&ScoreWeights>,
        now_s: f64,
    ) -> Result<ScoreResult> {
        let matches = self.match_all(&hashes, now_s);
        let weights = weights.copied().unwrap_or_else(|| self.weights());
        let blocks_by_engine = MatchLookup::new(&matches);
        let candidates = {
            let table = lock(&self.table);
            rank(
                table.all(),
                role,
                prompt_tokens,
                self.block_size as u64,
                &weights,
                |id| blocks_by_engine.get(id),
            )
        };
        Ok(ScoreResult {
            best: candidates.first().map(|c| c.engine_id),
            hashes,
            candidates,
            matches,
            block_size: self.block_size,
        })
    }

    /// Hash `tokens` (the request's current tokens: prompt plus anything generated), match on
    /// every engine, and predict every engine's times for it (prediction.rs), by engine id.
    pub fn predict(
        &self,
        tokens: &[u32],
        params: &PredictParams,
        now_s: f64,
    ) -> Result<Vec<EnginePrediction>> {
        self.predict_among(tokens, params, now_s, None)
    }

    /// As `predict`, for the engines `among` names only (None: every engine of the table), in
    /// its order; ids not in the table are skipped. The prefix match is still one lookup.
    pub fn predict_among(
        &self,
        tokens: &[u32],
        params: &PredictParams,
        now_s: f64,
        among: Option<&[u32]>,
    ) -> Result<Vec<EnginePrediction>> {
        if tokens.is_empty() {
            return Err(RouterCoreError::InvalidArgument(
                "predict needs at least one token".into(),
            ));
        }
        let hashes = block_hashes(tokens, self.block_size, self.seed)?;
        let blocks_by_engine = MatchLookup::new(&self.match_all(&hashes, now_s));
        let block = self.block_size as u64;
        let table = lock(&self.table);
        let one = |load: &EngineLoad| {
            let matched = blocks_by_engine.get(load.engine_id).saturating_mul(block);
            predict_engine(load, tokens.len() as u64, matched, block, params)
        };
        Ok(match among {
            None => table.all().map(one).collect(),
            Some(ids) => ids
                .iter()
                .filter_map(|&id| table.get(id).ok())
                .map(one)
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_call_hashes_matches_and_scores() {
        let core = RouterCore::new(4, 9, ScoreWeights::default(), 1000, 60.0).unwrap();
        let tokens: Vec<u32> = (0..18).collect();
        let hashes = block_hashes(&tokens, 4, 9).unwrap();
        for id in 0..3 {
            lock(&core.table).upsert(id, Role::Any);
            lock(&core.index).add_engine(id, id == 2);
        }
        lock(&core.index)
            .apply_events(1, 1, 1, &hashes[..3], &[])
            .unwrap();
        lock(&core.index)
            .record_routed(2, &hashes[..1], 0.0)
            .unwrap();
        let result = core.score(&tokens, None, None, 1.0).unwrap();
        assert_eq!(result.hashes, hashes);
        assert_eq!(result.best, Some(1));
        assert_eq!(result.matched_tokens(1), 12);
        assert_eq!(result.matched_tokens(2), 4);
        assert_eq!(result.matched_tokens(0), 0);
        assert_eq!(result.candidates.len(), 3);
        assert_eq!(result.candidates[0].prefill_cost, 6.0);
        // Past the TTL the approximate engine's block is forgotten.
        let later = core.score(&tokens, None, None, 1000.0).unwrap();
        assert_eq!(later.matched_tokens(2), 0);
        // No engine serves the role.
        lock(&core.table).set_health(1, false).unwrap();
        let result = core.score(&tokens, Some(Role::Prefill), None, 1.0).unwrap();
        assert_eq!(result.candidates.len(), 2);
        assert_eq!(
            result.matched_tokens(1),
            12,
            "matches cover ineligible engines too"
        );
    }

    #[test]
    fn per_call_weights_leave_the_default_alone() {
        let core = RouterCore::new(4, 9, ScoreWeights::default(), 1000, 60.0).unwrap();
        for id in 0..2 {
            lock(&core.table).upsert(id, Role::Any);
            lock(&core.index).add_engine(id, false);
        }
        let tokens: Vec<u32> = (0..16).collect();
        let hashes = block_hashes(&tokens, 4, 9).unwrap();
        lock(&core.index)
            .apply_events(1, 1, 1, &hashes, &[])
            .unwrap();
        lock(&core.table).on_dispatch(1, 0, 100).unwrap();
        // Default weights: engine 1's 100 dispatched tokens outweigh its 16 cached ones.
        assert_eq!(core.score(&tokens, None, None, 0.0).unwrap().best, Some(0));
        let cache_only = ScoreWeights::new(1.0, 0.0, 0.0, 0.0).unwrap();
        let result = core.score(&tokens, None, Some(&cache_only), 0.0).unwrap();
        assert_eq!(result.best, Some(1));
        assert_eq!(core.weights(), ScoreWeights::default());
    }

    #[test]
    fn predict_covers_every_engine_with_its_match() {
        let core = RouterCore::new(4, 9, ScoreWeights::default(), 1000, 60.0).unwrap();
        for id in 0..3 {
            lock(&core.table).upsert(id, Role::Any);
            lock(&core.index).add_engine(id, false);
        }
        lock(&core.table).set_health(2, false).unwrap();
        let tokens: Vec<u32> = (0..18).collect();
        let hashes = block_hashes(&tokens, 4, 9).unwrap();
        lock(&core.index)
            .apply_events(1, 1, 1, &hashes[..2], &[])
            .unwrap();
        let params = PredictParams::new(None, 1.0).unwrap();
        let preds = core.predict(&tokens, &params, 0.0).unwrap();
        assert_eq!(
            preds.iter().map(|p| p.engine_id).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(preds[1].matched_tokens, 8);
        assert_eq!(preds[1].prefill_tokens, 10);
        assert_eq!(preds[0].prefill_tokens, 18);
        assert!(!preds[2].healthy);
        assert!(core.predict(&[], &params, 0.0).is_err());
    }
}
