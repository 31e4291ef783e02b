//! `EngineRpcClient` for Python: the router's one gRPC client for one engine
//! (crate::engine_rpc::EngineRpc). The router dials each engine once, here; the executor's
//! fleet reaches the engine through the same client (RouterFront.set_engine), and the
//! membership's upkeep (python/engine_upkeep.rs: health, Stats and KV events, applied in Rust)
//! polls through it too. ModelInfo, health and Configure are asyncio awaitables here
//! (pyrouter/engines/rust_client.py). The verbs are the executor's alone.
//!
//! An awaitable crosses into Rust once (the call starts on tokio) and back once: the answer is
//! queued through the bridge's job queue (bridge_jobs.rs) and converted on the loop, so the
//! tokio side never takes the GIL. The answers are typed values (engine_info.rs); a failed
//! call raises EngineCallError with the gRPC status code's name and the details. Cancelling the awaitable cancels the call.

use super::bridge_jobs::{BridgeJobs, Job, Wake};
use super::engine_info::{PyConfigured, PyModelInfo};
use super::verb_values::call_error;
use crate::engine_rpc::{CallError, EngineRpc, EngineTls};
use crate::rpc::pb;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::AbortHandle;
use tonic::Status;

fn proto_int(name: &str, value: i64) -> PyResult<i32> {
    i32::try_from(value).map_err(|_| PyValueError::new_err(format!("{name}={value} is not int32")))
}

fn timeout_of(timeout_s: Option<f64>) -> PyResult<Option<Duration>> {
    timeout_s
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| PyValueError::new_err(format!("timeout_s must be > 0, got {s}")))
        })
        .transpose()
}

/// Where calls run (tokio) and how their answers reach the loop (the job queue).
#[derive(Clone)]
pub(super) struct Answers {
    jobs: Arc<BridgeJobs>,
    runtime: tokio::runtime::Handle,
}

impl Answers {
    /// `call` on tokio; its outcome, converted by `convert` on the loop, resolves the returned
    /// asyncio future. `cancellable`: cancelling that future aborts the call (not for a stream
    /// read, which cut short would leave its stream mid-read).
    pub(super) fn start<'py, T, F>(
        &self,
        py: Python<'py>,
        call: F,
        convert: fn(Python<'_>, T) -> PyResult<PyObject>,
        cancellable: bool,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, CallError>> + Send + 'static,
    {
        let waiting = self.jobs.event_loop(py).call_method0("create_future")?;
        let (jobs, future) = (self.jobs.clone(), waiting.clone().unbind());
        let task = self.runtime.spawn(async move {
            let outcome = call.await;
            jobs.push(Job::Answer(
                future,
                Box::new(move |py| match outcome {
                    Ok(value) => convert(py, value),
                    Err(err) => Err(call_error(py, &err)),
                }),
            ));
        });
        if cancellable {
            let on_done = CancelOnCancelled {
                task: task.abort_handle(),
            };
            waiting.call_method1("add_done_callback", (on_done,))?;
        }
        Ok(waiting)
    }
}

/// One engine's client, on the loop it was made on.
#[pyclass(name = "EngineRpcClient", module = "router_core._router_core", frozen)]
pub struct PyEngineRpcClient {
    rpc: EngineRpc,
    answers: Answers,
    #[pyo3(get)]
    address: String,
    #[pyo3(get)]
    timeout_s: f64,
}

impl PyEngineRpcClient {
    /// The client itself (the front's fleet reaches the engine through it: one connection).
    pub fn rpc(&self) -> &EngineRpc {
        &self.rpc
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Where its calls run and how their answers reach its loop (the upkeep's awaitables too).
    pub(super) fn answers(&self) -> &Answers {
        &self.answers
    }

    /// A unary call as an awaitable (cancelling it cancels the call).
    fn answer<'py, T, F>(
        &self,
        py: Python<'py>,
        call: F,
        convert: fn(Python<'_>, T) -> PyResult<PyObject>,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Status>> + Send + 'static,
    {
        let call = async move { call.await.map_err(CallError::Rpc) };
        self.answers.start(py, call, convert, true)
    }
}

#[pymethods]
impl PyEngineRpcClient {
    /// Call on the router's asyncio loop (the answers resolve there). The unary calls time out
    /// after `timeout_s` unless they name their own; the calls carry `engine_token` ("" =
    /// none); with `tls_ca` (PEM) the engine is dialled over TLS, presenting
    /// `tls_cert`/`tls_key` when given (mTLS) and expecting `tls_server_name` (default: the
    /// address's host). The connection opens on the first call.
    #[new]
    #[pyo3(signature = (address, timeout_s, engine_token = "", tls_ca = None, tls_cert = None,
                        tls_key = None, tls_server_name = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        address: &str,
        timeout_s: f64,
        engine_token: &str,
        tls_ca: Option<Vec<u8>>,
        tls_cert: Option<Vec<u8>>,
        tls_key: Option<Vec<u8>>,
        tls_server_name: Option<String>,
    ) -> PyResult<Self> {
        let timeout = timeout_of(Some(timeout_s))?.unwrap_or_default();
        let tls = tls_ca.map(|ca_pem| EngineTls {
            ca_pem,
            identity: tls_cert.zip(tls_key),
            server_name: tls_server_name,
        });
        let locals = TaskLocals::with_running_loop(py)?.copy_context(py)?;
        let runtime = pyo3_async_runtimes::tokio::get_runtime().handle().clone();
        let rpc = {
            let _entered = runtime.enter();
            EngineRpc::connect_lazy(address, timeout, engine_token, tls.as_ref())?
        };
        Ok(PyEngineRpcClient {
            rpc,
            answers: Answers {
                // Nothing but answers goes through this queue: it has no bridge to call.
                jobs: Arc::new(BridgeJobs::new(py, py.None(), locals, Wake::WithGil)?),
                runtime,
            },
            address: address.to_owned(),
            timeout_s,
        })
    }

    /// ModelInfo. Awaitable: a ModelInfo.
    #[pyo3(signature = (timeout_s = None))]
    fn model_info<'py>(
        &self,
        py: Python<'py>,
        timeout_s: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (rpc, timeout) = (self.rpc.clone(), timeout_of(timeout_s)?);
        self.answer(
            py,
            async move { rpc.model_info(timeout).await },
            |py, answer| Ok(Py::new(py, PyModelInfo::from(answer))?.into_any()),
        )
    }

    /// Configure (None: leave the setting as it is). Awaitable: a Configured (the value in
    /// force); EngineCallError INVALID_ARGUMENT for a value out of range.
    #[pyo3(signature = (prefill_chunk_size = None, timeout_s = None))]
    fn configure<'py>(
        &self,
        py: Python<'py>,
        prefill_chunk_size: Option<i64>,
        timeout_s: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let message = pb::ConfigureRequest {
            prefill_chunk_size: prefill_chunk_size
                .map(|size| proto_int("prefill_chunk_size", size))
                .transpose()?,
        };
        let (rpc, timeout) = (self.rpc.clone(), timeout_of(timeout_s)?);
        self.answer(
            py,
            async move { rpc.configure(message, timeout).await },
            |py, answer| Ok(Py::new(py, PyConfigured::from(answer))?.into_any()),
        )
    }

    /// grpc.health.v1 for the whole server. Awaitable: True when SERVING; False for anything
    /// else, an unreachable engine and a timeout included (it never raises for those).
    #[pyo3(signature = (timeout_s = 2.0))]
    fn healthy<'py>(&self, py: Python<'py>, timeout_s: f64) -> PyResult<Bound<'py, PyAny>> {
        let timeout = timeout_of(Some(timeout_s))?.unwrap_or_default();
        let rpc = self.rpc.clone();
        self.answer(
            py,
            async move { Ok(rpc.healthy(timeout).await) },
            |py, serving| Ok(serving.into_pyobject(py)?.to_owned().into_any().unbind()),
        )
    }
}

/// An awaitable's done-callback: a cancelled awaitable aborts its call's task.
#[pyclass(module = "router_core._router_core", frozen)]
struct CancelOnCancelled {
    task: AbortHandle,
}

#[pymethods]
impl CancelOnCancelled {
    fn __call__(&self, future: Bound<'_, PyAny>) -> PyResult<()> {
        if future.call_method0("cancelled")?.is_truthy()? {
            self.task.abort();
        }
        Ok(())
    }
}
