//! The engine table: per engine its role, health, load (from `Stats` polls and the router's own
//! dispatch/completion events), KV use, prefill chunk size and fitted step-time model
//! (latency_model.rs); the per-request predictions built on it are in prediction.rs.

use crate::dispatch_delta::{DeltaOutbox, DispatchDelta};
use crate::error::{Result, RouterCoreError};
use crate::latency_model::{chunked_prefill, DecodeBatch, StepModel, StepWork};
use std::collections::BTreeMap;

/// What an engine serves. An `Any` engine serves every role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Any,
    Prefill,
    Decode,
}

impl Role {
    pub fn parse(name: &str) -> Result<Role> {
        match name {
            "any" => Ok(Role::Any),
            "prefill" => Ok(Role::Prefill),
            "decode" => Ok(Role::Decode),
            other => Err(RouterCoreError::InvalidArgument(format!(
                "role must be 'any', 'prefill' or 'decode', got {other:?}"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Any => "any",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }

    /// Whether an engine with this role may take work asked for as `wanted` (None = any).
    pub fn serves(self, wanted: Option<Role>) -> bool {
        match wanted {
            None | Some(Role::Any) => true,
            Some(w) => self == Role::Any || self == w,
        }
    }
}

/// One engine's row.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineLoad {
    pub engine_id: u32,
    pub role: Role,
    pub healthy: bool,
    /// Prefill tokens not yet computed: waiting requests and running ones still prefilling.
    pub queued_prefill_tokens: u64,
    /// Sequences decoding (one token per step).
    pub running_decodes: u64,
    /// Requests waiting for the engine to admit them (0 = not reported).
    pub queued_requests: u64,
    /// KV positions the running decodes read per step (their context lengths summed).
    pub decode_context_tokens: u64,
    pub unfinished_tokens: u64,
    pub kv_pages_used: u64,
    /// Of `kv_pages_used`, pages only the prefix cache holds (evicted on demand).
    pub kv_pages_evictable: u64,
    pub kv_pages_total: u64,
    pub decode_step_ms: f64,
    pub latency: StepModel,
    /// The engine's prefill token budget per step (0 = not reported: a prefill is one step).
    pub prefill_chunk_size: u64,
    /// The most prefill tokens one queued request has left: the engine's last Stats, or a
    /// larger prefill the router has sent it since (one long prompt tells from a long queue).
    pub longest_queued_prefill: u64,
    /// Blocks the engine's prefix cache holds (its last Stats; 0 = not reported).
    pub cached_blocks: u64,
    /// Router-side: requests dispatched and not completed.
    pub inflight: u64,
    /// Router-side: prefill + decode tokens dispatched that the engine's latest Stats cannot
    /// include yet (sent after that Stats was asked for). Added to `unfinished_tokens`, it is
    /// the engine's load with no request counted twice.
    pub router_tokens: u64,
    /// Router-side, as `router_tokens`: prefill tokens dispatched (generations and KV sends)
    /// that the latest Stats cannot include yet — the queue the engine will report next.
    pub router_prefill_tokens: u64,
    /// Router-side, as `router_tokens`: generations dispatched that the latest Stats cannot
    /// include yet — decodes the engine will be running by its next Stats.
    pub router_seqs: u64,
    /// Router-side: of `router_prefill_tokens`, those whose prefill the router has seen finish
    /// (the generation's first token arrived, the send answered). Without it every request of a
    /// poll interval counts as queued until the next Stats, long after the engine computed it:
    /// at light load a phantom queue of half a poll interval's prompts.
    pub router_prefilled_tokens: u64,
    /// Of the latest Stats' `queued_prefill_tokens`, those the router has since seen finish
    /// (dispatched before that Stats was asked for, done after it was answered).
    pub stats_prefilled_tokens: u64,
    /// Stats asked for so far (a dispatch is stamped with it: `on_dispatch`'s return value)...
    stats_asked: u64,
    /// ...and the one the latest answer covers.
    stats_answered: u64,
    /// The router-side counts at the moment the pending Stats was asked for: what its answer
    /// covers.
    stats_mark: Pending,
}

/// Router-side counts since a Stats was asked for (see `EngineLoad::router_tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Pending {
    tokens: u64,
    prefill_tokens: u64,
    prefilled_tokens: u64,
    seqs: u64,
    epoch: u64,
}

impl EngineLoad {
    fn new(engine_id: u32, role: Role) -> Self {
        EngineLoad {
            engine_id,
            role,
            healthy: true,
            queued_prefill_tokens: 0,
            running_decodes: 0,
            queued_requests: 0,
            decode_context_tokens: 0,
            unfinished_tokens: 0,
            kv_pages_used: 0,
            kv_pages_evictable: 0,
            kv_pages_total: 0,
            decode_step_ms: 0.0,
            latency: StepModel::unknown(),
            prefill_chunk_size: 0,
            longest_queued_prefill: 0,
            cached_blocks: 0,
            inflight: 0,
            router_tokens: 0,
            router_prefill_tokens: 0,
            router_seqs: 0,
            router_prefilled_tokens: 0,
            stats_prefilled_tokens: 0,
            stats_asked: 0,
            stats_answered: 0,
            stats_mark: Pending::default(),
        }
    }

    /// The decodes now running, as they ride along in every step.
    pub fn decode_batch(&self) -> DecodeBatch {
        self.latency
            .decode_batch(self.running_decodes, self.decode_context_tokens)
    }

    /// Prefill tokens the engine has queued, counting what the router dispatched since its
    /// latest Stats (without them, every request in a poll interval sees the same idle engine
    /// and they all herd onto it).
    pub fn pending_prefill_tokens(&self) -> u64 {
        self.queued_prefill_tokens
            .saturating_sub(self.stats_prefilled_tokens)
            .saturating_add(
                self.router_prefill_tokens
                    .saturating_sub(self.router_prefilled_tokens),
            )
    }

    /// The decodes the engine will be running once what the router dispatched since its latest
    /// Stats has prefilled: those it reported plus the router's new ones, each with the mean
    /// context of the prefill dispatched with them.
    pub fn pending_decode_batch(&self) -> DecodeBatch {
        self.latency.decode_batch(
            self.running_decodes.saturating_add(self.router_seqs),
            self.decode_context_tokens
                .saturating_add(self.router_prefill_tokens),
        )
    }

    /// The decode batch a request placed now joins once it has prefilled: the decodes of
    /// [`Self::pending_decode_batch`] and the requests queued on the engine at its latest Stats
    /// (`queued_requests`, their context its `queued_prefill_tokens`) — they prefill ahead of it
    /// and decode beside it. Approximate where the engine also queues KV sends (counted as
    /// requests, though they never decode there) and for requests still prefilling when the
    /// Stats was taken (their tokens counted, not themselves: Stats do not tell them apart).
    pub fn joining_decode_batch(&self) -> DecodeBatch {
        let pending = self.pending_decode_batch();
        DecodeBatch {
            seqs: pending.seqs.saturating_add(self.queued_requests),
            context: pending.context.saturating_add(self.queued_prefill_tokens),
            ..pending
        }
    }

    /// Predicted time of prefilling `prefill_tokens` on top of `cached_tokens` already in KV,
    /// chunked at this engine's chunk size with its running decodes in every step (no queue).
    pub fn predict_prefill_ms(&self, prefill_tokens: u64, cached_tokens: u64) -> f64 {
        let run = chunked_prefill(
            cached_tokens,
            prefill_tokens,
            self.prefill_chunk_size,
            self.decode_batch(),
            0,
        );
        self.latency.time_ms(&run.total)
    }

    /// Predicted time of one step of the given shape (NaN without a model).
    pub fn predict_step_ms(&self, work: &StepWork) -> f64 {
        self.latency.time_ms(work)
    }

    /// Fraction of KV pages held by requests once `extra_pages` more are allocated (0 when
    /// unknown). Pages only the prefix cache holds do not count: the engine evicts them the
    /// moment it needs room, so a full but idle cache is no pressure.
    pub fn kv_pressure(&self, extra_pages: u64) -> f64 {
        if self.kv_pages_total == 0 {
            return 0.0;
        }
        let held = self.kv_pages_used.saturating_sub(self.kv_pages_evictable);
        (held + extra_pages) as f64 / self.kv_pages_total as f64
    }
}

/// A Stats poll's numbers for one engine.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsUpdate {
    pub queued_prefill_tokens: u64,
    pub running_decodes: u64,
    /// Requests waiting to be admitted (0 = not reported).
    pub queued_requests: u64,
    pub unfinished_tokens: u64,
    pub kv_pages_used: u64,
    /// Of kv_pages_used, pages only the prefix cache holds (0 = not reported).
    pub kv_pages_evictable: u64,
    pub kv_pages_total: u64,
    pub decode_step_ms: f64,
    pub decode_context_tokens: u64,
    /// (term, ms) pairs of the engine's step-time model; empty = no model yet.
    pub latency_model: Vec<(String, f64)>,
    /// 0 = not reported.
    pub prefill_chunk_size: u64,
}

impl StatsUpdate {
    /// An engine with nothing to do: no queue, no decodes, no pages held of `kv_pages_total`,
    /// no step model.
    pub fn idle(kv_pages_total: u64, decode_step_ms: f64) -> Self {
        StatsUpdate {
            queued_prefill_tokens: 0,
            running_decodes: 0,
            queued_requests: 0,
            unfinished_tokens: 0,
            kv_pages_used: 0,
            kv_pages_evictable: 0,
            kv_pages_total,
            decode_step_ms,
            decode_context_tokens: 0,
            latency_model: Vec::new(),
            prefill_chunk_size: 0,
        }
    }
}

/// All engines' rows, by engine id.
#[derive(Debug, Default)]
pub struct EngineTable {
    rows: BTreeMap<u32, EngineLoad>,
    /// This replica's dispatches for its peers (None: the router runs alone).
    peer_outbox: Option<DeltaOutbox>,
}

impl EngineTable {
    pub fn new() -> Self {
        EngineTable::default()
    }

    /// Adds an engine (healthy, no load) or changes an existing one's role.
    pub fn upsert(&mut self, engine_id: u32, role: Role) {
        self.rows
            .entry(engine_id)
            .and_modify(|row| row.role = role)
            .or_insert_with(|| EngineLoad::new(engine_id, role));
    }

    pub fn remove(&mut self, engine_id: u32) {
        self.rows.remove(&engine_id);
    }

    pub fn set_health(&mut self, engine_id: u32, healthy: bool) -> Result<()> {
        self.row_mut(engine_id)?.healthy = healthy;
        Ok(())
    }

    pub fn update_stats(&mut self, engine_id: u32, stats: &StatsUpdate) -> Result<()> {
        let latency = StepModel::from_named(
            stats
                .latency_model
                .iter()
                .map(|(name, coeff)| (name.as_str(), *coeff)),
        )?;
        if !(stats.decode_step_ms.is_finite() && stats.decode_step_ms >= 0.0) {
            return Err(RouterCoreError::InvalidArgument(format!(
                "decode_step_ms must be a finite number >= 0, got {}",
                stats.decode_step_ms
            )));
        }
        let row = self.row_mut(engine_id)?;
        row.queued_prefill_tokens = stats.queued_prefill_tokens;
        row.running_decodes = stats.running_decodes;
        row.queued_requests = stats.queued_requests;
        row.unfinished_tokens = stats.unfinished_tokens;
        row.kv_pages_used = stats.kv_pages_used;
        row.kv_pages_evictable = stats.kv_pages_evictable.min(stats.kv_pages_used);
        row.kv_pages_total = stats.kv_pages_total;
        row.decode_step_ms = stats.decode_step_ms;
        row.decode_context_tokens = stats.decode_context_tokens;
        row.latency = latency;
        row.prefill_chunk_size = stats.prefill_chunk_size;
        // The engine now counts everything dispatched before the Stats was asked for.
        let mark = std::mem::take(&mut row.stats_mark);
        row.router_tokens = row.router_tokens.saturating_sub(mark.tokens);
        row.router_prefill_tokens = row
            .router_prefill_tokens
            .saturating_sub(mark.prefill_tokens);
        row.router_prefilled_tokens = row
            .router_prefilled_tokens
            .saturating_sub(mark.prefilled_tokens);
        row.router_seqs = row.router_seqs.saturating_sub(mark.seqs);
        row.stats_prefilled_tokens = 0;
        row.stats_answered = mark.epoch;
        Ok(())
    }

    /// The most prefill tokens one queued request has left, as the engine's Stats reported it.
    pub fn set_longest_queued_prefill(&mut self, engine_id: u32, tokens: u64) -> Result<()> {
        self.row_mut(engine_id)?.longest_queued_prefill = tokens;
        Ok(())
    }

    /// The blocks the engine's prefix cache holds, as its Stats reported them.
    pub fn set_cached_blocks(&mut self, engine_id: u32, blocks: u64) -> Result<()> {
        self.row_mut(engine_id)?.cached_blocks = blocks;
        Ok(())
    }

    /// A Stats request is about to go out: its answer will include the work dispatched so far.
    pub fn stats_requested(&mut self, engine_id: u32) -> Result<()> {
        let row = self.row_mut(engine_id)?;
        row.stats_asked += 1;
        row.stats_mark = Pending {
            tokens: row.router_tokens,
            prefill_tokens: row.router_prefill_tokens,
            prefilled_tokens: row.router_prefilled_tokens,
            seqs: row.router_seqs,
            epoch: row.stats_asked,
        };
        Ok(())
    }

    /// The router sent work: counted until `on_complete`, so back-to-back requests see it.
    /// Returns the dispatch's stamp for `on_prefill_done`.
    pub fn on_dispatch(
        &mut self,
        engine_id: u32,
        prefill_tokens: u64,
        decode_tokens: u64,
    ) -> Result<u64> {
        let row = self.row_mut(engine_id)?;
        row.inflight += 1;
        row.longest_queued_prefill = row.longest_queued_prefill.max(prefill_tokens);
        let delta = DispatchDelta {
            tokens: prefill_tokens + decode_tokens,
            prefill_tokens,
            generations: u64::from(decode_tokens > 0),
            prefilled_tokens: 0,
        };
        add_dispatched(row, &delta);
        let stamp = row.stats_asked;
        self.tell_peers(engine_id, delta);
        Ok(stamp)
    }

    /// The router asked the engine for prefill work that is no generation (a `RemoteSend`'s
    /// K/V): part of its queue until the next Stats covers it, nothing in flight. Returns the
    /// dispatch's stamp for `on_prefill_done`.
    pub fn on_prefill_dispatch(&mut self, engine_id: u32, prefill_tokens: u64) -> Result<u64> {
        let row = self.row_mut(engine_id)?;
        row.router_prefill_tokens = row.router_prefill_tokens.saturating_add(prefill_tokens);
        row.longest_queued_prefill = row.longest_queued_prefill.max(prefill_tokens);
        let stamp = row.stats_asked;
        let delta = DispatchDelta {
            prefill_tokens,
            ..DispatchDelta::default()
        };
        self.tell_peers(engine_id, delta);
        Ok(stamp)
    }

    /// The router saw the prefill of `prefill_tokens` it dispatched with `stamp` finish (the
    /// generation's first token, the send's answer): no longer queued, whichever count holds
    /// it. Dispatched since the latest Stats was asked for: the router's own count. Dispatched
    /// before a Stats that has been answered since: that answer counted it as queued (it
    /// finished after). Covered by a Stats still unanswered: the answer tells.
    pub fn on_prefill_done(
        &mut self,
        engine_id: u32,
        prefill_tokens: u64,
        stamp: u64,
    ) -> Result<()> {
        let row = self.row_mut(engine_id)?;
        if stamp == row.stats_asked {
            row.router_prefilled_tokens =
                (row.router_prefilled_tokens + prefill_tokens).min(row.router_prefill_tokens);
            // Only a dispatch this replica still counts itself: the peers, polling as often,
            // most likely still count it too (an older one their Stats already cover).
            let delta = DispatchDelta {
                prefilled_tokens: prefill_tokens,
                ..DispatchDelta::default()
            };
            self.tell_peers(engine_id, delta);
        } else if stamp < row.stats_answered {
            row.stats_prefilled_tokens =
                (row.stats_prefilled_tokens + prefill_tokens).min(row.queued_prefill_tokens);
        }
        Ok(())
    }

    /// The request ended: no longer in flight. Its tokens leave the load with the engine's
    /// next Stats (they were, or will be, part of what that Stats covers), so the two sides
    /// never count one request twice.
    pub fn on_complete(&mut self, engine_id: u32) -> Result<()> {
        let row = self.row_mut(engine_id)?;
        row.inflight = row.inflight.saturating_sub(1);
        Ok(())
    }

    /// Start (or stop) keeping this replica's dispatches for its peers (`take_peer_outbox`).
    pub fn record_for_peers(&mut self, on: bool) {
        self.peer_outbox = on.then(DeltaOutbox::default);
    }

    /// This replica's dispatches since the last call, by engine id (empty when not recording).
    pub fn take_peer_outbox(&mut self) -> BTreeMap<u32, DispatchDelta> {
        self.peer_outbox
            .as_mut()
            .map(DeltaOutbox::take)
            .unwrap_or_default()
    }

    /// A peer replica dispatched `delta` to this engine: counted with this replica's own
    /// dispatches, so the next Stats asked for (which covers it) takes it out again — and a
    /// peer that stops sending stops being counted then.
    pub fn on_peer_delta(&mut self, engine_id: u32, delta: &DispatchDelta) -> Result<()> {
        add_dispatched(self.row_mut(engine_id)?, delta);
        Ok(())
    }

    fn tell_peers(&mut self, engine_id: u32, delta: DispatchDelta) {
        if let Some(outbox) = self.peer_outbox.as_mut() {
            outbox.record(engine_id, delta);
        }
    }

    pub fn get(&self, engine_id: u32) -> Result<&EngineLoad> {
        self.rows
            .get(&engine_id)
            .ok_or(RouterCoreError::UnknownEngine(engine_id))
    }

    /// Every row, by engine id.
    pub fn all(&self) -> impl Iterator<Item = &EngineLoad> {
        self.rows.values()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn row_mut(&mut self, engine_id: u32) -> Result<&mut EngineLoad> {
        self.rows
            .get_mut(&engine_id)
            .ok_or(RouterCoreError::UnknownEngine(engine_id))
    }
}

/// Dispatch counts the latest Stats cannot include yet (this replica's or a peer's).
fn add_dispatched(row: &mut EngineLoad, delta: &DispatchDelta) {
    row.router_tokens = row.router_tokens.saturating_add(delta.tokens);
    row.router_prefill_tokens = row
        .router_prefill_tokens
        .saturating_add(delta.prefill_tokens);
    row.router_seqs = row.router_seqs.saturating_add(delta.generations);
    row.router_prefilled_tokens = row
        .router_prefilled_tokens
        .saturating_add(delta.prefilled_tokens)
        .min(row.router_prefill_tokens);
}

#[cfg(test)]
#[path = "engine_table_peer_tests.rs"]
mod peer_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn named(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
        pairs.iter().map(|(n, c)| (n.to_string(), *c)).collect()
    }

    fn stats(running: u64, step: f64, model: Vec<(String, f64)>) -> StatsUpdate {
        StatsUpdate {
            queued_prefill_tokens: 10,
            running_decodes: running,
            queued_requests: 0,
            unfinished_tokens: 100,
            kv_pages_used: 5,
            kv_pages_evictable: 0,
            kv_pages_total: 10,
            decode_step_ms: step,
            decode_context_tokens: 400,
            latency_model: model,
            prefill_chunk_size: 64,
        }
    }

    #[test]
    fn pages_only_the_cache_holds_are_no_kv_pressure() {
        let mut t = EngineTable::new();
        t.upsert(1, Role::Any);
        let mut full_cache = stats(0, 1.0, vec![]);
        full_cache.kv_pages_used = 10;
        full_cache.kv_pages_evictable = 8;
        t.update_stats(1, &full_cache).unwrap();
        assert!((t.get(1).unwrap().kv_pressure(1) - 0.3).abs() < 1e-9);
        // An engine reporting more evictable than used pages never goes below zero.
        full_cache.kv_pages_evictable = 50;
        t.update_stats(1, &full_cache).unwrap();
        assert!((t.get(1).unwrap().kv_pressure(0)).abs() < 1e-9);
    }

    #[test]
    fn stats_dispatch_and_predictions() {
        let mut t = EngineTable::new();
        t.upsert(1, Role::Decode);
        assert!(t.get(1).unwrap().predict_prefill_ms(10, 0).is_nan());
        let model = named(&[
            ("const", 2.0),
            ("prefill_tokens", 0.5),
            ("decode_seqs", 1.0),
        ]);
        t.update_stats(1, &stats(4, 0.0, model)).unwrap();
        let row = t.get(1).unwrap();
        assert_eq!(row.prefill_chunk_size, 64);
        assert_eq!(row.decode_context_tokens, 400);
        // 100 tokens at chunk 64 = 2 steps, each 2 ms + 4 decodes; 0.5 ms per prefill token.
        assert_eq!(row.predict_prefill_ms(100, 900), 2.0 * (2.0 + 4.0) + 50.0);
        assert_eq!(
            row.predict_step_ms(&StepWork::one_step(&[], &DecodeBatch::new(5, 0))),
            2.0 + 5.0
        );
        assert_eq!(row.kv_pressure(5), 1.0);
        t.update_stats(1, &stats(4, 8.0, vec![])).unwrap();
        assert!(!t.get(1).unwrap().latency.is_known());
        t.on_dispatch(1, 30, 20).unwrap();
        t.stats_requested(1).unwrap(); // the engine's answer will include those 50
        t.on_dispatch(1, 1, 1).unwrap(); // ...but not these 2
        t.on_complete(1).unwrap();
        let row = t.get(1).unwrap();
        assert_eq!(
            (row.inflight, row.router_tokens),
            (1, 52),
            "until Stats, the router counts"
        );
        t.on_prefill_dispatch(1, 7).unwrap(); // a send's prefill: queued, not in flight
        let row = t.get(1).unwrap();
        assert_eq!((row.router_prefill_tokens, row.router_seqs), (38, 2));
        assert_eq!(row.pending_prefill_tokens(), 10 + 38);
        assert_eq!(row.pending_decode_batch().seqs, 4 + 2);
        t.update_stats(1, &stats(4, 8.0, vec![])).unwrap();
        assert_eq!(
            t.get(1).unwrap().router_tokens,
            2,
            "the engine now counts the first 50"
        );
        let row = t.get(1).unwrap();
        assert_eq!((row.router_prefill_tokens, row.router_seqs), (8, 1));
        t.on_complete(1).unwrap();
        t.on_complete(1).unwrap();
        assert_eq!(t.get(1).unwrap().inflight, 0);
        t.stats_requested(1).unwrap();
        t.update_stats(1, &stats(4, 8.0, vec![])).unwrap();
        assert_eq!(t.get(1).unwrap().router_tokens, 0);
        t.upsert(1, Role::Prefill);
        assert_eq!(t.get(1).unwrap().inflight, 0, "upsert keeps the row");
        assert_eq!(t.get(1).unwrap().role, Role::Prefill);
    }

    #[test]
    fn finished_prefills_leave_the_queue_before_the_next_stats() {
        let mut t = EngineTable::new();
        t.upsert(1, Role::Any);
        t.update_stats(1, &stats(0, 1.0, vec![])).unwrap(); // reports 10 queued
                                                            // Dispatched with no Stats asked since: the router's own count drops at once.
        let a = t.on_dispatch(1, 100, 5).unwrap();
        let b = t.on_dispatch(1, 50, 5).unwrap();
        assert_eq!(t.get(1).unwrap().pending_prefill_tokens(), 160);
        t.on_prefill_done(1, 100, a).unwrap();
        assert_eq!(t.get(1).unwrap().pending_prefill_tokens(), 60);
        // A Stats is asked for: its answer covers `b` (done or not, the engine will say).
        t.stats_requested(1).unwrap();
        let c = t.on_dispatch(1, 30, 5).unwrap();
        t.on_prefill_done(1, 50, b).unwrap(); // covered by the pending answer: no change yet
        assert_eq!(t.get(1).unwrap().pending_prefill_tokens(), 90);
        let mut answer = stats(0, 1.0, vec![]);
        answer.queued_prefill_tokens = 40; // `b`, still queued when the engine answered
        t.update_stats(1, &answer).unwrap();
        // 40 reported + `c` (dispatched after the ask): `a` and `b` left with the mark.
        assert_eq!(t.get(1).unwrap().pending_prefill_tokens(), 70);
        assert_eq!(t.get(1).unwrap().router_prefilled_tokens, 0);
        // `b` finishes after that answer counted it: it leaves the reported queue.
        t.on_prefill_done(1, 50, b).unwrap();
        assert_eq!(t.get(1).unwrap().pending_prefill_tokens(), 30);
        t.on_prefill_done(1, 30, c).unwrap();
        assert_eq!(t.get(1).unwrap().pending_prefill_tokens(), 0);
        // The next Stats replaces what was learned in between.
        t.stats_requested(1).unwrap();
        t.update_stats(1, &stats(0, 1.0, vec![])).unwrap();
        assert_eq!(t.get(1).unwrap().pending_prefill_tokens(), 10);
        assert_eq!(t.get(1).unwrap().router_prefill_tokens, 0);
    }

    #[test]
    fn bad_input_is_an_error() {
        let mut t = EngineTable::new();
        assert_eq!(
            t.set_health(3, true),
            Err(RouterCoreError::UnknownEngine(3))
        );
        t.upsert(3, Role::Any);
        assert!(t
            .update_stats(3, &stats(1, 1.0, named(&[("warp", 1.0)])))
            .is_err());
        assert!(t.update_stats(3, &stats(1, f64::NAN, vec![])).is_err());
        assert!(t
            .update_stats(3, &stats(1, 1.0, named(&[("const", f64::INFINITY)])))
            .is_err());
        assert!(Role::parse("both").is_err());
        assert!(Role::Any.serves(Some(Role::Decode)));
        assert!(!Role::Prefill.serves(Some(Role::Decode)));
        assert!(Role::Prefill.serves(None));
    }
}
