//! Every call the front makes into the policy bridge, and the results of chunk reads Python
//! awaits, queued by the front's tokio threads without the GIL and run by the router's asyncio
//! loop in batches.
//!
//! Calling into Python from a tokio thread takes the GIL, and the loop thread has to hand it
//! over (a futex wake-up each time): a profile of a Python policy at c=32 had the loop thread
//! spending 16% of its time in that hand-off alone, about six times per request. Here a tokio
//! thread only pushes the job and, when the queue was empty, asks the loop once to drain it;
//! the loop builds the Python values (bridge_values.rs), starts the coroutines and converts the
//! answers itself (it holds the GIL already), so a burst of requests costs one hand-off.

use super::bridge_values::{
    admit_outcome, next_segment, ops_response, PyAdmitSpec, PyOpsCall, PyRequestEnd,
    PySegmentHandoff,
};
use super::interpreter_exit::HandOver;
use crate::front::api_error::{ApiError, ShapedError};
use crate::front::bridge::{AdmitOutcome, AdmitSpec, OpsRequest, OpsResponse, RequestEnd, Segment};
use crate::rpc::pb;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3_async_runtimes::TaskLocals;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

/// The deciding side's handle on one request: an `Arc` so that tokio threads can share it
/// without taking the GIL.
pub type Run = Arc<PyObject>;

/// What the front waits for after a hand-off.
pub type SegmentAnswer = Result<(Segment, pb::GenerateChunk), ShapedError>;

pub enum Job {
    /// Run the policy's admission; its outcome goes back on the channel.
    Admit(Box<AdmitSpec>, oneshot::Sender<AdmitOutcome<Run>>),
    /// Stop an admission whose client went away (by engine-side id).
    CancelAdmission(String),
    /// A segment handed off after these tokens: the deciding side's next segment comes back.
    NextSegment(Arc<PyObject>, Vec<u32>, oneshot::Sender<SegmentAnswer>),
    /// End a request on the deciding side.
    Close(Arc<PyObject>, RequestEnd),
    /// A route the deciding side answers.
    Ops(Box<OpsRequest>, oneshot::Sender<OpsResponse>),
    /// A fast-path engine failed before output: out of rotation, with this log line.
    EngineUnavailable(u32, String),
    Warn(String),
    /// An awaitable's answer for Python (a GenerateCall's chunk read, an engine call of
    /// engine_client.rs), converted on the loop: resolves its asyncio future.
    Answer(
        PyObject,
        Box<dyn FnOnce(Python<'_>) -> PyResult<PyObject> + Send>,
    ),
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
        let Some(_handing_over) = HandOver::begin() else {
            return; // the interpreter is exiting (interpreter_exit.rs)
        };
        Python::with_gil(|py| {
            let event_loop = self.locals.event_loop(py);
            let scheduled =
                event_loop.call_method1("call_soon_threadsafe", (self.drainer.bind(py),));
            if let Err(err) = scheduled {
                // The loop is closed (shutdown): nothing will run the jobs; their senders drop
                // and the calls waiting on them end as failures. An engine call still answering
                // then (a Stats poll, a KV event read) is no news.
                let closed = event_loop
                    .call_method0("is_closed")
                    .and_then(|c| c.is_truthy());
                if !matches!(closed, Ok(true)) {
                    err.print(py);
                }
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
            if let Err(err) = self.run(py, job) {
                err.print(py);
            }
        }
    }
}

/// The outcome of an admission that never reached the policy's answer.
pub fn admit_failed(err: impl std::fmt::Display) -> AdmitOutcome<Run> {
    AdmitOutcome {
        run: None,
        policy: String::new(),
        result: Err(bridge_failed(err)),
    }
}

/// A bridge call that raised or answered badly, as the client's 500.
pub fn bridge_failed(err: impl std::fmt::Display) -> ShapedError {
    ShapedError::from(&ApiError::internal(format!(
        "the policy bridge failed: {err}"
    )))
}

/// An ops call that raised or answered badly, as the client's 500.
pub fn ops_failed(err: impl std::fmt::Display) -> OpsResponse {
    let err = ApiError::internal(format!("the router's admin side failed: {err}"));
    OpsResponse {
        status: err.status,
        content_type: "application/json".into(),
        headers: Vec::new(),
        body: err.body_bytes(),
    }
}

impl JobDrainer {
    fn run(&self, py: Python<'_>, job: Job) -> PyResult<()> {
        match job {
            Job::Admit(spec, reply) => {
                let spec = Py::new(py, PyAdmitSpec::from(*spec))?;
                let started = self.start(py, "admit", PyTuple::new(py, [spec])?);
                self.reply_when_done(py, started, Waiting::Admit(reply))
            }
            Job::NextSegment(run, tokens, reply) => {
                let handoff = Py::new(py, PySegmentHandoff::new(tokens))?.into_any();
                let args = PyTuple::new(py, [run.clone_ref(py), handoff])?;
                let started = self.start(py, "next_segment", args);
                self.reply_when_done(py, started, Waiting::Segment(reply))
            }
            Job::Close(run, end) => {
                // No done-callback: close logs its own failures (one crossing fewer).
                let end = Py::new(py, PyRequestEnd::from(&end))?.into_any();
                self.start(py, "close", PyTuple::new(py, [run.clone_ref(py), end])?)?;
                Ok(())
            }
            Job::Ops(request, reply) => {
                let call = Py::new(py, PyOpsCall::from(*request))?;
                let started = self.start(py, "ops", PyTuple::new(py, [call])?);
                self.reply_when_done(py, started, Waiting::Ops(reply))
            }
            Job::CancelAdmission(id) => self.call(py, "cancel_admission", (id,)),
            Job::EngineUnavailable(num, message) => {
                self.call(py, "engine_unavailable", (num, message))
            }
            Job::Warn(message) => self.call(py, "warn", (message,)),
            Job::Answer(future, answer) => settle(future.bind(py), answer(py)),
        }
    }

    /// `handler.<method>(*args)`, a plain function, now.
    fn call<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        args: impl IntoPyObject<'py, Target = PyTuple>,
    ) -> PyResult<()> {
        self.handler.bind(py).call_method1(method, args)?;
        Ok(())
    }

    /// `handler.<method>(*args)` (a coroutine function) as a task on the loop, in the bridge's
    /// context.
    fn start<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        args: Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let coroutine = self.handler.bind(py).call_method1(method, args)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("context", self.locals.context(py))?;
        self.locals
            .event_loop(py)
            .call_method("create_task", (coroutine,), Some(&kwargs))
    }

    /// The task's answer goes to `waiting` when it is done; a task that could not start
    /// answers its failure at once.
    fn reply_when_done(
        &self,
        py: Python<'_>,
        started: PyResult<Bound<'_, PyAny>>,
        waiting: Waiting,
    ) -> PyResult<()> {
        let task = match started {
            Ok(task) => task,
            Err(err) => {
                waiting.answer(Err(err));
                return Ok(());
            }
        };
        let on_done = Py::new(
            py,
            TaskDone {
                waiting: Mutex::new(Some(waiting)),
            },
        )?;
        task.call_method1("add_done_callback", (on_done,))?;
        Ok(())
    }
}

/// Sets an awaited read's or call's future (unless its awaiter gave up on it: cancelled).
fn settle(future: &Bound<'_, PyAny>, answer: PyResult<PyObject>) -> PyResult<()> {
    if future.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    match answer {
        Ok(value) => future.call_method1("set_result", (value,))?,
        Err(err) => future.call_method1("set_exception", (err.value(future.py()),))?,
    };
    Ok(())
}

/// Who waits for a bridge task's answer, and how it takes it.
enum Waiting {
    Admit(oneshot::Sender<AdmitOutcome<Run>>),
    Segment(oneshot::Sender<SegmentAnswer>),
    Ops(oneshot::Sender<OpsResponse>),
}

impl Waiting {
    /// Converts the answer (on the loop, holding the GIL) and sends it. The front always waits
    /// for it, so a failed send has nobody to tell.
    fn answer(self, answer: PyResult<Bound<'_, PyAny>>) {
        match self {
            Waiting::Admit(reply) => {
                let outcome = answer.and_then(|answer| admit_outcome(&answer));
                let _ = reply.send(outcome.unwrap_or_else(admit_failed));
            }
            Waiting::Segment(reply) => {
                let segment = answer.and_then(|answer| next_segment(&answer));
                let _ = reply.send(segment.unwrap_or_else(|err| Err(bridge_failed(err))));
            }
            Waiting::Ops(reply) => {
                let response = answer.and_then(|answer| ops_response(&answer));
                let _ = reply.send(response.unwrap_or_else(ops_failed));
            }
        }
    }
}

/// A bridge task's done-callback: converts its answer on the loop and sends it back.
#[pyclass(module = "router_core._router_core", frozen)]
struct TaskDone {
    waiting: Mutex<Option<Waiting>>,
}

#[pymethods]
impl TaskDone {
    fn __call__(&self, task: Bound<'_, PyAny>) {
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(waiting) = waiting {
            waiting.answer(task.call_method0("result"));
        }
    }
}
