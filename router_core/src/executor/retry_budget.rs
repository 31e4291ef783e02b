//! How many engine failures the router hides from clients by trying elsewhere.
//!
//! A request whose engine failed before it produced anything is tried again on another engine
//! (the failed one leaves rotation). Two bounds keep a sick cluster from multiplying its own
//! load: a request is tried at most `per_request` more times, and across the router retries
//! spend from a bucket that every admitted request refills by `ratio` (up to `reserve`), so once
//! a burst of failures has spent the reserve at most `ratio` extra attempts per request remain.
//! Retries the budget refuses surface as the engine's error.

use std::sync::{Mutex, PoisonError};

#[derive(Debug)]
pub struct RetryBudget {
    state: Mutex<BudgetState>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BudgetState {
    pub per_request: u32,
    pub ratio: f64,
    pub reserve: f64,
    pub tokens: f64,
    /// Retries granted, and refused (metrics, tests).
    pub spent: u64,
    pub refused: u64,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget::new(2, 0.2, 100.0)
    }
}

impl RetryBudget {
    pub fn new(per_request: u32, ratio: f64, reserve: f64) -> Self {
        RetryBudget {
            state: Mutex::new(BudgetState {
                per_request,
                ratio,
                reserve,
                tokens: reserve,
                ..Default::default()
            }),
        }
    }

    /// New bounds, the bucket full again.
    pub fn configure(&self, per_request: u32, ratio: f64, reserve: f64) {
        *self.lock() = RetryBudget::new(per_request, ratio, reserve).state();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One request admitted: it earns the router `ratio` of a retry.
    pub fn admitted(&self) {
        let mut state = self.lock();
        state.tokens = state.reserve.min(state.tokens + state.ratio);
    }

    /// May this request, retried `retries_so_far` times already, be tried once more?
    pub fn allow(&self, retries_so_far: u32) -> bool {
        let mut state = self.lock();
        if retries_so_far >= state.per_request || state.tokens < 1.0 {
            state.refused += 1;
            return false;
        }
        state.tokens -= 1.0;
        state.spent += 1;
        true
    }

    pub fn state(&self) -> BudgetState {
        *self.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_request_and_reserve_bound_the_retries() {
        let budget = RetryBudget::new(2, 0.5, 2.0);
        assert!(budget.allow(0));
        assert!(budget.allow(1));
        assert!(!budget.allow(2), "the per-request bound");
        assert!(!budget.allow(0), "the reserve is spent");
        budget.admitted();
        budget.admitted();
        assert!(budget.allow(0), "two admissions earned one retry");
        let state = budget.state();
        assert_eq!((state.spent, state.refused), (3, 2));
        for _ in 0..10 {
            budget.admitted();
        }
        assert_eq!(budget.state().tokens, 2.0, "never past the reserve");
    }
}
