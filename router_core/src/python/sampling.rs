//! The sampling rules (`crate::sampling::check_sampling`) for Python: the engine checks every
//! request it is given with them (switchyard_engine_api/sampling_params.py builds its `SamplingParams`
//! through `check_sampling`), and the router checks its configured defaults, so the HTTP front,
//! the engine and the router's configuration all apply one implementation.

use crate::error::RouterCoreError;
use crate::sampling::{check_sampling as check_rules, SamplingFields};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pyo3::create_exception!(
    _router_core,
    SamplingRefused,
    PyValueError,
    "A sampling rule the values break: the message, and `param` (the field it names)."
);

fn refused(py: Python<'_>, param: &str, message: String) -> PyErr {
    let err = SamplingRefused::new_err(message);
    match err.value(py).setattr("param", param) {
        Ok(()) => err,
        Err(failed) => failed,
    }
}

/// The normalised `(top_p, top_k)` ("off" spelt 1.0 and 0) when the values meet every rule;
/// otherwise raises `SamplingRefused` for the first rule broken, in the rules' order. A `stop`
/// entry that is not a string breaks the stop rule.
#[pyfunction]
#[pyo3(signature = (temperature, top_p, top_k, max_tokens, min_tokens, seed=None,
                    stop_token_ids=None, stop=None, priority=0))]
#[allow(clippy::too_many_arguments)]
fn check_sampling(
    py: Python<'_>,
    temperature: f64,
    top_p: f64,
    top_k: i128,
    max_tokens: i128,
    min_tokens: i128,
    seed: Option<i128>,
    stop_token_ids: Option<Vec<i128>>,
    stop: Option<Vec<Bound<'_, PyAny>>>,
    priority: i128,
) -> PyResult<(f64, i128)> {
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
    match check_rules(&fields) {
        Ok(normalised) => Ok((normalised.top_p, normalised.top_k)),
        Err(RouterCoreError::InvalidRequest { param, message }) => {
            Err(refused(py, &param, message))
        }
        Err(other) => Err(other.into()),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_sampling, m)?)?;
    m.add("SamplingRefused", m.py().get_type::<SamplingRefused>())?;
    m.add(
        "MAX_SCHEMA_BYTES",
        crate::front::response_format::MAX_SCHEMA_BYTES,
    )?;
    Ok(())
}
