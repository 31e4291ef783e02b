//! Per-caller rate and concurrency limits (429 with Retry-After), on top of the router-wide
//! in-flight limit, for every request whatever policy decides it.
//!
//! A caller is its API key when keys are configured, else its client address (front/admission.rs
//! `caller_key`). Each caller has a token bucket (`rps` requests per second, bursts up to
//! `burst`) and a cap on requests in flight (`max_inflight`); 0 turns a limit off. Callers are
//! kept in a bounded table, so a flood of distinct addresses costs bounded memory (a forgotten
//! caller starts with a full bucket again).

use super::admission::caller_key;
use super::api_error::ApiError;
use super::bridge::Caller;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

const MAX_CALLERS: usize = 10_000;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateRules {
    /// Sustained requests per second per caller (0 = unlimited).
    pub rps: f64,
    /// Bucket size (0 = max(1, rps)).
    pub burst: u32,
    /// Requests in flight per caller (0 = unlimited).
    pub max_inflight: u32,
}

impl RateRules {
    pub fn new(rps: f64, burst: u32, max_inflight: u32) -> Result<Self, String> {
        if !(rps.is_finite() && rps >= 0.0) {
            return Err("rate limits must be finite and >= 0".into());
        }
        Ok(RateRules {
            rps,
            burst,
            max_inflight,
        })
    }

    pub fn active(&self) -> bool {
        self.rps > 0.0 || self.max_inflight > 0
    }

    fn capacity(&self) -> f64 {
        if self.burst > 0 {
            f64::from(self.burst)
        } else {
            self.rps.max(1.0)
        }
    }
}

#[derive(Debug)]
struct CallerState {
    tokens: f64,
    updated: Instant,
    inflight: u32,
    used: u64,
}

#[derive(Debug, Default)]
struct Table {
    callers: HashMap<String, CallerState>,
    clock: u64,
}

#[derive(Debug, Default)]
pub struct CallerLimits {
    rules: RwLock<RateRules>,
    table: Arc<Mutex<Table>>,
}

/// One request counted in its caller's in-flight count until dropped.
pub struct CallerPermit {
    table: Arc<Mutex<Table>>,
    key: String,
}

impl Drop for CallerPermit {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(caller) = table.callers.get_mut(&self.key) {
            caller.inflight = caller.inflight.saturating_sub(1);
        }
    }
}

impl CallerLimits {
    pub fn set_rules(&self, rules: RateRules) {
        *self.rules.write().unwrap_or_else(PoisonError::into_inner) = rules;
    }

    pub fn rules(&self) -> RateRules {
        *self.rules.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one request of `caller` in (None when no limit is on); a 429 with its Retry-After
    /// when it is over a limit. `keyed`: the router has API keys (a caller is its key).
    pub fn acquire(&self, caller: &Caller, keyed: bool) -> Result<Option<CallerPermit>, ApiError> {
        let rules = self.rules();
        if !rules.active() {
            return Ok(None);
        }
        let key = caller_key(caller, keyed);
        self.acquire_at(&key, rules, Instant::now()).map(Some)
    }

    fn acquire_at(
        &self,
        key: &str,
        rules: RateRules,
        now: Instant,
    ) -> Result<CallerPermit, ApiError> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        table.clock += 1;
        let clock = table.clock;
        if !table.callers.contains_key(key) && table.callers.len() >= MAX_CALLERS {
            // Forget the least recently used caller with nothing in flight.
            let oldest = table
                .callers
                .iter()
                .filter(|(_, c)| c.inflight == 0)
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                table.callers.remove(&oldest);
            }
        }
        let caller = table.callers.entry(key.to_owned()).or_insert(CallerState {
            tokens: rules.capacity(),
            updated: now,
            inflight: 0,
            used: clock,
        });
        caller.used = clock;
        if rules.max_inflight > 0 && caller.inflight >= rules.max_inflight {
            return Err(ApiError::busy(format!(
                "{} requests of this caller in flight (limit {})",
                caller.inflight, rules.max_inflight
            ))
            .with_code("too_many_concurrent_requests")
            .with_retry_after(1.0));
        }
        if rules.rps > 0.0 {
            let elapsed = now.saturating_duration_since(caller.updated).as_secs_f64();
            caller.tokens = rules.capacity().min(caller.tokens + elapsed * rules.rps);
            caller.updated = now;
            if caller.tokens < 1.0 {
                let wait = (1.0 - caller.tokens) / rules.rps;
                return Err(ApiError::busy(format!(
                    "over the rate limit of {} requests/s for this caller",
                    crate::sampling::py_float(rules.rps).trim_end_matches(".0")
                ))
                .with_code("rate_limit_exceeded")
                .with_retry_after(wait));
            }
            caller.tokens -= 1.0;
        }
        caller.inflight += 1;
        Ok(CallerPermit {
            table: self.table.clone(),
            key: key.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rate_and_concurrency_per_caller() {
        let limits = CallerLimits::default();
        let rules = RateRules::new(2.0, 2, 3).unwrap();
        let t0 = Instant::now();
        let a1 = limits.acquire_at("a", rules, t0).unwrap();
        let _a2 = limits.acquire_at("a", rules, t0).unwrap();
        let over = limits.acquire_at("a", rules, t0).err().unwrap();
        assert_eq!(over.code.as_deref(), Some("rate_limit_exceeded"));
        assert_eq!(over.retry_after_s, Some(0.5));
        assert_eq!(
            over.message,
            "over the rate limit of 2 requests/s for this caller"
        );
        let _b = limits.acquire_at("b", rules, t0).unwrap(); // its own bucket
        let _a3 = limits
            .acquire_at("a", rules, t0 + Duration::from_millis(500))
            .unwrap();
        let busy = limits
            .acquire_at("a", rules, t0 + Duration::from_secs(10))
            .err()
            .unwrap();
        assert_eq!(busy.code.as_deref(), Some("too_many_concurrent_requests"));
        drop(a1);
        assert!(limits
            .acquire_at("a", rules, t0 + Duration::from_secs(10))
            .is_ok());
        assert!(RateRules::new(f64::NAN, 0, 0).is_err());
    }
}
