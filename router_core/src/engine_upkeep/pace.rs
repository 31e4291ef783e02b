//! How often each engine of the fleet is polled: every `poll_s`, or less often once the fleet is
//! larger than the upkeep's whole rate allows (every engine's health check and Stats poll
//! together at most `polls_per_s` a second), so that a fleet's idle cost stays bounded however
//! many engines it has (docs/benchmarks.md, "One router, N engines").

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[derive(Debug)]
pub struct UpkeepPace {
    poll_s: f64,
    /// 0: no bound (every engine every `poll_s`).
    polls_per_s: f64,
    engines: AtomicUsize,
}

impl UpkeepPace {
    /// `poll_s` > 0 and `polls_per_s` >= 0 (checked by the caller).
    pub fn new(poll_s: f64, polls_per_s: f64) -> Self {
        UpkeepPace {
            poll_s,
            polls_per_s,
            engines: AtomicUsize::new(0),
        }
    }

    pub fn poll_s(&self) -> f64 {
        self.poll_s
    }

    pub fn polls_per_s(&self) -> f64 {
        self.polls_per_s
    }

    /// The fleet's size now (membership changes it).
    pub fn set_engines(&self, engines: usize) {
        self.engines.store(engines, Ordering::Relaxed);
    }

    /// Seconds between one engine's polls.
    pub fn interval_s(&self) -> f64 {
        if self.polls_per_s <= 0.0 {
            return self.poll_s;
        }
        let engines = self.engines.load(Ordering::Relaxed) as f64;
        self.poll_s.max(engines / self.polls_per_s)
    }

    /// The interval scaled by `jitter` in [0.75, 1.25), so that engines added together do not
    /// poll in step.
    pub fn jittered(&self, jitter: f64) -> Duration {
        Duration::from_secs_f64(self.interval_s() * (0.75 + 0.5 * jitter.clamp(0.0, 1.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_fleets_poll_each_engine_less_often() {
        let pace = UpkeepPace::new(0.5, 256.0);
        pace.set_engines(2);
        assert_eq!(pace.interval_s(), 0.5);
        pace.set_engines(1024);
        assert_eq!(pace.interval_s(), 4.0);
        let unbounded = UpkeepPace::new(0.5, 0.0);
        unbounded.set_engines(1024);
        assert_eq!(unbounded.interval_s(), 0.5);
        assert_eq!(pace.jittered(0.0), Duration::from_secs(3));
        assert_eq!(pace.jittered(1.0), Duration::from_secs(5));
    }
}
