//! `InProcessFront` for Python: the router's HTTP front with no listener, for tests and the
//! simulator. A request goes in as the body a client would POST and runs through the same
//! parsing, admission and request task as on the socket (front/in_process.rs), with the same
//! Python bridge (pyrouter/front_bridge.py); engine doubles stand behind the request task's
//! engine interface (python/double_call.rs).
//!
//! Nothing here runs on tokio's threads: the caller polls the request task, the response's
//! head and its body from the asyncio loop (switchyard_sim/fake/in_process.py), and every wake-up
//! comes back to that loop. So a run is as deterministic as its loop, and the simulator's
//! virtual clock never moves while the front still has work to do.

use super::bridge_jobs::BridgeJobs;
use super::detok::PyDetokenizerVocab;
use super::front::PyBridge;
use super::router::PyRouterCore;
use super::tokenize::PyRouterTokenizer;
use super::tracing::PyRouterTracer;
use crate::front::admission::AdmissionGate;
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
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tokio::sync::oneshot;

/// A Rust waker that calls a Python callable (the driver's: it schedules the next poll on the
/// loop, thread-safely).
struct PyWake(PyObject);

impl Wake for PyWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        Python::with_gil(|py| {
            if let Err(err) = self.0.call0(py) {
                err.print(py);
            }
        });
    }
}

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
        let front = Front::new(
            config,
            tokenizer.shared(),
            vocab.shared(),
            PyBridge {
                jobs: Arc::new(BridgeJobs::new(py, bridge, locals)?),
            },
            pyo3_async_runtimes::tokio::get_runtime().handle().clone(),
            0,
        );
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
        })
    }

    /// Requests in flight right now.
    #[getter]
    fn inflight(&self) -> u64 {
        self.front.inflight()
    }

    /// The router core whose engine table the admission gate reads (as RouterFront.set_core;
    /// none: the gate never finds the engines saturated).
    fn set_core(&self, core: PyRef<'_, PyRouterCore>) {
        self.front.set_core(core.core.clone());
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
}

impl PyInProcessRequest {
    fn poll_with<T>(&self, wake: PyObject, poll: impl FnOnce(&mut Context<'_>) -> T) -> T {
        let _runtime = self.runtime.enter();
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
    fn poll_task(&self, wake: PyObject) -> bool {
        let mut task = locked(&self.task);
        let Some(future) = task.as_mut() else {
            return true;
        };
        let done = self.poll_with(wake, |cx| future.as_mut().poll(cx).is_ready());
        if done {
            *task = None;
        }
        done
    }

    /// (ready, (status, headers)): the response's head, once the task has sent it.
    fn poll_head(&self, wake: PyObject) -> PyResult<(bool, Option<Head>)> {
        let mut head = locked(&self.head);
        let Some(receiver) = head.as_mut() else {
            return Err(PyRuntimeError::new_err(
                "the head was taken, or the client left",
            ));
        };
        let polled = self.poll_with(wake, |cx| Pin::new(receiver).poll(cx));
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
        let polled = self.poll_with(wake, |cx| Pin::new(stream).poll_next(cx));
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

    /// The client goes away: the response is dropped (the task sees it at its next step).
    fn disconnect(&self) {
        *locked(&self.head) = None;
        *locked(&self.body) = None;
    }
}
