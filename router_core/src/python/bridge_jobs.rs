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
    decision_of, ops_response, PyDecideSpec, PyObservation, PyOpsCall, PySegmentEnd, Run,
};
use super::gil_off_worker::{off_worker, polling_with_gil};
use super::interpreter_exit::HandOver;
use super::request_verbs::PyRequestVerbs;
use crate::executor::RequestExec;
use crate::front::api_error::{ApiError, ShapedError};
use crate::front::bridge::{
    DecideSpec, Decision, Observation, OpsRequest, OpsResponse, Refused, SegmentEnd,
};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3_async_runtimes::TaskLocals;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

/// What the front waits for from a decision.
pub type DecideAnswer = Result<Decision<Run>, Refused>;
/// What the front waits for after a hand-off (None: the policy has nothing more).
pub type NextAnswer = Result<Option<Decision<Run>>, Refused>;

pub enum Job {
    /// Run the policy's decision (its verbs through the request's executor); the decision
    /// goes back on the channel.
    Decide(
        Box<DecideSpec>,
        Arc<RequestExec>,
        oneshot::Sender<DecideAnswer>,
    ),
    /// Stop a decision whose client went away (by the request's key).
    CancelDecision(String),
    /// A segment ended: the policy run's next decision comes back.
    NextSegment(
        Run,
        SegmentEnd,
        Arc<RequestExec>,
        oneshot::Sender<NextAnswer>,
    ),
    /// Close a policy run (the request ended).
    Close(Run),
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

/// Every crossing between the front's requests and the deciding side, by kind (counts, for
/// tests and benchmarks: a request a placement decides crosses twice, a verb twice more).
#[derive(Debug, Default)]
pub struct Crossings {
    /// R->P: a decision asked for (a request's, a segment's after a hand-off), a run closed.
    pub decide: AtomicU64,
    pub next_segment: AtomicU64,
    pub close: AtomicU64,
    /// P->R: a decision (or refusal) handed back.
    pub decision: AtomicU64,
    /// P->R a verb a policy awaits, called; R->P its answer.
    pub verb_call: AtomicU64,
    pub verb_answer: AtomicU64,
}

impl Crossings {
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("decide", read(&self.decide)),
            ("next_segment", read(&self.next_segment)),
            ("close", read(&self.close)),
            ("decision", read(&self.decision)),
            ("verb_call", read(&self.verb_call)),
            ("verb_answer", read(&self.verb_answer)),
        ]
    }
}

#[derive(Default)]
struct Pending {
    crossings: Arc<Crossings>,
    jobs: Mutex<Vec<Job>>,
    /// How placements went, for their observers: delivered before the next decision (the only
    /// time a policy reads what it learned) or when the deciding side asks.
    observations: Mutex<Vec<(Run, Observation)>>,
    /// A drain is scheduled on the loop (or running and not yet past taking the jobs).
    scheduled: AtomicBool,
    /// The owner shut down: no job runs any more.
    closed: AtomicBool,
}

impl Pending {
    fn take(&self) -> Vec<Job> {
        std::mem::take(&mut *self.jobs.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The queue and what drains it.
pub struct BridgeJobs {
    pending: Arc<Pending>,
    waker: Arc<LoopWaker>,
    /// The deciding side (what the jobs call).
    handler: PyObject,
    locals: TaskLocals,
}

/// Wakes the loop without the GIL: a byte on a socket pair whose reading end the loop watches
/// (`add_reader`), so the drain runs on the loop's next turn. Taking the GIL to call
/// `call_soon_threadsafe` instead made the waker wait for the loop thread to let go of it: a
/// loop busy in Python releases and retakes the GIL at every turn, and CPython's hand-over then
/// starves the waiting thread — 30 ms waits, the Python-policy path's p99 (docs/benchmarks.md,
/// "One executor").
struct LoopBell {
    ring: UnixStream,
    hear: UnixStream,
}

impl LoopBell {
    fn new() -> std::io::Result<Self> {
        let (ring, hear) = UnixStream::pair()?;
        ring.set_nonblocking(true)?;
        hear.set_nonblocking(true)?;
        Ok(LoopBell { ring, hear })
    }

    fn ring(&self) {
        // A full socket already wakes the loop: nothing is lost when the write would block.
        let _ = (&self.ring).write(&[1]);
    }

    /// Reads every byte rung so far (the loop calls the drainer while any is unread).
    fn quiet(&self) {
        let mut buf = [0_u8; 256];
        while matches!((&self.hear).read(&mut buf), Ok(n) if n > 0) {}
    }
}

/// Asks the loop to drain the queue.
struct LoopWaker {
    pending: Arc<Pending>,
    drainer: PyObject,
    locals: TaskLocals,
    /// The router's front rings (its requests wait on the loop); the in-process front and the
    /// upkeep clients hand the drain over with the GIL, off tokio's workers (gil_off_worker.rs).
    bell: Option<Arc<LoopBell>>,
}

impl LoopWaker {
    fn wake(self: &Arc<Self>) {
        if polling_with_gil() {
            // On the loop's own thread, polling a Rust future (the in-process front): the
            // drain joins the loop's ready queue at once, in the order the simulator's runs
            // rely on.
            return Python::with_gil(|py| self.schedule(py, "call_soon"));
        }
        if let Some(bell) = &self.bell {
            return bell.ring();
        }
        let waker = self.clone();
        off_worker(move || {
            let Some(_handing_over) = HandOver::begin() else {
                return; // the interpreter is exiting (interpreter_exit.rs)
            };
            Python::with_gil(|py| waker.schedule(py, "call_soon_threadsafe"));
        });
    }

    fn schedule(&self, py: Python<'_>, how: &str) {
        let event_loop = self.locals.event_loop(py);
        if let Err(err) = event_loop.call_method1(how, (self.drainer.bind(py),)) {
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
    }
}

/// How a queue's loop learns of jobs pushed by tokio's threads.
#[derive(Clone, Copy, PartialEq)]
pub enum Wake {
    /// A socket the loop watches: no GIL (the router's front, whose requests wait on it).
    Bell,
    /// `call_soon_threadsafe` with the GIL, taken off tokio's workers.
    WithGil,
}

impl BridgeJobs {
    pub fn new(
        py: Python<'_>,
        handler: PyObject,
        locals: TaskLocals,
        wake: Wake,
    ) -> PyResult<Self> {
        let pending = Arc::new(Pending::default());
        let bell = match wake {
            Wake::Bell => Some(Arc::new(LoopBell::new().map_err(|err| {
                PyRuntimeError::new_err(format!("cannot make the loop's wake-up socket: {err}"))
            })?)),
            Wake::WithGil => None,
        };
        let drainer = Py::new(
            py,
            JobDrainer {
                pending: pending.clone(),
                bell: bell.clone(),
                handler: handler.clone_ref(py),
                locals: locals.clone_ref(py),
            },
        )?
        .into_any();
        if let Some(bell) = &bell {
            // Registered on the loop's own thread (add_reader is not thread-safe); a job
            // pushed before then rings a bell the loop hears once it watches.
            let event_loop = locals.event_loop(py);
            event_loop.call_method1(
                "call_soon_threadsafe",
                (
                    event_loop.getattr("add_reader")?,
                    bell.hear.as_raw_fd(),
                    drainer.bind(py),
                ),
            )?;
        }
        let waker = Arc::new(LoopWaker {
            pending: pending.clone(),
            drainer,
            locals: locals.clone_ref(py),
            bell,
        });
        Ok(BridgeJobs {
            pending,
            waker,
            handler,
            locals,
        })
    }

    pub fn event_loop<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.locals.event_loop(py)
    }

    pub fn crossings(&self) -> &Crossings {
        &self.pending.crossings
    }

    /// Keeps `observation` for `observer` until the deciding side next decides (no hand-off).
    pub fn observe(&self, observer: Run, observation: Observation) {
        self.pending
            .observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((observer, observation));
    }

    /// Hands the observations kept so far to the deciding side (on its loop, with the GIL).
    pub fn deliver_observations(&self, py: Python<'_>) -> PyResult<()> {
        deliver(py, &self.pending, &self.handler)
    }

    /// Queues `job`; the first job of a batch wakes the loop (`LoopWaker`). After `close`, the
    /// job is dropped: the call waiting on it fails at once.
    pub fn push(&self, job: Job) {
        if self.pending.closed.load(Ordering::Acquire) {
            return;
        }
        let crossings = &self.pending.crossings;
        match &job {
            Job::Decide(..) => Crossings::count(&crossings.decide),
            Job::NextSegment(..) => Crossings::count(&crossings.next_segment),
            Job::Close(..) => Crossings::count(&crossings.close),
            _ => {}
        }
        self.pending
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(job);
        if self.pending.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        self.waker.wake();
    }

    /// The loop stops serving this queue (its owner shuts down): jobs queued and pushed from
    /// now on are dropped, so nothing waits on a loop that will not run them; the loop stops
    /// watching the bell.
    pub fn close(&self, py: Python<'_>) {
        self.pending.closed.store(true, Ordering::Release);
        drop(self.pending.take());
        let Some(bell) = &self.waker.bell else {
            return;
        };
        let event_loop = self.locals.event_loop(py);
        let unwatch = event_loop.getattr("remove_reader").and_then(|remove| {
            event_loop.call_method1("call_soon_threadsafe", (remove, bell.hear.as_raw_fd()))
        });
        // A closed loop watches nothing already.
        drop(unwatch);
    }
}

fn deliver(py: Python<'_>, pending: &Pending, handler: &PyObject) -> PyResult<()> {
    let observations = std::mem::take(
        &mut *pending
            .observations
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    if observations.is_empty() {
        return Ok(());
    }
    let mut batch = Vec::with_capacity(observations.len());
    for (observer, observation) in &observations {
        let observation = Py::new(py, PyObservation::from(observation))?;
        batch.push((observer.clone_ref(py), observation));
    }
    handler.bind(py).call_method1("observed", (batch,))?;
    Ok(())
}

/// Called on the loop: runs every queued job.
#[pyclass(module = "router_core._router_core", frozen)]
struct JobDrainer {
    pending: Arc<Pending>,
    bell: Option<Arc<LoopBell>>,
    handler: PyObject,
    locals: TaskLocals,
}

#[pymethods]
impl JobDrainer {
    fn __call__(&self, py: Python<'_>) {
        // Heard before clearing, cleared before taking: a job pushed after the take rings for
        // the next drain.
        if let Some(bell) = &self.bell {
            bell.quiet();
        }
        self.pending.scheduled.store(false, Ordering::Release);
        for job in self.pending.take() {
            if let Err(err) = self.run(py, job) {
                err.print(py);
            }
        }
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
            Job::Decide(spec, exec, reply) => {
                deliver(py, &self.pending, &self.handler)?;
                let spec = Py::new(py, PyDecideSpec::from(*spec))?.into_any();
                let crossings = self.pending.crossings.clone();
                let verbs = Py::new(py, PyRequestVerbs::new(exec, crossings))?.into_any();
                let started = self.start(py, "decide", PyTuple::new(py, [spec, verbs])?);
                self.reply_when_done(py, started, Waiting::Decide(reply))
            }
            Job::NextSegment(run, end, exec, reply) => {
                deliver(py, &self.pending, &self.handler)?;
                let end = Py::new(py, PySegmentEnd::from(end))?.into_any();
                let crossings = self.pending.crossings.clone();
                let verbs = Py::new(py, PyRequestVerbs::new(exec, crossings))?.into_any();
                let args = PyTuple::new(py, [run.clone_ref(py), end, verbs])?;
                let started = self.start(py, "next_segment", args);
                self.reply_when_done(py, started, Waiting::Next(reply))
            }
            Job::Close(run) => self.call(py, "close", (run.clone_ref(py),)),
            Job::Ops(request, reply) => {
                let call = Py::new(py, PyOpsCall::from(*request))?;
                let started = self.start(py, "ops", PyTuple::new(py, [call])?);
                self.reply_when_done(py, started, Waiting::Ops(reply))
            }
            Job::CancelDecision(key) => self.call(py, "cancel_decision", (key,)),
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
                waiting.answer(py, Err(err), &self.pending.crossings);
                return Ok(());
            }
        };
        let on_done = Py::new(
            py,
            TaskDone {
                waiting: Mutex::new(Some(waiting)),
                crossings: self.pending.crossings.clone(),
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
    Decide(oneshot::Sender<DecideAnswer>),
    Next(oneshot::Sender<NextAnswer>),
    Ops(oneshot::Sender<OpsResponse>),
}

impl Waiting {
    /// Converts the answer (on the loop, holding the GIL) and sends it. The front always waits
    /// for it, so a failed send has nobody to tell.
    fn answer(self, py: Python<'_>, answer: PyResult<Bound<'_, PyAny>>, crossings: &Crossings) {
        if !matches!(self, Waiting::Ops(_)) {
            Crossings::count(&crossings.decision);
        }
        match self {
            Waiting::Decide(reply) => {
                let decided = match decision_of(py, answer, "decide") {
                    Ok(Ok(Some(decision))) => Ok(decision),
                    Ok(Ok(None)) => Err(Refused::Shaped(bridge_failed("decide returned None"))),
                    Ok(Err(refused)) => Err(refused),
                    Err(err) => Err(Refused::Shaped(bridge_failed(err))),
                };
                let _ = reply.send(decided);
            }
            Waiting::Next(reply) => {
                let next = decision_of(py, answer, "next_segment")
                    .unwrap_or_else(|err| Err(Refused::Shaped(bridge_failed(err))));
                let _ = reply.send(next);
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
    crossings: Arc<Crossings>,
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
            let py = task.py();
            waiting.answer(py, task.call_method0("result"), &self.crossings);
        }
    }
}
