//! The per-request calls into the policy bridge (admit, close) and the results of chunk reads
//! Python awaits, queued by the front's tokio threads without the GIL and run by the router's
//! asyncio loop in batches.
//!
//! Calling into Python from a tokio thread takes the GIL, and the loop thread has to hand it
//! over (a futex wake-up each time): a profile of a Python policy at c=32 had the loop thread
//! spending 16% of its time in that hand-off alone, about six times per request. Here a tokio
//! thread only pushes the job and, when the queue was empty, asks the loop once to drain it;
//! the loop builds the Python arguments, starts the coroutines and converts the answers itself
//! (it holds the GIL already), so a burst of requests costs one hand-off.

use super::front::{admit_failed, admitted, chunk_to_py, spec_dict};
use crate::engine_rpc::CallError;
use crate::front::bridge::{AdmitOutcome, AdmitSpec, RequestEnd};
use crate::rpc::pb;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_async_runtimes::TaskLocals;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

pub enum Job {
    /// Run the policy's admission; its outcome goes back on the channel.
    Admit(Box<AdmitSpec>, oneshot::Sender<AdmitOutcome<PyObject>>),
    /// End a request on the deciding side.
    Close(PyObject, RequestEnd),
    /// A chunk read for Python (GenerateCall.next_chunk): resolves its asyncio future.
    Chunk(PyObject, Result<Option<pb::GenerateChunk>, CallError>),
}

#[derive(Default)]
struct Pending {
    jobs: Mutex<Vec<Job>>,
    /// A drain is scheduled on the loop (or running and not yet past taking the jobs).
    scheduled: AtomicBool,
}

impl Pending {
    fn take(&self) -> Vec<Job> {
        std::mem::take(&mut *self.jobs.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The queue and what drains it.
pub struct BridgeJobs {
    pending: Arc<Pending>,
    drainer: PyObject,
    locals: TaskLocals,
}

impl BridgeJobs {
    pub fn new(py: Python<'_>, handler: PyObject, locals: TaskLocals) -> PyResult<Self> {
        let pending = Arc::new(Pending::default());
        let drainer = Py::new(
            py,
            JobDrainer {
                pending: pending.clone(),
                handler,
                locals: locals.clone_ref(py),
            },
        )?
        .into_any();
        Ok(BridgeJobs {
            pending,
            drainer,
            locals,
        })
    }

    pub fn event_loop<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.locals.event_loop(py)
    }

    /// Queues `job`; the first job of a batch asks the loop to drain (the only GIL taken here).
    pub fn push(&self, job: Job) {
        self.pending
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(job);
        if self.pending.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        Python::with_gil(|py| {
            let scheduled = self
                .locals
                .event_loop(py)
                .call_method1("call_soon_threadsafe", (self.drainer.bind(py),));
            if let Err(err) = scheduled {
                // The loop is closed (shutdown): nothing will run the jobs; their senders drop
                // and the admissions end as failures.
                err.print(py);
                self.pending.scheduled.store(false, Ordering::Release);
                drop(self.pending.take());
            }
        });
    }
}

/// Called on the loop: runs every queued job.
#[pyclass(module = "router_core._router_core", frozen)]
struct JobDrainer {
    pending: Arc<Pending>,
    handler: PyObject,
    locals: TaskLocals,
}

#[pymethods]
impl JobDrainer {
    fn __call__(&self, py: Python<'_>) {
        // Cleared before taking: a job pushed after the take schedules the next drain.
        self.pending.scheduled.store(false, Ordering::Release);
        for job in self.pending.take() {
            match job {
                Job::Admit(spec, reply) => self.admit(py, &spec, reply),
                Job::Close(run, end) => {
                    if let Err(err) = self.close(py, run, &end) {
                        err.print(py);
                    }
                }
                Job::Chunk(future, read) => {
                    if let Err(err) = resolve(py, future.bind(py), read) {
                        err.print(py);
                    }
                }
            }
        }
    }
}

impl JobDrainer {
    /// `handler.<method>(*args)` as a task on the loop, in the bridge's context.
    fn start<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        args: Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let coroutine = self.handler.bind(py).call_method1(method, args)?;
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("context", self.locals.context(py))?;
        self.locals
            .event_loop(py)
            .call_method("create_task", (coroutine,), Some(&kwargs))
    }

    fn admit(
        &self,
        py: Python<'_>,
        spec: &AdmitSpec,
        reply: oneshot::Sender<AdmitOutcome<PyObject>>,
    ) {
        let started =
            spec_dict(py, spec).and_then(|spec| self.start(py, "admit", PyTuple::new(py, [spec])?));
        let task = match started {
            Ok(task) => task,
            Err(err) => {
                let _ = reply.send(admit_failed(py, err));
                return;
            }
        };
        let on_done = AdmitReply {
            reply: Mutex::new(Some(reply)),
        };
        let added = Py::new(py, on_done)
            .and_then(|on_done| task.call_method1("add_done_callback", (on_done,)));
        if let Err(err) = added {
            err.print(py);
        }
    }

    fn close(&self, py: Python<'_>, run: PyObject, end: &RequestEnd) -> PyResult<()> {
        let args = (
            run,
            end.status,
            end.completion_tokens,
            end.delivered,
            end.since_start.as_secs_f64(),
            end.since_first_token.map(|d| d.as_secs_f64()),
        )
            .into_pyobject(py)?;
        let task = self.start(py, "close", args)?;
        task.call_method1("add_done_callback", (Py::new(py, CloseDone)?,))?;
        Ok(())
    }
}

/// Sets a chunk read's future (unless its reader gave up on it: cancelled).
fn resolve(
    py: Python<'_>,
    future: &Bound<'_, PyAny>,
    read: Result<Option<pb::GenerateChunk>, CallError>,
) -> PyResult<()> {
    if future.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    match chunk_to_py(py, read) {
        Ok(value) => future.call_method1("set_result", (value,))?,
        Err(err) => future.call_method1("set_exception", (err.value(py),))?,
    };
    Ok(())
}

/// An admission task's done-callback: converts its answer on the loop and sends it back.
#[pyclass(module = "router_core._router_core", frozen)]
struct AdmitReply {
    reply: Mutex<Option<oneshot::Sender<AdmitOutcome<PyObject>>>>,
}

#[pymethods]
impl AdmitReply {
    fn __call__(&self, py: Python<'_>, task: Bound<'_, PyAny>) {
        let outcome = task
            .call_method0("result")
            .and_then(|answer| admitted(&answer))
            .unwrap_or_else(|err| admit_failed(py, err));
        let reply = self
            .reply
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(reply) = reply {
            // The front always waits for the outcome (a client that went away included).
            let _ = reply.send(outcome);
        }
    }
}

/// A close task's done-callback: a close that raised is printed (it has nobody to tell).
#[pyclass(module = "router_core._router_core", frozen)]
struct CloseDone;

#[pymethods]
impl CloseDone {
    fn __call__(&self, py: Python<'_>, task: Bound<'_, PyAny>) {
        if let Err(err) = task.call_method0("result") {
            err.print(py);
        }
    }
}
