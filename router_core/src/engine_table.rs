//! The engine table: per engine its role, health, load (from `Stats` polls and the router's own
//! dispatch/completion events), KV use and fitted latency model; plus the two predictions the
//! policies need: prefill time and TPOT slack.

use crate::error::{Result, RouterCoreError};
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

/// Step time model: step_ms = c0 + c_prefill*prefill_tokens + c_decode*decode_seqs + c_ctx*context.
pub type LatencyCoeffs = [f64; 4];

/// One engine's row.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineLoad {
    pub engine_id: u32,
    pub role: Role,
    pub healthy: bool,
    pub queued_prefill_tokens: u64,
    pub running_decodes: u64,
    pub unfinished_tokens: u64,
    pub kv_pages_used: u64,
    pub kv_pages_total: u64,
    pub decode_step_ms: f64,
    pub latency_coeffs: LatencyCoeffs,
    /// Router-side: requests dispatched and not completed.
    pub inflight: u64,
    /// Router-side: prefill + decode tokens dispatched and not completed (seen before the
    /// engine's next Stats reflects them).
    pub router_tokens: u64,
}

impl EngineLoad {
    fn new(engine_id: u32, role: Role) -> Self {
        EngineLoad {
            engine_id,
            role,
            healthy: true,
            queued_prefill_tokens: 0,
            running_decodes: 0,
            unfinished_tokens: 0,
            kv_pages_used: 0,
            kv_pages_total: 0,
            decode_step_ms: 0.0,
            latency_coeffs: [0.0; 4],
            inflight: 0,
            router_tokens: 0,
        }
    }

    /// Predicted time of a prefill of `prefill_tokens` on top of `context_tokens` already in KV.
    pub fn predict_prefill_ms(&self, prefill_tokens: u64, context_tokens: u64) -> f64 {
        let [c0, c_prefill, _, c_ctx] = self.latency_coeffs;
        let p = prefill_tokens as f64;
        (c0 + c_prefill * p + c_ctx * (context_tokens as f64 + p)).max(0.0)
    }

    /// Current decode step time: measured when reported, else from the latency model.
    pub fn decode_step_estimate_ms(&self) -> f64 {
        if self.decode_step_ms > 0.0 {
            return self.decode_step_ms;
        }
        let [c0, _, c_decode, _] = self.latency_coeffs;
        (c0 + c_decode * self.running_decodes as f64).max(0.0)
    }

    /// How much one decode step may grow while running requests still meet `tpot_slo_ms`;
    /// infinite when nothing is decoding (no one to slow down).
    pub fn tpot_slack_ms(&self, tpot_slo_ms: f64) -> f64 {
        if self.running_decodes == 0 {
            return f64::INFINITY;
        }
        (tpot_slo_ms - self.decode_step_estimate_ms()).max(0.0)
    }

    /// Fraction of KV pages in use once `extra_pages` more are allocated (0 when unknown).
    pub fn kv_pressure(&self, extra_pages: u64) -> f64 {
        if self.kv_pages_total == 0 {
            return 0.0;
        }
        (self.kv_pages_used + extra_pages) as f64 / self.kv_pages_total as f64
    }
}

/// A Stats poll's numbers for one engine.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsUpdate {
    pub queued_prefill_tokens: u64,
    pub running_decodes: u64,
    pub unfinished_tokens: u64,
    pub kv_pages_used: u64,
    pub kv_pages_total: u64,
    pub decode_step_ms: f64,
    /// Empty (engine has no model yet: zeros) or the four coefficients.
    pub latency_coeffs: Vec<f64>,
}

/// All engines' rows, by engine id.
#[derive(Debug, Default)]
pub struct EngineTable {
    rows: BTreeMap<u32, EngineLoad>,
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
        let coeffs = validate_coeffs(&stats.latency_coeffs)?;
        if !(stats.decode_step_ms.is_finite() && stats.decode_step_ms >= 0.0) {
            return Err(RouterCoreError::InvalidArgument(format!(
                "decode_step_ms must be a finite number >= 0, got {}",
                stats.decode_step_ms
            )));
        }
        let row = self.row_mut(engine_id)?;
        row.queued_prefill_tokens = stats.queued_prefill_tokens;
        row.running_decodes = stats.running_decodes;
        row.unfinished_tokens = stats.unfinished_tokens;
        row.kv_pages_used = stats.kv_pages_used;
        row.kv_pages_total = stats.kv_pages_total;
        row.decode_step_ms = stats.decode_step_ms;
        row.latency_coeffs = coeffs;
        Ok(())
    }

    /// The router sent work: counted until `on_complete`, so back-to-back requests see it.
    pub fn on_dispatch(
        &mut self,
        engine_id: u32,
        prefill_tokens: u64,
        decode_tokens: u64,
    ) -> Result<()> {
        let row = self.row_mut(engine_id)?;
        row.inflight += 1;
        row.router_tokens = row
            .router_tokens
            .saturating_add(prefill_tokens + decode_tokens);
        Ok(())
    }

    pub fn on_complete(
        &mut self,
        engine_id: u32,
        prefill_tokens: u64,
        decode_tokens: u64,
    ) -> Result<()> {
        let row = self.row_mut(engine_id)?;
        row.inflight = row.inflight.saturating_sub(1);
        row.router_tokens = row
            .router_tokens
            .saturating_sub(prefill_tokens + decode_tokens);
        Ok(())
    }

    pub fn predict_prefill_ms(
        &self,
        engine_id: u32,
        prefill_tokens: u64,
        context_tokens: u64,
    ) -> Result<f64> {
        Ok(self
            .get(engine_id)?
            .predict_prefill_ms(prefill_tokens, context_tokens))
    }

    pub fn tpot_slack_ms(&self, engine_id: u32, tpot_slo_ms: f64) -> Result<f64> {
        if !(tpot_slo_ms.is_finite() && tpot_slo_ms > 0.0) {
            return Err(RouterCoreError::InvalidArgument(format!(
                "tpot_slo_ms must be a positive number, got {tpot_slo_ms}"
            )));
        }
        Ok(self.get(engine_id)?.tpot_slack_ms(tpot_slo_ms))
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

fn validate_coeffs(coeffs: &[f64]) -> Result<LatencyCoeffs> {
    let out = match coeffs.len() {
        0 => [0.0; 4],
        4 => [coeffs[0], coeffs[1], coeffs[2], coeffs[3]],
        n => {
            return Err(RouterCoreError::InvalidArgument(format!(
            "latency_coeffs needs 4 values [c0, c_prefill_tok, c_decode_seq, c_ctx_tok], got {n}"
        )))
        }
    };
    if out.iter().any(|c| !c.is_finite()) {
        return Err(RouterCoreError::InvalidArgument(format!(
            "latency_coeffs must be finite, got {coeffs:?}"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(running: u64, step: f64, coeffs: Vec<f64>) -> StatsUpdate {
        StatsUpdate {
            queued_prefill_tokens: 10,
            running_decodes: running,
            unfinished_tokens: 100,
            kv_pages_used: 5,
            kv_pages_total: 10,
            decode_step_ms: step,
            latency_coeffs: coeffs,
        }
    }

    #[test]
    fn stats_dispatch_and_predictions() {
        let mut t = EngineTable::new();
        t.upsert(1, Role::Decode);
        t.update_stats(1, &stats(4, 0.0, vec![2.0, 0.5, 1.0, 0.01]))
            .unwrap();
        let row = t.get(1).unwrap();
        assert_eq!(row.predict_prefill_ms(100, 900), 2.0 + 50.0 + 10.0);
        assert_eq!(row.decode_step_estimate_ms(), 6.0);
        assert_eq!(row.tpot_slack_ms(20.0), 14.0);
        assert_eq!(row.tpot_slack_ms(5.0), 0.0);
        assert_eq!(row.kv_pressure(5), 1.0);
        t.update_stats(1, &stats(4, 8.0, vec![])).unwrap();
        assert_eq!(t.get(1).unwrap().tpot_slack_ms(20.0), 12.0);
        t.update_stats(1, &stats(0, 8.0, vec![])).unwrap();
        assert!(t.get(1).unwrap().tpot_slack_ms(20.0).is_infinite());
        t.on_dispatch(1, 30, 20).unwrap();
        t.on_dispatch(1, 1, 1).unwrap();
        t.on_complete(1, 30, 20).unwrap();
        let row = t.get(1).unwrap();
        assert_eq!((row.inflight, row.router_tokens), (1, 2));
        t.on_complete(1, 100, 100).unwrap();
        t.on_complete(1, 100, 100).unwrap();
        assert_eq!(t.get(1).unwrap().router_tokens, 0);
        t.upsert(1, Role::Prefill);
        assert_eq!(t.get(1).unwrap().inflight, 0, "upsert keeps the row");
        assert_eq!(t.get(1).unwrap().role, Role::Prefill);
    }

    #[test]
    fn bad_input_is_an_error() {
        let mut t = EngineTable::new();
        assert_eq!(
            t.set_health(3, true),
            Err(RouterCoreError::UnknownEngine(3))
        );
        t.upsert(3, Role::Any);
        assert!(t.update_stats(3, &stats(1, 1.0, vec![1.0])).is_err());
        assert!(t.update_stats(3, &stats(1, f64::NAN, vec![])).is_err());
        assert!(t
            .update_stats(3, &stats(1, 1.0, vec![f64::INFINITY; 4]))
            .is_err());
        assert!(Role::parse("both").is_err());
        assert!(Role::Any.serves(Some(Role::Decode)));
        assert!(!Role::Prefill.serves(Some(Role::Decode)));
        assert!(Role::Prefill.serves(None));
    }
}
