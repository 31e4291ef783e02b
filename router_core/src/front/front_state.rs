//! `Front`: what the HTTP front holds while it serves — configuration, the tokenizer and
//! detokenizer vocabulary, the engines it can stream from, the router core it scores with, the
//! active fast-path policy (None: every request goes to the deciding side), the in-flight
//! count, per-request metrics and the fast path's finished-request outcomes. The deciding side
//! keeps these mirrors current (engines added/removed, the core rebuilt, a policy switch).

use super::bridge::PolicyBridge;
use super::fast_path::FastPolicy;
use super::openai_request::RequestLimits;
use super::request_metrics::RequestMetrics;
use crate::detok::DetokenizerVocab;
use crate::engine_rpc::EngineRpc;
use crate::router::{lock, RouterCore};
use crate::tokenize::RouterTokenizer;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
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
}

/// An engine the front can stream from.
pub struct FrontEngine {
    pub rpc: EngineRpc,
    /// Fast-path requests with work on this engine right now (a drain waits for them).
    pub fast_active: AtomicU64,
}

/// A fast-path request that ended, for the adaptive policies' feedback (pyrouter/outcomes.py
/// drains these when it is read).
#[derive(Debug, Clone, PartialEq)]
pub struct FastOutcome {
    pub ended: Instant,
    pub pattern: String,
    pub ok: bool,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub slo_ttft_ms: Option<f64>,
    pub slo_tpot_ms: Option<f64>,
}

/// As many as pyrouter's RecentOutcomes keeps.
const MAX_OUTCOMES: usize = 512;

pub struct Front<B: PolicyBridge> {
    pub config: FrontConfig,
    pub tokenizer: Arc<RouterTokenizer>,
    pub vocab: Arc<DetokenizerVocab>,
    pub bridge: B,
    pub runtime: tokio::runtime::Handle,
    pub metrics: RequestMetrics,
    /// Unix seconds at start (/v1/models' `created`).
    pub started_unix: u64,
    inflight: Arc<AtomicU64>,
    /// Smallest context any engine accepts; 0 = not known yet.
    engine_max_context: AtomicU64,
    engines: RwLock<HashMap<u32, Arc<FrontEngine>>>,
    core: RwLock<Option<Arc<RouterCore>>>,
    fast: RwLock<Option<Arc<FastPolicy>>>,
    outcomes: Mutex<VecDeque<FastOutcome>>,
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
        Front {
            config,
            tokenizer,
            vocab,
            bridge,
            runtime,
            metrics: RequestMetrics::default(),
            started_unix,
            inflight: Arc::new(AtomicU64::new(0)),
            engine_max_context: AtomicU64::new(0),
            engines: RwLock::new(HashMap::new()),
            core: RwLock::new(None),
            fast: RwLock::new(None),
            outcomes: Mutex::new(VecDeque::new()),
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

    /// The fast-path policy new requests get (None: the deciding side's policy runs).
    pub fn set_fast_policy(&self, policy: Option<FastPolicy>) {
        *write(&self.fast) = policy.map(Arc::new);
    }

    pub fn fast_policy(&self) -> Option<Arc<FastPolicy>> {
        read(&self.fast).clone()
    }

    pub fn push_outcome(&self, outcome: FastOutcome) {
        let mut outcomes = lock(&self.outcomes);
        if outcomes.len() == MAX_OUTCOMES {
            outcomes.pop_front();
        }
        outcomes.push_back(outcome);
    }

    /// The fast path's outcomes since the last drain, oldest first.
    pub fn drain_outcomes(&self) -> Vec<FastOutcome> {
        lock(&self.outcomes).drain(..).collect()
    }
}
