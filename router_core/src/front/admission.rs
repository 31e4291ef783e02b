//! The admission gate in front of every generation request: while every engine is saturated
//! (crate::admission_queue's rule over the engine table), a request waits in the admission
//! queue — by priority, then fair shares over API keys — and is let through when an engine has
//! room; it is shed with 429 when the queue is full, and with 503 when its deadline passes
//! (its `slo.ttft_ms`, at most the queue timeout). Both carry a `Retry-After` from the waits
//! the queue has seen lately.
//!
//! Only the head of the queue polls (every few milliseconds, as engine Stats and completions
//! change the table); the others sleep until they become the head. A request let through holds
//! an [`AdmissionPermit`] until it ends: the gate counts the router's requests on the engines
//! itself (against `max_inflight_per_engine` per open engine), and those whose admission has not
//! ended (the table may not count their tokens yet, which the token limit reads).

use super::api_error::{ApiError, ShapedError};
use super::bridge::{Caller, PolicyBridge};
use super::front_state::Front;
use super::generation::{error_response, Prepared};
use crate::admission_queue::{has_room, open_engines, AdmissionQueue, AdmissionSettings};
use crate::router::{lock, RouterCore};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

/// How often the head of the queue looks at the engine table again.
const HEAD_POLL: Duration = Duration::from_millis(5);
/// Wait records kept between two drains (the metrics scrape drains them); past this the oldest
/// go.
const MAX_WAIT_RECORDS: usize = 65_536;
/// Weight of the newest wait in the running mean `Retry-After` is made from.
const WAIT_MEAN_WEIGHT: f64 = 0.2;

/// One request's time at the gate, for the metrics (`switchyard:admission_wait_seconds`).
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionWait {
    pub priority: i32,
    pub wait_s: f64,
    /// "admitted", "queue_full" (429), "timeout" (503: past its deadline) or "gone" (the client
    /// went away while it waited).
    pub outcome: &'static str,
}

/// What a shed request is answered.
#[derive(Debug)]
pub struct Shed {
    pub error: ApiError,
    /// Seconds, for the `Retry-After` header.
    pub retry_after_s: u64,
}

impl Shed {
    /// The OpenAI error body with `Retry-After`.
    pub fn response(&self, request_id: &str) -> Response {
        let mut resp = error_response(&ShapedError::from(&self.error), "none", request_id);
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(self.retry_after_s));
        resp
    }
}

/// Whose fair share a request counts against: its API key when keys are configured (the
/// front let it in, so its bearer token is one), else its client address.
pub fn caller_key(caller: &Caller, keyed: bool) -> String {
    let auth = caller.authorization.as_str();
    let token = match auth.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case("bearer ") => auth[7..].trim(),
        _ => "",
    };
    if keyed && !token.is_empty() {
        token.to_owned()
    } else {
        format!("addr:{}", caller.host)
    }
}

/// The gate for one parsed request: its priority, its caller's share, its TTFT objective.
async fn admit<B: PolicyBridge>(
    front: &Front<B>,
    prepared: &Prepared,
) -> Result<Option<AdmissionPermit>, Shed> {
    let caller = caller_key(&prepared.caller, !front.config.api_keys.is_empty());
    let request = &prepared.request;
    let slo_ttft = request
        .slo_ttft_ms
        .map(|ms| Duration::from_secs_f64(ms / 1e3));
    let priority = request.sampling.priority;
    (front.admission)
        .enter(front.core(), priority, &caller, slo_ttft, prepared.started)
        .await
}

/// Holds `prepared` at the gate until it may go, its permit in `prepared.admission`; None when
/// it ended there: shed (its error answered on `head`), or its client went away (`head`'s
/// receiver dropped: it leaves the queue, recorded "gone").
pub async fn wait_at_gate<B: PolicyBridge>(
    front: &Front<B>,
    mut prepared: Prepared,
    mut head: oneshot::Sender<Response>,
) -> Option<(Prepared, oneshot::Sender<Response>)> {
    let entered = tokio::select! {
        entered = admit(front, &prepared) => entered,
        () = head.closed() => return None,
    };
    match entered {
        Ok(permit) => {
            prepared.admission = permit;
            Some((prepared, head))
        }
        Err(shed) => {
            let _ = head.send(shed.response(&prepared.request_id));
            None
        }
    }
}

#[derive(Default)]
struct GateState {
    settings: AdmissionSettings,
    queue: AdmissionQueue,
    /// Requests let through whose admission has not ended (first token, or failure)...
    in_transit: u64,
    /// ...and those not finished yet.
    running: u64,
    wakers: HashMap<u64, Arc<Notify>>,
    waits: VecDeque<AdmissionWait>,
    mean_wait_s: f64,
}

impl GateState {
    fn record(&mut self, priority: i32, since: Instant, outcome: &'static str) {
        let wait_s = since.elapsed().as_secs_f64();
        if outcome == "admitted" {
            self.mean_wait_s += WAIT_MEAN_WEIGHT * (wait_s - self.mean_wait_s);
        }
        if self.waits.len() == MAX_WAIT_RECORDS {
            self.waits.pop_front();
        }
        self.waits.push_back(AdmissionWait {
            priority,
            wait_s,
            outcome,
        });
    }

    fn retry_after_s(&self) -> u64 {
        // Whole seconds, at least 1: what a request waited lately before it got through.
        self.mean_wait_s.ceil().clamp(1.0, 60.0) as u64
    }

    fn wake_head(&self) {
        if let Some(waker) = self.queue.head().and_then(|h| self.wakers.get(&h.ticket)) {
            waker.notify_one();
        }
    }

    /// Whether a request may go to the engines now (also when no engine is healthy: nothing to
    /// wait for).
    fn room(&self, core: Option<&RouterCore>) -> bool {
        let open = core.and_then(|core| open_engines(lock(&core.table).all(), &self.settings));
        open.is_none_or(|open| has_room(open, self.running, self.in_transit, &self.settings))
    }

    fn let_through(&mut self) {
        self.in_transit += 1;
        self.running += 1;
    }
}

#[derive(Default)]
pub struct AdmissionGate {
    state: Mutex<GateState>,
}

/// Held by a request let through until it ends; [`AdmissionPermit::admitted`] once its
/// admission ends (the table counts its tokens from then on).
pub struct AdmissionPermit {
    gate: Arc<AdmissionGate>,
    in_transit: bool,
}

impl AdmissionPermit {
    pub fn admitted(&mut self) {
        if std::mem::take(&mut self.in_transit) {
            let mut state = lock(&self.gate.state);
            state.in_transit = state.in_transit.saturating_sub(1);
            state.wake_head();
        }
    }
}

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        self.admitted();
        let mut state = lock(&self.gate.state);
        state.running = state.running.saturating_sub(1);
        state.wake_head();
    }
}

/// A queued request's place; leaving the queue any other way than through the gate (the client
/// went away) takes it out.
struct Ticket<'a> {
    gate: &'a AdmissionGate,
    ticket: u64,
    priority: i32,
    since: Instant,
    queued: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.queued {
            let mut state = lock(&self.gate.state);
            state.wakers.remove(&self.ticket);
            if state.queue.remove(self.ticket).is_some() {
                state.record(self.priority, self.since, "gone");
                state.wake_head();
            }
        }
    }
}

impl AdmissionGate {
    pub fn configure(&self, settings: AdmissionSettings) {
        let mut state = lock(&self.state);
        state.settings = settings;
        state.wake_head();
    }

    pub fn settings(&self) -> AdmissionSettings {
        lock(&self.state).settings.clone()
    }

    /// Queued requests per priority.
    pub fn queue_lengths(&self) -> Vec<(i32, usize)> {
        lock(&self.state).queue.len_by_priority()
    }

    /// The waits recorded since the last drain, oldest first.
    pub fn drain_waits(&self) -> Vec<AdmissionWait> {
        lock(&self.state).waits.drain(..).collect()
    }

    /// Waits until the request may go to the engines (at once when no engine is healthy: there
    /// is nothing to wait for). Ok(None): the gate is off; Ok(Some(permit)): hold it until the
    /// request's admission ends.
    pub async fn enter(
        self: &Arc<Self>,
        core: Option<Arc<RouterCore>>,
        priority: i32,
        caller: &str,
        slo_ttft: Option<Duration>,
        arrived: Instant,
    ) -> Result<Option<AdmissionPermit>, Shed> {
        let permit = || AdmissionPermit {
            gate: self.clone(),
            in_transit: true,
        };
        let now = Instant::now();
        let (ticket, waker, deadline) = {
            let mut state = lock(&self.state);
            if !state.settings.enabled() {
                return Ok(None);
            }
            if state.queue.is_empty() && state.room(core.as_deref()) {
                state.let_through();
                state.record(priority, now, "admitted");
                return Ok(Some(permit()));
            }
            if state.queue.len() >= state.settings.max_queue_len {
                state.record(priority, now, "queue_full");
                return Err(Shed {
                    error: ApiError::busy(format!(
                        "every engine is saturated and the admission queue is full ({} \
                         requests)",
                        state.settings.max_queue_len
                    ))
                    .with_code("queue_full"),
                    retry_after_s: state.retry_after_s(),
                });
            }
            let timeout = slo_ttft.map_or(state.settings.queue_timeout, |slo| {
                slo.min(state.settings.queue_timeout)
            });
            let weight = state.settings.weight(caller);
            let deadline = arrived + timeout;
            let ticket = state.queue.push(priority, caller, weight, now, deadline);
            let waker = Arc::new(Notify::new());
            state.wakers.insert(ticket, waker.clone());
            (ticket, waker, deadline)
        };
        let mut place = Ticket {
            gate: self,
            ticket,
            priority,
            since: now,
            queued: true,
        };
        loop {
            let is_head = {
                let mut state = lock(&self.state);
                let is_head = state.queue.head().is_some_and(|h| h.ticket == ticket);
                if is_head && state.room(core.as_deref()) {
                    state.queue.pop_head();
                    state.wakers.remove(&ticket);
                    state.let_through();
                    state.record(priority, now, "admitted");
                    state.wake_head();
                    place.queued = false;
                    return Ok(Some(permit()));
                }
                is_head
            };
            tokio::select! {
                () = waker.notified() => {}
                () = tokio::time::sleep(HEAD_POLL), if is_head => {}
                () = tokio::time::sleep_until(deadline.into()) => {
                    let mut state = lock(&self.state);
                    state.wakers.remove(&ticket);
                    state.queue.remove(ticket);
                    place.queued = false;
                    state.record(priority, now, "timeout");
                    state.wake_head();
                    let waited = now.elapsed().as_secs_f64();
                    return Err(Shed {
                        error: ApiError::no_capacity(format!(
                            "every engine is saturated: shed after {waited:.3} s in the \
                             admission queue (its deadline: the request's slo.ttft_ms or the \
                             queue timeout)"
                        ))
                        .with_code("queue_timeout"),
                        retry_after_s: state.retry_after_s(),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
