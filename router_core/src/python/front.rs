//! `RouterFront` for Python: the Rust HTTP front (crate::front) serving on the
//! pyo3-async-runtimes tokio runtime, with the Python side (pyrouter/front_bridge.py) as its
//! `PolicyBridge`. The front calls the bridge on the router's asyncio loop once per request,
//! once per segment boundary and once at the end, always through the job queue
//! (bridge_jobs.rs) and with typed values (bridge_values.rs); tokens never reach Python, except
//! a segment's first chunk while the policy admits it (an `EngineChunk`, generate_call.rs).

use super::bridge_jobs::{admit_failed, bridge_failed, ops_failed, BridgeJobs, Job};
use super::router::PyRouterCore;
use crate::background_server::BackgroundServer;
use crate::detok::DetokenizerVocab;
use crate::engine_rpc::EngineRpc;
use crate::front::api_error::ShapedError;
use crate::front::bridge::{
    AdmitOutcome, AdmitSpec, BoxFuture, OpsRequest, OpsResponse, Plane, PolicyBridge, RequestEnd,
    Segment,
};
use crate::front::fast_path::{FastPolicy, FastPolicyKind};
use crate::front::served_models::ServedModel;
use crate::front::{start_front, FastRecord, Front, FrontConfig};
use crate::rpc::pb;
use crate::scoring::ScoreWeights;
use crate::session_affinity::SessionSettings;
use crate::tokenize::RouterTokenizer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// The Python side behind the front (pyrouter.front_bridge.FrontBridge): every call reaches it
/// through the job queue its loop drains (bridge_jobs.rs), so no tokio thread waits for the GIL
/// beyond the one wake-up per batch.
pub(super) struct PyBridge {
    pub(super) jobs: Arc<BridgeJobs>,
}

impl PolicyBridge for PyBridge {
    type Run = Arc<PyObject>;

    fn admit(&self, spec: AdmitSpec) -> BoxFuture<AdmitOutcome<Arc<PyObject>>> {
        let (reply, outcome) = oneshot::channel();
        self.jobs.push(Job::Admit(Box::new(spec), reply));
        Box::pin(async move {
            outcome
                .await
                .unwrap_or_else(|_| admit_failed("the router's loop is gone"))
        })
    }

    fn cancel_admission(&self, engine_request_id: &str) {
        self.jobs
            .push(Job::CancelAdmission(engine_request_id.to_owned()));
    }

    fn next_segment(
        &self,
        run: &Arc<PyObject>,
        segment_tokens: Vec<u32>,
    ) -> BoxFuture<Result<(Segment, pb::GenerateChunk), ShapedError>> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .push(Job::NextSegment(run.clone(), segment_tokens, reply));
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| Err(bridge_failed("the router's loop is gone")))
        })
    }

    fn close(&self, run: Arc<PyObject>, end: RequestEnd) -> BoxFuture<()> {
        self.jobs.push(Job::Close(run, end));
        Box::pin(std::future::ready(()))
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

/// A fast-path request that ended (crate::front::FastRecord, with its age instead of an
/// Instant).
#[pyclass(
    name = "FastRequestRecord",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyFastRecord {
    /// Seconds since it ended, when drained.
    age_s: f64,
    model: String,
    policy: String,
    pattern: Option<&'static str>,
    engine: Option<u32>,
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

impl From<FastRecord> for PyFastRecord {
    fn from(r: FastRecord) -> Self {
        PyFastRecord {
            age_s: r.ended.elapsed().as_secs_f64(),
            model: r.model,
            policy: r.policy,
            pattern: r.pattern,
            engine: r.engine,
            ok: r.ok,
            error_type: r.error_type,
            ttft_s: r.ttft_s,
            tpot_s: r.tpot_s,
            e2e_s: r.e2e_s,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            slo_ttft_ms: r.slo_ttft_ms,
            slo_tpot_ms: r.slo_tpot_ms,
        }
    }
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
    /// Engine `num` streams through `rpc` (the router's one client for it: engine_client.rs).
    pub(super) fn set_engine_rpc(&self, num: u32, rpc: EngineRpc) {
        let _runtime = self.front.runtime.enter();
        self.front.set_engine(num, rpc);
    }

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
                jobs: Arc::new(BridgeJobs::new(py, bridge, locals)?),
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

    fn remove_engine(&self, num: u32) {
        self.front.remove_engine(num);
    }

    /// The smallest context any engine accepts (0: not known yet).
    fn set_engine_max_context(&self, tokens: u64) {
        self.front.set_engine_max_context(tokens);
    }

    /// The router core the fast path scores with (the membership's; again when it is rebuilt).
    fn set_core(&self, core: PyRef<'_, PyRouterCore>) {
        self.front.set_core(core.core.clone());
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
        let policy = match name {
            None => None,
            Some(name) => {
                let weights = weights
                    .map(|(p, q, d, k)| ScoreWeights::new(p, q, d, k))
                    .transpose()?;
                let kind = FastPolicyKind::parse(name, weights).ok_or_else(|| {
                    PyValueError::new_err(format!("no fast path for policy {name:?}"))
                })?;
                Some(FastPolicy::new(kind, name))
            }
        };
        match model {
            Some(model) => self.front.set_model_fast_policy(model, policy),
            None => self.front.set_fast_policy(policy),
        }
        Ok(())
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

    /// What the fast path picks for `tokens` now: (engine, X-Switchyard-Route); a round_robin
    /// pick takes its turn. Raises when it would answer an error (no healthy engine) or when
    /// there is no fast path. For tests comparing it with the Python policies.
    fn choose_fast(&self, tokens: Vec<u32>) -> PyResult<(u32, String)> {
        let policy = self
            .front
            .fast_policy(&self.front.config.served_model)
            .ok_or_else(|| PyValueError::new_err("no fast-path policy is set"))?;
        let core = self
            .front
            .core()
            .ok_or_else(|| PyValueError::new_err("no router core is set"))?;
        let choice = policy
            .choose(&core, &tokens)
            .map_err(|err| PyRuntimeError::new_err(err.message))?;
        Ok((choice.engine, choice.route))
    }

    /// The policy the fast path runs now (None: the bridge decides every request).
    #[getter]
    fn fast_policy(&self) -> Option<String> {
        let model = &self.front.config.served_model;
        self.front.fast_policy(model).map(|p| p.name.clone())
    }

    /// The router drains: no fast path for new requests (the bridge refuses them).
    fn set_draining(&self, draining: bool) {
        self.front.set_draining(draining);
    }

    /// The drain's grace is over: requests still running end now with a 503 `shutting_down`
    /// (an error event and `[DONE]` once a stream has begun).
    fn end_requests(&self) {
        self.front.end_requests();
    }

    /// Fast-path requests still holding work on engine `num` (a drain waits for them).
    fn fast_active(&self, num: u32) -> u64 {
        self.front.fast_active(num)
    }

    /// The fast path's finished requests since the last call, oldest first, and how many were
    /// dropped unread since start.
    fn drain_fast_records(&self) -> (Vec<PyFastRecord>, u64) {
        let (records, dropped) = self.front.drain_records();
        (
            records.into_iter().map(PyFastRecord::from).collect(),
            dropped,
        )
    }

    /// Stops accepting, lets requests in flight finish for up to `grace_s`, then ends them.
    #[pyo3(signature = (grace_s = 1.0))]
    fn shutdown(&self, py: Python<'_>, grace_s: f64) -> PyResult<()> {
        let grace = duration("grace_s", grace_s)?;
        let servers = std::mem::take(&mut *self.servers.lock().unwrap_or_else(|p| p.into_inner()));
        py.allow_threads(move || -> crate::Result<()> {
            for mut server in servers {
                server.shutdown(grace)?;
            }
            Ok(())
        })?;
        Ok(())
    }
}
