//! The admission queue for Python (front/admission.rs): its settings (the router's flags and
//! `PUT /admin/admission`), and what the metrics read of it at each scrape — of a RouterFront's,
//! or of an InProcessFront's (tests run the same gate in-process).

use super::front::PyRouterFront;
use super::in_process::PyInProcessFront;
use crate::admission_queue::{AdmissionSettings, SloTargets, DEFAULT_MARGIN};
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
    /// "admitted" | "queue_full" | "timeout" | "slo_unattainable" | "gone"
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

/// A positive finite number of ms, or None.
fn objective(name: &str, ms: Option<f64>) -> PyResult<Option<f64>> {
    match ms {
        Some(ms) if !(ms.is_finite() && ms > 0.0) => Err(PyValueError::new_err(format!(
            "{name} must be a positive number of ms, got {ms}"
        ))),
        ms => Ok(ms),
    }
}

// `margin`'s default is admission_queue::DEFAULT_MARGIN, written out so the signature shows it.
/// The front's admission gate takes these settings for requests from now on (ValueError for
/// a negative or non-finite timeout or weight, a queue of 0, a margin outside (-1, 10], or an
/// objective that is not a positive number). `predicted`: requests with a TTFT objective (their
/// own, else `slo_ttft_ms`) are admitted by their predicted outcome (front/admission.rs).
#[pyfunction]
#[pyo3(signature = (front, *, max_inflight_per_engine, max_queued_prefill_tokens,
                    max_queue_len, queue_timeout_s, weights, default_weight = 1.0,
                    predicted = true, margin = 0.1, slo_ttft_ms = None,
                    slo_tpot_ms = None))]
#[allow(clippy::too_many_arguments)]
fn set_admission(
    front: &Bound<'_, PyAny>,
    max_inflight_per_engine: u64,
    max_queued_prefill_tokens: u64,
    max_queue_len: usize,
    queue_timeout_s: f64,
    weights: HashMap<String, f64>,
    default_weight: f64,
    predicted: bool,
    margin: f64,
    slo_ttft_ms: Option<f64>,
    slo_tpot_ms: Option<f64>,
) -> PyResult<()> {
    if !(margin.is_finite() && margin > -1.0 && margin <= 10.0) {
        return Err(PyValueError::new_err(format!(
            "the admission margin must be in (-1, 10], got {margin}"
        )));
    }
    let default_slo = SloTargets {
        ttft_ms: objective("slo_ttft_ms", slo_ttft_ms)?,
        tpot_ms: objective("slo_tpot_ms", slo_tpot_ms)?,
    };
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
        predicted,
        margin,
        default_slo,
    });
    Ok(())
}

/// The gate's closed-loop (TTFT, TPOT) corrections now (1: nothing learnt yet).
#[pyfunction]
fn admission_corrections(front: &Bound<'_, PyAny>) -> PyResult<(f64, f64)> {
    Ok(gate(front)?.corrections())
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
    m.add("ADMISSION_DEFAULT_MARGIN", DEFAULT_MARGIN)?;
    m.add_function(wrap_pyfunction!(set_admission, m)?)?;
    m.add_function(wrap_pyfunction!(admission_corrections, m)?)?;
    m.add_function(wrap_pyfunction!(admission_queue_lengths, m)?)?;
    m.add_function(wrap_pyfunction!(drain_admission_waits, m)?)
}
