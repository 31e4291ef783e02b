//! When a request's first token is due, and the relative deadline its engine calls carry
//! (`first_token_due_ms` on StartGenerate and RemoteSend): the engines queue by it within a
//! priority, earliest first, so a request the router admitted by its TTFT objective is not left
//! behind work that can wait (engine/core/waiting_queue.py).
//!
//! The router's clock and an engine's differ, so a call carries what is left, not a time: the
//! objective less what the request has spent since it reached the front, as of the moment the
//! call goes out. An overdue request still sends a small positive deadline (0 means none): it
//! sorts ahead of everything with time left instead of behind everything with a deadline.

use crate::front::clock::Clock;
use std::sync::Arc;

/// What an overdue request's calls carry, ms: positive (0 would say "no deadline"), so it sorts
/// first.
pub const OVERDUE_DUE_MS: f64 = 1e-3;

/// The first-token deadline a call sent at `now_s` carries for a first token due at `due_s`
/// (both seconds on one clock), ms: what is left, never below [`OVERDUE_DUE_MS`].
pub fn relative_due_ms(due_s: f64, now_s: f64) -> f64 {
    let left_ms = (due_s - now_s) * 1e3;
    if left_ms > OVERDUE_DUE_MS {
        left_ms
    } else {
        OVERDUE_DUE_MS
    }
}

/// A request's first-token deadline on the front's clock (virtual in the simulator).
#[derive(Clone)]
pub struct FirstTokenDue {
    /// Seconds on `clock`.
    pub due_s: f64,
    pub clock: Arc<dyn Clock>,
}

impl FirstTokenDue {
    /// The deadline of a request that reached the front at `arrived_s` (on `clock`) with a TTFT
    /// objective of `objective_ms`; None without an objective (or a meaningless one).
    pub fn of(arrived_s: f64, objective_ms: Option<f64>, clock: Arc<dyn Clock>) -> Option<Self> {
        let objective_ms = objective_ms.filter(|ms| ms.is_finite() && *ms > 0.0)?;
        Some(FirstTokenDue {
            due_s: arrived_s + objective_ms / 1e3,
            clock,
        })
    }

    /// What a call sent now carries, ms.
    pub fn ms_from_now(&self) -> f64 {
        relative_due_ms(self.due_s, self.clock.now())
    }

    /// The `first_token_due_ms` of a call sent now with `deadline` (0: none).
    pub fn call_ms(deadline: Option<&FirstTokenDue>) -> f64 {
        deadline.map_or(0.0, FirstTokenDue::ms_from_now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::bridge::BoxFuture;
    use std::sync::Mutex;
    use std::time::Duration;

    /// A clock that reads what the test sets.
    struct SetClock(Mutex<f64>);

    impl Clock for SetClock {
        fn now(&self) -> f64 {
            *self.0.lock().unwrap()
        }

        fn sleep(&self, _: Duration) -> BoxFuture<()> {
            Box::pin(async {})
        }
    }

    #[test]
    fn the_deadline_is_what_is_left_of_the_objective() {
        let clock = Arc::new(SetClock(Mutex::new(10.25)));
        // Arrived at 10.0 s with 500 ms to its first token: 250 ms left at 10.25 s.
        let due = FirstTokenDue::of(10.0, Some(500.0), clock.clone()).unwrap();
        assert!((due.ms_from_now() - 250.0).abs() < 1e-9);
        *clock.0.lock().unwrap() = 10.499;
        assert!((due.ms_from_now() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn an_overdue_request_still_carries_a_positive_deadline() {
        let clock = Arc::new(SetClock(Mutex::new(11.0)));
        let due = FirstTokenDue::of(10.0, Some(500.0), clock.clone()).unwrap();
        assert_eq!(due.ms_from_now(), OVERDUE_DUE_MS);
        assert_eq!(relative_due_ms(1.0, 1.0), OVERDUE_DUE_MS);
        assert!(relative_due_ms(2.0, 1.0) > 999.0);
    }

    #[test]
    fn a_call_without_a_deadline_carries_0() {
        let clock = Arc::new(SetClock(Mutex::new(10.1)));
        let due = FirstTokenDue::of(10.0, Some(500.0), clock).unwrap();
        assert_eq!(FirstTokenDue::call_ms(None), 0.0);
        assert!((FirstTokenDue::call_ms(Some(&due)) - 400.0).abs() < 1e-9);
    }

    #[test]
    fn only_the_calls_before_the_first_token_carry_it() {
        let clock: Arc<dyn Clock> = Arc::new(SetClock(Mutex::new(10.2)));
        let mut state = crate::executor::ExecState {
            scope: Default::default(),
            tokens: vec![1, 2, 3],
            prompt_len: 3,
            engine_request_id: "r".into(),
            sampling: Default::default(),
            generating: false,
            trace: None,
            last_error: None,
            placed: None,
            first_token_due: FirstTokenDue::of(10.0, Some(500.0), clock),
        };
        let ms = FirstTokenDue::call_ms(state.call_deadline().as_ref());
        assert!((ms - 300.0).abs() < 1e-9, "{ms}");
        // A token generated: a later segment's calls carry none.
        state.tokens.push(4);
        assert!(state.call_deadline().is_none());
        state.tokens.pop();
        state.first_token_due = None;
        assert!(state.call_deadline().is_none());
    }

    #[test]
    fn no_objective_no_deadline() {
        let clock: Arc<dyn Clock> = Arc::new(SetClock(Mutex::new(0.0)));
        for objective in [
            None,
            Some(0.0),
            Some(-5.0),
            Some(f64::NAN),
            Some(f64::INFINITY),
        ] {
            assert!(FirstTokenDue::of(0.0, objective, clock.clone()).is_none());
        }
    }
}
