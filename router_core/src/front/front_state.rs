//! `Front`: what the HTTP front holds while it serves — configuration, the tokenizer and
//! detokenizer vocabulary, the executor's fleet (the engines it reaches and the router core it
//! accounts on), the active Rust built-in per model (None: the deciding side's policy decides),
//! the retry budget, the per-caller limits, the in-flight count, the running requests (admin
//! calls find them: a live migration) and the finished requests' records (the deciding side
//! turns them into its metrics and outcome window). The deciding side keeps these mirrors
//! current (engines added/removed, the core rebuilt, a policy switch).

use super::admission::AdmissionGate;
use super::bridge::PolicyBridge;
use super::caller_limits::CallerLimits;
use super::clock::{Clock, SystemClock};
use super::fast_path::FastPolicy;
use super::openai_request::RequestLimits;
use super::served_models::{ServedModel, ServedModels};
use crate::detok::DetokenizerVocab;
use crate::executor::{Fleet, RetryBudget};
use crate::router::{lock, RouterCore};
use crate::tokenize::RouterTokenizer;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

#[derive(Debug, Clone)]
pub struct FrontConfig {
    /// The id /v1/models lists (requests may also say "default").
    pub served_model: String,
    pub max_context: u64,
    pub max_inflight: u64,
    /// Bearer keys; empty = no auth.
    pub api_keys: Vec<String>,
    pub default_temperature: f64,
    pub default_top_p: f64,
    /// A segment's first chunk must come within this (the policy timeout).
    pub first_chunk_timeout: Duration,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// The whole body must arrive within this (else 408 and the connection closes).
    pub body_timeout: Duration,
    /// A connection must send a complete request head within this — the first one after it
    /// opens, and each next one after a response (idle keep-alive).
    pub idle_timeout: Duration,
}

/// One segment of a finished request: its engine and when its tokens arrived (the inter-token
/// latency metric reads it).
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentRecord {
    pub engine: u32,
    pub tokens: u64,
    /// When its first and last tokens arrived (the front's clock, seconds).
    pub first_at: Option<f64>,
    pub last_at: Option<f64>,
}

/// A request that ended: what the deciding side records for it — its metrics and the outcome
/// window the adaptive policies read (pyrouter drains these a few times a second).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// When it ended (the front's clock, seconds).
    pub ended: f64,
    /// The served model it asked for.
    pub model: String,
    pub policy: String,
    /// The pattern that ran ("dp", "pd", an adaptive policy's choice; "none": no engine took
    /// the request).
    pub pattern: String,
    /// Its segments, in order (none: no engine took it).
    pub segments: Vec<SegmentRecord>,
    pub ok: bool,
    /// Why it failed (the OpenAI error code, or "client_or_engine"); "" when ok.
    pub error_type: String,
    pub ttft_s: Option<f64>,
    /// Mean time per output token after the first (None below two tokens).
    pub tpot_s: Option<f64>,
    pub e2e_s: f64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub slo_ttft_ms: Option<f64>,
    pub slo_tpot_ms: Option<f64>,
}

/// What an admin call asks of a running request's task.
pub enum Control {
    /// Move the running segment to `target` (a live migration); answered when it has moved,
    /// failed, or the request ended first.
    Migrate {
        target: u32,
        reply: oneshot::Sender<MigrationOutcome>,
    },
}

/// How a live migration went.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationOutcome {
    pub from: Option<u32>,
    pub to: Option<u32>,
    /// "migrated", "finished" (the request ended, or reached its own boundary, first),
    /// "failed", or "refused" (with `error`).
    pub outcome: &'static str,
    /// Tokens of context whose KV crossed (prompt + generated so far).
    pub moved_tokens: u64,
    pub error: Option<String>,
}

impl MigrationOutcome {
    pub fn refused(error: &str) -> Self {
        MigrationOutcome {
            from: None,
            to: None,
            outcome: "refused",
            moved_tokens: 0,
            error: Some(error.to_owned()),
        }
    }

    pub fn ended(from: u32, to: u32, outcome: &'static str, moved_tokens: u64) -> Self {
        MigrationOutcome {
            from: Some(from),
            to: Some(to),
            outcome,
            moved_tokens,
            error: None,
        }
    }
}

/// No engine runs the request's segment (yet).
const NO_ENGINE: u32 = u32::MAX;

/// A running request as admin calls find it, registered while its task lives.
struct RunningEntry {
    request_id: String,
    /// The served model it asked for (it moves only to that model's engines).
    model: String,
    control: mpsc::UnboundedSender<Control>,
    /// The engine its running segment is on (NO_ENGINE: none).
    engine: Arc<AtomicU32>,
}

/// Keeps a request registered as running until dropped.
pub struct Running<B: PolicyBridge> {
    front: std::sync::Weak<Front<B>>,
    key: String,
    engine: Arc<AtomicU32>,
}

impl<B: PolicyBridge> Running<B> {
    /// Its running segment is on engine `num` now.
    pub fn on_engine(&self, num: u32) {
        self.engine.store(num, Ordering::Relaxed);
    }
}

impl<B: PolicyBridge> Drop for Running<B> {
    fn drop(&mut self) {
        if let Some(front) = self.front.upgrade() {
            lock(&front.running).remove(&self.key);
        }
    }
}

/// Records kept between two drains (the deciding side drains several times a second; past
/// this the oldest go, counted in `records_dropped`).
const MAX_RECORDS: usize = 65_536;

pub struct Front<B: PolicyBridge> {
    pub config: FrontConfig,
    pub tokenizer: Arc<RouterTokenizer>,
    pub vocab: Arc<DetokenizerVocab>,
    /// Every served model (the first is `config.served_model` with the tokenizer above).
    pub models: ServedModels,
    pub bridge: B,
    pub runtime: tokio::runtime::Handle,
    /// Unix seconds at start (/v1/models' `created`).
    pub started_unix: u64,
    /// Session affinity's settings and ring.
    pub sessions: super::fast_session::SessionAffinity,
    inflight: Arc<AtomicU64>,
    /// Smallest context any engine accepts; 0 = not known yet.
    engine_max_context: AtomicU64,
    /// The engines the executor reaches and the router core it accounts on.
    pub fleet: Arc<Fleet>,
    /// How many engine failures the router hides by retrying elsewhere.
    pub budget: RetryBudget,
    /// Per-caller rate and concurrency limits.
    pub caller_limits: CallerLimits,
    /// Requests running now, by key (their first engine-side id).
    running: Mutex<HashMap<String, RunningEntry>>,
    /// Each model's fast-path policy, by model name (absent: its requests go to the bridge).
    fast: RwLock<HashMap<String, Arc<FastPolicy>>>,
    records: Mutex<VecDeque<RequestRecord>>,
    records_dropped: AtomicU64,
    /// The router drains: new requests go to the deciding side, which refuses them.
    draining: AtomicBool,
    /// The drain's grace is over: requests still running end with an error now.
    ending: tokio::sync::watch::Sender<bool>,
    /// Where requests wait while every engine is saturated (front/admission.rs).
    pub admission: Arc<AdmissionGate>,
    /// What requests time themselves by and wait on.
    pub clock: Arc<dyn Clock>,
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Holds one unit of the in-flight count until dropped.
pub struct InflightGuard(Arc<AtomicU64>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<B: PolicyBridge> Front<B> {
    pub fn new(
        config: FrontConfig,
        tokenizer: Arc<RouterTokenizer>,
        vocab: Arc<DetokenizerVocab>,
        bridge: B,
        runtime: tokio::runtime::Handle,
        started_unix: u64,
    ) -> Self {
        let models = ServedModels::new(ServedModel {
            name: config.served_model.clone(),
            tokenizer: tokenizer.clone(),
            vocab: vocab.clone(),
        });
        Front {
            config,
            tokenizer,
            vocab,
            models,
            bridge,
            runtime,
            started_unix,
            sessions: Default::default(),
            inflight: Arc::new(AtomicU64::new(0)),
            engine_max_context: AtomicU64::new(0),
            fleet: Arc::default(),
            budget: RetryBudget::default(),
            caller_limits: CallerLimits::default(),
            running: Mutex::new(HashMap::new()),
            fast: RwLock::new(HashMap::new()),
            records: Mutex::new(VecDeque::new()),
            records_dropped: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            ending: tokio::sync::watch::channel(false).0,
            admission: Arc::default(),
            clock: Arc::new(SystemClock::default()),
        }
    }

    /// Requests time themselves by, and wait on, `clock` (the in-process front's event loop's).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn limits(&self) -> RequestLimits {
        let engines = self.engine_max_context.load(Ordering::Relaxed);
        let max_context = if engines == 0 {
            self.config.max_context
        } else {
            self.config.max_context.min(engines)
        };
        RequestLimits {
            served_model: self.config.served_model.clone(),
            max_context: i64::try_from(max_context).unwrap_or(i64::MAX),
            default_temperature: self.config.default_temperature,
            default_top_p: self.config.default_top_p,
        }
    }

    pub fn set_engine_max_context(&self, tokens: u64) {
        self.engine_max_context.store(tokens, Ordering::Relaxed);
    }

    pub fn inflight(&self) -> u64 {
        self.inflight.load(Ordering::Acquire)
    }

    /// Counts a request in flight, or says how many there are when the limit is reached.
    pub fn enter(&self) -> Result<InflightGuard, u64> {
        let before = self.inflight.fetch_add(1, Ordering::AcqRel);
        if before >= self.config.max_inflight {
            self.inflight.fetch_sub(1, Ordering::AcqRel);
            return Err(before);
        }
        Ok(InflightGuard(self.inflight.clone()))
    }

    pub fn core(&self) -> Option<Arc<RouterCore>> {
        self.fleet.core()
    }

    /// The fast-path policy the default model's new requests get (None: the deciding side's
    /// policy runs).
    pub fn set_fast_policy(&self, policy: Option<FastPolicy>) {
        self.set_model_fast_policy(&self.config.served_model, policy);
    }

    /// The fast-path policy `model`'s new requests get.
    pub fn set_model_fast_policy(&self, model: &str, policy: Option<FastPolicy>) {
        let mut fast = write(&self.fast);
        match policy {
            Some(policy) => fast.insert(model.to_owned(), Arc::new(policy)),
            None => fast.remove(model),
        };
    }

    /// The Rust built-in that decides `model`'s new requests (None: the deciding side's policy).
    pub fn fast_policy(&self, model: &str) -> Option<Arc<FastPolicy>> {
        read(&self.fast).get(model).cloned()
    }

    /// The router drains: new requests are refused (503 `shutting_down`).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn set_draining(&self, draining: bool) {
        self.draining.store(draining, Ordering::Release);
    }

    /// Ends every request still running: a stream with an error event and `[DONE]`, a request
    /// without output yet with a 503 (the drain's grace is over).
    pub fn end_requests(&self) {
        self.ending.send_replace(true);
    }

    /// What a request watches (once, for its whole life) to learn that `end_requests` was
    /// called: see [`ended`].
    pub fn watch_ending(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ending.subscribe()
    }

    pub fn push_record(&self, record: RequestRecord) {
        let mut records = lock(&self.records);
        if records.len() == MAX_RECORDS {
            records.pop_front();
            self.records_dropped.fetch_add(1, Ordering::Relaxed);
        }
        records.push_back(record);
    }

    /// The requests finished since the last drain, oldest first, and how many were dropped
    /// unread (ever).
    pub fn drain_records(&self) -> (Vec<RequestRecord>, u64) {
        let records = lock(&self.records).drain(..).collect();
        (records, self.records_dropped.load(Ordering::Relaxed))
    }

    /// Registers the request named `key` (client id `request_id`) as running until the guard
    /// drops; admin calls reach its task on the receiver.
    pub fn register(
        self: &Arc<Self>,
        key: &str,
        request_id: &str,
        model: &str,
    ) -> (Running<B>, mpsc::UnboundedReceiver<Control>) {
        let (control, receiver) = mpsc::unbounded_channel();
        let engine = Arc::new(AtomicU32::new(NO_ENGINE));
        let entry = RunningEntry {
            request_id: request_id.to_owned(),
            model: model.to_owned(),
            control,
            engine: engine.clone(),
        };
        lock(&self.running).insert(key.to_owned(), entry);
        let guard = Running {
            front: Arc::downgrade(self),
            key: key.to_owned(),
            engine,
        };
        (guard, receiver)
    }

    /// Moves every request whose running segment is on engine `from` to `target` (in the
    /// background); how many were told to move.
    pub fn evacuate(&self, from: u32, target: u32) -> usize {
        let running = lock(&self.running);
        running
            .values()
            .filter(|r| r.engine.load(Ordering::Relaxed) == from)
            .filter(|r| {
                let (reply, _) = oneshot::channel();
                r.control.send(Control::Migrate { target, reply }).is_ok()
            })
            .count()
    }

    /// Moves the running request the client calls `request_id` to engine `target`; answers once
    /// it has moved (or failed, or the request ended first). Err: no such request, or several
    /// share the id.
    pub async fn migrate(&self, request_id: &str, target: u32) -> Result<MigrationOutcome, String> {
        let control = {
            let running = lock(&self.running);
            let found: Vec<_> = running
                .values()
                .filter(|r| r.request_id == request_id)
                .collect();
            match found.as_slice() {
                [] => return Err(format!("no running request {request_id:?}")),
                [one] if !self.models.serves(target, &one.model) => {
                    return Ok(MigrationOutcome::refused(&format!(
                        "engine {} does not serve model {:?}, the request's",
                        super::engine_names::engine_name(target),
                        one.model
                    )))
                }
                [one] => one.control.clone(),
                several => {
                    return Err(format!(
                        "{} running requests share the id {request_id:?}",
                        several.len()
                    ))
                }
            }
        };
        // The task gone, or dropping the reply: the request ended before it could move.
        let finished = MigrationOutcome {
            to: Some(target),
            outcome: "finished",
            ..MigrationOutcome::refused("")
        };
        let finished = MigrationOutcome {
            error: None,
            ..finished
        };
        let (reply, answer) = oneshot::channel();
        if control.send(Control::Migrate { target, reply }).is_err() {
            return Ok(finished);
        }
        Ok(answer.await.unwrap_or(finished))
    }
}

/// Resolves once `end_requests` was called (at once if it already was).
pub async fn ended(ending: &mut tokio::sync::watch::Receiver<bool>) {
    // An error means the sender is gone with the front: nothing ends this way then.
    if ending.wait_for(|ended| *ended).await.is_err() {
        std::future::pending::<()>().await;
    }
}
