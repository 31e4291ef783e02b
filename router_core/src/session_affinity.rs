//! Session affinity: consistent hashing with bounded load, over the serving engines' ids.
//!
//! A session id (the `X-Session-Id` header, or the body's `user` when the operator allows it)
//! hashes to a point on a ring where every engine holds `POINTS_PER_ENGINE` points. The first
//! engine clockwise is the session's home; it takes the request while its load stays within the
//! bound — in-flight requests, counting this one, at most `ceil(c × (total + 1) / n)` for `n`
//! engines and `c` ≥ 1 — else the walk goes on clockwise to the next engine within it (the
//! session overflows). With `c` ≥ 1 the least loaded engine is always within the bound, so the
//! walk always ends on an engine.
//!
//! Why a ring: an engine joining takes only the sessions whose points now fall on it, and one
//! leaving (removed, drained, unhealthy) gives up only its own sessions, each to the engine next
//! on the ring; every other session stays where it was. The points depend only on the engine ids
//! and the session id (a fixed xxh3 seed), so every router replica sends a session to the same
//! home. Load is the router's in-flight count per engine (the engine table's `inflight`): the
//! router knows it exactly at dispatch, with no Stats poll in between.
//!
//! No crate was taken for this: the crates that implement bounded-load consistent hashing are
//! single releases that keep their own load counts per key, while the load here is the engine
//! table's; the ring over the table's ids is a few lines.

use crate::engine_table::EngineTable;
use crate::error::{Result, RouterCoreError};
use std::sync::{Arc, Mutex};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Points per engine: enough that each engine's share of the ring is within a few percent of
/// 1/n at the engine counts a router serves.
pub const POINTS_PER_ENGINE: u32 = 160;
/// The bound `c` when the operator sets none: an engine takes its sessions up to 1.25 × the
/// mean load.
pub const DEFAULT_LOAD_BOUND: f64 = 1.25;
/// Fixed, so that router replicas and restarts place sessions alike.
const RING_SEED: u64 = 0x5e55_1047;

/// What the operator set: the bound `c`, and whether the body's `user` names a session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionSettings {
    pub load_bound: f64,
    pub from_user: bool,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            load_bound: DEFAULT_LOAD_BOUND,
            from_user: false,
        }
    }
}

impl SessionSettings {
    /// Checked: `c` below 1 could leave every engine over its bound.
    pub fn new(load_bound: f64, from_user: bool) -> Result<Self> {
        if !(load_bound.is_finite() && load_bound >= 1.0) {
            return Err(RouterCoreError::InvalidArgument(format!(
                "session load bound must be a number >= 1, got {load_bound}"
            )));
        }
        Ok(SessionSettings {
            load_bound,
            from_user,
        })
    }
}

/// A session id's place on the ring.
pub fn session_key(session_id: &str) -> u64 {
    xxh3_64_with_seed(session_id.as_bytes(), RING_SEED)
}

fn point(engine: u32, replica: u32) -> u64 {
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&engine.to_le_bytes());
    buf[4..].copy_from_slice(&replica.to_le_bytes());
    xxh3_64_with_seed(&buf, RING_SEED)
}

/// Most in-flight requests an engine may hold, this one included, when `total` are in flight
/// over `engines` engines: `ceil(c × (total + 1) / engines)`.
pub fn load_cap(total: u64, engines: usize, load_bound: f64) -> u64 {
    let engines = engines.max(1) as f64;
    ((load_bound * (total as f64 + 1.0)) / engines).ceil() as u64
}

/// Where a session's request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPick {
    pub engine: u32,
    /// The session's home was over the bound: the walk went on past it.
    pub overflowed: bool,
}

impl SessionPick {
    /// The route header's word for it.
    pub fn outcome(self) -> &'static str {
        if self.overflowed {
            "overflow"
        } else {
            "stuck"
        }
    }
}

/// The ring over one set of engines.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRing {
    /// Sorted engine ids.
    members: Vec<u32>,
    /// (point, engine), sorted.
    points: Vec<(u64, u32)>,
}

impl SessionRing {
    pub fn new(engines: &[u32]) -> Self {
        let mut members = engines.to_vec();
        members.sort_unstable();
        members.dedup();
        let mut points: Vec<(u64, u32)> = members
            .iter()
            .flat_map(|&e| (0..POINTS_PER_ENGINE).map(move |r| (point(e, r), e)))
            .collect();
        points.sort_unstable();
        SessionRing { members, points }
    }

    pub fn members(&self) -> &[u32] {
        &self.members
    }

    /// The engines in the order a walk from `key` meets them, home first.
    pub fn walk(&self, key: u64) -> Vec<u32> {
        let start = self.points.partition_point(|&(p, _)| p < key);
        let mut order: Vec<u32> = Vec::with_capacity(self.members.len());
        let around = self.points[start..].iter().chain(&self.points[..start]);
        for &(_, engine) in around {
            if !order.contains(&engine) {
                order.push(engine);
                if order.len() == self.members.len() {
                    break;
                }
            }
        }
        order
    }

    /// The engine for session `key` among `loads` ((engine id, requests in flight) of the
    /// engines that may serve it; engines not on the ring are not taken): the first on the walk
    /// within the bound. None when no engine of `loads` is on the ring.
    pub fn choose(&self, key: u64, loads: &[(u32, u64)], load_bound: f64) -> Option<SessionPick> {
        let load = |engine: u32| loads.iter().find(|(e, _)| *e == engine).map(|(_, l)| *l);
        let order: Vec<(u32, u64)> = self
            .walk(key)
            .into_iter()
            .filter_map(|e| load(e).map(|l| (e, l)))
            .collect();
        let total: u64 = order.iter().map(|(_, l)| l).sum();
        let cap = load_cap(total, order.len(), load_bound);
        let (home, _) = *order.first()?;
        // Within the bound, or (only when c < 1 slipped through) the least loaded.
        let engine = order
            .iter()
            .find(|(_, l)| *l < cap)
            .or_else(|| order.iter().min_by_key(|(e, l)| (*l, *e)))
            .map_or(home, |(e, _)| *e);
        Some(SessionPick {
            engine,
            overflowed: engine != home,
        })
    }
}

/// (engine id, requests in flight) of the healthy engines `member` admits, by id: the engines a
/// session may go to and the load its bound reads.
pub fn serving_loads(table: &EngineTable, member: &dyn Fn(u32) -> bool) -> Vec<(u32, u64)> {
    table
        .all()
        .filter(|e| e.healthy && member(e.engine_id))
        .map(|e| (e.engine_id, e.inflight))
        .collect()
}

/// The ring of the latest engine set, rebuilt only when the set changes (requests share it).
#[derive(Debug, Default)]
pub struct RingCache {
    ring: Mutex<Option<Arc<SessionRing>>>,
}

impl RingCache {
    /// The ring over `engines` (sorted ids).
    pub fn ring_for(&self, engines: &[u32]) -> Arc<SessionRing> {
        let mut held = crate::router::lock(&self.ring);
        if let Some(ring) = held.as_ref() {
            if ring.members() == engines {
                return ring.clone();
            }
        }
        let ring = Arc::new(SessionRing::new(engines));
        *held = Some(ring.clone());
        ring
    }

    /// Where session `session_id` goes among `loads` ([`SessionRing::choose`] on the ring over
    /// exactly those engines).
    pub fn pick(
        &self,
        session_id: &str,
        loads: &[(u32, u64)],
        load_bound: f64,
    ) -> Option<SessionPick> {
        let mut engines: Vec<u32> = loads.iter().map(|(e, _)| *e).collect();
        engines.sort_unstable();
        engines.dedup();
        self.ring_for(&engines)
            .choose(session_key(session_id), loads, load_bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle(engines: &[u32]) -> Vec<(u32, u64)> {
        engines.iter().map(|&e| (e, 0)).collect()
    }

    fn home(ring: &SessionRing, session: &str, engines: &[u32]) -> u32 {
        ring.choose(session_key(session), &idle(engines), DEFAULT_LOAD_BOUND)
            .unwrap()
            .engine
    }

    #[test]
    fn a_session_keeps_its_engine_and_sessions_spread() {
        let engines = [0, 1, 2, 3];
        let ring = SessionRing::new(&engines);
        let mut per_engine = [0u32; 4];
        for s in 0..4000 {
            let id = format!("conversation-{s}");
            let first = home(&ring, &id, &engines);
            assert_eq!(home(&ring, &id, &engines), first);
            assert_eq!(home(&SessionRing::new(&[3, 2, 1, 0]), &id, &engines), first);
            per_engine[first as usize] += 1;
        }
        // 1000 each on a perfect ring; 160 points per engine keep each within ±25%.
        for n in per_engine {
            assert!((750..=1250).contains(&n), "{per_engine:?}");
        }
    }

    #[test]
    fn an_engine_over_the_bound_passes_the_session_on() {
        let engines = [0, 1];
        let ring = SessionRing::new(&engines);
        let key = session_key("s");
        let home = ring.walk(key)[0];
        let other = 1 - home;
        let with = |home_load: u64, other_load: u64| {
            ring.choose(key, &[(home, home_load), (other, other_load)], 1.25)
                .unwrap()
        };
        // cap = ceil(1.25 × (total + 1) / 2): 2 with one or two in flight, so the home takes a
        // second request and passes on a third.
        assert_eq!(
            with(1, 0),
            SessionPick {
                engine: home,
                overflowed: false
            }
        );
        let over = with(2, 0);
        assert_eq!((over.engine, over.outcome()), (other, "overflow"));
        // Back within the bound once the others catch up.
        assert_eq!(with(2, 2).engine, home);
        // c = 1: a home as loaded as the mean still takes one more; above it, not.
        assert!(
            !ring
                .choose(key, &[(home, 1), (other, 1)], 1.0)
                .unwrap()
                .overflowed
        );
        assert!(
            ring.choose(key, &[(home, 2), (other, 1)], 1.0)
                .unwrap()
                .overflowed
        );
    }

    #[test]
    fn the_walk_ends_within_the_bound_whatever_the_loads() {
        let engines: Vec<u32> = (0..5).collect();
        let ring = SessionRing::new(&engines);
        for s in 0..200u64 {
            let loads: Vec<(u32, u64)> = engines
                .iter()
                .map(|&e| (e, (s * 7 + u64::from(e) * 3) % 11))
                .collect();
            let total: u64 = loads.iter().map(|(_, l)| l).sum();
            for bound in [1.0, 1.25, 2.0] {
                let pick = ring
                    .choose(session_key(&s.to_string()), &loads, bound)
                    .unwrap();
                let load = loads[pick.engine as usize].1;
                assert!(
                    load < load_cap(total, engines.len(), bound),
                    "{loads:?} {bound}"
                );
            }
        }
    }

    #[test]
    fn membership_changes_move_only_that_engines_sessions() {
        let before = [0, 1, 2, 3];
        let ring = SessionRing::new(&before);
        let sessions: Vec<String> = (0..2000).map(|s| format!("user-{s}")).collect();
        let homes: Vec<u32> = sessions.iter().map(|s| home(&ring, s, &before)).collect();
        // Engine 2 leaves: only its sessions move, and they spread over the others.
        let after = [0, 1, 3];
        let shrunk = SessionRing::new(&after);
        let mut took = [0u32; 4];
        for (s, &was) in sessions.iter().zip(&homes) {
            let now = home(&shrunk, s, &after);
            if was == 2 {
                took[now as usize] += 1;
            } else {
                assert_eq!(now, was, "{s} moved off engine {was}");
            }
        }
        assert!(took[0] > 0 && took[1] > 0 && took[3] > 0, "{took:?}");
        // Engine 4 joins: sessions move only onto it, about a fifth of them.
        let grown_ids = [0, 1, 2, 3, 4];
        let grown = SessionRing::new(&grown_ids);
        let mut moved = 0;
        for (s, &was) in sessions.iter().zip(&homes) {
            let now = home(&grown, s, &grown_ids);
            if now != was {
                assert_eq!(now, 4, "{s} moved from {was} to {now}");
                moved += 1;
            }
        }
        assert!((250..=550).contains(&moved), "{moved} of 2000 moved");
    }

    #[test]
    fn only_the_given_engines_are_taken() {
        let ring = SessionRing::new(&[0, 1, 2]);
        let key = session_key("s");
        let home = ring.walk(key)[0];
        // The home is not among the serving engines (draining): the next on the ring takes it,
        // as its own home, not an overflow.
        let serving: Vec<(u32, u64)> = [0, 1, 2]
            .into_iter()
            .filter(|&e| e != home)
            .map(|e| (e, 0))
            .collect();
        let pick = ring.choose(key, &serving, 1.25).unwrap();
        assert_eq!(pick.engine, ring.walk(key)[1]);
        assert!(!pick.overflowed);
        assert_eq!(ring.choose(key, &[(9, 0)], 1.25), None);
        assert_eq!(ring.choose(key, &[], 1.25), None);
    }

    #[test]
    fn the_cache_rebuilds_only_for_a_new_engine_set() {
        let cache = RingCache::default();
        let first = cache.ring_for(&[0, 1]);
        assert!(Arc::ptr_eq(&first, &cache.ring_for(&[0, 1])));
        let other = cache.ring_for(&[0, 2]);
        assert_eq!(other.members(), &[0, 2]);
        assert!(!Arc::ptr_eq(&first, &other));
    }

    #[test]
    fn settings_refuse_a_bound_below_one() {
        assert!(SessionSettings::new(0.9, false).is_err());
        assert!(SessionSettings::new(f64::NAN, false).is_err());
        assert_eq!(SessionSettings::new(1.0, true).unwrap().load_bound, 1.0);
        assert_eq!(SessionSettings::default().load_bound, DEFAULT_LOAD_BOUND);
    }
}
