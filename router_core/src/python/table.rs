//! `EngineTable` and `EngineLoad` for Python: a handle on the shared, locked engine table.

use crate::engine_table::{EngineLoad, EngineTable, Role, StatsUpdate};
use crate::router::lock;
use pyo3::prelude::*;
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
    unfinished_tokens: u64,
    kv_pages_used: u64,
    kv_pages_total: u64,
    decode_step_ms: f64,
    latency_coeffs: Vec<f64>,
    inflight: u64,
    router_tokens: u64,
}

impl From<&EngineLoad> for PyEngineLoad {
    fn from(row: &EngineLoad) -> Self {
        PyEngineLoad {
            engine_id: row.engine_id,
            role: row.role.as_str(),
            healthy: row.healthy,
            queued_prefill_tokens: row.queued_prefill_tokens,
            running_decodes: row.running_decodes,
            unfinished_tokens: row.unfinished_tokens,
            kv_pages_used: row.kv_pages_used,
            kv_pages_total: row.kv_pages_total,
            decode_step_ms: row.decode_step_ms,
            latency_coeffs: row.latency_coeffs.to_vec(),
            inflight: row.inflight,
            router_tokens: row.router_tokens,
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
        latency_coeffs: Vec<f64>,
    ) -> PyResult<()> {
        let stats = StatsUpdate {
            queued_prefill_tokens,
            running_decodes,
            unfinished_tokens,
            kv_pages_used,
            kv_pages_total,
            decode_step_ms,
            latency_coeffs,
        };
        Ok(py.allow_threads(|| lock(&self.inner).update_stats(engine_id, &stats))?)
    }

    fn on_dispatch(
        &self,
        py: Python<'_>,
        engine_id: u32,
        prefill_tokens: u64,
        decode_tokens: u64,
    ) -> PyResult<()> {
        Ok(py.allow_threads(|| {
            lock(&self.inner).on_dispatch(engine_id, prefill_tokens, decode_tokens)
        })?)
    }

    fn on_complete(
        &self,
        py: Python<'_>,
        engine_id: u32,
        prefill_tokens: u64,
        decode_tokens: u64,
    ) -> PyResult<()> {
        Ok(py.allow_threads(|| {
            lock(&self.inner).on_complete(engine_id, prefill_tokens, decode_tokens)
        })?)
    }

    fn get(&self, py: Python<'_>, engine_id: u32) -> PyResult<PyEngineLoad> {
        Ok(py.allow_threads(|| lock(&self.inner).get(engine_id).map(PyEngineLoad::from))?)
    }

    fn all(&self, py: Python<'_>) -> Vec<PyEngineLoad> {
        py.allow_threads(|| lock(&self.inner).all().map(PyEngineLoad::from).collect())
    }

    fn predict_prefill_ms(
        &self,
        py: Python<'_>,
        engine_id: u32,
        prefill_tokens: u64,
        context_tokens: u64,
    ) -> PyResult<f64> {
        Ok(py.allow_threads(|| {
            lock(&self.inner).predict_prefill_ms(engine_id, prefill_tokens, context_tokens)
        })?)
    }

    /// How much one decode step on this engine may grow while running requests still meet the
    /// SLO (inf when nothing is decoding).
    fn tpot_slack_ms(&self, py: Python<'_>, engine_id: u32, tpot_slo_ms: f64) -> PyResult<f64> {
        Ok(py.allow_threads(|| lock(&self.inner).tpot_slack_ms(engine_id, tpot_slo_ms))?)
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        py.allow_threads(|| lock(&self.inner).len())
    }
}
