//! `RouterFront` for Python: the Rust HTTP front (crate::front) serving on the
//! pyo3-async-runtimes tokio runtime, with the Python side (pyrouter/runtime/bridge.py) as its
//! `PolicyBridge`. The front calls the bridge on the router's asyncio loop once per decision
//! (a request's, and a segment's after a hand-off), always through the job queue
//! (bridge_jobs.rs) and with typed values (bridge_values.rs, placements.rs); everything else of
//! a request — its verbs, chunks, retries and close — stays in Rust (crate::executor).

use super::bridge_jobs::{
    bridge_failed, ops_failed, BridgeJobs, DecideAnswer, Job, NextAnswer, Wake,
};
use super::bridge_values::Run;
use super::engine_client::PyEngineRpcClient;
use super::pollable::PyPendingCall;
use super::router::PyRouterCore;
use crate::background_server::BackgroundServer;
use crate::detok::DetokenizerVocab;
use crate::executor::carry_out::copy_context as copy_context_task;
use crate::executor::RequestExec;
use crate::front::bridge::{
    BoxFuture, DecideSpec, Observation, OpsRequest, OpsResponse, Plane, PolicyBridge, Refused,
    SegmentEnd,
};
use crate::front::fast_path::{FastPolicy, FastPolicyKind};
use crate::front::served_models::ServedModel;
use crate::front::{start_front, Front, FrontConfig, MigrationOutcome, RateRules, RequestRecord};
use crate::scoring::ScoreWeights;
use crate::session_affinity::SessionSettings;
use crate::tokenize::RouterTokenizer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_async_runtimes::TaskLocals;
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// The Python side behind the front (pyrouter.runtime.bridge.PolicyRuntime): every call reaches
/// it through the job queue its loop drains (bridge_jobs.rs), so no tokio thread waits for the
/// GIL beyond the one wake-up per batch.
pub(super) struct PyBridge {
    pub(super) jobs: Arc<BridgeJobs>,
}

fn loop_gone<T>() -> Result<T, Refused> {
    Err(Refused::Shaped(bridge_failed("the router's loop is gone")))
}

impl PolicyBridge for PyBridge {
    type Run = Run;

    fn decide(&self, spec: DecideSpec, exec: Arc<RequestExec>) -> BoxFuture<DecideAnswer> {
        let (reply, answer) = oneshot::channel();
        self.jobs.push(Job::Decide(Box::new(spec), exec, reply));
        Box::pin(async move { answer.await.unwrap_or_else(|_| loop_gone()) })
    }

    fn next_segment(
        &self,
        run: &Run,
        end: SegmentEnd,
        exec: Arc<RequestExec>,
    ) -> BoxFuture<NextAnswer> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .push(Job::NextSegment(run.clone(), end, exec, reply));
        Box::pin(async move { answer.await.unwrap_or_else(|_| loop_gone()) })
    }

    fn observe(&self, observer: &Run, observation: Observation) {
        self.jobs.observe(observer.clone(), observation);
    }

    fn close(&self, run: Run) {
        self.jobs.push(Job::Close(run));
    }

    fn cancel_decision(&self, key: &str) {
        self.jobs.push(Job::CancelDecision(key.to_owned()));
    }

    fn ops(&self, request: OpsRequest) -> BoxFuture<OpsResponse> {
        let (reply, answer) = oneshot::channel();
        self.jobs.push(Job::Ops(Box::new(request), reply));
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| ops_failed("the router's loop is gone"))
        })
    }

    fn engine_unavailable(&self, engine: u32, message: String) {
        self.jobs.push(Job::EngineUnavailable(engine, message));
    }

    fn warn(&self, message: String) {
        self.jobs.push(Job::Warn(message));
    }
}

fn socket_addr(host: &str, port: u16) -> PyResult<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .map_err(|err| PyValueError::new_err(format!("cannot resolve {host}:{port}: {err}")))?
        .next()
        .ok_or_else(|| PyValueError::new_err(format!("{host} resolves to no address")))
}

fn duration(name: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| PyValueError::new_err(format!("{name} must be >= 0, got {seconds}")))
}

fn positive(name: &str, seconds: f64) -> PyResult<Duration> {
    match duration(name, seconds)? {
        d if d.is_zero() => Err(PyValueError::new_err(format!("{name} must be > 0"))),
        d => Ok(d),
    }
}

/// One segment of a finished request: its engine, its tokens and the mean gap between them
/// (None below two tokens).
#[pyclass(
    name = "SegmentRecord",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PySegmentRecord {
    engine: u32,
    tokens: u64,
    gap_s: Option<f64>,
}

/// A request that ended (crate::front::RequestRecord, with its age instead of an Instant).
#[pyclass(
    name = "RequestRecord",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyRequestRecord {
    /// Seconds since it ended, when drained.
    age_s: f64,
    model: String,
    policy: String,
    pattern: String,
    segments: Vec<Py<PySegmentRecord>>,
    ok: bool,
    error_type: String,
    ttft_s: Option<f64>,
    tpot_s: Option<f64>,
    e2e_s: f64,
    prompt_tokens: u64,
    completion_tokens: u64,
    slo_ttft_ms: Option<f64>,
    slo_tpot_ms: Option<f64>,
}

fn record_to_py(py: Python<'_>, r: RequestRecord, now: f64) -> PyResult<PyRequestRecord> {
    let segments = r
        .segments
        .iter()
        .map(|s| {
            let gap_s = match (s.first_at, s.last_at) {
                (Some(first), Some(last)) if s.tokens > 1 => {
                    Some((last - first) / (s.tokens - 1) as f64)
                }
                _ => None,
            };
            Py::new(
                py,
                PySegmentRecord {
                    engine: s.engine,
                    tokens: s.tokens,
                    gap_s,
                },
            )
        })
        .collect::<PyResult<_>>()?;
    Ok(PyRequestRecord {
        age_s: (now - r.ended).max(0.0),
        model: r.model,
        policy: r.policy,
        pattern: r.pattern,
        segments,
        ok: r.ok,
        error_type: r.error_type,
        ttft_s: r.ttft_s,
        tpot_s: r.tpot_s,
        e2e_s: r.e2e_s,
        prompt_tokens: r.prompt_tokens,
        completion_tokens: r.completion_tokens,
        slo_ttft_ms: r.slo_ttft_ms,
        slo_tpot_ms: r.slo_tpot_ms,
    })
}

/// The front's finished requests since the last drain, and how many were dropped (ever).
pub(super) fn drain_records<B: PolicyBridge>(
    py: Python<'_>,
    front: &Front<B>,
) -> PyResult<(Vec<PyRequestRecord>, u64)> {
    let (records, dropped) = front.drain_records();
    let now = front.clock.now();
    let records = records
        .into_iter()
        .map(|r| record_to_py(py, r, now))
        .collect::<PyResult<_>>()?;
    Ok((records, dropped))
}

/// Crossings between the requests and the deciding side so far, by kind.
pub(super) fn crossings(front: &Front<PyBridge>) -> HashMap<&'static str, u64> {
    front
        .bridge
        .jobs
        .crossings()
        .snapshot()
        .into_iter()
        .collect()
}

/// (spent, refused, tokens) of the front's retry budget.
pub(super) fn retry_budget<B: PolicyBridge>(front: &Front<B>) -> (u64, u64, f64) {
    let state = front.budget.state();
    (state.spent, state.refused, state.tokens)
}

/// Copies the KV of `tokens` from engine `source` into engine `target`'s prefix cache (a
/// PendingCall answering {matched, copied, bytes_sent, transport}).
pub(super) fn copy_context<B: PolicyBridge>(
    front: &Front<B>,
    tokens: Vec<u32>,
    source: u32,
    target: u32,
) -> PyPendingCall {
    let (fleet, runtime) = (front.fleet.clone(), front.runtime.clone());
    let id = crate::front::engine_names::first_engine_request_id("migrate-");
    let copying = copy_context_task(fleet, runtime.clone(), tokens, source, target, id);
    PyPendingCall::new(runtime, async move {
        let copied = copying.await;
        Box::new(move |py: Python<'_>| -> PyResult<PyObject> {
            let copied = copied.map_err(|err| super::verb_values::verb_error(py, &err))?;
            let dict = PyDict::new(py);
            dict.set_item("matched", copied.matched)?;
            dict.set_item("copied", copied.copied)?;
            let (bytes, transport) = copied
                .sent
                .map_or((0, String::new()), |s| (s.bytes_sent, s.transport));
            dict.set_item("bytes_sent", bytes)?;
            dict.set_item("transport", transport)?;
            Ok(dict.into_any().unbind())
        }) as super::pollable::Answer
    })
}

/// The Rust built-in that decides new requests of `model` (default: the first model's):
/// "round_robin", "least_load", or "cache_aware" with its four weights; None: the bridge's
/// policy decides. A new value starts a fresh policy (turn 0).
pub(super) fn set_fast_policy<B: PolicyBridge>(
    front: &Front<B>,
    name: Option<&str>,
    weights: Option<(f64, f64, f64, f64)>,
    model: Option<&str>,
) -> PyResult<()> {
    let policy = match name {
        None => None,
        Some(name) => {
            let weights = weights
                .map(|(p, q, d, k)| ScoreWeights::new(p, q, d, k))
                .transpose()?;
            let kind = FastPolicyKind::parse(name, weights)
                .ok_or_else(|| PyValueError::new_err(format!("no Rust built-in named {name:?}")))?;
            Some(FastPolicy::new(kind, name))
        }
    };
    match model {
        Some(model) => front.set_model_fast_policy(model, policy),
        None => front.set_fast_policy(policy),
    }
    Ok(())
}

/// A live migration's outcome as admin routes answer it.
fn migration_to_py(py: Python<'_>, moved: MigrationOutcome) -> PyResult<PyObject> {
    let dict = PyDict::new(py);
    dict.set_item(
        "from",
        moved.from.map(crate::front::engine_names::engine_name),
    )?;
    dict.set_item("to", moved.to.map(crate::front::engine_names::engine_name))?;
    dict.set_item("outcome", moved.outcome)?;
    dict.set_item("moved_tokens", moved.moved_tokens)?;
    dict.set_item("error", moved.error)?;
    Ok(dict.into_any().unbind())
}

/// Moves the running request `request_id` to engine `target` (a PendingCall answering a dict:
/// from, to, outcome, moved_tokens, error).
pub(super) fn migrate<B: PolicyBridge>(
    front: Arc<Front<B>>,
    request_id: String,
    target: u32,
) -> PyPendingCall {
    let runtime = front.runtime.clone();
    PyPendingCall::new(runtime, async move {
        let moved = front.migrate(&request_id, target).await;
        Box::new(move |py: Python<'_>| match moved {
            Ok(moved) => migration_to_py(py, moved),
            Err(why) => Err(PyValueError::new_err(why)),
        }) as super::pollable::Answer
    })
}

/// A served model's tokenizer and detokenizer vocabulary, from its tokenizer state.
fn load_tokenizer(
    tokenizer_json: &str,
    chat_template: Option<&str>,
    bos_token_id: Option<u32>,
    eos_token_ids: Vec<u32>,
) -> crate::Result<(RouterTokenizer, DetokenizerVocab)> {
    let tokenizer =
        RouterTokenizer::new(tokenizer_json, chat_template, bos_token_id, eos_token_ids)?;
    tokenizer.max_token_bytes(); // worked out now, not on the first request
    Ok((
        tokenizer,
        DetokenizerVocab::from_tokenizer_json(tokenizer_json)?,
    ))
}

/// The router's HTTP front, serving from construction until `shutdown`.
#[pyclass(name = "RouterFront", module = "router_core._router_core", frozen)]
pub struct PyRouterFront {
    front: Arc<Front<PyBridge>>,
    /// The public listener, and the admin plane's when it has its own address.
    servers: Mutex<Vec<BackgroundServer>>,
    port: u16,
    admin_port: Option<u16>,
}

impl PyRouterFront {
    /// The front itself (for the binding's functions that read or set parts of it).
    pub(super) fn front(&self) -> &Front<PyBridge> {
        &self.front
    }
}

#[pymethods]
impl PyRouterFront {
    /// Call from a coroutine on the router's asyncio loop: `bridge`'s coroutines run there.
    #[new]
    #[pyo3(signature = (bridge, host, port, *, tokenizer_json, chat_template = None,
                        bos_token_id = None, eos_token_ids = Vec::new(), served_model,
                        max_context, max_inflight, api_keys = Vec::new(),
                        default_temperature = 1.0, default_top_p = 1.0,
                        first_chunk_timeout_s = 300.0, max_body_bytes = 64 << 20,
                        body_timeout_s = 30.0, idle_timeout_s = 30.0, admin_host = None,
                        admin_port = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        bridge: PyObject,
        host: &str,
        port: u16,
        tokenizer_json: &str,
        chat_template: Option<&str>,
        bos_token_id: Option<u32>,
        eos_token_ids: Vec<u32>,
        served_model: String,
        max_context: u64,
        max_inflight: u64,
        api_keys: Vec<String>,
        default_temperature: f64,
        default_top_p: f64,
        first_chunk_timeout_s: f64,
        max_body_bytes: usize,
        body_timeout_s: f64,
        idle_timeout_s: f64,
        admin_host: Option<&str>,
        admin_port: Option<u16>,
    ) -> PyResult<Self> {
        let locals = TaskLocals::with_running_loop(py)?.copy_context(py)?;
        let addr = socket_addr(host, port)?;
        let admin_addr = match admin_port {
            Some(admin_port) => Some(socket_addr(admin_host.unwrap_or("127.0.0.1"), admin_port)?),
            None => None,
        };
        let first_chunk_timeout = duration("first_chunk_timeout_s", first_chunk_timeout_s)?;
        let (tokenizer, vocab) = py.allow_threads(|| {
            load_tokenizer(tokenizer_json, chat_template, bos_token_id, eos_token_ids)
        })?;
        let config = FrontConfig {
            served_model,
            max_context,
            max_inflight,
            api_keys,
            default_temperature,
            default_top_p,
            first_chunk_timeout,
            max_body_bytes,
            body_timeout: positive("body_timeout_s", body_timeout_s)?,
            idle_timeout: positive("idle_timeout_s", idle_timeout_s)?,
        };
        let runtime = pyo3_async_runtimes::tokio::get_runtime().handle().clone();
        let started_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let front = Arc::new(Front::new(
            config,
            Arc::new(tokenizer),
            Arc::new(vocab),
            PyBridge {
                jobs: Arc::new(BridgeJobs::new(py, bridge, locals, Wake::Bell)?),
            },
            runtime.clone(),
            started_unix,
        ));
        let serving = front.clone();
        let servers = py.allow_threads(move || -> crate::Result<Vec<BackgroundServer>> {
            let mut servers = vec![start_front(serving.clone(), addr, Plane::Public, &runtime)?];
            if let Some(admin_addr) = admin_addr {
                servers.push(start_front(serving, admin_addr, Plane::Admin, &runtime)?);
            }
            Ok(servers)
        })?;
        Ok(PyRouterFront {
            front,
            port: servers[0].local_addr().port(),
            admin_port: servers.get(1).map(|s| s.local_addr().port()),
            servers: Mutex::new(servers),
        })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// The admin plane's port (None: the admin routes are on the public listener).
    #[getter]
    fn admin_port(&self) -> Option<u16> {
        self.admin_port
    }

    /// Requests in flight right now.
    #[getter]
    fn inflight(&self) -> u64 {
        self.front.inflight()
    }

    /// Session affinity's bound `c` (>= 1) and whether the body's `user` names a session.
    fn set_session_affinity(&self, load_bound: f64, from_user: bool) -> PyResult<()> {
        let settings = SessionSettings::new(load_bound, from_user)?;
        self.front.sessions.set_settings(settings);
        Ok(())
    }

    /// Engine `num` is reached through `client` (the router's one client for it).
    fn set_engine(&self, num: u32, client: PyRef<'_, PyEngineRpcClient>) {
        self.front.fleet.set_engine(
            num,
            Arc::new(client.rpc().clone()),
            client.address().to_owned(),
        );
    }

    fn remove_engine(&self, num: u32) {
        self.front.fleet.remove_engine(num);
    }

    /// The smallest context any engine accepts (0: not known yet).
    fn set_engine_max_context(&self, tokens: u64) {
        self.front.set_engine_max_context(tokens);
    }

    /// The router core the fast path scores with (the membership's; again when it is rebuilt).
    fn set_core(&self, core: PyRef<'_, PyRouterCore>) {
        self.front.fleet.set_core(core.core.clone());
    }

    /// Runs new requests under a pure-selection built-in in Rust, with no Python call
    /// ("round_robin", "least_load", or "cache_aware" with its four weights); None: every
    /// request goes to the bridge's policy. A new value starts a fresh policy (turn 0). With
    /// `model`, for that served model's requests only (default: the first model's).
    #[pyo3(signature = (name, weights = None, model = None))]
    fn set_fast_policy(
        &self,
        name: Option<&str>,
        weights: Option<(f64, f64, f64, f64)>,
        model: Option<&str>,
    ) -> PyResult<()> {
        set_fast_policy(&self.front, name, weights, model)
    }

    /// Serves one more model behind this front: requests naming `name` are tokenised with
    /// this tokenizer state (EngineTokenizer.to_state()'s keys) and go to its engines only.
    #[pyo3(signature = (name, *, tokenizer_json, chat_template = None, bos_token_id = None,
                        eos_token_ids = Vec::new()))]
    fn add_served_model(
        &self,
        py: Python<'_>,
        name: String,
        tokenizer_json: &str,
        chat_template: Option<&str>,
        bos_token_id: Option<u32>,
        eos_token_ids: Vec<u32>,
    ) -> PyResult<()> {
        let (tokenizer, vocab) = py.allow_threads(|| {
            load_tokenizer(tokenizer_json, chat_template, bos_token_id, eos_token_ids)
        })?;
        self.front
            .models
            .add(ServedModel {
                name,
                tokenizer: Arc::new(tokenizer),
                vocab: Arc::new(vocab),
            })
            .map_err(PyValueError::new_err)
    }

    /// The served models' ids, the default first (/v1/models lists them).
    #[getter]
    fn served_models(&self) -> Vec<String> {
        let models = self.front.models.list();
        models.iter().map(|m| m.name.clone()).collect()
    }

    /// Engine `num` serves `model` (its ModelInfo said so; None: forget it). With several
    /// models a request goes only to engines of its own.
    #[pyo3(signature = (num, model))]
    fn set_engine_model(&self, num: u32, model: Option<String>) {
        self.front.models.set_engine_model(num, model);
    }

    /// The Rust built-in deciding the first model's requests (None: the bridge's policy).
    #[getter]
    fn fast_policy(&self) -> Option<String> {
        let model = &self.front.config.served_model;
        self.front.fast_policy(model).map(|p| p.name.clone())
    }

    /// The router drains: new requests are refused (503 `shutting_down`).
    fn set_draining(&self, draining: bool) {
        self.front.set_draining(draining);
    }

    /// The drain's grace is over: requests still running end now with a 503 `shutting_down`
    /// (an error event and `[DONE]` once a stream has begun).
    fn end_requests(&self) {
        self.front.end_requests();
    }

    /// Requests with work on engine `num` right now (a drain waits for them).
    fn engine_active(&self, num: u32) -> u64 {
        self.front.fleet.active(num)
    }

    /// The requests finished since the last call, oldest first, and how many were dropped
    /// unread since start.
    fn drain_records(&self, py: Python<'_>) -> PyResult<(Vec<PyRequestRecord>, u64)> {
        drain_records(py, &self.front)
    }

    /// Hands the placements' observations kept so far to the bridge's `observed` now.
    fn deliver_observations(&self, py: Python<'_>) -> PyResult<()> {
        self.front.bridge.jobs.deliver_observations(py)
    }

    /// Per-caller limits: `rps` sustained requests per second (0: none), bursts of `burst`
    /// (0: max(1, rps)), `max_inflight` in flight (0: none).
    fn set_caller_limits(&self, rps: f64, burst: u32, max_inflight: u32) -> PyResult<()> {
        let rules = RateRules::new(rps, burst, max_inflight).map_err(PyValueError::new_err)?;
        self.front.caller_limits.set_rules(rules);
        Ok(())
    }

    /// Moves the running request the client calls `request_id` to engine `target`: a
    /// PendingCall answering {from, to, outcome, moved_tokens, error}.
    fn migrate(&self, request_id: String, target: u32) -> PyPendingCall {
        migrate(self.front.clone(), request_id, target)
    }

    /// Moves every request running on engine `from_num` to `target` (in the background); how
    /// many were told to move.
    fn evacuate(&self, from_num: u32, target: u32) -> usize {
        self.front.evacuate(from_num, target)
    }

    /// Copies the KV of `tokens` from engine `source` into engine `target`'s prefix cache: a
    /// PendingCall answering {matched, copied, bytes_sent, transport}.
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

    /// (spent, refused, tokens) of the retry budget.
    fn retry_budget(&self) -> (u64, u64, f64) {
        retry_budget(&self.front)
    }

    /// Stops accepting, lets requests in flight finish for up to `grace_s`, then ends them; the
    /// loop runs no bridge job after this (a request still waiting on one fails rather than
    /// waits on a loop about to close).
    #[pyo3(signature = (grace_s = 1.0))]
    fn shutdown(&self, py: Python<'_>, grace_s: f64) -> PyResult<()> {
        let grace = duration("grace_s", grace_s)?;
        let servers = std::mem::take(&mut *self.servers.lock().unwrap_or_else(|p| p.into_inner()));
        let stopped = py.allow_threads(move || -> crate::Result<()> {
            for mut server in servers {
                server.shutdown(grace)?;
            }
            Ok(())
        });
        self.front.bridge.jobs.close(py);
        stopped?;
        Ok(())
    }
}
