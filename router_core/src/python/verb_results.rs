//! The answers of the verbs a policy awaits (PrepRecv, RemoteSend), as Python classes made once
//! in Rust from the message tonic decoded: the policy's side reads their fields and never
//! decodes protobuf (stubs in router_core/__init__.pyi). Their field names are the messages',
//! so an engine double answering with the generated protobuf classes reads the same.

use crate::rpc::pb;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// PrepRecv's answer: pages reserved for tokens[matched_len:end].
#[pyclass(name = "PrepRecvResult", module = "router_core._router_core", frozen)]
pub struct PyPrepRecvResult {
    answer: pb::PrepRecvResponse,
}

impl From<pb::PrepRecvResponse> for PyPrepRecvResult {
    fn from(answer: pb::PrepRecvResponse) -> Self {
        PyPrepRecvResult { answer }
    }
}

#[pymethods]
impl PyPrepRecvResult {
    /// The opaque transfer descriptor a RemoteSend into these pages carries.
    #[getter]
    fn kv_addr<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.answer.kv_addr)
    }
    #[getter]
    fn matched_len(&self) -> i32 {
        self.answer.matched_len
    }
    #[getter]
    fn end(&self) -> i32 {
        self.answer.end
    }
    #[getter]
    fn page_size(&self) -> i32 {
        self.answer.page_size
    }

    fn __repr__(&self) -> String {
        format!(
            "PrepRecvResult(matched_len={}, end={}, page_size={})",
            self.answer.matched_len, self.answer.end, self.answer.page_size
        )
    }
}

/// RemoteSend's answer, once every byte has landed.
#[pyclass(name = "RemoteSendResult", module = "router_core._router_core", frozen)]
pub struct PyRemoteSendResult {
    answer: pb::RemoteSendResponse,
}

impl From<pb::RemoteSendResponse> for PyRemoteSendResult {
    fn from(answer: pb::RemoteSendResponse) -> Self {
        PyRemoteSendResult { answer }
    }
}

#[pymethods]
impl PyRemoteSendResult {
    #[getter]
    fn bytes_sent(&self) -> i64 {
        self.answer.bytes_sent
    }
    #[getter]
    fn transport(&self) -> &str {
        &self.answer.transport
    }
    #[getter]
    fn compute_ms(&self) -> f64 {
        self.answer.compute_ms
    }
    #[getter]
    fn transfer_ms(&self) -> f64 {
        self.answer.transfer_ms
    }
    #[getter]
    fn total_ms(&self) -> f64 {
        self.answer.total_ms
    }
    #[getter]
    fn cached_on_sender(&self) -> i32 {
        self.answer.cached_on_sender
    }
    #[getter]
    fn bytes_expected(&self) -> i64 {
        self.answer.bytes_expected
    }
    #[getter]
    fn begin(&self) -> i32 {
        self.answer.begin
    }
    #[getter]
    fn end(&self) -> i32 {
        self.answer.end
    }
    #[getter]
    fn hidden_fraction(&self) -> f64 {
        self.answer.hidden_fraction
    }
    #[getter]
    fn tail_ms(&self) -> f64 {
        self.answer.tail_ms
    }

    fn __repr__(&self) -> String {
        format!(
            "RemoteSendResult(bytes_sent={}, transport={:?}, total_ms={})",
            self.answer.bytes_sent, self.answer.transport, self.answer.total_ms
        )
    }
}

/// A verb's answer as its awaitable resolves on the loop.
pub fn prep_recv_to_py(py: Python<'_>, answer: pb::PrepRecvResponse) -> PyResult<PyObject> {
    Ok(Py::new(py, PyPrepRecvResult::from(answer))?.into_any())
}

pub fn remote_send_to_py(py: Python<'_>, answer: pb::RemoteSendResponse) -> PyResult<PyObject> {
    Ok(Py::new(py, PyRemoteSendResult::from(answer))?.into_any())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPrepRecvResult>()?;
    m.add_class::<PyRemoteSendResult>()?;
    Ok(())
}
