//! What a policy's verbs answer and raise, as Python types made once in Rust: `KvReservation`
//! (PrepRecv's reservation), `SendResult` (RemoteSend's answer), and the errors — `EngineCallError`
//! (the engine failed the call: its gRPC status code's name and details), `TransferFailed` (a KV
//! transfer failed on the engines' side: a policy may fall back to local prefill) and
//! `VerbOrderError` (the verbs used in an order the contract forbids). pyrouter re-exports them.

use crate::engine_rpc::{code_name, CallError};
use crate::executor::{KvReservation, SendResult, VerbError};
use crate::front::engine_names::engine_name;
use pyo3::exceptions::{PyException, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

pyo3::create_exception!(
    _router_core,
    EngineCallError,
    PyException,
    "An engine failed a call (or it was cancelled): `code` (the gRPC status code's name) and \
     `details`."
);
pyo3::create_exception!(
    _router_core,
    TransferFailed,
    PyRuntimeError,
    "RemoteSend failed on the engines' side (not a policy mistake); a PD policy may fall back to \
     prefilling locally on the decode engine."
);
pyo3::create_exception!(
    _router_core,
    VerbOrderError,
    PyRuntimeError,
    "A policy called the verbs in an order the contract forbids (reported as its failure)."
);

pub fn engine_call_error(py: Python<'_>, code: &str, details: &str) -> PyErr {
    let err = EngineCallError::new_err((code.to_owned(), details.to_owned()));
    let value = err.value(py);
    let typed = value
        .setattr("code", code)
        .and_then(|()| value.setattr("details", details));
    match typed {
        Ok(()) => err,
        Err(failed) => failed,
    }
}

/// A failed engine call as Python sees it.
pub fn call_error(py: Python<'_>, err: &CallError) -> PyErr {
    match err {
        CallError::Rpc(status) => engine_call_error(py, code_name(status.code()), status.message()),
        CallError::Cancelled => engine_call_error(py, "CANCELLED", "the call was cancelled"),
        CallError::Busy => PyRuntimeError::new_err("two readers of one engine stream at once"),
    }
}

/// A verb's failure as Python sees it.
pub fn verb_error(py: Python<'_>, err: &VerbError) -> PyErr {
    match err {
        VerbError::Order(why) => VerbOrderError::new_err(why.clone()),
        VerbError::Transfer(why) => TransferFailed::new_err(why.clone()),
        VerbError::Engine { error, .. } => call_error(py, error),
    }
}

/// PrepRecv's answer: pages reserved on `engine_id` for tokens[matched:end].
#[pyclass(name = "KvReservation", module = "router_core._router_core", frozen)]
pub struct PyKvReservation {
    pub reservation: KvReservation,
}

#[pymethods]
impl PyKvReservation {
    /// The engine holding the reservation ("e1").
    #[getter]
    fn engine_id(&self) -> String {
        engine_name(self.reservation.engine)
    }
    /// The engine-side request id it was made for.
    #[getter]
    fn request_id(&self) -> &str {
        &self.reservation.request_id
    }
    /// The opaque transfer descriptor a RemoteSend into these pages carries.
    #[getter]
    fn kv_addr<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.reservation.kv_addr)
    }
    /// Tokens of the context the engine already held.
    #[getter]
    fn matched(&self) -> u64 {
        self.reservation.matched
    }
    #[getter]
    fn end(&self) -> u64 {
        self.reservation.end
    }
    #[getter]
    fn page_size(&self) -> u32 {
        self.reservation.page_size
    }
    #[getter]
    fn dst_address(&self) -> &str {
        &self.reservation.dst_address
    }

    fn __repr__(&self) -> String {
        format!(
            "KvReservation(engine_id={:?}, matched={}, end={})",
            engine_name(self.reservation.engine),
            self.reservation.matched,
            self.reservation.end
        )
    }
}

/// RemoteSend's answer, once every byte has landed.
#[pyclass(
    name = "SendResult",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PySendResult {
    bytes_sent: i64,
    transport: String,
    total_ms: f64,
    cached_on_sender: i64,
    /// The transfer's exposed part: the sender's prefill done -> all landed.
    tail_ms: f64,
}

impl From<SendResult> for PySendResult {
    fn from(sent: SendResult) -> Self {
        PySendResult {
            bytes_sent: sent.bytes_sent,
            transport: sent.transport,
            total_ms: sent.total_ms,
            cached_on_sender: sent.cached_on_sender,
            tail_ms: sent.tail_ms,
        }
    }
}

#[pymethods]
impl PySendResult {
    fn __repr__(&self) -> String {
        format!(
            "SendResult(bytes_sent={}, transport={:?}, total_ms={:.1})",
            self.bytes_sent, self.transport, self.total_ms
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKvReservation>()?;
    m.add_class::<PySendResult>()?;
    let py = m.py();
    m.add("EngineCallError", py.get_type::<EngineCallError>())?;
    m.add("TransferFailed", py.get_type::<TransferFailed>())?;
    m.add("VerbOrderError", py.get_type::<VerbOrderError>())?;
    Ok(())
}
