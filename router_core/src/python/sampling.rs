//! The router's sampling rules (`crate::sampling::check_sampling`) for Python: what the HTTP
//! front applies to a client's request, callable beside the engine's own copy of the rules
//! (switchyard_proto/sampling_params.py) so a test can hold the two to the same answers.

use crate::error::RouterCoreError;
use crate::sampling::{check_sampling, SamplingFields};
use pyo3::prelude::*;

/// `(param, message)` of the first rule the values break, in the rules' order, or None.
/// A `stop` entry that is not a string breaks the stop rule.
#[pyfunction]
#[pyo3(signature = (temperature, top_p, top_k, max_tokens, min_tokens, seed=None,
                    stop_token_ids=None, stop=None, priority=0))]
#[allow(clippy::too_many_arguments)]
fn sampling_error(
    temperature: f64,
    top_p: f64,
    top_k: i128,
    max_tokens: i128,
    min_tokens: i128,
    seed: Option<i128>,
    stop_token_ids: Option<Vec<i128>>,
    stop: Option<Vec<Bound<'_, PyAny>>>,
    priority: i128,
) -> PyResult<Option<(String, String)>> {
    let stop_token_ids = stop_token_ids.unwrap_or_default();
    let stop: Vec<Option<String>> = stop
        .unwrap_or_default()
        .iter()
        .map(|s| s.extract().ok())
        .collect();
    let stop: Vec<Option<&str>> = stop.iter().map(Option::as_deref).collect();
    // Every field named, deliberately, as in the front's literal (front/openai_request.rs).
    let fields = SamplingFields {
        temperature,
        top_p,
        top_k,
        max_tokens,
        min_tokens,
        seed,
        stop_token_ids: &stop_token_ids,
        stop: &stop,
        priority,
    };
    match check_sampling(&fields) {
        Ok(_) => Ok(None),
        Err(RouterCoreError::InvalidRequest { param, message }) => Ok(Some((param, message))),
        Err(other) => Err(other.into()),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sampling_error, m)?)?;
    Ok(())
}
