//! Rust futures Python drives from its asyncio loop: the caller polls with a wake callable (it
//! schedules the next poll on the loop, thread-safely) until the answer is ready. A policy's
//! verbs are awaited this way (pyrouter/runtime/pollable.py), as the in-process front's request
//! tasks are: the future runs on the loop's thread, within the tokio runtime's context, so an
//! engine double living on that loop is called in order, and the simulator's virtual clock
//! never moves while a verb is under way.

use super::gil_off_worker::{off_worker, PollingWithGil};
use super::interpreter_exit::HandOver;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// A Rust waker that calls a Python callable (off tokio's workers: gil_off_worker.rs).
pub struct PyWake(pub PyObject);

impl Wake for PyWake {
    fn wake(self: Arc<Self>) {
        off_worker(move || {
            let Some(_handing_over) = HandOver::begin() else {
                return; // the interpreter is exiting (interpreter_exit.rs)
            };
            Python::with_gil(|py| {
                if let Err(err) = self.0.call0(py) {
                    err.print(py);
                }
            });
        });
    }
}

/// Converts a ready answer into its Python value (with the GIL, on the loop).
pub type Answer = Box<dyn FnOnce(Python<'_>) -> PyResult<PyObject> + Send>;

type Pending = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// One call under way: poll it until it answers.
#[pyclass(name = "PendingCall", module = "router_core._router_core", frozen)]
pub struct PyPendingCall {
    runtime: tokio::runtime::Handle,
    future: Mutex<Option<Pending>>,
}

impl PyPendingCall {
    pub fn new(
        runtime: tokio::runtime::Handle,
        future: impl Future<Output = Answer> + Send + 'static,
    ) -> Self {
        PyPendingCall {
            runtime,
            future: Mutex::new(Some(Box::pin(future))),
        }
    }
}

#[pymethods]
impl PyPendingCall {
    /// (ready, answer): runs the call as far as it can go now; its answer (or its exception)
    /// once it is ready.
    fn poll(&self, py: Python<'_>, wake: PyObject) -> PyResult<(bool, Option<PyObject>)> {
        let mut slot = self.future.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(future) = slot.as_mut() else {
            return Err(PyRuntimeError::new_err("the call was already answered"));
        };
        let _runtime = self.runtime.enter();
        let _with_gil = PollingWithGil::begin(py);
        let waker = Waker::from(Arc::new(PyWake(wake)));
        match future.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Pending => Ok((false, None)),
            Poll::Ready(answer) => {
                *slot = None;
                drop(slot);
                answer(py).map(|value| (true, Some(value)))
            }
        }
    }
}
