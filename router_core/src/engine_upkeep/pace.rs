//! How often each engine of the fleet is polled. An engine that pushes its load on its KV event
//! stream (engine.proto, KVEventBatch.stats) needs a poll only to notice that it died: every
//! `liveness_s`. One that does not (an older engine, or one whose stream is down) is polled for
//! its load every `poll_s`. Once the fleet's polls would together exceed `polls_per_s` a second,
//! every engine's interval is stretched by the same factor, so that a fleet's idle cost stays
//! bounded however many engines it has (docs/benchmarks.md, "One router, N engines") — and a
//! fleet that pushes costs `liveness_s / poll_s` times fewer polls than one that does not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// `--liveness-s`'s default. A pushing fleet of 1,024 engines is then polled ~102 times a second
/// (under `--upkeep-polls-per-s`' 256, so not stretched), 2.5 times fewer than a polled fleet of
/// that size. Only a hung engine waits this long to be found: one that exits or resets its
/// connections ends its KV event stream, which puts its polls back at `poll_s` at once, and a
/// request that fails on a hung engine takes it out of rotation itself.
pub const DEFAULT_LIVENESS_S: f64 = 10.0;

#[derive(Debug)]
pub struct UpkeepPace {
    poll_s: f64,
    liveness_s: f64,
    /// 0: no bound (every engine at its own interval).
    polls_per_s: f64,
    engines: AtomicUsize,
    /// Of `engines`, those whose KV event stream is open and pushing their load.
    pushing: AtomicUsize,
}

impl UpkeepPace {
    /// `poll_s` > 0, `liveness_s` > 0 and `polls_per_s` >= 0 (checked by the caller).
    pub fn new(poll_s: f64, liveness_s: f64, polls_per_s: f64) -> Self {
        UpkeepPace {
            poll_s,
            liveness_s,
            polls_per_s,
            engines: AtomicUsize::new(0),
            pushing: AtomicUsize::new(0),
        }
    }

    pub fn poll_s(&self) -> f64 {
        self.poll_s
    }

    pub fn liveness_s(&self) -> f64 {
        self.liveness_s
    }

    pub fn polls_per_s(&self) -> f64 {
        self.polls_per_s
    }

    /// The fleet's size now (membership changes it).
    pub fn set_engines(&self, engines: usize) {
        self.engines.store(engines, Ordering::Relaxed);
    }

    /// One more engine pushes its load (its upkeep calls this as its stream starts pushing).
    pub fn push_started(&self) {
        self.pushing.fetch_add(1, Ordering::Relaxed);
    }

    /// One engine fewer pushes (its stream ended, or its upkeep stopped).
    pub fn push_ended(&self) {
        // Never below zero, whatever the order the upkeeps report in.
        let _ = self
            .pushing
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Engines pushing their load now.
    pub fn pushing(&self) -> usize {
        self.pushing.load(Ordering::Relaxed)
    }

    /// Seconds between one engine's polls: `liveness_s` for an engine that pushes its load,
    /// else `poll_s`; both stretched alike once the fleet would poll faster than `polls_per_s`.
    pub fn interval_s(&self, pushes: bool) -> f64 {
        let own = if pushes { self.liveness_s } else { self.poll_s };
        if self.polls_per_s <= 0.0 {
            return own;
        }
        let engines = self.engines.load(Ordering::Relaxed);
        let pushing = self.pushing().min(engines);
        let wanted = (engines - pushing) as f64 / self.poll_s + pushing as f64 / self.liveness_s;
        own * (wanted / self.polls_per_s).max(1.0)
    }

    /// The interval scaled by `jitter` in [0.75, 1.25), so that engines added together do not
    /// poll in step.
    pub fn jittered(&self, pushes: bool, jitter: f64) -> Duration {
        let scale = 0.75 + 0.5 * jitter.clamp(0.0, 1.0);
        Duration::from_secs_f64(self.interval_s(pushes) * scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_fleets_poll_each_engine_less_often() {
        let pace = UpkeepPace::new(0.5, 10.0, 256.0);
        pace.set_engines(2);
        assert_eq!(pace.interval_s(false), 0.5);
        pace.set_engines(1024);
        assert_eq!(pace.interval_s(false), 4.0);
        let unbounded = UpkeepPace::new(0.5, 10.0, 0.0);
        unbounded.set_engines(1024);
        assert_eq!(unbounded.interval_s(false), 0.5);
        assert_eq!(pace.jittered(false, 0.0), Duration::from_secs(3));
        assert_eq!(pace.jittered(false, 1.0), Duration::from_secs(5));
    }

    #[test]
    fn engines_that_push_are_polled_only_for_liveness() {
        let pace = UpkeepPace::new(0.5, 10.0, 256.0);
        pace.set_engines(2);
        pace.push_started();
        assert_eq!(pace.interval_s(true), 10.0);
        assert_eq!(pace.interval_s(false), 0.5); // the other one still polls for its load
                                                 // 1,024 engines all pushing: 102.4 polls a second, under the bound: nothing stretched.
        pace.set_engines(1024);
        for _ in 1..1024 {
            pace.push_started();
        }
        assert_eq!(pace.pushing(), 1024);
        assert_eq!(pace.interval_s(true), 10.0);
    }

    #[test]
    fn a_mixed_fleet_stays_within_the_bound() {
        let pace = UpkeepPace::new(0.5, 10.0, 256.0);
        pace.set_engines(1024);
        for _ in 0..512 {
            pace.push_started();
        }
        // 512 / 0.5 + 512 / 10 = 1,075.2 polls a second wanted: each interval stretched by 4.2.
        let fleet_rate = 512.0 / pace.interval_s(false) + 512.0 / pace.interval_s(true);
        assert!((fleet_rate - 256.0).abs() < 1e-9, "{fleet_rate}");
        assert!((pace.interval_s(true) / pace.interval_s(false) - 20.0).abs() < 1e-9);
    }

    #[test]
    fn push_counts_never_go_negative_or_past_the_fleet() {
        let pace = UpkeepPace::new(0.5, 10.0, 256.0);
        pace.set_engines(1);
        pace.push_ended();
        assert_eq!(pace.pushing(), 0);
        pace.push_started();
        pace.push_started(); // a removed engine's stream not ended yet
        assert_eq!(pace.interval_s(true), 10.0);
        pace.push_ended();
        pace.push_ended();
        pace.push_ended();
        assert_eq!(pace.pushing(), 0);
    }
}
