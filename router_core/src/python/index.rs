//! `PrefixIndex` for Python: a handle on a shared, locked [`crate::prefix_index::PrefixIndex`]
//! (the same one `RouterCore.index` scores with).

use super::convert::extract_u64s;
use crate::hashing::validate_block_size;
use crate::prefix_index::PrefixIndex;
use crate::router::{lock, monotonic_s};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[pyclass(name = "PrefixIndex", module = "router_core._router_core", frozen)]
pub struct PyPrefixIndex {
    pub inner: Arc<Mutex<PrefixIndex>>,
    block_size: usize,
    seed: u64,
}

impl PyPrefixIndex {
    pub fn shared(inner: Arc<Mutex<PrefixIndex>>, block_size: usize, seed: u64) -> Self {
        PyPrefixIndex {
            inner,
            block_size,
            seed,
        }
    }
}

#[pymethods]
impl PyPrefixIndex {
    #[new]
    #[pyo3(signature = (block_size, seed, max_blocks = 16_777_216, approx_ttl_s = 120.0))]
    fn new(block_size: usize, seed: u64, max_blocks: usize, approx_ttl_s: f64) -> PyResult<Self> {
        validate_block_size(block_size)?;
        let index = PrefixIndex::new(max_blocks, approx_ttl_s)?;
        Ok(PyPrefixIndex::shared(
            Arc::new(Mutex::new(index)),
            block_size,
            seed,
        ))
    }

    #[getter]
    fn block_size(&self) -> usize {
        self.block_size
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.seed
    }

    /// Adds an engine; a no-op when it exists in the same mode.
    #[pyo3(signature = (engine_id, approximate = false))]
    fn add_engine(&self, py: Python<'_>, engine_id: u32, approximate: bool) {
        py.allow_threads(|| lock(&self.inner).add_engine(engine_id, approximate));
    }

    /// Removes an engine and its blocks; a no-op when unknown.
    fn remove_engine(&self, py: Python<'_>, engine_id: u32) {
        py.allow_threads(|| lock(&self.inner).remove_engine(engine_id));
    }

    /// False when first_seq != last seen + 1: the engine's view is stale until a snapshot.
    fn apply_events(
        &self,
        py: Python<'_>,
        engine_id: u32,
        first_seq: u64,
        last_seq: u64,
        stored: &Bound<'_, PyAny>,
        evicted: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (stored, evicted) = (extract_u64s(stored)?, extract_u64s(evicted)?);
        Ok(py.allow_threads(|| {
            lock(&self.inner).apply_events(engine_id, first_seq, last_seq, &stored, &evicted)
        })?)
    }

    fn apply_snapshot(
        &self,
        py: Python<'_>,
        engine_id: u32,
        last_seq: u64,
        stored: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let stored = extract_u64s(stored)?;
        Ok(py.allow_threads(|| lock(&self.inner).apply_snapshot(engine_id, last_seq, &stored))?)
    }

    fn is_stale(&self, py: Python<'_>, engine_id: u32) -> PyResult<bool> {
        Ok(py.allow_threads(|| lock(&self.inner).is_stale(engine_id))?)
    }

    fn last_seq(&self, py: Python<'_>, engine_id: u32) -> PyResult<u64> {
        Ok(py.allow_threads(|| lock(&self.inner).last_seq(engine_id))?)
    }

    /// Approximate mode: remember that these blocks were sent to engine_id (expire after TTL).
    fn record_routed(
        &self,
        py: Python<'_>,
        engine_id: u32,
        hashes: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let hashes = extract_u64s(hashes)?;
        Ok(py
            .allow_threads(|| lock(&self.inner).record_routed(engine_id, &hashes, monotonic_s()))?)
    }

    /// engine_id -> number of leading blocks of `hashes` that engine holds (0s omitted).
    #[pyo3(name = "match")]
    fn match_(&self, py: Python<'_>, hashes: &Bound<'_, PyAny>) -> PyResult<HashMap<u32, usize>> {
        let hashes = extract_u64s(hashes)?;
        Ok(py.allow_threads(|| {
            let mut index = lock(&self.inner);
            index.purge_expired(monotonic_s());
            index.match_prefix(&hashes).into_iter().collect()
        }))
    }

    fn num_blocks(&self, py: Python<'_>) -> usize {
        py.allow_threads(|| lock(&self.inner).num_blocks())
    }

    /// Blocks the index believes `engine_id` holds.
    fn engine_blocks(&self, py: Python<'_>, engine_id: u32) -> PyResult<usize> {
        Ok(py.allow_threads(|| lock(&self.inner).engine_blocks(engine_id))?)
    }

    /// Blocks not indexed because the index was at max_blocks.
    fn dropped_blocks(&self, py: Python<'_>) -> u64 {
        py.allow_threads(|| lock(&self.inner).dropped_blocks())
    }

    fn memory_bytes(&self, py: Python<'_>) -> usize {
        py.allow_threads(|| lock(&self.inner).memory_bytes())
    }

    fn engine_ids(&self, py: Python<'_>) -> Vec<u32> {
        py.allow_threads(|| lock(&self.inner).engine_ids())
    }
}
