//! An engine double's generation (a Python object with an awaitable `read()` and `cancel()`:
//! switchyard_sim/fake/fake_engine.py's FakeCall, the simulator's stream) behind the request
//! task's engine interface (front/segment_call.rs). Each read runs the double's coroutine as a
//! task on the asyncio loop the segment was started on, and its chunk (a GenerateChunk message),
//! its end (None) or its failure comes back as the router's gRPC client would report them. So
//! FakeCluster and the simulator drive the front's own request task with in-process engines.

use super::engine_double::call_error_of;
use crate::engine_rpc::CallError;
use crate::front::segment_call::{ReadFuture, SegmentCall};
use crate::rpc::pb;
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::{Mutex, PoisonError};
use tokio::sync::oneshot;
use tonic::Status;

type ReadResult = Result<Option<pb::GenerateChunk>, CallError>;

pub struct DoubleCall {
    call: PyObject,
    event_loop: PyObject,
}

impl DoubleCall {
    /// `call`'s reads will run on the asyncio loop running now.
    pub fn new(py: Python<'_>, call: PyObject) -> PyResult<Self> {
        let event_loop = py
            .import("asyncio")?
            .call_method0("get_running_loop")?
            .unbind();
        Ok(DoubleCall { call, event_loop })
    }
}

/// A chunk as the front streams it: a GenerateChunk message (serialized here and decoded once).
pub fn chunk_message(chunk: &Bound<'_, PyAny>) -> PyResult<pb::GenerateChunk> {
    let data = chunk.call_method0("SerializeToString")?;
    let data = data.downcast::<PyBytes>()?;
    pb::GenerateChunk::decode(data.as_bytes()).map_err(|err| {
        pyo3::exceptions::PyValueError::new_err(format!("not a GenerateChunk: {err}"))
    })
}

/// The double's answer (or its exception) as the gRPC client would report it.
fn read_result(py: Python<'_>, answer: PyResult<Bound<'_, PyAny>>) -> ReadResult {
    let chunk = answer.map_err(|err| call_error_of(py, err))?;
    if chunk.is_none() {
        return Ok(None);
    }
    chunk_message(&chunk)
        .map(Some)
        .map_err(|err| call_error_of(py, err))
}

/// A call that failed as it started: its first read reports `failure`.
struct FailedCall {
    failure: Mutex<Option<CallError>>,
}

/// A stream whose first read answers `read` (and ends there).
pub fn chunk_call(read: ReadResult) -> std::sync::Arc<dyn SegmentCall> {
    let failure = read.err().unwrap_or(CallError::Cancelled);
    std::sync::Arc::new(FailedCall {
        failure: Mutex::new(Some(failure)),
    })
}

impl SegmentCall for FailedCall {
    fn next(&self) -> ReadFuture<'_> {
        let failure = self
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Box::pin(async move { failure.map_or(Ok(None), Err) })
    }

    fn finish(&self, _runtime: &tokio::runtime::Handle) {}

    fn cancel(&self) -> bool {
        false
    }
}

impl SegmentCall for DoubleCall {
    fn next(&self) -> ReadFuture<'_> {
        let (reply, answer) = oneshot::channel();
        let scheduled = Python::with_gil(|py| -> PyResult<()> {
            let start = Py::new(
                py,
                StartRead {
                    call: self.call.clone_ref(py),
                    reply: Mutex::new(Some(reply)),
                },
            )?;
            self.event_loop
                .call_method1(py, "call_soon_threadsafe", (start,))?;
            Ok(())
        });
        Box::pin(async move {
            if let Err(err) = scheduled {
                return Err(CallError::Rpc(Status::internal(format!(
                    "the engine double's read could not start: {err}"
                ))));
            }
            answer
                .await
                .unwrap_or_else(|_| Err(CallError::Rpc(Status::unavailable("the loop is gone"))))
        })
    }

    /// Nothing is left to read of a double's stream.
    fn finish(&self, _runtime: &tokio::runtime::Handle) {}

    fn cancel(&self) -> bool {
        Python::with_gil(|py| {
            self.call
                .call_method0(py, "cancel")
                .and_then(|running| running.extract::<bool>(py))
                .unwrap_or(false)
        })
    }
}

type Reply = Mutex<Option<oneshot::Sender<ReadResult>>>;

fn send(reply: &Reply, result: ReadResult) {
    if let Some(reply) = reply.lock().unwrap_or_else(PoisonError::into_inner).take() {
        let _ = reply.send(result);
    }
}

/// On the loop: runs the double's `read()` as a task, answered by ReadDone.
#[pyclass(module = "router_core._router_core", frozen)]
struct StartRead {
    call: PyObject,
    reply: Reply,
}

#[pymethods]
impl StartRead {
    fn __call__(&self, py: Python<'_>) {
        let started = (|| -> PyResult<()> {
            let read = self.call.bind(py).call_method0("read")?;
            let task = py
                .import("asyncio")?
                .call_method1("ensure_future", (read,))?;
            let reply = self
                .reply
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            task.call_method1(
                "add_done_callback",
                (ReadDone {
                    reply: Mutex::new(reply),
                },),
            )?;
            Ok(())
        })();
        if let Err(err) = started {
            send(&self.reply, read_result(py, Err(err)));
        }
    }
}

#[pyclass(module = "router_core._router_core", frozen)]
struct ReadDone {
    reply: Reply,
}

#[pymethods]
impl ReadDone {
    fn __call__(&self, task: Bound<'_, PyAny>) {
        let py = task.py();
        send(&self.reply, read_result(py, task.call_method0("result")));
    }
}
