//! `EngineRpcClient` for Python: the router's one gRPC client for one engine
//! (crate::engine_rpc::EngineRpc), its calls as asyncio awaitables. The router dials each
//! engine once, here; the HTTP front streams from the same client (`attach_to`), and the
//! policies' verbs, the membership's health / Stats / ModelInfo / KV event upkeep and Configure
//! go through it too (pyrouter/engines/rust_client.py).
//!
//! An awaitable crosses into Rust once (the call starts on tokio) and back once: the answer is
//! queued through the bridge's job queue (bridge_jobs.rs) and converted on the loop, so the
//! tokio side never takes the GIL. The verbs a policy awaits answer typed values made from the
//! message tonic decoded (verb_results.rs: PrepRecvResult, RemoteSendResult); the upkeep calls
//! answer the serialized response message (Python reads it with the generated protobuf class);
//! a failed call raises EngineCallError with the gRPC status code's name and the details.
//! Cancelling the awaitable cancels the call.

use super::bridge_jobs::{BridgeJobs, Job};
use super::front::PyRouterFront;
use super::generate_call::{engine_call_error, PyGenerateCall};
use super::verb_results::{prep_recv_to_py, remote_send_to_py};
use crate::engine_rpc::{code_name, CallError, EngineRpc, EngineTls, KvEventsCall};
use crate::rpc::pb;
use prost::Message;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3_async_runtimes::TaskLocals;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::AbortHandle;
use tonic::Status;

/// Token ids as the proto carries them (int32); a value out of range is the caller's mistake.
fn proto_tokens(tokens: Vec<i64>) -> PyResult<Vec<i32>> {
    tokens
        .into_iter()
        .map(|t| {
            i32::try_from(t)
                .map_err(|_| PyValueError::new_err(format!("token id {t} is not int32")))
        })
        .collect()
}

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

/// A failed call or read as Python sees it.
fn call_error(py: Python<'_>, err: &CallError) -> PyErr {
    match err {
        CallError::Rpc(status) => engine_call_error(py, code_name(status.code()), status.message()),
        CallError::Cancelled => engine_call_error(py, "CANCELLED", "the call was cancelled"),
        CallError::Busy => PyRuntimeError::new_err("two readers of one engine stream at once"),
    }
}

/// The serialized message, for Python's generated class to read.
fn encoded<M: Message>(py: Python<'_>, message: &M) -> PyResult<PyObject> {
    Ok(PyBytes::new(py, &message.encode_to_vec())
        .into_any()
        .unbind())
}

/// Where calls run (tokio) and how their answers reach the loop (the job queue).
#[derive(Clone)]
struct Answers {
    jobs: Arc<BridgeJobs>,
    runtime: tokio::runtime::Handle,
}

impl Answers {
    /// `call` on tokio; its outcome, converted by `convert` on the loop, resolves the returned
    /// asyncio future. `cancellable`: cancelling that future aborts the call (not for a stream
    /// read, which cut short would leave its stream mid-read).
    fn start<'py, T, F>(
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
                jobs: Arc::new(BridgeJobs::new(py, py.None(), locals)?),
                runtime,
            },
            address: address.to_owned(),
            timeout_s,
        })
    }

    /// Engine `num` of `front` streams through this client (no second connection).
    fn attach_to(&self, front: PyRef<'_, PyRouterFront>, num: u32) {
        front.set_engine_rpc(num, self.rpc.clone());
    }

    /// PrepRecv: reserve KV pages for tokens[matched:end] (`end` < 0 counts from the end).
    /// Awaitable: a PrepRecvResult.
    #[pyo3(signature = (request_id, tokens, end = -1, lease_s = 0.0, metadata = Vec::new()))]
    fn prep_recv<'py>(
        &self,
        py: Python<'py>,
        request_id: String,
        tokens: Vec<i64>,
        end: i64,
        lease_s: f64,
        metadata: Vec<(String, String)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let message = pb::PrepRecvRequest {
            request_id,
            tokens: proto_tokens(tokens)?,
            end: proto_int("end", end)?,
            lease_s,
        };
        let rpc = self.rpc.clone();
        self.answer(
            py,
            async move { rpc.prep_recv(message, &metadata).await },
            prep_recv_to_py,
        )
    }

    /// RemoteSend: compute KV for tokens[begin:end] and push it into `kv_addr` (a reservation
    /// on the engine at `dst`). Awaitable: a RemoteSendResult.
    #[pyo3(signature = (request_id, tokens, kv_addr, dst, begin, end, transport = String::new(),
                        metadata = Vec::new(), timeout_s = None))]
    #[allow(clippy::too_many_arguments)]
    fn remote_send<'py>(
        &self,
        py: Python<'py>,
        request_id: String,
        tokens: Vec<i64>,
        kv_addr: Vec<u8>,
        dst: String,
        begin: i64,
        end: i64,
        transport: String,
        metadata: Vec<(String, String)>,
        timeout_s: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let message = pb::RemoteSendRequest {
            request_id,
            tokens: proto_tokens(tokens)?,
            kv_addr,
            dst,
            begin: proto_int("begin", begin)?,
            end: proto_int("end", end)?,
            transport,
        };
        let (rpc, timeout) = (self.rpc.clone(), timeout_of(timeout_s)?);
        self.answer(
            py,
            async move { rpc.remote_send(message, &metadata, timeout).await },
            remote_send_to_py,
        )
    }

    /// StartGenerate (a serialized StartGenerateRequest), started now; `metadata` is added to
    /// the call (the verb span's trace context when the request is traced).
    #[pyo3(signature = (request, metadata = Vec::new()))]
    fn start_generate(
        &self,
        request: &[u8],
        metadata: Vec<(String, String)>,
    ) -> PyResult<PyGenerateCall> {
        let message = pb::StartGenerateRequest::decode(request)
            .map_err(|err| PyValueError::new_err(format!("bad StartGenerateRequest: {err}")))?;
        let call = self
            .rpc
            .start_generate(message, &metadata, &self.answers.runtime);
        Ok(PyGenerateCall::new(call, self.answers.jobs.clone()))
    }

    /// Abort. Awaitable: True when the engine knew the request. `handoff`: a running
    /// generation ends with finish_reason "handoff" instead.
    #[pyo3(signature = (request_id, handoff = false))]
    fn abort<'py>(
        &self,
        py: Python<'py>,
        request_id: String,
        handoff: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let rpc = self.rpc.clone();
        self.answer(
            py,
            async move { rpc.abort(&request_id, handoff).await },
            |py, found| Ok(found.into_pyobject(py)?.to_owned().into_any().unbind()),
        )
    }

    /// Stats. Awaitable: the serialized StatsResponse.
    #[pyo3(signature = (timeout_s = None))]
    fn stats<'py>(&self, py: Python<'py>, timeout_s: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let (rpc, timeout) = (self.rpc.clone(), timeout_of(timeout_s)?);
        self.answer(py, async move { rpc.stats(timeout).await }, |py, answer| {
            encoded(py, &answer)
        })
    }

    /// ModelInfo. Awaitable: the serialized ModelInfoResponse.
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
            |py, answer| encoded(py, &answer),
        )
    }

    /// Configure (None: leave the setting as it is). Awaitable: the serialized
    /// ConfigureResponse; EngineCallError INVALID_ARGUMENT for a value out of range.
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
            |py, answer| encoded(py, &answer),
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

    /// KVEvents, opened now (endless until cancelled); with `snapshot` the first batch is the
    /// full set the engine holds.
    #[pyo3(signature = (snapshot = false))]
    fn kv_events(&self, snapshot: bool) -> PyKvEventStream {
        PyKvEventStream {
            call: self.rpc.kv_events(snapshot, &self.answers.runtime),
            answers: self.answers.clone(),
        }
    }
}

/// One KVEvents stream: `next_batch` until None (the engine ended it) or an error.
#[pyclass(name = "KvEventStream", module = "router_core._router_core", frozen)]
pub struct PyKvEventStream {
    call: Arc<KvEventsCall>,
    answers: Answers,
}

#[pymethods]
impl PyKvEventStream {
    /// Awaitable: the next serialized KVEventBatch, or None once the engine closed the stream;
    /// raises EngineCallError when the stream failed or was cancelled.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let call = self.call.clone();
        let read = async move { call.next().await };
        self.answers.start(
            py,
            read,
            |py, batch| match batch {
                Some(batch) => encoded(py, &batch),
                None => Ok(py.None()),
            },
            false,
        )
    }

    /// Ends the stream; True if it was open.
    fn cancel(&self) -> bool {
        self.call.cancel()
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
