//! `GenerateCall` for Python: a StartGenerate stream the router started in Rust, read from the
//! router's asyncio loop while the policy admits a segment (its first chunk), then handed to the
//! front. A chunk reaches Python as an `EngineChunk` made once in Rust from the message tonic
//! decoded: Python never decodes (or re-encodes) protobuf the front already holds.

use super::bridge_jobs::{BridgeJobs, Job};
use crate::engine_rpc::{code_name, CallError, GenerateCall};
use crate::rpc::pb;
use pyo3::exceptions::{PyException, PyRuntimeError};
use pyo3::prelude::*;
use std::sync::Arc;

pyo3::create_exception!(
    _router_core,
    EngineCallError,
    PyException,
    "A GenerateCall failed or was cancelled: `code` (the gRPC status code's name) and `details`."
);

pub(super) fn engine_call_error(py: Python<'_>, code: &str, details: &str) -> PyErr {
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

/// One chunk of a generation, as a policy reads it (the `GenerateChunk` message's fields).
#[pyclass(name = "EngineChunk", module = "router_core._router_core", frozen)]
pub struct PyEngineChunk {
    chunk: pb::GenerateChunk,
}

impl PyEngineChunk {
    /// The message, for the front to stream from (a copy: the Python object may live on).
    pub fn message(&self) -> pb::GenerateChunk {
        self.chunk.clone()
    }
}

#[pymethods]
impl PyEngineChunk {
    #[getter]
    fn token_ids(&self) -> Vec<i32> {
        self.chunk.token_ids.clone()
    }
    #[getter]
    fn text(&self) -> &str {
        &self.chunk.text
    }
    #[getter]
    fn finish_reason(&self) -> &str {
        &self.chunk.finish_reason
    }
    #[getter]
    fn prompt_tokens(&self) -> i32 {
        self.chunk.prompt_tokens
    }
    #[getter]
    fn cached_tokens(&self) -> i32 {
        self.chunk.cached_tokens
    }
    #[getter]
    fn queue_ms(&self) -> f64 {
        self.chunk.queue_ms
    }
    #[getter]
    fn prefill_ms(&self) -> f64 {
        self.chunk.prefill_ms
    }
    #[getter]
    fn step_ms(&self) -> f64 {
        self.chunk.step_ms
    }
    #[getter]
    fn logprobs(&self) -> Vec<f32> {
        self.chunk.logprobs.clone()
    }
    #[getter]
    fn error(&self) -> &str {
        &self.chunk.error
    }

    fn __repr__(&self) -> String {
        format!(
            "EngineChunk(token_ids={:?}, finish_reason={:?})",
            self.chunk.token_ids, self.chunk.finish_reason
        )
    }
}

/// One StartGenerate stream the router started in Rust; Python reads chunks from it until it
/// hands the call to the front.
#[pyclass(name = "GenerateCall", module = "router_core._router_core", frozen)]
pub struct PyGenerateCall {
    call: Arc<GenerateCall>,
    /// Where a read's result goes to reach the loop (bridge_jobs.rs).
    jobs: Arc<BridgeJobs>,
}

impl PyGenerateCall {
    pub fn new(call: Arc<GenerateCall>, jobs: Arc<BridgeJobs>) -> Self {
        PyGenerateCall { call, jobs }
    }

    pub fn call(&self) -> Arc<GenerateCall> {
        self.call.clone()
    }
}

/// A read's result as Python sees it: the chunk, None at the stream's end, or the error.
fn chunk_to_py(
    py: Python<'_>,
    read: Result<Option<pb::GenerateChunk>, CallError>,
) -> PyResult<PyObject> {
    match read {
        Ok(Some(chunk)) => Ok(Py::new(py, PyEngineChunk { chunk })?.into_any()),
        Ok(None) => Ok(py.None()),
        Err(CallError::Rpc(status)) => Err(engine_call_error(
            py,
            code_name(status.code()),
            status.message(),
        )),
        Err(CallError::Cancelled) => {
            Err(engine_call_error(py, "CANCELLED", "the call was cancelled"))
        }
        Err(CallError::Busy) => Err(PyRuntimeError::new_err(
            "two readers of one GenerateCall at once",
        )),
    }
}

#[pymethods]
impl PyGenerateCall {
    /// Awaitable (call it on the router's loop): the next chunk, or None once the engine closed
    /// the stream; raises EngineCallError when the call failed or was cancelled. The read runs
    /// on tokio; its result reaches the loop through the bridge's job queue (no GIL taken on
    /// the tokio side) and becomes an EngineChunk there.
    fn next_chunk<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let waiting = self.jobs.event_loop(py).call_method0("create_future")?;
        let (call, jobs, future) = (
            self.call.clone(),
            self.jobs.clone(),
            waiting.clone().unbind(),
        );
        pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
            let read = call.next().await;
            jobs.push(Job::Answer(
                future,
                Box::new(move |py| chunk_to_py(py, read)),
            ));
        });
        Ok(waiting)
    }

    /// Ends the call (the engine aborts an unfinished generation); True if it was running.
    fn cancel(&self) -> bool {
        self.call.cancel()
    }
}
