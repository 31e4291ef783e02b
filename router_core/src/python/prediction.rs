//! `EnginePrediction` for Python: one engine's predicted times for one request (a frozen copy).

use crate::prediction::EnginePrediction;
use pyo3::prelude::*;

#[pyclass(
    name = "EnginePrediction",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyEnginePrediction {
    engine_id: u32,
    role: &'static str,
    healthy: bool,
    has_latency_model: bool,
    prefill_chunk_size: u64,
    matched_tokens: u64,
    prefill_tokens: u64,
    prefill_steps: u64,
    prefill_ms: f64,
    prefill_step_ms: f64,
    queued_prefill_tokens: u64,
    kv_wait_ms: f64,
    queue_ms: f64,
    ttft_ms: f64,
    decode_step_ms: f64,
    decode_step_now_ms: f64,
    backlog_step_ms: f64,
    tpot_slack_ms: f64,
    new_pages: u64,
    kv_use: f64,
    kv_ok: bool,
}

impl From<&EnginePrediction> for PyEnginePrediction {
    fn from(p: &EnginePrediction) -> Self {
        PyEnginePrediction {
            engine_id: p.engine_id,
            role: p.role.as_str(),
            healthy: p.healthy,
            has_latency_model: p.has_latency_model,
            prefill_chunk_size: p.prefill_chunk_size,
            matched_tokens: p.matched_tokens,
            prefill_tokens: p.prefill_tokens,
            prefill_steps: p.prefill_steps,
            prefill_ms: p.prefill_ms,
            prefill_step_ms: p.prefill_step_ms,
            queued_prefill_tokens: p.queued_prefill_tokens,
            kv_wait_ms: p.kv_wait_ms,
            queue_ms: p.queue_ms,
            ttft_ms: p.ttft_ms,
            decode_step_ms: p.decode_step_ms,
            decode_step_now_ms: p.decode_step_now_ms,
            backlog_step_ms: p.backlog_step_ms,
            tpot_slack_ms: p.tpot_slack_ms,
            new_pages: p.new_pages,
            kv_use: p.kv_use,
            kv_ok: p.kv_ok,
        }
    }
}

#[pymethods]
impl PyEnginePrediction {
    fn __repr__(&self) -> String {
        format!(
            "EnginePrediction(engine_id={}, matched_tokens={}, prefill_tokens={}, \
             queue_ms={:.2}, prefill_ms={:.2}, ttft_ms={:.2}, decode_step_ms={:.2}, \
             tpot_slack_ms={:.2}, kv_use={:.3}, kv_ok={})",
            self.engine_id,
            self.matched_tokens,
            self.prefill_tokens,
            self.queue_ms,
            self.prefill_ms,
            self.ttft_ms,
            self.decode_step_ms,
            self.tpot_slack_ms,
            self.kv_use,
            self.kv_ok
        )
    }
}
