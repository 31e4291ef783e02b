//! An engine double living in Python (switchyard_sim/fake/fake_engine.py's FakeEngineClient, the
//! simulator's SimEngineClient) behind the executor's engine interface (executor::EngineVerbs),
//! so FakeCluster and the simulator run the executor a client's request runs. The double speaks
//! the engine's messages: `prep_recv(request_id, tokens, end, metadata=)`, `remote_send(
//! request_id, tokens, kv_addr, dst, begin, end, metadata=)` and `abort(request_id, handoff)`
//! are coroutines, `start_generate_request(StartGenerateRequest, metadata=)` starts a stream
//! with `read()` / `cancel()`; a failure is an exception with `code()` and `details()` (as the
//! engine's gRPC server reports it) or router_core's EngineCallError.
//!
//! Each call is scheduled on the loop it is made from when it is made (the caller — the request
//! task or a policy's verb — runs on that loop), so the double sees the calls in order, and the
//! answer comes back on a channel.

use super::double_call::{chunk_call, DoubleCall};
use crate::engine_rpc::CallError;
use crate::executor::{EngineVerbs, Metadata, VerbFuture};
use crate::front::segment_call::SegmentCall;
use crate::rpc::pb;
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;
use tonic::Status;

pub struct EngineDouble {
    double: PyObject,
}

impl EngineDouble {
    pub fn new(double: PyObject) -> Self {
        EngineDouble { double }
    }
}

/// A Python exception from a double as the gRPC client would report it.
pub fn call_error_of(py: Python<'_>, err: PyErr) -> CallError {
    if err.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py) {
        return CallError::Cancelled;
    }
    let value = err.value(py);
    let status = (|| -> PyResult<Status> {
        let code = value.getattr("code")?;
        let code = if code.is_callable() {
            code.call0()?
        } else {
            code
        };
        let code = match code.extract::<String>() {
            Ok(name) => code_of_name(&name),
            Err(_) => tonic::Code::from_i32(code.getattr("value")?.get_item(0)?.extract()?),
        };
        let details = value.getattr("details")?;
        let details = if details.is_callable() {
            details.call0()?
        } else {
            details
        };
        let details: Option<String> = details.extract()?;
        Ok(Status::new(code, details.unwrap_or_default()))
    })();
    CallError::Rpc(status.unwrap_or_else(|_| Status::unknown(err.to_string())))
}

fn code_of_name(name: &str) -> tonic::Code {
    (0..17)
        .map(tonic::Code::from_i32)
        .find(|code| crate::engine_rpc::code_name(*code) == name)
        .unwrap_or(tonic::Code::Unknown)
}

type Reply<T> = oneshot::Sender<Result<T, CallError>>;
type Make = Box<dyn FnOnce(Python<'_>) -> PyResult<PyObject> + Send>;
type Finish = Box<dyn FnOnce(Python<'_>, PyResult<Bound<'_, PyAny>>) + Send>;

/// Schedules the coroutine `make` returns on the running loop now; its outcome, converted by
/// `convert`, answers the returned future.
fn on_loop<T: Send + 'static>(
    make: Make,
    convert: fn(Python<'_>, Bound<'_, PyAny>) -> PyResult<T>,
) -> VerbFuture<T> {
    let (reply, answer): (Reply<T>, _) = oneshot::channel();
    let finish: Finish = Box::new(move |py, outcome| {
        let result = outcome
            .and_then(|value| convert(py, value))
            .map_err(|err| call_error_of(py, err));
        let _ = reply.send(result);
    });
    let scheduled = Python::with_gil(|py| -> PyResult<()> {
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let start = Py::new(
            py,
            StartOnLoop {
                start: Mutex::new(Some((make, finish))),
            },
        )?;
        event_loop.call_method1("call_soon_threadsafe", (start,))?;
        Ok(())
    });
    Box::pin(async move {
        if let Err(err) = scheduled {
            return Err(CallError::Rpc(Status::internal(format!(
                "the engine double's call could not start: {err}"
            ))));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(CallError::Rpc(Status::unavailable("the loop is gone"))))
    })
}

/// On the loop: starts the coroutine as a task, answered by DoneOnLoop.
#[pyclass(module = "router_core._router_core", frozen)]
struct StartOnLoop {
    start: Mutex<Option<(Make, Finish)>>,
}

#[pymethods]
impl StartOnLoop {
    fn __call__(&self, py: Python<'_>) {
        let Some((make, finish)) = self
            .start
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let started = make(py).and_then(|coroutine| {
            py.import("asyncio")?
                .call_method1("ensure_future", (coroutine,))
        });
        match started {
            Ok(task) => {
                let done = DoneOnLoop {
                    finish: Mutex::new(Some(finish)),
                };
                if let Err(err) = task.call_method1("add_done_callback", (done,)) {
                    err.print(py);
                }
            }
            Err(err) => finish(py, Err(err)),
        }
    }
}

#[pyclass(module = "router_core._router_core", frozen)]
struct DoneOnLoop {
    finish: Mutex<Option<Finish>>,
}

#[pymethods]
impl DoneOnLoop {
    fn __call__(&self, task: Bound<'_, PyAny>) {
        let py = task.py();
        let finish = self
            .finish
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(finish) = finish {
            finish(py, task.call_method0("result"));
        }
    }
}

fn metadata_kwargs<'py>(py: Python<'py>, metadata: &Metadata) -> PyResult<Bound<'py, PyDict>> {
    let kwargs = PyDict::new(py);
    kwargs.set_item("metadata", PyList::new(py, metadata.iter().cloned())?)?;
    Ok(kwargs)
}

fn int<T: for<'a> FromPyObject<'a>>(value: &Bound<'_, PyAny>, name: &str) -> PyResult<T> {
    value.getattr(name)?.extract()
}

fn prep_recv_answer(_: Python<'_>, value: Bound<'_, PyAny>) -> PyResult<pb::PrepRecvResponse> {
    Ok(pb::PrepRecvResponse {
        kv_addr: value.getattr("kv_addr")?.extract()?,
        matched_len: int(&value, "matched_len")?,
        end: int(&value, "end")?,
        page_size: int(&value, "page_size")?,
    })
}

fn remote_send_answer(_: Python<'_>, value: Bound<'_, PyAny>) -> PyResult<pb::RemoteSendResponse> {
    Ok(pb::RemoteSendResponse {
        bytes_sent: int(&value, "bytes_sent")?,
        transport: value.getattr("transport")?.extract()?,
        total_ms: int(&value, "total_ms")?,
        cached_on_sender: int(&value, "cached_on_sender")?,
        tail_ms: int(&value, "tail_ms")?,
        ..Default::default()
    })
}

impl EngineVerbs for EngineDouble {
    fn prep_recv(
        &self,
        message: pb::PrepRecvRequest,
        metadata: Metadata,
    ) -> VerbFuture<pb::PrepRecvResponse> {
        let double = Python::with_gil(|py| self.double.clone_ref(py));
        on_loop(
            Box::new(move |py| {
                let kwargs = metadata_kwargs(py, &metadata)?;
                let args = (message.request_id, message.tokens, message.end);
                Ok(double
                    .bind(py)
                    .call_method("prep_recv", args, Some(&kwargs))?
                    .unbind())
            }),
            prep_recv_answer,
        )
    }

    fn remote_send(
        &self,
        message: pb::RemoteSendRequest,
        metadata: Metadata,
    ) -> VerbFuture<pb::RemoteSendResponse> {
        let double = Python::with_gil(|py| self.double.clone_ref(py));
        on_loop(
            Box::new(move |py| {
                let kwargs = metadata_kwargs(py, &metadata)?;
                // Only when set: a double that predates deadlines still takes the call.
                if message.first_token_due_ms > 0.0 {
                    kwargs.set_item("first_token_due_ms", message.first_token_due_ms)?;
                }
                let args = (
                    message.request_id,
                    message.tokens,
                    PyBytes::new(py, &message.kv_addr),
                    message.dst,
                    message.begin,
                    message.end,
                );
                Ok(double
                    .bind(py)
                    .call_method("remote_send", args, Some(&kwargs))?
                    .unbind())
            }),
            remote_send_answer,
        )
    }

    fn start_generate(
        &self,
        message: pb::StartGenerateRequest,
        metadata: Metadata,
        _runtime: &tokio::runtime::Handle,
    ) -> Arc<dyn SegmentCall> {
        Python::with_gil(|py| -> Arc<dyn SegmentCall> {
            let started = (|| -> PyResult<DoubleCall> {
                let request = py
                    .import("switchyard_rpc.engine_pb2")?
                    .getattr("StartGenerateRequest")?
                    .call_method1("FromString", (PyBytes::new(py, &message.encode_to_vec()),))?;
                let kwargs = metadata_kwargs(py, &metadata)?;
                let call = self.double.bind(py).call_method(
                    "start_generate_request",
                    (request,),
                    Some(&kwargs),
                )?;
                DoubleCall::new(py, call.unbind())
            })();
            match started {
                Ok(call) => Arc::new(call),
                Err(err) => chunk_call(Err(call_error_of(py, err))),
            }
        })
    }

    fn abort(&self, request_id: String, handoff: bool) -> VerbFuture<bool> {
        let double = Python::with_gil(|py| self.double.clone_ref(py));
        on_loop(
            Box::new(move |py| {
                Ok(double
                    .bind(py)
                    .call_method1("abort", (request_id, handoff))?
                    .unbind())
            }),
            |_, value| value.extract(),
        )
    }
}
