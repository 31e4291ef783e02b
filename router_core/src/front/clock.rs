//! The clock a request task times itself by and waits on: the process's monotonic clock and
//! tokio's timers for a router, and — for the in-process front the simulator drives — its event
//! loop's clock (python/loop_clock.rs), so that a simulated request's TTFT, its timeouts and
//! the closed loop's observations are in the simulation's virtual seconds.

use super::bridge::BoxFuture;
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    /// Seconds on a monotonic clock (only differences mean anything).
    fn now(&self) -> f64;

    /// Resolves once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<()>;

    /// This clock's reading when a request that began at `started` (the process's clock)
    /// arrived, called as it is prepared: now, less the time it took to arrive.
    fn arrival_s(&self, started: Instant) -> f64 {
        self.now() - started.elapsed().as_secs_f64()
    }
}

/// The process's monotonic clock and tokio's timers.
pub struct SystemClock {
    origin: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(duration))
    }
}
