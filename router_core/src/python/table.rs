//! `EngineTable` and `EngineLoad` for Python: a handle on the shared, locked engine table.

use crate::engine_table::{EngineLoad, EngineTable, Role, StatsUpdate};
use crate::engine_upkeep::stats::apply_stats;
use crate::latency_model::StepWork;
use crate::router::lock;
use crate::rpc::pb;
use prost::Message;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A snapshot of one engine's row (a copy: later updates do not change it).
#[pyclass(
    name = "EngineLoad",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyEngineLoad {
    engine_id: u32,
    role: &'static str,
    healthy: bool,
    queued_prefill_tokens: u64,
    running_decodes: u64,
    queued_requests: u64,
    decode_context_tokens: u64,
    unfinished_tokens: u64,
    kv_pages_used: u64,
    kv_pages_evictable: u64,
    kv_pages_total: u64,
    /// EngineLoad::kv_pressure(0): the share of pages requests hold.
    kv_pressure: f64,
    decode_step_ms: f64,
    latency_model: HashMap<String, f64>,
    prefill_chunk_size: u64,
    longest_queued_prefill: u64,
    cached_blocks: u64,
    inflight: u64,
    router_tokens: u64,
    router_prefill_tokens: u64,
    router_seqs: u64,
    /// EngineLoad::pending_prefill_tokens: the queue the predictions see.
    pending_prefill_tokens: u64,
}

impl From<&EngineLoad> for PyEngineLoad {
    fn from(row: &EngineLoad) -> Self {
        PyEngineLoad {
            engine_id: row.engine_id,
            role: row.role.as_str(),
            healthy: row.healthy,
            queued_prefill_tokens: row.queued_prefill_tokens,
            running_decodes: row.running_decodes,
            queued_requests: row.queued_requests,
            decode_context_tokens: row.decode_context_tokens,
            unfinished_tokens: row.unfinished_tokens,
            kv_pages_used: row.kv_pages_used,
            kv_pages_evictable: row.kv_pages_evictable,
            kv_pages_total: row.kv_pages_total,
            kv_pressure: row.kv_pressure(0),
            decode_step_ms: row.decode_step_ms,
            latency_model: row.latency.named().into_iter().collect(),
            prefill_chunk_size: row.prefill_chunk_size,
            longest_queued_prefill: row.longest_queued_prefill,
            cached_blocks: row.cached_blocks,
            inflight: row.inflight,
            router_tokens: row.router_tokens,
            router_prefill_tokens: row.router_prefill_tokens,
            router_seqs: row.router_seqs,
            pending_prefill_tokens: row.pending_prefill_tokens(),
        }
    }
}

#[pymethods]
impl PyEngineLoad {
    fn __repr__(&self) -> String {
        format!(
            "EngineLoad(engine_id={}, role={:?}, healthy={}, queued_prefill_tokens={}, \
             running_decodes={}, unfinished_tokens={}, kv_pages={}/{}, inflight={})",
            self.engine_id,
            self.role,
            self.healthy,
            self.queued_prefill_tokens,
            self.running_decodes,
            self.unfinished_tokens,
            self.kv_pages_used,
            self.kv_pages_total,
            self.inflight
        )
    }
}

#[pyclass(name = "EngineTable", module = "router_core._router_core", frozen)]
pub struct PyEngineTable {
    pub inner: Arc<Mutex<EngineTable>>,
}

#[pymethods]
impl PyEngineTable {
    #[new]
    fn new() -> Self {
        PyEngineTable {
            inner: Arc::new(Mutex::new(EngineTable::new())),
        }
    }

    fn upsert(&self, py: Python<'_>, engine_id: u32, role: &str) -> PyResult<()> {
        let role = Role::parse(role)?;
        py.allow_threads(|| lock(&self.inner).upsert(engine_id, role));
        Ok(())
    }

    fn remove(&self, py: Python<'_>, engine_id: u32) {
        py.allow_threads(|| lock(&self.inner).remove(engine_id));
    }

    fn set_health(&self, py: Python<'_>, engine_id: u32, healthy: bool) -> PyResult<()> {
        Ok(py.allow_threads(|| lock(&self.inner).set_health(engine_id, healthy))?)
    }

    /// A serialized StatsResponse into `engine_id`'s row, through the upkeep's own mapping
    /// (engine_upkeep::stats): for engines whose answers are Python objects (the simulator's).
    /// The router's upkeep applies real engines' answers in Rust; nothing crosses for them.
    fn apply_stats(&self, py: Python<'_>, engine_id: u32, stats: &[u8]) -> PyResult<()> {
        let answer = pb::StatsResponse::decode(stats)
            .map_err(|err| PyValueError::new_err(format!("not a StatsResponse: {err}")))?;
        Ok(py.allow_threads(|| apply_stats(&mut lock(&self.inner), engine_id, &answer))?)
    }

    #[pyo3(signature = (engine_id, queued_prefill_tokens, running_decodes, unfinished_tokens,
                        kv_pages_used, kv_pages_total, decode_step_ms, *, latency_model = None,
                        prefill_chunk_size = 0, decode_context_tokens = 0,
                        kv_pages_evictable = 0, queued_requests = 0,
                        longest_queued_prefill_tokens = 0))]
    #[allow(clippy::too_many_arguments)]
    fn update_stats(
        &self,
        py: Python<'_>,
        engine_id: u32,
        queued_prefill_tokens: u64,
        running_decodes: u64,
        unfinished_tokens: u64,
        kv_pages_used: u64,
        kv_pages_total: u64,
        decode_step_ms: f64,
        latency_model: Option<HashMap<String, f64>>,
        prefill_chunk_size: u64,
        decode_context_tokens: u64,
        kv_pages_evictable: u64,
        queued_requests: u64,
        longest_queued_prefill_tokens: u64,
    ) -> PyResult<()> {
        let stats = StatsUpdate {
            queued_prefill_tokens,
            running_decodes,
            queued_requests,
            unfinished_tokens,
            kv_pages_used,
            kv_pages_evictable,
            kv_pages_total,
            decode_step_ms,
            decode_context_tokens,
            latency_model: latency_model.unwrap_or_default().into_iter().collect(),
            prefill_chunk_size,
        };
        Ok(py.allow_threads(|| {
            let mut table = lock(&self.inner);
            table.update_stats(engine_id, &stats)?;
            table.set_longest_queued_prefill(engine_id, longest_queued_prefill_tokens)
        })?)
    }

    fn on_dispatch(
        &self,
        py: Python<'_>,
        engine_id: u32,
        prefill_tokens: u64,
        decode_tokens: u64,
    ) -> PyResult<u64> {
        Ok(py.allow_threads(|| {
            lock(&self.inner).on_dispatch(engine_id, prefill_tokens, decode_tokens)
        })?)
    }

    fn on_prefill_dispatch(
        &self,
        py: Python<'_>,
        engine_id: u32,
        prefill_tokens: u64,
    ) -> PyResult<u64> {
        Ok(py.allow_threads(|| lock(&self.inner).on_prefill_dispatch(engine_id, prefill_tokens))?)
    }

    fn on_prefill_done(
        &self,
        py: Python<'_>,
        engine_id: u32,
        prefill_tokens: u64,
        stamp: u64,
    ) -> PyResult<()> {
        Ok(py.allow_threads(|| {
            lock(&self.inner).on_prefill_done(engine_id, prefill_tokens, stamp)
        })?)
    }

    fn on_complete(&self, py: Python<'_>, engine_id: u32) -> PyResult<()> {
        Ok(py.allow_threads(|| lock(&self.inner).on_complete(engine_id))?)
    }

    fn stats_requested(&self, py: Python<'_>, engine_id: u32) -> PyResult<()> {
        Ok(py.allow_threads(|| lock(&self.inner).stats_requested(engine_id))?)
    }

    fn get(&self, py: Python<'_>, engine_id: u32) -> PyResult<PyEngineLoad> {
        Ok(py.allow_threads(|| lock(&self.inner).get(engine_id).map(PyEngineLoad::from))?)
    }

    fn all(&self, py: Python<'_>) -> Vec<PyEngineLoad> {
        py.allow_threads(|| lock(&self.inner).all().map(PyEngineLoad::from).collect())
    }

    /// This engine's prefill of `prefill_tokens` on top of `cached_tokens` (ms), chunked at its
    /// chunk size with its running decodes in every step; NaN without a latency model.
    fn predict_prefill_ms(
        &self,
        py: Python<'_>,
        engine_id: u32,
        prefill_tokens: u64,
        cached_tokens: u64,
    ) -> PyResult<f64> {
        Ok(py.allow_threads(|| {
            lock(&self.inner)
                .get(engine_id)
                .map(|row| row.predict_prefill_ms(prefill_tokens, cached_tokens))
        })?)
    }

    /// One step of the given shape on this engine (ms): prefill chunks as (cached_before,
    /// new_tokens) pairs plus decodes; NaN without a latency model.
    #[pyo3(signature = (engine_id, prefill_chunks = None, decode_seqs = 0,
                        decode_context_tokens = 0))]
    fn predict_step_ms(
        &self,
        py: Python<'_>,
        engine_id: u32,
        prefill_chunks: Option<Vec<(u64, u64)>>,
        decode_seqs: u64,
        decode_context_tokens: u64,
    ) -> PyResult<f64> {
        let chunks = prefill_chunks.unwrap_or_default();
        Ok(py.allow_threads(|| {
            lock(&self.inner).get(engine_id).map(|row| {
                let decode = row.latency.decode_batch(decode_seqs, decode_context_tokens);
                row.predict_step_ms(&StepWork::one_step(&chunks, &decode))
            })
        })?)
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        py.allow_threads(|| lock(&self.inner).len())
    }
}
