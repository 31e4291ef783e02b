//! The admission queue for Python (front/admission.rs): its settings (the router's flags and
//! `PUT /admin/admission`), and what the metrics read of it at each scrape — of a RouterFront's,
//! or of an InProcessFront's (tests run the same gate in-process).

use super::front::PyRouterFront;
use super::in_process::PyInProcessFront;
use crate::admission_queue::AdmissionSettings;
use crate::front::admission::AdmissionGate;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The admission gate of `front`, a RouterFront or an InProcessFront.
fn gate(front: &Bound<'_, PyAny>) -> PyResult<Arc<AdmissionGate>> {
    if let Ok(front) = front.downcast::<PyRouterFront>() {
        return Ok(front.get().front().admission.clone());
    }
    if let Ok(front) = front.downcast::<PyInProcessFront>() {
        return Ok(front.get().admission());
    }
    Err(PyTypeError::new_err(
        "the admission gate belongs to a RouterFront or an InProcessFront",
    ))
}

/// One request's time at the admission gate.
#[pyclass(
    name = "AdmissionWait",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyAdmissionWait {
    priority: i32,
    wait_s: f64,
    /// "admitted" | "queue_full" | "timeout" | "gone"
    outcome: &'static str,
}

/// Requests of one priority waiting in the admission queue now.
#[pyclass(
    name = "AdmissionQueueLength",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyAdmissionQueueLength {
    priority: i32,
    length: usize,
}

/// The front's admission queue takes these settings for requests from now on (ValueError for
/// a negative or non-finite timeout or weight, or a queue of 0).
#[pyfunction]
#[pyo3(signature = (front, *, max_inflight_per_engine, max_queued_prefill_tokens,
                    max_queue_len, queue_timeout_s, weights, default_weight = 1.0))]
fn set_admission(
    front: &Bound<'_, PyAny>,
    max_inflight_per_engine: u64,
    max_queued_prefill_tokens: u64,
    max_queue_len: usize,
    queue_timeout_s: f64,
    weights: HashMap<String, f64>,
    default_weight: f64,
) -> PyResult<()> {
    let bad_weight = |w: &f64| !w.is_finite() || *w <= 0.0;
    if max_queue_len == 0 {
        return Err(PyValueError::new_err(
            "the admission queue must hold at least 1 request",
        ));
    }
    if !queue_timeout_s.is_finite() || queue_timeout_s <= 0.0 {
        return Err(PyValueError::new_err(format!(
            "the admission queue timeout must be a positive number of seconds, got \
             {queue_timeout_s}"
        )));
    }
    if bad_weight(&default_weight) || weights.values().any(bad_weight) {
        return Err(PyValueError::new_err(
            "fair-share weights must be positive numbers",
        ));
    }
    gate(front)?.configure(AdmissionSettings {
        max_inflight_per_engine,
        max_queued_prefill_tokens,
        max_queue_len,
        queue_timeout: Duration::from_secs_f64(queue_timeout_s),
        weights,
        default_weight,
    });
    Ok(())
}

/// Requests waiting now, per priority (lowest number first; priorities with none are absent).
#[pyfunction]
fn admission_queue_lengths(front: &Bound<'_, PyAny>) -> PyResult<Vec<PyAdmissionQueueLength>> {
    let lengths = gate(front)?.queue_lengths();
    Ok(lengths
        .into_iter()
        .map(|(priority, length)| PyAdmissionQueueLength { priority, length })
        .collect())
}

/// Every request's time at the gate since the last call, oldest first.
#[pyfunction]
fn drain_admission_waits(front: &Bound<'_, PyAny>) -> PyResult<Vec<PyAdmissionWait>> {
    let waits = gate(front)?.drain_waits();
    Ok(waits
        .into_iter()
        .map(|w| PyAdmissionWait {
            priority: w.priority,
            wait_s: w.wait_s,
            outcome: w.outcome,
        })
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAdmissionWait>()?;
    m.add_class::<PyAdmissionQueueLength>()?;
    m.add_function(wrap_pyfunction!(set_admission, m)?)?;
    m.add_function(wrap_pyfunction!(admission_queue_lengths, m)?)?;
    m.add_function(wrap_pyfunction!(drain_admission_waits, m)?)
}
