//! `InProcessFront` for Python: the router's HTTP front with no listener, for tests and the
//! simulator. A request goes in as the body a client would POST and runs through the same
//! parsing, admission, request task and executor as on the socket (front/in_process.rs), with
//! the same Python bridge (pyrouter/runtime/bridge.py) and the same Rust built-ins; engine
//! doubles stand behind the executor's engine interface (python/engine_double.rs).
//!
//! Nothing here runs on tokio's threads: the caller polls the request task, the response's
//! head and its body from the asyncio loop (switchyard_sim/fake/in_process.py), and every wake-up
//! comes back to that loop. So a run is as deterministic as its loop, and the simulator's
//! virtual clock never moves while the front still has work to do.

use super::bridge_jobs::{BridgeJobs, Wake};
use super::detok::PyDetokenizerVocab;
use super::engine_client::PyEngineRpcClient;
use super::engine_double::EngineDouble;
use super::front::{
    copy_context, crossings, drain_records, migrate, set_fast_policy, PyBridge, PyRequestRecord,
};
use super::gil_off_worker::PollingWithGil;
use super::loop_clock::LoopClock;
use super::pollable::{PyPendingCall, PyWake};
use super::router::PyRouterCore;
use super::tokenize::PyRouterTokenizer;
use super::tracing::PyRouterTracer;
use crate::front::admission::AdmissionGate;
use crate::front::generation::TaskOutcome;
use crate::front::in_process::{start_in_process, TaskFuture};
use crate::front::openai_request::RequestKind;
use crate::front::{Front, FrontConfig};
use crate::otel::RouterTracer;
use axum::body::BodyDataStream;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;
use futures_util::Stream;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3_async_runtimes::TaskLocals;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::oneshot;

#[pyclass(name = "InProcessFront", module = "router_core._router_core", frozen)]
pub struct PyInProcessFront {
    front: Arc<Front<PyBridge>>,
    /// Where its requests' spans go (None: the process's router tracer, as the HTTP front's).
    tracer: Option<Arc<RouterTracer>>,
}

#[pymethods]
impl PyInProcessFront {
    /// Call from a coroutine on the loop that will drive its requests: `bridge`'s coroutines
    /// run there.
    #[new]
    #[pyo3(signature = (bridge, tokenizer, vocab, *, served_model, max_context,
                        max_inflight = 4096, default_temperature = 1.0, default_top_p = 1.0,
                        first_chunk_timeout_s = 300.0, tracer = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        bridge: PyObject,
        tokenizer: PyRef<'_, PyRouterTokenizer>,
        vocab: PyRef<'_, PyDetokenizerVocab>,
        served_model: String,
        max_context: u64,
        max_inflight: u64,
        default_temperature: f64,
        default_top_p: f64,
        first_chunk_timeout_s: f64,
        tracer: Option<PyRef<'_, PyRouterTracer>>,
    ) -> PyResult<Self> {
        let locals = TaskLocals::with_running_loop(py)?.copy_context(py)?;
        let first_chunk_timeout = Duration::try_from_secs_f64(first_chunk_timeout_s)
            .map_err(|_| PyValueError::new_err("first_chunk_timeout_s must be >= 0"))?;
        let config = FrontConfig {
            served_model,
            max_context,
            max_inflight,
            api_keys: Vec::new(),
            default_temperature,
            default_top_p,
            first_chunk_timeout,
            max_body_bytes: usize::MAX,
            body_timeout: Duration::MAX,
            idle_timeout: Duration::MAX,
        };
        let clock = LoopClock::new(locals.event_loop(py).unbind());
        let front = Front::new(
            config,
            tokenizer.shared(),
            vocab.shared(),
            PyBridge {
                jobs: Arc::new(BridgeJobs::new(py, bridge, locals, Wake::WithGil)?),
            },
            pyo3_async_runtimes::tokio::get_runtime().handle().clone(),
            0,
        )
        .with_clock(Arc::new(clock));
        Ok(PyInProcessFront {
            front: Arc::new(front),
            tracer: tracer.map(|tracer| tracer.shared()),
        })
    }

    /// Starts a request: `kind` "completion" or "chat", the JSON body, the client's headers.
    #[pyo3(signature = (kind, body, headers = Vec::new()))]
    fn request(
        &self,
        kind: &str,
        body: &[u8],
        headers: Vec<(String, String)>,
    ) -> PyResult<PyInProcessRequest> {
        let kind = match kind {
            "completion" => RequestKind::Completion,
            "chat" => RequestKind::Chat,
            _ => return Err(PyValueError::new_err(format!("no request kind {kind:?}"))),
        };
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|err| PyValueError::new_err(format!("header {name:?}: {err}")))?;
            let value = HeaderValue::from_str(&value)
                .map_err(|err| PyValueError::new_err(format!("header value {value:?}: {err}")))?;
            map.insert(name, value);
        }
        let _runtime = self.front.runtime.enter();
        let started = start_in_process(
            self.front.clone(),
            kind,
            body,
            &map,
            "127.0.0.1",
            self.tracer.clone(),
        );
        Ok(PyInProcessRequest {
            runtime: self.front.runtime.clone(),
            engine_request_id: started.engine_request_id,
            task: Mutex::new(started.task),
            head: Mutex::new(Some(started.head)),
            body: Mutex::new(None),
            outcome: started.outcome,
        })
    }

    /// Engine `num` is reached through `client` (the router's gRPC client of a real engine).
    fn set_engine(&self, num: u32, client: PyRef<'_, PyEngineRpcClient>) {
        self.front.fleet.set_engine(
            num,
            Arc::new(client.rpc().clone()),
            client.address().to_owned(),
        );
    }

    /// Engine `num` is the in-process double `double` (its address `address`).
    fn set_engine_double(&self, num: u32, double: PyObject, address: String) {
        self.front
            .fleet
            .set_engine(num, Arc::new(EngineDouble::new(double)), address);
    }

    fn remove_engine(&self, num: u32) {
        self.front.fleet.remove_engine(num);
    }

    /// As RouterFront.set_fast_policy.
    #[pyo3(signature = (name, weights = None, model = None))]
    fn set_fast_policy(
        &self,
        name: Option<&str>,
        weights: Option<(f64, f64, f64, f64)>,
        model: Option<&str>,
    ) -> PyResult<()> {
        set_fast_policy(&self.front, name, weights, model)
    }

    /// As RouterFront.set_session_affinity.
    fn set_session_affinity(&self, load_bound: f64, from_user: bool) -> PyResult<()> {
        let settings = crate::session_affinity::SessionSettings::new(load_bound, from_user)?;
        self.front.sessions.set_settings(settings);
        Ok(())
    }

    /// As RouterFront.drain_records.
    fn drain_records(&self, py: Python<'_>) -> PyResult<(Vec<PyRequestRecord>, u64)> {
        drain_records(py, &self.front)
    }

    /// As RouterFront.deliver_observations.
    fn deliver_observations(&self, py: Python<'_>) -> PyResult<()> {
        self.front.bridge.jobs.deliver_observations(py)
    }

    /// As RouterFront.migrate.
    fn migrate(&self, request_id: String, target: u32) -> PyPendingCall {
        migrate(self.front.clone(), request_id, target)
    }

    /// As RouterFront.copy_context.
    fn copy_context(&self, tokens: Vec<u32>, source: u32, target: u32) -> PyPendingCall {
        copy_context(&self.front, tokens, source, target)
    }

    /// Crossings between the requests and the deciding side so far, by kind: "decide",
    /// "next_segment", "close" (to Python), "decision" (back), "verb_call" and "verb_answer".
    fn crossings(&self) -> HashMap<&'static str, u64> {
        crossings(&self.front)
    }

    /// The retry budget's bounds: `per_request` retries of one request at most, and a
    /// router-wide bucket of `reserve` retries refilled by `ratio` per admitted request.
    #[pyo3(signature = (per_request = 2, ratio = 0.2, reserve = 100.0))]
    fn set_retry_budget(&self, per_request: u32, ratio: f64, reserve: f64) {
        self.front.budget.configure(per_request, ratio, reserve);
    }

    /// As RouterFront.engine_active.
    fn engine_active(&self, num: u32) -> u64 {
        self.front.fleet.active(num)
    }

    /// Requests in flight right now.
    #[getter]
    fn inflight(&self) -> u64 {
        self.front.inflight()
    }

    /// The router core whose engine table the admission gate reads (as RouterFront.set_core;
    /// none: the gate never finds the engines saturated).
    fn set_core(&self, core: PyRef<'_, PyRouterCore>) {
        self.front.fleet.set_core(core.core.clone());
    }
}

impl PyInProcessFront {
    pub(super) fn admission(&self) -> Arc<AdmissionGate> {
        self.front.admission.clone()
    }
}

/// A response's status and headers.
type Head = (u16, Vec<(String, String)>);

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One request: its task, its response's head and body, each polled by the caller with a wake
/// callable; each poll answers (ready, value).
#[pyclass(name = "InProcessRequest", module = "router_core._router_core", frozen)]
pub struct PyInProcessRequest {
    runtime: tokio::runtime::Handle,
    engine_request_id: String,
    task: Mutex<Option<TaskFuture>>,
    head: Mutex<Option<oneshot::Receiver<Response>>>,
    body: Mutex<Option<BodyDataStream>>,
    outcome: Arc<Mutex<TaskOutcome>>,
}

impl PyInProcessRequest {
    fn poll_with<T>(
        &self,
        py: Python<'_>,
        wake: PyObject,
        poll: impl FnOnce(&mut Context<'_>) -> T,
    ) -> T {
        let _runtime = self.runtime.enter();
        let _with_gil = PollingWithGil::begin(py);
        let waker = Waker::from(Arc::new(PyWake(wake)));
        poll(&mut Context::from_waker(&waker))
    }
}

#[pymethods]
impl PyInProcessRequest {
    /// The id engines see for the request's first attempt.
    #[getter]
    fn engine_request_id(&self) -> &str {
        &self.engine_request_id
    }

    /// Runs the request task as far as it can go now: True once it has ended (clean-up
    /// included, but for the bridge's close, which runs as a task on the loop).
    fn poll_task(&self, py: Python<'_>, wake: PyObject) -> bool {
        let mut task = locked(&self.task);
        let Some(future) = task.as_mut() else {
            return true;
        };
        let done = self.poll_with(py, wake, |cx| future.as_mut().poll(cx).is_ready());
        if done {
            *task = None;
        }
        done
    }

    /// (ready, (status, headers)): the response's head, once the task has sent it.
    fn poll_head(&self, py: Python<'_>, wake: PyObject) -> PyResult<(bool, Option<Head>)> {
        let mut head = locked(&self.head);
        let Some(receiver) = head.as_mut() else {
            return Err(PyRuntimeError::new_err(
                "the head was taken, or the client left",
            ));
        };
        let polled = self.poll_with(py, wake, |cx| Pin::new(receiver).poll(cx));
        let response = match polled {
            Poll::Pending => return Ok((false, None)),
            Poll::Ready(Err(_)) => {
                return Err(PyRuntimeError::new_err(
                    "the request ended without a response",
                ))
            }
            Poll::Ready(Ok(response)) => response,
        };
        *head = None;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        *locked(&self.body) = Some(response.into_body().into_data_stream());
        Ok((true, Some((status, headers))))
    }

    /// (ready, bytes): the body's next bytes; None at its end.
    fn poll_body<'py>(
        &self,
        py: Python<'py>,
        wake: PyObject,
    ) -> PyResult<(bool, Option<Bound<'py, PyBytes>>)> {
        let mut body = locked(&self.body);
        let Some(stream) = body.as_mut() else {
            return Ok((true, None));
        };
        let polled = self.poll_with(py, wake, |cx| Pin::new(stream).poll_next(cx));
        match polled {
            Poll::Pending => Ok((false, None)),
            Poll::Ready(None) => {
                *body = None;
                Ok((true, None))
            }
            Poll::Ready(Some(Ok(bytes))) => Ok((true, Some(PyBytes::new(py, &bytes)))),
            Poll::Ready(Some(Err(err))) => Err(PyRuntimeError::new_err(err.to_string())),
        }
    }

    /// How the request ran, once its task has ended: (verbs as (verb, engine id), route,
    /// policy, segments, its last attempt's engine-side id).
    #[allow(clippy::type_complexity)]
    fn outcome(&self) -> (Vec<(String, String)>, String, String, u32, String) {
        let o = locked(&self.outcome).clone();
        (o.verbs, o.route, o.policy, o.segments, o.engine_request_id)
    }

    /// The client goes away: the response is dropped (the task sees it at its next step).
    fn disconnect(&self) {
        *locked(&self.head) = None;
        *locked(&self.body) = None;
    }
}
