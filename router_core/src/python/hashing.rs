//! `block_hashes` and `model_seed` for Python.

use super::convert::{extract_u32s, GIL_RELEASE_MIN_ITEMS};
use crate::hashing;
use pyo3::prelude::*;

/// Chained 64-bit hashes over the full blocks of `tokens` (len(tokens) // block_size of them).
#[pyfunction]
#[pyo3(signature = (tokens, block_size, seed))]
fn block_hashes(
    py: Python<'_>,
    tokens: &Bound<'_, PyAny>,
    block_size: usize,
    seed: u64,
) -> PyResult<Vec<u64>> {
    let tokens = extract_u32s(tokens)?;
    if tokens.len() < GIL_RELEASE_MIN_ITEMS {
        return Ok(hashing::block_hashes(&tokens, block_size, seed)?);
    }
    Ok(py.allow_threads(|| hashing::block_hashes(&tokens, block_size, seed))?)
}

/// A per-model hash seed derived from the model id (same model => same seed everywhere).
#[pyfunction]
fn model_seed(model_id: &str) -> u64 {
    hashing::model_seed(model_id)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(block_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(model_seed, m)?)?;
    Ok(())
}
