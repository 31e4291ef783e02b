//! Unit tests, and a property test of the index against a naive reference model under random
//! add/remove/event/gap/snapshot/routed/match sequences.

use super::ttl::bucket_expired;
use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};

const TTL: f64 = 16.0;

fn sorted(mut v: Vec<(u32, usize)>) -> Vec<(u32, usize)> {
    v.sort_unstable();
    v
}

#[test]
fn matches_leading_blocks_per_engine() {
    let mut idx = PrefixIndex::new(1000, TTL).unwrap();
    idx.add_engine(0, false);
    idx.add_engine(7, false);
    assert!(idx.apply_events(0, 1, 1, &[10, 11, 12], &[]).unwrap());
    assert!(idx.apply_events(7, 1, 2, &[10, 12], &[]).unwrap());
    assert_eq!(
        sorted(idx.match_prefix(&[10, 11, 12, 13])),
        vec![(0, 3), (7, 1)]
    );
    assert_eq!(idx.match_prefix(&[99, 10]), vec![]);
    assert!(idx.apply_events(0, 2, 2, &[], &[11]).unwrap());
    assert_eq!(sorted(idx.match_prefix(&[10, 11])), vec![(0, 1), (7, 1)]);
    assert_eq!(idx.num_blocks(), 2);
    assert_eq!(idx.engine_blocks(0).unwrap(), 2);
}

#[test]
fn gap_marks_stale_until_snapshot() {
    let mut idx = PrefixIndex::new(1000, TTL).unwrap();
    idx.add_engine(1, false);
    assert!(idx.apply_events(1, 1, 3, &[1], &[]).unwrap());
    assert!(!idx.apply_events(1, 5, 5, &[2], &[]).unwrap());
    assert!(idx.is_stale(1).unwrap());
    assert!(
        idx.apply_events(1, 6, 6, &[3], &[]).unwrap(),
        "contiguous after the gap"
    );
    assert!(idx.is_stale(1).unwrap());
    idx.apply_snapshot(1, 6, &[4, 5]).unwrap();
    assert!(!idx.is_stale(1).unwrap());
    assert_eq!(idx.match_prefix(&[1]), vec![]);
    assert_eq!(idx.match_prefix(&[4, 5]), vec![(1, 2)]);
    assert!(
        idx.apply_events(1, 3, 6, &[1], &[]).unwrap(),
        "old batch ignored"
    );
    assert_eq!(idx.match_prefix(&[1]), vec![]);
}

#[test]
fn wide_engine_sets_beyond_64_engines() {
    let mut idx = PrefixIndex::new(1000, TTL).unwrap();
    for e in 0..200 {
        idx.add_engine(e, false);
        idx.apply_events(e, 1, 1, &[1, 2 + u64::from(e % 3)], &[])
            .unwrap();
    }
    let m = sorted(idx.match_prefix(&[1, 2]));
    assert_eq!(m.len(), 200);
    assert_eq!(m.iter().filter(|(_, d)| *d == 2).count(), 67);
    idx.remove_engine(5);
    assert_eq!(idx.match_prefix(&[1]).len(), 199);
    let before = idx.memory_bytes();
    for e in 0..200 {
        idx.remove_engine(e);
    }
    assert_eq!(idx.num_blocks(), 0);
    assert!(idx.memory_bytes() <= before);
}

#[test]
fn capacity_bounds_blocks() {
    let mut idx = PrefixIndex::new(2, TTL).unwrap();
    idx.add_engine(0, false);
    idx.apply_events(0, 1, 1, &[1, 2, 3], &[]).unwrap();
    assert_eq!(idx.num_blocks(), 2);
    assert_eq!(idx.dropped_blocks(), 1);
    idx.add_engine(1, true);
    idx.record_routed(1, &[1, 9], 0.0).unwrap();
    assert_eq!(idx.num_blocks(), 2);
    assert_eq!(sorted(idx.match_prefix(&[1, 2])), vec![(0, 2), (1, 1)]);
}

#[test]
fn approximate_mode_expires() {
    let mut idx = PrefixIndex::new(100, TTL).unwrap();
    idx.add_engine(3, true);
    idx.record_routed(3, &[1, 2], 0.0).unwrap();
    assert_eq!(idx.match_prefix(&[1, 2]), vec![(3, 2)]);
    idx.record_routed(3, &[1], 10.0).unwrap();
    idx.purge_expired(20.0);
    assert_eq!(idx.match_prefix(&[1, 2]), vec![(3, 1)]);
    idx.purge_expired(30.0);
    assert_eq!(idx.match_prefix(&[1]), vec![]);
    assert_eq!(idx.engine_blocks(3).unwrap(), 0);
    assert!(idx.apply_events(3, 1, 1, &[1], &[]).is_err());
}

#[test]
fn bad_input_is_an_error() {
    assert!(PrefixIndex::new(0, TTL).is_err());
    assert!(PrefixIndex::new(10, 0.0).is_err());
    assert!(PrefixIndex::new(10, f64::NAN).is_err());
    let mut idx = PrefixIndex::new(10, TTL).unwrap();
    assert_eq!(
        idx.apply_events(4, 1, 1, &[], &[]),
        Err(RouterCoreError::UnknownEngine(4))
    );
    idx.add_engine(4, false);
    assert!(idx.apply_events(4, 3, 2, &[], &[]).is_err());
    assert!(idx.is_stale(5).is_err());
    idx.remove_engine(5); // unknown: no-op
}

// ---- the reference model ----

#[derive(Default)]
struct RefEngine {
    approx: bool,
    held: HashSet<u64>,
    expiry: BTreeMap<u64, u64>,
    last_seq: u64,
    stale: bool,
}

#[derive(Default)]
struct RefIndex {
    engines: BTreeMap<u32, RefEngine>,
}

impl RefIndex {
    fn holds(e: &RefEngine, h: u64, now: f64) -> bool {
        if e.approx {
            e.expiry
                .get(&h)
                .is_some_and(|b| !bucket_expired(*b, now, TTL))
        } else {
            e.held.contains(&h)
        }
    }

    fn matches(&self, hashes: &[u64], now: f64) -> Vec<(u32, usize)> {
        let mut out = Vec::new();
        for (id, e) in &self.engines {
            let n = hashes
                .iter()
                .take_while(|h| Self::holds(e, **h, now))
                .count();
            if n > 0 {
                out.push((*id, n));
            }
        }
        out
    }

    fn count(&self, id: u32, now: f64) -> usize {
        let e = &self.engines[&id];
        if e.approx {
            e.expiry
                .values()
                .filter(|b| !bucket_expired(**b, now, TTL))
                .count()
        } else {
            e.held.len()
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u32, bool),
    Remove(u32),
    Events {
        engine: u32,
        kind: u8,
        stored: Vec<u64>,
        evicted: Vec<u64>,
    },
    Snapshot(u32, Vec<u64>),
    Routed(u32, Vec<u64>, f64),
    Match(Vec<u64>, f64),
}

fn hashes() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(0u64..12, 0..8)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..5, any::<bool>()).prop_map(|(e, a)| Op::Add(e, a)),
        (0u32..5).prop_map(Op::Remove),
        (0u32..5, 0u8..3, hashes(), hashes()).prop_map(|(engine, kind, stored, evicted)| {
            Op::Events {
                engine,
                kind,
                stored,
                evicted,
            }
        }),
        (0u32..5, hashes()).prop_map(|(e, s)| Op::Snapshot(e, s)),
        (0u32..5, hashes(), 0.0f64..10.0).prop_map(|(e, h, dt)| Op::Routed(e, h, dt)),
        (hashes(), 0.0f64..10.0).prop_map(|(h, dt)| Op::Match(h, dt)),
    ]
}

fn run(ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
    let mut idx = PrefixIndex::new(1 << 20, TTL).unwrap();
    let mut reference = RefIndex::default();
    let mut now = 0.0f64;
    for op in ops {
        match op {
            Op::Add(id, approx) => {
                idx.add_engine(id, approx);
                let same = reference
                    .engines
                    .get(&id)
                    .is_some_and(|e| e.approx == approx);
                if !same {
                    reference.engines.insert(
                        id,
                        RefEngine {
                            approx,
                            ..Default::default()
                        },
                    );
                }
            }
            Op::Remove(id) => {
                idx.remove_engine(id);
                reference.engines.remove(&id);
            }
            Op::Events {
                engine,
                kind,
                stored,
                evicted,
            } => {
                let seen = idx.last_seq(engine).unwrap_or(0);
                let (first, last) = match kind {
                    0 => (seen + 1, seen + 1 + stored.len() as u64),
                    1 => (seen + 2, seen + 3),
                    _ => (seen.saturating_sub(1), seen),
                };
                let got = idx.apply_events(engine, first, last, &stored, &evicted);
                let want = match reference.engines.get_mut(&engine) {
                    None => Err(()),
                    Some(e) if e.approx => Err(()),
                    Some(e) if last <= e.last_seq => Ok(true),
                    Some(e) => {
                        let gap = first > e.last_seq + 1;
                        e.last_seq = last;
                        e.stale |= gap;
                        for h in &evicted {
                            e.held.remove(h);
                        }
                        e.held.extend(stored.iter().copied());
                        Ok(!gap)
                    }
                };
                prop_assert_eq!(got.map_err(|_| ()), want);
            }
            Op::Snapshot(engine, stored) => {
                let got = idx.apply_snapshot(engine, 100, &stored).is_ok();
                let want = match reference.engines.get_mut(&engine) {
                    Some(e) if !e.approx => {
                        e.held = stored.iter().copied().collect();
                        e.last_seq = 100;
                        e.stale = false;
                        true
                    }
                    _ => false,
                };
                prop_assert_eq!(got, want);
            }
            Op::Routed(engine, hashes, dt) => {
                now += dt;
                let got = idx.record_routed(engine, &hashes, now).is_ok();
                prop_assert_eq!(got, reference.engines.contains_key(&engine));
                if let Some(e) = reference.engines.get_mut(&engine) {
                    if e.approx {
                        let b = expiry_bucket(now, TTL);
                        for h in hashes {
                            let slot = e.expiry.entry(h).or_insert(b);
                            *slot = (*slot).max(b);
                        }
                    }
                }
            }
            Op::Match(hashes, dt) => {
                now += dt;
                idx.purge_expired(now);
                prop_assert_eq!(
                    sorted(idx.match_prefix(&hashes)),
                    reference.matches(&hashes, now)
                );
            }
        }
        idx.purge_expired(now);
        for (id, e) in &reference.engines {
            prop_assert_eq!(idx.is_stale(*id).unwrap(), e.stale && !e.approx);
            prop_assert_eq!(idx.engine_blocks(*id).unwrap(), reference.count(*id, now));
        }
        let all: HashSet<u64> = (0..12u64)
            .filter(|h| {
                reference
                    .engines
                    .values()
                    .any(|e| RefIndex::holds(e, *h, now))
            })
            .collect();
        prop_assert_eq!(idx.num_blocks(), all.len());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn index_agrees_with_reference(ops in prop::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
