//! `Front`: what the HTTP front holds while it serves — configuration, the tokenizer and
//! detokenizer vocabulary, the engines it can stream from, the router core it scores with, the
//! active fast-path policy (None: every request goes to the deciding side), the in-flight count
//! and the fast path's finished-request records (the deciding side turns them into its metrics
//! and outcome window). The deciding side keeps these mirrors current (engines added/removed,
//! the core rebuilt, a policy switch).

use super::admission::AdmissionGate;
use super::bridge::PolicyBridge;
use super::fast_path::FastPolicy;
use super::openai_request::RequestLimits;
use super::served_models::{ServedModel, ServedModels};
use crate::detok::DetokenizerVocab;
use crate::engine_rpc::EngineRpc;
use crate::router::{lock, RouterCore};
use crate::tokenize::RouterTokenizer;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

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

/// An engine the front can stream from.
pub struct FrontEngine {
    pub rpc: EngineRpc,
    /// Fast-path requests with work on this engine right now (a drain waits for them).
    pub fast_active: AtomicU64,
}

/// A fast-path request that ended: what the deciding side records for it — its metrics and
/// the outcome window the adaptive policies read (pyrouter/fast_path.py drains these; requests
/// the Python policies ran are recorded there directly).
#[derive(Debug, Clone, PartialEq)]
pub struct FastRecord {
    pub ended: Instant,
    /// The served model it asked for.
    pub model: String,
    pub policy: String,
    /// The route's pattern ("dp", "cache_aware"); None when no engine took the request.
    pub pattern: Option<&'static str>,
    /// The engine that served it (router_core id); None as for `pattern`.
    pub engine: Option<u32>,
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
    engines: RwLock<HashMap<u32, Arc<FrontEngine>>>,
    core: RwLock<Option<Arc<RouterCore>>>,
    /// Each model's fast-path policy, by model name (absent: its requests go to the bridge).
    fast: RwLock<HashMap<String, Arc<FastPolicy>>>,
    records: Mutex<VecDeque<FastRecord>>,
    records_dropped: AtomicU64,
    /// The router drains: new requests go to the deciding side, which refuses them.
    draining: AtomicBool,
    /// The drain's grace is over: requests still running end with an error now.
    ending: tokio::sync::watch::Sender<bool>,
    /// Where requests wait while every engine is saturated (front/admission.rs).
    pub admission: Arc<AdmissionGate>,
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
            engines: RwLock::new(HashMap::new()),
            core: RwLock::new(None),
            fast: RwLock::new(HashMap::new()),
            records: Mutex::new(VecDeque::new()),
            records_dropped: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            ending: tokio::sync::watch::channel(false).0,
            admission: Arc::default(),
        }
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

    pub fn set_engine(&self, num: u32, rpc: EngineRpc) {
        let engine = Arc::new(FrontEngine {
            rpc,
            fast_active: AtomicU64::new(0),
        });
        write(&self.engines).insert(num, engine);
    }

    pub fn remove_engine(&self, num: u32) {
        write(&self.engines).remove(&num);
    }

    pub fn engine(&self, num: u32) -> Option<Arc<FrontEngine>> {
        read(&self.engines).get(&num).cloned()
    }

    /// Fast-path requests with work on engine `num`.
    pub fn fast_active(&self, num: u32) -> u64 {
        self.engine(num)
            .map_or(0, |e| e.fast_active.load(Ordering::Acquire))
    }

    pub fn set_core(&self, core: Arc<RouterCore>) {
        *write(&self.core) = Some(core);
    }

    pub fn core(&self) -> Option<Arc<RouterCore>> {
        read(&self.core).clone()
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

    /// The fast-path policy for a new request of `model`: none while the router drains (the
    /// deciding side answers those with its 503 `shutting_down`).
    pub fn fast_policy(&self, model: &str) -> Option<Arc<FastPolicy>> {
        if self.draining.load(Ordering::Acquire) {
            return None;
        }
        read(&self.fast).get(model).cloned()
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

    pub fn push_record(&self, record: FastRecord) {
        let mut records = lock(&self.records);
        if records.len() == MAX_RECORDS {
            records.pop_front();
            self.records_dropped.fetch_add(1, Ordering::Relaxed);
        }
        records.push_back(record);
    }

    /// The fast path's finished requests since the last drain, oldest first, and how many were
    /// dropped unread (ever).
    pub fn drain_records(&self) -> (Vec<FastRecord>, u64) {
        let records = lock(&self.records).drain(..).collect();
        (records, self.records_dropped.load(Ordering::Relaxed))
    }
}

/// Resolves once `end_requests` was called (at once if it already was).
pub async fn ended(ending: &mut tokio::sync::watch::Receiver<bool>) {
    // An error means the sender is gone with the front: nothing ends this way then.
    if ending.wait_for(|ended| *ended).await.is_err() {
        std::future::pending::<()>().await;
    }
}
