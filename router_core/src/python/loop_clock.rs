//! The in-process front's clock: its asyncio loop's (`loop.time()`, timers by `call_later`). The
//! simulator's loop runs in virtual time, so a simulated request's TTFT, its timeouts and what
//! the closed loop observes of it are virtual seconds, as its engines' steps are. Timers are
//! scheduled when the wait starts (on the loop's thread, as the request task runs there) and
//! cancelled when it is given up.

use crate::front::bridge::BoxFuture;
use crate::front::clock::Clock;
use pyo3::prelude::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::oneshot;

pub struct LoopClock {
    event_loop: PyObject,
}

impl LoopClock {
    pub fn new(event_loop: PyObject) -> Self {
        LoopClock { event_loop }
    }
}

impl Clock for LoopClock {
    fn now(&self) -> f64 {
        Python::with_gil(|py| {
            self.event_loop
                .call_method0(py, "time")
                .and_then(|t| t.extract::<f64>(py))
                .unwrap_or(0.0)
        })
    }

    /// Now: an in-process request is made and prepared in one call, within one instant of the
    /// loop's time. (The process's clock has no part in a virtual time: subtracting what it
    /// measured would make a simulation's deadlines, and their order, differ run to run.)
    fn arrival_s(&self, _started: std::time::Instant) -> f64 {
        self.now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        let (fire, fired) = oneshot::channel();
        let handle = Python::with_gil(|py| -> PyResult<PyObject> {
            let timer = Py::new(
                py,
                FireTimer {
                    fire: Mutex::new(Some(fire)),
                },
            )?;
            self.event_loop
                .call_method1(py, "call_later", (duration.as_secs_f64(), timer))
        });
        match handle {
            Ok(handle) => Box::pin(Timer { fired, handle }),
            // The loop is closed: nothing will fire; the wait never ends (as a closed loop's).
            Err(_) => Box::pin(std::future::pending()),
        }
    }
}

/// A wait on the loop's timer; dropped before it fires, the timer is cancelled.
struct Timer {
    fired: oneshot::Receiver<()>,
    handle: PyObject,
}

impl Future for Timer {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.fired).poll(cx).map(|_| ())
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        Python::with_gil(|py| {
            let _ = self.handle.call_method0(py, "cancel");
        });
    }
}

#[pyclass(module = "router_core._router_core", frozen)]
struct FireTimer {
    fire: Mutex<Option<oneshot::Sender<()>>>,
}

#[pymethods]
impl FireTimer {
    fn __call__(&self) {
        if let Some(fire) = self
            .fire
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = fire.send(());
        }
    }
}
