//! `RouterCore`, `ScoreWeights`, `ScoreResult` and `Candidate` for Python: one `score` or
//! `predict` call per request, with the GIL released while it hashes, matches and computes.

use super::convert::extract_u32s;
use super::index::PyPrefixIndex;
use super::prediction::PyEnginePrediction;
use super::table::PyEngineTable;
use crate::engine_table::Role;
use crate::prediction::PredictParams;
use crate::prediction_shortlist;
use crate::router::{lock, monotonic_s, RouterCore, ScoreResult};
use crate::scoring::{Candidate, ScoreWeights};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

#[pyclass(
    name = "Candidate",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyCandidate {
    engine_id: u32,
    matched_tokens: u64,
    uncached_tokens: u64,
    cost: f64,
    prefill_cost: f64,
    decode_cost: f64,
    kv_cost: f64,
    kv_pressure: f64,
}

impl From<&Candidate> for PyCandidate {
    fn from(c: &Candidate) -> Self {
        PyCandidate {
            engine_id: c.engine_id,
            matched_tokens: c.matched_tokens,
            uncached_tokens: c.uncached_tokens,
            cost: c.cost,
            prefill_cost: c.prefill_cost,
            decode_cost: c.decode_cost,
            kv_cost: c.kv_cost,
            kv_pressure: c.kv_pressure,
        }
    }
}

#[pymethods]
impl PyCandidate {
    fn __repr__(&self) -> String {
        format!(
            "Candidate(engine_id={}, matched_tokens={}, cost={:.1}, prefill_cost={:.1}, \
             decode_cost={:.1}, kv_cost={:.1})",
            self.engine_id,
            self.matched_tokens,
            self.cost,
            self.prefill_cost,
            self.decode_cost,
            self.kv_cost
        )
    }
}

/// Scoring weights, validated once: a policy builds one from its parameters and passes it to
/// every `score` call (no shared state to mutate).
#[pyclass(name = "ScoreWeights", module = "router_core._router_core", frozen, eq)]
#[derive(PartialEq)]
pub struct PyScoreWeights {
    inner: ScoreWeights,
}

#[pymethods]
impl PyScoreWeights {
    #[new]
    #[pyo3(signature = (prefill_weight = 1.0, queue_weight = 1.0, decode_weight = 1.0,
                        kv_weight = 1.0))]
    fn new(
        prefill_weight: f64,
        queue_weight: f64,
        decode_weight: f64,
        kv_weight: f64,
    ) -> PyResult<Self> {
        let inner = ScoreWeights::new(prefill_weight, queue_weight, decode_weight, kv_weight)?;
        Ok(PyScoreWeights { inner })
    }

    #[getter]
    fn prefill_weight(&self) -> f64 {
        self.inner.prefill
    }

    #[getter]
    fn queue_weight(&self) -> f64 {
        self.inner.queue
    }

    #[getter]
    fn decode_weight(&self) -> f64 {
        self.inner.decode
    }

    #[getter]
    fn kv_weight(&self) -> f64 {
        self.inner.kv
    }

    fn __repr__(&self) -> String {
        let w = &self.inner;
        format!(
            "ScoreWeights(prefill_weight={}, queue_weight={}, decode_weight={}, kv_weight={})",
            w.prefill, w.queue, w.decode, w.kv
        )
    }
}

/// Python objects are built only for the fields a caller reads.
#[pyclass(name = "ScoreResult", module = "router_core._router_core", frozen)]
pub struct PyScoreResult {
    inner: ScoreResult,
}

#[pymethods]
impl PyScoreResult {
    #[getter]
    fn best(&self) -> Option<u32> {
        self.inner.best
    }

    #[getter]
    fn hashes(&self) -> Vec<u64> {
        self.inner.hashes.clone()
    }

    #[getter]
    fn candidates(&self) -> Vec<PyCandidate> {
        self.inner
            .candidates
            .iter()
            .map(PyCandidate::from)
            .collect()
    }

    /// Prompt tokens `engine_id` holds (0 when none), eligible or not.
    fn matched(&self, engine_id: u32) -> u64 {
        self.inner.matched_tokens(engine_id)
    }

    /// engine_id -> matched prompt tokens, for every engine holding at least one block.
    #[getter]
    fn matches(&self) -> HashMap<u32, u64> {
        self.inner
            .matches
            .iter()
            .map(|(id, blocks)| (*id, (*blocks * self.inner.block_size) as u64))
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "ScoreResult(best={:?}, blocks={}, candidates={})",
            self.inner.best,
            self.inner.hashes.len(),
            self.inner.candidates.len()
        )
    }
}

#[pyclass(name = "RouterCore", module = "router_core._router_core", frozen)]
pub struct PyRouterCore {
    /// Shared with the HTTP front's fast path (python/front.rs `set_core`).
    pub(crate) core: Arc<RouterCore>,
    index: Py<PyPrefixIndex>,
    table: Py<PyEngineTable>,
}

#[pymethods]
impl PyRouterCore {
    #[new]
    #[pyo3(signature = (block_size, seed, prefill_weight = 1.0, queue_weight = 1.0,
                        decode_weight = 1.0, kv_weight = 1.0, max_blocks = 16_777_216,
                        approx_ttl_s = 120.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        block_size: usize,
        seed: u64,
        prefill_weight: f64,
        queue_weight: f64,
        decode_weight: f64,
        kv_weight: f64,
        max_blocks: usize,
        approx_ttl_s: f64,
    ) -> PyResult<Self> {
        let weights = ScoreWeights::new(prefill_weight, queue_weight, decode_weight, kv_weight)?;
        let core = RouterCore::new(block_size, seed, weights, max_blocks, approx_ttl_s)?;
        let index = Py::new(
            py,
            PyPrefixIndex::shared(core.index.clone(), block_size, seed),
        )?;
        let table = Py::new(
            py,
            PyEngineTable {
                inner: core.table.clone(),
            },
        )?;
        Ok(PyRouterCore {
            core: Arc::new(core),
            index,
            table,
        })
    }

    #[getter]
    fn index(&self, py: Python<'_>) -> Py<PyPrefixIndex> {
        self.index.clone_ref(py)
    }

    #[getter]
    fn table(&self, py: Python<'_>) -> Py<PyEngineTable> {
        self.table.clone_ref(py)
    }

    #[getter]
    fn block_size(&self) -> usize {
        self.core.block_size()
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.core.seed()
    }

    /// (prefill_weight, queue_weight, decode_weight, kv_weight)
    #[getter]
    fn weights(&self) -> (f64, f64, f64, f64) {
        let w = self.core.weights();
        (w.prefill, w.queue, w.decode, w.kv)
    }

    fn set_weights(
        &self,
        prefill_weight: f64,
        queue_weight: f64,
        decode_weight: f64,
        kv_weight: f64,
    ) -> PyResult<()> {
        let weights = ScoreWeights::new(prefill_weight, queue_weight, decode_weight, kv_weight)?;
        self.core.set_weights(weights);
        Ok(())
    }

    /// Approximate mode: remember that `result`'s prompt blocks went to `engine_id` (no trip
    /// of the hashes through Python objects); a no-op for event-driven engines.
    fn record_routed(
        &self,
        py: Python<'_>,
        engine_id: u32,
        result: &PyScoreResult,
    ) -> PyResult<()> {
        let hashes = &result.inner.hashes;
        Ok(py.allow_threads(|| {
            lock(&self.core.index).record_routed(engine_id, hashes, monotonic_s())
        })?)
    }

    /// Hash, match against every engine, score every healthy engine whose role is `role`
    /// (None or "any" = all; an engine with role "any" serves every role) with `weights`
    /// (None = the core's default weights).
    #[pyo3(signature = (tokens, role = None, weights = None))]
    fn score(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        role: Option<&str>,
        weights: Option<&PyScoreWeights>,
    ) -> PyResult<PyScoreResult> {
        let tokens = extract_u32s(tokens)?;
        let role = role.map(Role::parse).transpose()?;
        let weights = weights.map(|w| w.inner);
        let inner = py.allow_threads(|| {
            self.core
                .score(&tokens, role, weights.as_ref(), monotonic_s())
        })?;
        Ok(PyScoreResult { inner })
    }

    /// Hash `tokens` (prompt plus tokens generated so far), match against every engine and
    /// predict every engine's times for this request, by engine id (prediction.rs). `engines`:
    /// only these engines (a served model's, a policy's candidates; None: every engine).
    /// `shortlist` k: only the healthy engines a placement planner should weigh — the k with
    /// the soonest first token and the k that decode fastest (prediction_shortlist.rs).
    #[pyo3(signature = (tokens, tpot_slo_ms = None, kv_watermark = 1.0, engines = None,
                        shortlist = None))]
    fn predict(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        tpot_slo_ms: Option<f64>,
        kv_watermark: f64,
        engines: Option<Vec<u32>>,
        shortlist: Option<usize>,
    ) -> PyResult<Vec<PyEnginePrediction>> {
        let tokens = extract_u32s(tokens)?;
        let params = PredictParams::new(tpot_slo_ms, kv_watermark)?;
        if shortlist == Some(0) {
            return Err(PyValueError::new_err("shortlist must be at least 1"));
        }
        let preds = py.allow_threads(|| {
            let preds =
                self.core
                    .predict_among(&tokens, &params, monotonic_s(), engines.as_deref())?;
            Ok::<_, crate::error::RouterCoreError>(match shortlist {
                Some(k) => prediction_shortlist::shortlist(preds, k),
                None => preds,
            })
        })?;
        Ok(preds.iter().map(PyEnginePrediction::from).collect())
    }
}
