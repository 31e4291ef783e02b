//! The router's admission queue, as pure bookkeeping (no clock of its own, no async): requests
//! that arrive while every engine is saturated wait here, ordered by priority (lower first, the
//! body's `priority`) and, within a priority:
//!
//! - requests admitted by their predicted outcome (they carry an SLO: admission_outlook.rs)
//!   earliest deadline first, so that a burst does not make every request miss by a little;
//! - the others by weighted fair queuing over callers (API keys): start-time fair queuing,
//!   where a caller's request gets the start tag max(V, F) — V the start tag of the request last
//!   let through, F the caller's previous finish tag — and finishes at start + 1/weight. A caller
//!   sending many requests thus takes its weight's share of the turns, not the whole queue, and
//!   one that was idle starts at V, with no credit saved up.
//!
//! Within a priority the deadline-ordered requests go before the fair-shared ones: they are the
//! ones that can still miss.
//!
//! When the engines count as saturated is [`open_engines`] (over the engine table's rows) and
//! [`has_room`], or, for a request with an SLO, admission_outlook.rs; the async gate around this
//! (front/admission.rs) asks them when to let the head through. Times are seconds on the front's
//! clock (the simulator's virtual one in a simulation).

use crate::engine_table::EngineLoad;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The deployment's default SLO, for requests that bring none (`--slo-ttft-ms`,
/// `--slo-tpot-ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SloTargets {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
}

/// What the admission queue does; the defaults leave it off.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionSettings {
    /// Requests per open engine the router lets through before it is saturated, counted by the
    /// router itself (let through and not finished); 0 = no such limit.
    pub max_inflight_per_engine: u64,
    /// An engine is saturated once this many prefill tokens are queued on it (the table's
    /// `pending_prefill_tokens`: its latest Stats plus what the router sent since); 0 = no limit.
    pub max_queued_prefill_tokens: u64,
    /// Requests the queue holds; one more is refused (429).
    pub max_queue_len: usize,
    /// The longest a request waits before it is shed (503); its `slo.ttft_ms` shortens it.
    pub queue_timeout: Duration,
    /// Fair-share weight per API key (absent: `default_weight`).
    pub weights: HashMap<String, f64>,
    pub default_weight: f64,
    /// Admission by predicted outcome for requests with an SLO (admission_outlook.rs).
    pub predicted: bool,
    /// How far past its TTFT budget a prediction may go and still count as meeting it (0.1:
    /// 10% over). Larger admits more requests that may miss; negative sheds earlier.
    pub margin: f64,
    /// The SLO of requests that bring none.
    pub default_slo: SloTargets,
}

/// The default `margin`: the closed loop's corrected TTFT predictions are within about 10% past
/// capacity (docs/policies.md "Admission by predicted outcome").
pub const DEFAULT_MARGIN: f64 = 0.1;

impl Default for AdmissionSettings {
    fn default() -> Self {
        AdmissionSettings {
            max_inflight_per_engine: 0,
            max_queued_prefill_tokens: 0,
            max_queue_len: 1024,
            queue_timeout: Duration::from_secs(30),
            weights: HashMap::new(),
            default_weight: 1.0,
            predicted: true,
            margin: DEFAULT_MARGIN,
            default_slo: SloTargets::default(),
        }
    }
}

impl AdmissionSettings {
    /// With neither saturation limit set no engine is ever saturated by count: only requests
    /// admitted by their predicted outcome ever queue.
    pub fn enabled(&self) -> bool {
        self.max_inflight_per_engine > 0 || self.max_queued_prefill_tokens > 0
    }

    /// The TTFT objective a request is admitted against by prediction: its own, else the
    /// deployment's; None when predicted admission is off or the request has no TTFT objective
    /// (it is never shed by prediction).
    pub fn predicted_ttft_ms(&self, own: Option<f64>) -> Option<f64> {
        self.predicted
            .then(|| self.ttft_objective_ms(own))
            .flatten()
    }

    /// A request's TTFT objective: its own, else the deployment's; None when it has neither (or
    /// a meaningless one). Its engine calls carry what is left of it (executor/first_token_due.rs)
    /// whether or not admission by prediction is on.
    pub fn ttft_objective_ms(&self, own: Option<f64>) -> Option<f64> {
        own.or(self.default_slo.ttft_ms)
            .filter(|ms| ms.is_finite() && *ms > 0.0)
    }

    /// The fair-share weight of `caller` (a non-positive or non-finite weight counts as 1).
    pub fn weight(&self, caller: &str) -> f64 {
        let weight = self
            .weights
            .get(caller)
            .copied()
            .unwrap_or(self.default_weight);
        if weight.is_finite() && weight > 0.0 {
            weight
        } else {
            1.0
        }
    }
}

/// Engines that take work now: healthy, and under the queued-prefill-token limit when one is
/// set (the table's `pending_prefill_tokens`: the engine's latest Stats plus what the router
/// sent since). None when no engine is healthy (nothing to wait for: the request goes on and
/// meets the usual "no capacity" answer).
pub fn open_engines<'a>(
    rows: impl Iterator<Item = &'a EngineLoad>,
    settings: &AdmissionSettings,
) -> Option<u64> {
    let tokens = settings.max_queued_prefill_tokens;
    let mut healthy = false;
    let mut open = 0u64;
    for row in rows.filter(|row| row.healthy) {
        healthy = true;
        if tokens == 0 || row.pending_prefill_tokens() < tokens {
            open += 1;
        }
    }
    healthy.then_some(open)
}

/// Whether one more request may go to the engines: with a request limit, while the requests the
/// router let through and that have not finished (`running`) stay under the limit times the open
/// engines; with only the token limit, one request at a time per open engine until its tokens
/// are counted in the table (`in_transit`: let through, first token not yet back).
pub fn has_room(open: u64, running: u64, in_transit: u64, settings: &AdmissionSettings) -> bool {
    match settings.max_inflight_per_engine {
        _ if open == 0 => false,
        0 => in_transit < open,
        limit => running < limit.saturating_mul(open),
    }
}

/// How a request is ordered within its priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// By its deadline (admitted by predicted outcome).
    Deadline,
    /// By its caller's fair share.
    FairShare,
}

/// One queued request.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    pub ticket: u64,
    pub priority: i32,
    pub caller: String,
    /// Seconds on the front's clock.
    pub enqueued: f64,
    /// Shed (503) if still queued then.
    pub deadline: f64,
    pub order: Order,
    /// Prompt tokens it brings (the work it adds ahead of those behind it).
    pub tokens: u64,
}

/// The queue's order: priority, then deadline-ordered before fair-shared, then the deadline or
/// the start tag (a non-negative f64's bits order as the value does), then arrival.
type Key = (i32, u8, u64, u64);

#[derive(Debug, Default)]
pub struct AdmissionQueue {
    waiting: BTreeMap<Key, Queued>,
    keys: HashMap<u64, Key>,
    /// Virtual time: the start tag of the request last let through.
    virtual_time: f64,
    /// Each caller's latest finish tag (callers at or behind `virtual_time` are forgotten).
    finish: HashMap<String, f64>,
    next_ticket: u64,
}

impl AdmissionQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Queues a request (times in seconds on the front's clock); its ticket names it from now
    /// on.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        priority: i32,
        caller: &str,
        weight: f64,
        enqueued: f64,
        deadline: f64,
        order: Order,
        tokens: u64,
    ) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let key = match order {
            // Clock seconds are non-negative: their bits order as the values do.
            Order::Deadline => (priority, 0, deadline.max(0.0).to_bits(), ticket),
            Order::FairShare => {
                let previous = self.finish.get(caller).copied().unwrap_or(0.0);
                let start = self.virtual_time.max(previous);
                self.finish.insert(caller.to_owned(), start + 1.0 / weight);
                (priority, 1, start.to_bits(), ticket)
            }
        };
        self.keys.insert(ticket, key);
        self.waiting.insert(
            key,
            Queued {
                ticket,
                priority,
                caller: caller.to_owned(),
                enqueued,
                deadline,
                order,
                tokens,
            },
        );
        ticket
    }

    /// Prompt tokens of the requests queued ahead of `ticket` (0 when it is not queued).
    pub fn tokens_ahead(&self, ticket: u64) -> u64 {
        self.keys.get(&ticket).map_or(0, |key| {
            self.waiting.range(..*key).map(|(_, q)| q.tokens).sum()
        })
    }

    /// The request that goes next.
    pub fn head(&self) -> Option<&Queued> {
        self.waiting.values().next()
    }

    /// Lets the head through: virtual time moves to its start tag.
    pub fn pop_head(&mut self) -> Option<Queued> {
        let (key, queued) = self.waiting.pop_first()?;
        self.keys.remove(&queued.ticket);
        if queued.order == Order::FairShare {
            self.virtual_time = self.virtual_time.max(f64::from_bits(key.2));
        }
        if self.finish.len() > 2 * self.waiting.len() + 64 {
            let now = self.virtual_time;
            self.finish.retain(|_, finish| *finish > now);
        }
        Some(queued)
    }

    /// Takes a request out (shed, or its client went away); None when it is not queued.
    pub fn remove(&mut self, ticket: u64) -> Option<Queued> {
        let key = self.keys.remove(&ticket)?;
        self.waiting.remove(&key)
    }

    /// Queued requests per priority, lowest number first.
    pub fn len_by_priority(&self) -> Vec<(i32, usize)> {
        let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
        for queued in self.waiting.values() {
            *counts.entry(queued.priority).or_default() += 1;
        }
        counts.into_iter().collect()
    }
}

#[cfg(test)]
#[path = "admission_queue_tests.rs"]
mod tests;
