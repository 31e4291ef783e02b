//! Admission by predicted outcome, as pure arithmetic over router_core's per-engine predictions
//! (prediction.rs): whether a request with a TTFT objective can make it if let through now,
//! could once the work ahead of it drains, or cannot at all.
//!
//! Past capacity a router that lets every request through grows the engines' queues without
//! bound and every request's TTFT passes its SLO while the engines stay busy: goodput falls to
//! nothing. Holding a request in the router while no engine would give it its first token in
//! time, and refusing it at once when even the wait ahead of it leaves no time, keeps the engines
//! working only on requests that can still make their SLO — and tells the others so before they
//! took any engine time.
//!
//! For one request of TTFT budget `B` (its objective `T` less the time it has waited), margin
//! `m` and the closed loop's corrections `c` (TTFT) and `k` (TPOT) — what the requests let
//! through have seen against what was predicted for them, smoothed: [`Correction`] — over the
//! engines that may take it (healthy, serving its model, not decode-only, with a fitted latency
//! model):
//!
//! ```text
//! step      = the decode step with this request added, beside the share of a prefill chunk
//!             the engine's queued prefill fills (`step_ms`)
//! best      = the least predicted TTFT (queue + prefill) among the engines whose step x k
//!             stays within its TPOT objective x (1 + m) (an engine with no running decode
//!             always counts: nothing there to slow)
//! go        = c x ttft(best) <= B x (1 + m), and c x queue(best) <= T / 4, and fewer requests
//!             let through but not yet placed than engines
//! wait_ms   = c x (mean queue over the engines + tokens queued ahead of it in the router x the
//!             best engine's prefill ms per token / engines)       (the work ahead, drained by
//!             every engine at once)
//! unattainable at arrival: max(c x ttft(best), wait_ms + c x prefill(best)) > B x (1 + m)
//! unattainable at the head: c x ttft(best) > B x (1 + m)   (a queue drains no faster than a
//!             budget runs out: waiting cannot bring it back in time)
//! ```
//!
//! The queue cap (a quarter of the objective) is why the router holds the backlog, not the
//! engines: an engine works through its queue first come, first served and cannot refuse what
//! it holds, while the router's queue goes earliest deadline first and refuses what can no longer
//! make it. Without the cap, past capacity every engine's queue would sit at the objective's
//! edge and each request let through would make it only if no prediction erred — about half
//! would not. With it the engines keep enough queued to stay busy, and a request let through
//! has the rest of its budget as slack.
//!
//! TPOT is where a request let through costs the others: it joins every running decode's batch,
//! and while the engine prefills what keeps coming, its decodes step beside prefill chunks — on
//! a prefill-heavy mix past capacity (azure-code), nearly every step. The predicted step counts
//! the chunk share the engine's queue fills; the TPOT correction learns the rest at the operating
//! point from the requests that finished, so the gate stops adding to a batch whose decodes
//! already miss.
//!
//! A request no engine has a latency model for (a mock engine; an engine before its first
//! Stats) cannot be predicted: it is admitted as if it had no objective.

use crate::engine_table::Role;
use crate::prediction::EnginePrediction;

/// A correction never scales a prediction beyond these: a burst of odd requests cannot make
/// the gate believe anything absurd.
const CORRECTION_CLAMP: (f64, f64) = (0.5, 4.0);
/// Weight of each new observation in the smoothed log ratio.
const CORRECTION_ALPHA: f64 = 0.1;
/// The most queued prefill an engine may hold, as a share of the TTFT objective, for a request
/// to go to it (the module's doc says why).
pub const QUEUE_SHARE: f64 = 0.25;

/// What the engines promise one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Outlook {
    /// Engines that may take it.
    pub engines: usize,
    /// The least predicted TTFT among the engines whose decodes can bear it (else among all).
    pub best_ttft_ms: f64,
    /// That engine's prefill of this request, without any queue, and its queue.
    pub best_prefill_ms: f64,
    pub best_queue_ms: f64,
    /// Its decode step with this request added (raw: the TPOT correction not applied).
    pub best_step_ms: f64,
    /// Whether that engine keeps the TPOT objective with the request added.
    pub tpot_fits: bool,
    /// The engines' mean predicted queue.
    pub mean_queue_ms: f64,
    /// The best engine's prefill time per prompt token (to price the work queued in the router).
    pub ms_per_token: f64,
}

/// The outlook over `predictions` (already limited to the engines serving the request's model),
/// their decode steps scaled by `tpot_correction`; None when no engine may take it with a latency
/// model.
pub fn outlook<'a>(
    predictions: impl Iterator<Item = &'a EnginePrediction>,
    tpot_ms: Option<f64>,
    margin: f64,
    tpot_correction: f64,
) -> Option<Outlook> {
    let tpot_limit = tpot_ms.map(|ms| ms * (1.0 + margin));
    let mut engines = 0usize;
    let mut queue_sum = 0.0;
    let mut best: Option<(&EnginePrediction, bool)> = None;
    for p in predictions {
        let usable = p.healthy && p.role != Role::Decode && p.has_latency_model;
        if !usable || !p.ttft_ms.is_finite() {
            continue;
        }
        engines += 1;
        queue_sum += p.queue_ms;
        let idle = p.decode_step_now_ms <= 0.0 || p.decode_step_now_ms.is_nan();
        let fits = idle || tpot_limit.is_none_or(|limit| tpot_correction * step_ms(p) <= limit);
        let better = match best {
            None => true,
            // An engine that keeps the TPOT objective beats one that does not; then the TTFT.
            Some((b, best_fits)) => (fits, -p.ttft_ms) > (best_fits, -b.ttft_ms),
        };
        if better {
            best = Some((p, fits));
        }
    }
    let (p, tpot_fits) = best?;
    Some(Outlook {
        engines,
        best_ttft_ms: p.ttft_ms,
        best_prefill_ms: p.prefill_ms,
        best_queue_ms: p.queue_ms,
        best_step_ms: step_ms(p),
        tpot_fits,
        mean_queue_ms: queue_sum / engines as f64,
        ms_per_token: p.prefill_ms / p.prefill_tokens.max(1) as f64,
    })
}

/// The step the engine's decodes will take with this request added, beside the prefill queued
/// there: an engine prefills what it holds a chunk per step until that is done, so while more
/// than a chunk is queued every step carries a full one (past capacity the engine always holds
/// that much), and a shorter queue fills that share of a step. Between the decode step alone
/// and the step beside a full chunk (`backlog_step_ms`), by that share (a step's time is close
/// to linear in its prefill tokens). This request's own prefill is not counted: it passes in a
/// few steps, a small part of the running decodes' lives, where a queue that stays is every
/// step of theirs.
fn step_ms(p: &EnginePrediction) -> f64 {
    let share = match p.prefill_chunk_size {
        0 => f64::from(u8::from(p.queued_prefill_tokens > 0)),
        chunk => (p.queued_prefill_tokens as f64 / chunk as f64).min(1.0),
    };
    p.decode_step_ms + (p.backlog_step_ms - p.decode_step_ms).max(0.0) * share
}

/// What the gate does with a request now.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Let it through; its TTFT is predicted at `raw_ms`, `predicted_ms` corrected.
    Go { predicted_ms: f64, raw_ms: f64 },
    /// It may make it once the work ahead drains: it waits in the queue.
    Wait,
    /// It cannot make its TTFT objective: refuse it now; the work ahead drains in `drain_s`.
    Shed { drain_s: f64 },
}

/// One request's standing at the gate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    /// Its TTFT objective less the time it has waited, ms.
    pub budget_ms: f64,
    /// The most queue an engine may hold for it to go there: QUEUE_SHARE of its objective, ms.
    pub queue_cap_ms: f64,
    /// Prompt tokens queued in the router ahead of it.
    pub tokens_ahead: u64,
    /// Requests let through that no decision has placed yet (the table does not count them).
    pub in_transit: u64,
    pub margin: f64,
    /// The closed loop's TTFT correction.
    pub correction: f64,
}

impl Standing {
    fn limit_ms(&self) -> f64 {
        self.budget_ms * (1.0 + self.margin)
    }

    fn fits_now(&self, o: &Outlook) -> bool {
        o.tpot_fits
            && self.correction * o.best_ttft_ms <= self.limit_ms()
            && self.correction * o.best_queue_ms <= self.queue_cap_ms
            && self.in_transit < o.engines as u64
    }

    fn go(&self, o: &Outlook) -> Verdict {
        Verdict::Go {
            predicted_ms: self.correction * o.best_ttft_ms,
            raw_ms: o.best_ttft_ms,
        }
    }

    /// The work ahead of it, drained by every engine at once (corrected), ms.
    fn wait_ms(&self, o: &Outlook) -> f64 {
        let router_ms = self.tokens_ahead as f64 * o.ms_per_token / o.engines.max(1) as f64;
        self.correction * (o.mean_queue_ms + router_ms)
    }

    /// As it arrives: through when nothing waits ahead of it and it fits now; refused when the
    /// wait ahead of it leaves no time for its prefill; else it waits.
    pub fn at_arrival(&self, o: &Outlook) -> Verdict {
        if self.tokens_ahead == 0 && self.fits_now(o) {
            return self.go(o);
        }
        let wait_ms = self.wait_ms(o);
        let soonest =
            (self.correction * o.best_ttft_ms).max(wait_ms + self.correction * o.best_prefill_ms);
        if soonest > self.limit_ms() {
            Verdict::Shed {
                drain_s: wait_ms / 1e3,
            }
        } else {
            Verdict::Wait
        }
    }

    /// At the head of the queue: through when it fits now; refused when its TTFT on the best
    /// engine is already past its budget — an engine's queue drains no faster than the budget
    /// runs out, so waiting cannot bring it back in time; else it waits on (for the queue cap, a
    /// placement in transit, or room in a batch).
    pub fn at_head(&self, o: &Outlook) -> Verdict {
        if self.correction * o.best_ttft_ms > self.limit_ms() {
            Verdict::Shed {
                drain_s: self.wait_ms(o) / 1e3,
            }
        } else if self.fits_now(o) {
            self.go(o)
        } else {
            Verdict::Wait
        }
    }
}

/// The closed loop of admission: what each request let through by prediction saw (its TTFT, its
/// TPOT) against what was predicted for it, as a smoothed log ratio (over- and under-prediction
/// weigh the same; one outlier moves it little). It learns whatever the prediction misses — the
/// policy placing a request elsewhere than the best engine, a transfer, prefill chunks beside the
/// decodes, a model fitted on another load.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Correction {
    log_ratio: f64,
    observed: u64,
}

impl Correction {
    /// The factor predictions are scaled by.
    pub fn factor(&self) -> f64 {
        self.log_ratio
            .exp()
            .clamp(CORRECTION_CLAMP.0, CORRECTION_CLAMP.1)
    }

    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// One request saw `actual_ms` where `predicted_ms` (raw, before the correction) was
    /// predicted.
    pub fn observe(&mut self, actual_ms: f64, predicted_ms: f64) {
        if !(actual_ms > 0.0 && predicted_ms > 0.0 && actual_ms.is_finite()) {
            return;
        }
        let (lo, hi) = (CORRECTION_CLAMP.0.ln(), CORRECTION_CLAMP.1.ln());
        let ratio = (actual_ms / predicted_ms).ln().clamp(2.0 * lo, 2.0 * hi);
        self.log_ratio += CORRECTION_ALPHA * (ratio - self.log_ratio);
        self.log_ratio = self.log_ratio.clamp(lo, hi);
        self.observed += 1;
    }
}

#[cfg(test)]
#[path = "admission_outlook_tests.rs"]
mod tests;
