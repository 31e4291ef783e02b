//! The admission gate in front of every generation request. A request with a TTFT objective (its
//! `slo.ttft_ms`, else the deployment's `--slo-ttft-ms`) is admitted by its predicted outcome
//! (crate::admission_outlook): let through when an engine would give it its first token in
//! time, queued — earliest deadline first within its priority — while it could once the work
//! ahead drains, and refused at once, 503 `slo_unattainable` with a `Retry-After` of the
//! predicted drain, when it cannot; the head of the queue is refused the same way once not even
//! an idle engine would be in time. Every request also waits while every engine is saturated
//! by count (crate::admission_queue's rule over the engine table, when its limits are set) —
//! the others by fair shares over API keys — and is shed with 429 when the queue is full, and
//! with 503 `queue_timeout` when its deadline passes (its TTFT objective, at most the queue
//! timeout). A shed request never reached an engine. Times are on the front's clock (virtual in
//! the simulator, which runs this gate as a router does).
//!
//! Only the head of the queue polls (every few milliseconds, as engine Stats and completions
//! change the table); the others sleep until they become the head. A request let through holds
//! an [`AdmissionPermit`] until it ends: the gate counts the router's requests on the engines
//! itself (against `max_inflight_per_engine` per open engine), and those whose admission has not
//! ended (the table may not count their tokens yet, which the token limit reads).

use super::api_error::{ApiError, ShapedError};
use super::bridge::{Caller, PolicyBridge};
use super::client::ROUTE_HEADER;
use super::clock::Clock;
use super::front_state::Front;
use super::generation::{error_response, Prepared};
use crate::admission_outlook::{outlook, Correction, Outlook, Standing, Verdict, QUEUE_SHARE};
use crate::admission_queue::{has_room, open_engines, AdmissionQueue, AdmissionSettings, Order};
use crate::prediction::PredictParams;
use crate::router::{lock, monotonic_s, RouterCore};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
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
    /// "admitted", "queue_full" (429), "timeout" (503: past its deadline), "slo_unattainable"
    /// (503: predicted to miss its TTFT objective) or "gone" (the client went away while it
    /// waited).
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
        let headers = resp.headers_mut();
        headers.insert(header::RETRY_AFTER, HeaderValue::from(self.retry_after_s));
        headers.insert(ROUTE_HEADER, HeaderValue::from_static("none admitted=shed"));
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

/// The gate for one parsed request: its priority, its caller's share, its objectives, its
/// prompt (the predictions match its prefix) and its model's engines.
async fn admit<B: PolicyBridge>(
    front: &Front<B>,
    prepared: &Prepared,
) -> Result<Option<AdmissionPermit>, Shed> {
    let caller = caller_key(&prepared.caller, !front.config.api_keys.is_empty());
    let request = &prepared.request;
    let clock = front.clock.as_ref();
    let (models, model) = (&front.models, prepared.model.name.as_str());
    // With one model every engine serves it: no lock per engine of the fleet.
    let several = models.several();
    let serves = move |num: u32| !several || models.serves(num, model);
    let entry = Entry {
        priority: request.sampling.priority,
        caller: &caller,
        slo_ttft_ms: request.slo_ttft_ms,
        slo_tpot_ms: request.slo_tpot_ms,
        arrived_s: clock.now() - prepared.started.elapsed().as_secs_f64(),
        tokens: &request.tokens,
        serves: &serves,
    };
    (front.admission).enter(front.core(), clock, entry).await
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

/// One request at the gate.
pub struct Entry<'a> {
    pub priority: i32,
    /// Whose fair share it counts against ([`caller_key`]).
    pub caller: &'a str,
    /// Its own objectives, ms (the deployment's stand in for those it has not).
    pub slo_ttft_ms: Option<f64>,
    pub slo_tpot_ms: Option<f64>,
    /// When it arrived, seconds on the front's clock.
    pub arrived_s: f64,
    /// Its prompt.
    pub tokens: &'a [u32],
    /// Whether engine `num` serves its model.
    pub serves: &'a (dyn Fn(u32) -> bool + Sync),
}

impl Entry<'_> {
    /// What the engines promise it now; None when none can be predicted (no latency model).
    fn outlook(
        &self,
        core: &RouterCore,
        tpot_ms: Option<f64>,
        margin: f64,
        tpot_correction: f64,
    ) -> Option<Outlook> {
        if self.tokens.is_empty() {
            return None;
        }
        let params = PredictParams {
            tpot_slo_ms: tpot_ms,
            kv_watermark: 1.0,
        };
        let predictions = core.predict(self.tokens, &params, monotonic_s()).ok()?;
        outlook(
            predictions.iter().filter(|p| (self.serves)(p.engine_id)),
            tpot_ms,
            margin,
            tpot_correction,
        )
    }
}

/// What the gate reads of its settings for one request.
#[derive(Clone, Copy)]
struct Terms {
    /// The count limits are set.
    counting: bool,
    /// Its TTFT objective, when it is admitted by prediction.
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
    margin: f64,
    timeout: Duration,
    weight: f64,
    max_queue_len: usize,
}

#[derive(Default)]
struct GateState {
    settings: AdmissionSettings,
    queue: AdmissionQueue,
    /// Requests let through that no decision has placed yet (the table does not count them)...
    in_transit: u64,
    /// ...and those not finished yet.
    running: u64,
    wakers: HashMap<u64, Arc<Notify>>,
    waits: VecDeque<AdmissionWait>,
    mean_wait_s: f64,
    /// The closed loop over the TTFTs and TPOTs of the requests let through by prediction.
    ttft: Correction,
    tpot: Correction,
}

impl GateState {
    fn record(&mut self, priority: i32, wait_s: f64, outcome: &'static str) {
        let wait_s = wait_s.max(0.0);
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

    /// Whether the count limits let a request go to the engines now (always, when they are not
    /// set; also when no engine is healthy: nothing to wait for).
    fn room(&self, core: Option<&RouterCore>) -> bool {
        if !self.settings.enabled() {
            return true;
        }
        let open = core.and_then(|core| open_engines(lock(&core.table).all(), &self.settings));
        open.is_none_or(|open| has_room(open, self.running, self.in_transit, &self.settings))
    }

    fn let_through(&mut self) {
        self.in_transit += 1;
        self.running += 1;
    }

    fn terms(&self, entry: &Entry<'_>) -> Terms {
        let s = &self.settings;
        Terms {
            counting: s.enabled(),
            ttft_ms: s.predicted_ttft_ms(entry.slo_ttft_ms),
            tpot_ms: entry
                .slo_tpot_ms
                .or(s.default_slo.tpot_ms)
                .filter(|ms| ms.is_finite() && *ms > 0.0),
            margin: s.margin,
            timeout: s.queue_timeout,
            weight: s.weight(entry.caller),
            max_queue_len: s.max_queue_len,
        }
    }

    fn standing(
        &self,
        terms: &Terms,
        entry: &Entry<'_>,
        now_s: f64,
        tokens_ahead: u64,
    ) -> Standing {
        let ttft_ms = terms.ttft_ms.unwrap_or(f64::INFINITY);
        Standing {
            budget_ms: ttft_ms - (now_s - entry.arrived_s) * 1e3,
            queue_cap_ms: QUEUE_SHARE * ttft_ms,
            tokens_ahead,
            in_transit: self.in_transit,
            margin: terms.margin,
            correction: self.ttft.factor(),
        }
    }

    /// The refusal of a request predicted to miss its TTFT objective of `ttft_ms`.
    fn unattainable(&mut self, priority: i32, waited_s: f64, drain_s: f64, ttft_ms: f64) -> Shed {
        self.record(priority, waited_s, "slo_unattainable");
        Shed {
            error: ApiError::no_capacity(format!(
                "the request's TTFT objective ({ttft_ms:.0} ms) cannot be met: the work ahead \
                 of it drains in about {drain_s:.2} s"
            ))
            .with_code("slo_unattainable"),
            retry_after_s: drain_s.ceil().clamp(1.0, 60.0) as u64,
        }
    }
}

#[derive(Default)]
pub struct AdmissionGate {
    state: Mutex<GateState>,
}

/// Held by a request let through until it ends: [`AdmissionPermit::placed`] once a decision
/// placed it (the table counts its tokens from then on), [`AdmissionPermit::first_token`] when
/// its first token came (the closed loop learns from it).
pub struct AdmissionPermit {
    gate: Arc<AdmissionGate>,
    in_transit: bool,
    /// How it got through, for its route (`admitted=...`): "predicted" (straight through by its
    /// predicted outcome), "queued" (it waited), None (straight through by the counts).
    how: Option<&'static str>,
    /// What was predicted for it where it was let through.
    predicted: Option<Predicted>,
}

/// A request's raw predictions when it was let through, for the closed loop.
#[derive(Clone, Copy)]
struct Predicted {
    ttft_ms: f64,
    /// The TTFT the gate admitted it by (corrected by the closed loop).
    corrected_ttft_ms: f64,
    step_ms: f64,
    /// When it was let through, on the front's clock.
    at_s: f64,
}

impl AdmissionPermit {
    /// How it got through: "predicted", "queued" or None.
    pub fn how(&self) -> Option<&'static str> {
        self.how
    }

    /// The TTFT it was admitted by, ms (predicted, corrected by the closed loop); None when no
    /// prediction let it through.
    pub fn predicted_ttft_ms(&self) -> Option<f64> {
        self.predicted.map(|p| p.corrected_ttft_ms)
    }

    /// A decision placed it, or its admission ended without one (its first token came, or it
    /// failed): the engine table counts it from then on.
    pub fn placed(&mut self) {
        if std::mem::take(&mut self.in_transit) {
            let mut state = lock(&self.gate.state);
            state.in_transit = state.in_transit.saturating_sub(1);
            state.wake_head();
        }
    }

    /// Its first token came at `now_s` on the front's clock: the closed loop learns how far its
    /// TTFT prediction was off.
    pub fn first_token(&mut self, now_s: f64) {
        if let Some(p) = &self.predicted {
            let mut state = lock(&self.gate.state);
            state.ttft.observe((now_s - p.at_s) * 1e3, p.ttft_ms);
        }
    }

    /// It finished with a mean TPOT of `tpot_ms`: the closed loop learns how far the decode
    /// step predicted for it was off.
    pub fn finished(&mut self, tpot_ms: f64) {
        if let Some(p) = self.predicted.take() {
            let mut state = lock(&self.gate.state);
            state.tpot.observe(tpot_ms, p.step_ms);
        }
    }
}

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        self.placed();
        let mut state = lock(&self.gate.state);
        state.running = state.running.saturating_sub(1);
        state.wake_head();
    }
}

/// A queued request's place; leaving the queue any other way than through the gate (the client
/// went away) takes it out.
struct Ticket<'a> {
    gate: &'a AdmissionGate,
    clock: &'a dyn Clock,
    ticket: u64,
    priority: i32,
    since: f64,
    queued: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.queued {
            let mut state = lock(&self.gate.state);
            state.wakers.remove(&self.ticket);
            if state.queue.remove(self.ticket).is_some() {
                state.record(self.priority, self.clock.now() - self.since, "gone");
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

    /// A request's TTFT objective: its own, else the deployment's (whether or not admission by
    /// prediction is on: the engines queue by it either way).
    pub fn ttft_objective_ms(&self, own: Option<f64>) -> Option<f64> {
        lock(&self.state).settings.ttft_objective_ms(own)
    }

    /// Queued requests per priority.
    pub fn queue_lengths(&self) -> Vec<(i32, usize)> {
        lock(&self.state).queue.len_by_priority()
    }

    /// The waits recorded since the last drain, oldest first.
    pub fn drain_waits(&self) -> Vec<AdmissionWait> {
        lock(&self.state).waits.drain(..).collect()
    }

    /// The closed loop's TTFT and TPOT corrections now (1: none learnt).
    pub fn corrections(&self) -> (f64, f64) {
        let state = lock(&self.state);
        (state.ttft.factor(), state.tpot.factor())
    }

    fn permit(
        self: &Arc<Self>,
        how: Option<&'static str>,
        predicted: Option<Predicted>,
    ) -> AdmissionPermit {
        AdmissionPermit {
            gate: self.clone(),
            in_transit: true,
            how,
            predicted,
        }
    }

    /// Waits until the request may go to the engines (at once when no engine is healthy: there
    /// is nothing to wait for). Ok(None): the gate holds nothing of it (no count limit, no
    /// prediction); Ok(Some(permit)): hold it until the request ends; Err: refused.
    pub async fn enter(
        self: &Arc<Self>,
        core: Option<Arc<RouterCore>>,
        clock: &dyn Clock,
        entry: Entry<'_>,
    ) -> Result<Option<AdmissionPermit>, Shed> {
        let terms = lock(&self.state).terms(&entry);
        let look = || match (terms.ttft_ms, core.as_deref()) {
            (Some(_), Some(core)) => {
                let tpot_correction = lock(&self.state).tpot.factor();
                entry.outlook(core, terms.tpot_ms, terms.margin, tpot_correction)
            }
            _ => None,
        };
        // What the closed loop learns from: the outlook's raw predictions, the TTFT it was
        // let through by (corrected), when.
        let noted = |o: &Outlook, predicted_ms: f64, at_s| Predicted {
            ttft_ms: o.best_ttft_ms,
            corrected_ttft_ms: predicted_ms,
            step_ms: o.best_step_ms,
            at_s,
        };
        let arrival = look();
        if !terms.counting && arrival.is_none() {
            return Ok(None);
        }
        let priority = entry.priority;
        let now = clock.now();
        let (ticket, waker, deadline) = {
            let mut state = lock(&self.state);
            if state.queue.is_empty() && state.room(core.as_deref()) {
                let through = match &arrival {
                    None => Some(self.permit(None, None)),
                    Some(o) => match state.standing(&terms, &entry, now, 0).at_arrival(o) {
                        Verdict::Go { predicted_ms, .. } => {
                            Some(self.permit(Some("predicted"), Some(noted(o, predicted_ms, now))))
                        }
                        _ => None,
                    },
                };
                if let Some(permit) = through {
                    state.let_through();
                    state.record(priority, 0.0, "admitted");
                    return Ok(Some(permit));
                }
            }
            if state.queue.len() >= terms.max_queue_len {
                state.record(priority, 0.0, "queue_full");
                return Err(Shed {
                    error: ApiError::busy(format!(
                        "every engine is saturated and the admission queue is full ({} \
                         requests)",
                        terms.max_queue_len
                    ))
                    .with_code("queue_full"),
                    retry_after_s: state.retry_after_s(),
                });
            }
            let objective = terms.ttft_ms.map(|ms| Duration::from_secs_f64(ms / 1e3));
            let timeout = objective.map_or(terms.timeout, |slo| slo.min(terms.timeout));
            let deadline = entry.arrived_s + timeout.as_secs_f64();
            let order = if arrival.is_some() {
                Order::Deadline
            } else {
                Order::FairShare
            };
            let tokens = entry.tokens.len() as u64;
            let ticket = state.queue.push(
                priority,
                entry.caller,
                terms.weight,
                now,
                deadline,
                order,
                tokens,
            );
            if let Some(o) = &arrival {
                let ahead = state.queue.tokens_ahead(ticket);
                if let Verdict::Shed { drain_s } =
                    state.standing(&terms, &entry, now, ahead).at_arrival(o)
                {
                    state.queue.remove(ticket);
                    let ttft_ms = terms.ttft_ms.unwrap_or_default();
                    return Err(state.unattainable(priority, 0.0, drain_s, ttft_ms));
                }
            }
            let waker = Arc::new(Notify::new());
            state.wakers.insert(ticket, waker.clone());
            (ticket, waker, deadline)
        };
        let mut place = Ticket {
            gate: self,
            clock,
            ticket,
            priority,
            since: now,
            queued: true,
        };
        loop {
            let is_head = lock(&self.state)
                .queue
                .head()
                .is_some_and(|h| h.ticket == ticket);
            // The head's outlook now, read outside the gate's lock (the table's and the index's
            // are taken inside).
            let at_head = if is_head { look() } else { None };
            let is_head = {
                let mut state = lock(&self.state);
                let is_head = state.queue.head().is_some_and(|h| h.ticket == ticket);
                let t = clock.now();
                let verdict = match (&at_head, is_head) {
                    (_, false) => Verdict::Wait,
                    (Some(o), true) => state.standing(&terms, &entry, t, 0).at_head(o),
                    // Nothing to predict with (any more): the counts decide.
                    (None, true) => Verdict::Go {
                        predicted_ms: f64::NAN,
                        raw_ms: f64::NAN,
                    },
                };
                match verdict {
                    Verdict::Go { predicted_ms, .. } if state.room(core.as_deref()) => {
                        state.queue.pop_head();
                        state.wakers.remove(&ticket);
                        state.let_through();
                        state.record(priority, t - now, "admitted");
                        state.wake_head();
                        place.queued = false;
                        let note = at_head.as_ref().map(|o| noted(o, predicted_ms, t));
                        return Ok(Some(self.permit(Some("queued"), note)));
                    }
                    Verdict::Shed { drain_s } => {
                        state.queue.remove(ticket);
                        state.wakers.remove(&ticket);
                        place.queued = false;
                        state.wake_head();
                        let ttft_ms = terms.ttft_ms.unwrap_or_default();
                        return Err(state.unattainable(priority, t - now, drain_s, ttft_ms));
                    }
                    _ => {}
                }
                is_head
            };
            let left = Duration::from_secs_f64((deadline - clock.now()).max(0.0));
            // Only the head polls (a timer is made only when this is polled).
            let poll = async {
                if is_head {
                    clock.sleep(HEAD_POLL).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = waker.notified() => {}
                () = poll => {}
                () = clock.sleep(left) => {
                    let mut state = lock(&self.state);
                    state.wakers.remove(&ticket);
                    state.queue.remove(ticket);
                    place.queued = false;
                    let waited = clock.now() - now;
                    state.record(priority, waited, "timeout");
                    state.wake_head();
                    return Err(Shed {
                        error: ApiError::no_capacity(format!(
                            "every engine is saturated: shed after {waited:.3} s in the \
                             admission queue (its deadline: the request's TTFT objective or \
                             the queue timeout)"
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
