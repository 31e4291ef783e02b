//! The pure-selection built-in policies in Rust, so a request under them runs no Python at all:
//! round_robin, least_load and cache_aware (pyrouter/policies/*.py). Each picks exactly the
//! engine its Python version picks for the same engine table and the same cursor, and names the
//! route the same way (tests/policy/test_fast_path_identity.py checks both against each other).
//! The Python side chooses the fast path automatically when the active policy is one of these
//! built-ins (a policy file re-registering the name keeps its own Python code).

use super::api_error::ApiError;
use super::engine_names::engine_name;
use crate::engine_table::EngineLoad;
use crate::router::{lock, monotonic_s, RouterCore};
use crate::scoring::ScoreWeights;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FastPolicyKind {
    RoundRobin,
    LeastLoad,
    CacheAware(ScoreWeights),
}

impl FastPolicyKind {
    /// By the built-in's name; cache_aware takes its four weights.
    pub fn parse(name: &str, weights: Option<ScoreWeights>) -> Option<Self> {
        match name {
            "round_robin" => Some(FastPolicyKind::RoundRobin),
            "least_load" => Some(FastPolicyKind::LeastLoad),
            "cache_aware" => Some(FastPolicyKind::CacheAware(weights.unwrap_or_default())),
            _ => None,
        }
    }
}

/// One active instance (a switch makes a new one: fresh cursor, as a fresh ActivePolicy has
/// fresh state).
#[derive(Debug)]
pub struct FastPolicy {
    pub kind: FastPolicyKind,
    /// The policy's name (metrics and logs).
    pub name: String,
    /// round_robin's turn counter (`cluster.state["turn"]`).
    cursor: AtomicU64,
}

/// The engine chosen and the route header describing it.
#[derive(Debug, Clone, PartialEq)]
pub struct FastChoice {
    pub engine: u32,
    pub route: String,
    /// The route's pattern (the header's first word; metrics).
    pub pattern: &'static str,
}

fn no_healthy_engine() -> ApiError {
    ApiError::no_capacity("no healthy engine")
}

impl FastPolicy {
    pub fn new(kind: FastPolicyKind, name: &str) -> Self {
        FastPolicy {
            kind,
            name: name.to_owned(),
            cursor: AtomicU64::new(0),
        }
    }

    /// Picks the engine for `tokens` among the table's healthy engines (those serving: healthy
    /// and not draining). Errors are the 503s the Python versions raise.
    pub fn choose(&self, core: &RouterCore, tokens: &[u32]) -> Result<FastChoice, ApiError> {
        self.choose_among(core, tokens, &|_| true)
    }

    /// As `choose`, among the engines `member` admits only (a served model's group).
    pub fn choose_among(
        &self,
        core: &RouterCore,
        tokens: &[u32],
        member: &dyn Fn(u32) -> bool,
    ) -> Result<FastChoice, ApiError> {
        match self.kind {
            FastPolicyKind::RoundRobin => {
                // Counted, then walked to the turn's engine: no list of the fleet built per
                // request (at 1,024 engines that allocation and copy was ~10% of the router).
                let table = lock(&core.table);
                let serving = || table.all().filter(|e| e.healthy && member(e.engine_id));
                let count = serving().count();
                if count == 0 {
                    return Err(no_healthy_engine());
                }
                let turn = self.cursor.fetch_add(1, Ordering::Relaxed);
                let engine = serving()
                    .nth((turn % count as u64) as usize)
                    .map(|e| e.engine_id)
                    .ok_or_else(no_healthy_engine)?;
                Ok(FastChoice {
                    engine,
                    route: format!("dp engine={} via=round_robin", engine_name(engine)),
                    pattern: "dp",
                })
            }
            FastPolicyKind::LeastLoad => {
                let best = least_loaded(core, member).ok_or_else(no_healthy_engine)?;
                Ok(FastChoice {
                    engine: best.id,
                    route: format!(
                        "dp engine={} via=least_load unfinished={}",
                        engine_name(best.id),
                        best.unfinished
                    ),
                    pattern: "dp",
                })
            }
            FastPolicyKind::CacheAware(weights) => {
                let result = core
                    .score(tokens, None, Some(&weights), monotonic_s())
                    .map_err(ApiError::from)?;
                let best = result
                    .candidates
                    .iter()
                    .find(|c| member(c.engine_id))
                    .ok_or_else(|| ApiError::no_capacity("no healthy engine with role 'any'"))?;
                Ok(FastChoice {
                    engine: best.engine_id,
                    route: format!(
                        "cache_aware engine={} matched={}",
                        engine_name(best.engine_id),
                        best.matched_tokens
                    ),
                    pattern: "cache_aware",
                })
            }
        }
    }
}

/// What the data-parallel picks look at, per healthy engine.
struct Serving {
    id: u32,
    /// Unfinished tokens: the engine's Stats plus the router's dispatches since.
    unfinished: u64,
    inflight: u64,
}

/// The healthy engine `member` admits with the fewest unfinished tokens, then in-flight
/// requests, then the lowest id (one pass, nothing collected).
fn least_loaded(core: &RouterCore, member: &dyn Fn(u32) -> bool) -> Option<Serving> {
    let table = lock(&core.table);
    table
        .all()
        .filter(|e| e.healthy && member(e.engine_id))
        .map(|e: &EngineLoad| Serving {
            id: e.engine_id,
            unfinished: e.unfinished_tokens + e.router_tokens,
            inflight: e.inflight,
        })
        .min_by_key(|e| (e.unfinished, e.inflight, e.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_table::{Role, StatsUpdate};

    fn core_with(loads: &[(u64, u64, bool)]) -> RouterCore {
        let core = RouterCore::new(4, 0, ScoreWeights::default(), 1000, 60.0).unwrap();
        for (id, (unfinished, inflight, healthy)) in loads.iter().enumerate() {
            let id = id as u32;
            let mut table = lock(&core.table);
            table.upsert(id, Role::Any);
            table.set_health(id, *healthy).unwrap();
            table
                .update_stats(
                    id,
                    &StatsUpdate {
                        queued_prefill_tokens: 0,
                        running_decodes: 0,
                        queued_requests: 0,
                        unfinished_tokens: *unfinished,
                        kv_pages_used: 0,
                        kv_pages_evictable: 0,
                        kv_pages_total: 100,
                        decode_step_ms: 0.0,
                        decode_context_tokens: 0,
                        latency_model: Vec::new(),
                        prefill_chunk_size: 0,
                    },
                )
                .unwrap();
            for _ in 0..*inflight {
                table.on_dispatch(id, 0, 0).unwrap();
            }
            drop(table);
            lock(&core.index).add_engine(id, false);
        }
        core
    }

    #[test]
    fn round_robin_takes_turns_over_healthy_engines() {
        let core = core_with(&[(0, 0, true), (0, 0, false), (0, 0, true)]);
        let rr = FastPolicy::new(FastPolicyKind::RoundRobin, "round_robin");
        let picks: Vec<u32> = (0..4)
            .map(|_| rr.choose(&core, &[1]).unwrap().engine)
            .collect();
        assert_eq!(picks, vec![0, 2, 0, 2]);
        assert_eq!(
            rr.choose(&core, &[1]).unwrap().route,
            "dp engine=e0 via=round_robin"
        );
        let none = core_with(&[(0, 0, false)]);
        let err = rr.choose(&none, &[1]).unwrap_err();
        assert_eq!(
            (err.status, err.message.as_str()),
            (503, "no healthy engine")
        );
    }

    #[test]
    fn least_load_breaks_ties_by_inflight_then_id() {
        let core = core_with(&[(10, 0, true), (5, 2, true), (5, 1, true), (1, 0, false)]);
        let ll = FastPolicy::new(FastPolicyKind::LeastLoad, "least_load");
        let choice = ll.choose(&core, &[1]).unwrap();
        assert_eq!(choice.engine, 2);
        assert_eq!(choice.route, "dp engine=e2 via=least_load unfinished=5");
    }

    #[test]
    fn cache_aware_scores_with_its_weights() {
        let core = core_with(&[(0, 0, true), (0, 0, true)]);
        let tokens: Vec<u32> = (0..8).collect();
        let hashes = crate::hashing::block_hashes(&tokens, 4, 0).unwrap();
        lock(&core.index)
            .apply_events(1, 1, 1, &hashes, &[])
            .unwrap();
        let ca = FastPolicy::new(
            FastPolicyKind::CacheAware(ScoreWeights::default()),
            "cache_aware",
        );
        let choice = ca.choose(&core, &tokens).unwrap();
        assert_eq!(choice.route, "cache_aware engine=e1 matched=8");
        assert_eq!(FastPolicyKind::parse("pd", None), None);
        // Among engine 0 alone (another model's group holds e1), e0 it is.
        let choice = ca.choose_among(&core, &tokens, &|e| e == 0).unwrap();
        assert_eq!(choice.route, "cache_aware engine=e0 matched=0");
    }

    #[test]
    fn a_group_picks_among_its_own_engines_only() {
        let core = core_with(&[(0, 0, true), (9, 0, true), (0, 0, true), (5, 0, true)]);
        let odd = |e: u32| e % 2 == 1;
        let rr = FastPolicy::new(FastPolicyKind::RoundRobin, "round_robin");
        let picks: Vec<u32> = (0..3)
            .map(|_| rr.choose_among(&core, &[1], &odd).unwrap().engine)
            .collect();
        assert_eq!(picks, vec![1, 3, 1]);
        let ll = FastPolicy::new(FastPolicyKind::LeastLoad, "least_load");
        assert_eq!(ll.choose_among(&core, &[1], &odd).unwrap().engine, 3);
        let err = ll.choose_among(&core, &[1], &|_| false).unwrap_err();
        assert_eq!(err.status, 503);
    }
}
