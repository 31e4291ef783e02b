//! The mock engine's load, as its Stats answer reports it and as its KV event streams push it
//! (engine.proto, KVEventBatch.stats): the first batch of a stream carries it, and later ones
//! whenever it differs from the last pushed in anything but its step timings, at most one push
//! per [`PUSH_INTERVAL`] — woken by the load changing, so an idle mock costs nothing.

use super::generation::RunningTable;
use super::prefix_cache::MockPrefixCache;
use crate::rpc::pb;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

/// At most one push per stream this often: the real engine's (engine/server/load_push.py
/// PUSH_INTERVAL_S), so that router tests see the same coalescing from both.
pub const PUSH_INTERVAL: Duration = Duration::from_millis(50);

/// The mock's "unlimited" KV pool and context, as Stats and ModelInfo report them.
pub const REPORTED_CAPACITY: i32 = 1 << 20;

/// What the mock's Stats are made of (shared by the service and its event streams).
#[derive(Clone)]
pub struct MockLoad {
    pub engine_id: String,
    pub role: String,
    pub page_size: i32,
    pub step_ms: f64,
    pub running: Arc<RunningTable>,
    pub cache: Arc<MockPrefixCache>,
    /// Prefill token budget per step as Configure set it (the mock has no prefill to chunk).
    pub prefill_chunk_size: Arc<AtomicI32>,
}

impl MockLoad {
    pub fn stats(&self) -> pb::StatsResponse {
        let (running, unfinished) = self.running.load();
        let blocks = self.cache.num_blocks() as i32;
        pb::StatsResponse {
            engine_id: self.engine_id.clone(),
            role: self.role.clone(),
            running_requests: running as i32,
            decode_requests: running as i32,
            prefill_chunk_size: self.prefill_chunk_size.load(Ordering::Relaxed),
            unfinished_tokens: unfinished as i64,
            kv_pages_used: blocks,
            // The mock's pages are all cache: nothing holds them once a request ends.
            kv_pages_evictable: blocks,
            kv_pages_total: REPORTED_CAPACITY,
            cached_blocks: blocks,
            page_size: self.page_size,
            decode_step_ms: self.step_ms,
            kv_event_seq: self.cache.last_seq(),
            ..Default::default()
        }
    }
}

/// What of a Stats a push is sent for: all of it but the step timings (noise, not load).
fn routing_view(stats: &pb::StatsResponse) -> pb::StatsResponse {
    pb::StatsResponse {
        recent_step_ms: Vec::new(),
        decode_step_ms: 0.0,
        ..stats.clone()
    }
}

/// One stream's pushes: what it pushed last, and when it may push next.
pub struct LoadPush {
    load: MockLoad,
    changed: watch::Receiver<u64>,
    pushed: Option<pb::StatsResponse>,
    not_before: Instant,
    /// A change seen before `not_before`, to push then.
    deferred: bool,
}

impl LoadPush {
    pub fn new(load: MockLoad) -> Self {
        let mut changed = load.running.subscribe();
        changed.borrow_and_update();
        LoadPush {
            load,
            changed,
            pushed: None,
            not_before: Instant::now(),
            deferred: false,
        }
    }

    /// The Stats to send with the stream's next batch: always the first time, then when they
    /// changed and the last push is `PUSH_INTERVAL` old (else deferred until it is).
    pub fn take_due(&mut self) -> Option<pb::StatsResponse> {
        let now = Instant::now();
        if self.pushed.is_some() && now < self.not_before {
            self.deferred = true;
            return None;
        }
        self.deferred = false;
        let stats = self.load.stats();
        let view = routing_view(&stats);
        if self.pushed.as_ref() == Some(&view) {
            return None;
        }
        self.pushed = Some(view);
        self.not_before = now + PUSH_INTERVAL;
        Some(stats)
    }

    /// Until a push may be due: the load changed, or a deferred change may go now. False when
    /// the engine is gone.
    pub async fn wait(&mut self) -> bool {
        if self.deferred {
            tokio::time::sleep_until(self.not_before).await;
            return true;
        }
        let alive = self.changed.changed().await.is_ok();
        self.changed.borrow_and_update();
        self.deferred = true;
        alive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load() -> MockLoad {
        MockLoad {
            engine_id: "m".into(),
            role: "any".into(),
            page_size: 16,
            step_ms: 1.0,
            running: Arc::new(RunningTable::default()),
            cache: Arc::new(MockPrefixCache::new(16, 0, 0)),
            prefill_chunk_size: Arc::new(AtomicI32::new(512)),
        }
    }

    #[tokio::test]
    async fn the_first_push_always_then_only_changes_at_most_once_an_interval() {
        let load = load();
        let mut push = LoadPush::new(load.clone());
        let first = Instant::now();
        assert!(push.take_due().is_some());
        assert!(push.take_due().is_none()); // unchanged
        load.prefill_chunk_size.store(64, Ordering::Relaxed);
        load.running.touch();
        assert!(push.wait().await);
        if Instant::now() < first + PUSH_INTERVAL {
            // Changed, but pushed less than an interval ago: deferred until the interval is up.
            assert!(push.take_due().is_none());
            assert!(push.wait().await);
            assert!(Instant::now() >= first + PUSH_INTERVAL);
        }
        let pushed = push.take_due().map(|s| s.prefill_chunk_size);
        assert_eq!(pushed, Some(64));
        assert!(push.take_due().is_none());
    }

    #[test]
    fn step_timings_alone_push_nothing() {
        let a = load().stats();
        let b = pb::StatsResponse {
            decode_step_ms: 7.0,
            recent_step_ms: vec![1.0, 2.0],
            ..a.clone()
        };
        assert_eq!(routing_view(&a), routing_view(&b));
        let c = pb::StatsResponse {
            unfinished_tokens: 3,
            ..a.clone()
        };
        assert_ne!(routing_view(&a), routing_view(&c));
    }
}
