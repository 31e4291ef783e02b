//! The router's engine-side names for Python (`crate::front::engine_names`): the policies' path
//! names engines and retries with the same functions the Rust front uses.

use crate::front::engine_names;
use pyo3::prelude::*;

/// Engine `num`'s id ("e0", "e1", ...).
#[pyfunction]
fn engine_name(num: u32) -> String {
    engine_names::engine_name(num)
}

/// A request's router-made engine-side id for its first attempt.
#[pyfunction]
fn first_engine_request_id(prefix: &str) -> String {
    engine_names::first_engine_request_id(prefix)
}

/// The engine-side id of a request's `attempt`-th retry or resumption (1, 2, ...).
#[pyfunction]
fn retry_engine_request_id(first: &str, attempt: u32) -> String {
    engine_names::retry_engine_request_id(first, attempt)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(engine_name, m)?)?;
    m.add_function(wrap_pyfunction!(first_engine_request_id, m)?)?;
    m.add_function(wrap_pyfunction!(retry_engine_request_id, m)?)?;
    Ok(())
}
