//! One KVEvents subscription of the mock engine: the snapshot first, then each store as its own
//! batch, with the engine's load pushed along ([`LoadPush`]): in the first batch, on the last
//! batch of a burst of stores when due, and as a batch of its own (no events) when only the load
//! changed. It ends when the mock shuts down or turns NOT_SERVING, as a real engine's does.

use super::load_push::LoadPush;
use super::prefix_cache::{EventsAfter, MockPrefixCache};
use crate::background_server::Shutdown;
use crate::rpc::pb;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::watch;

pub struct KvEventsFeed {
    cache: Arc<MockPrefixCache>,
    changed: watch::Receiver<u64>,
    shutdown: Shutdown,
    serving: watch::Receiver<bool>,
    seq: u64,
    pending: VecDeque<pb::KvEventBatch>,
    /// None: this mock plays an engine that does not push its load.
    push: Option<LoadPush>,
}

/// A batch of stored hashes (a snapshot: the full set held as of `seq`).
fn batch(seq: u64, snapshot: bool, stored: Vec<u64>) -> pb::KvEventBatch {
    pb::KvEventBatch {
        first_seq: seq,
        last_seq: seq,
        snapshot,
        stored,
        ..Default::default()
    }
}

/// Once the engine is not serving (at once if it is not now); its health gone: at once too.
async fn stops_serving(serving: &mut watch::Receiver<bool>) {
    let _stopped_or_gone = serving.wait_for(|serving| !*serving).await.is_ok();
}

async fn push_due(push: &mut Option<LoadPush>) -> bool {
    match push {
        Some(push) => push.wait().await,
        None => std::future::pending().await,
    }
}

impl KvEventsFeed {
    /// A subscription to `cache` that ends when `shutdown` begins or `serving` turns false
    /// (its first batch is sent all the same).
    pub fn new(
        cache: Arc<MockPrefixCache>,
        (shutdown, serving): (Shutdown, watch::Receiver<bool>),
        push: Option<LoadPush>,
    ) -> Self {
        // Subscribe before the snapshot so no store between the two is missed.
        let mut changed = cache.subscribe();
        changed.borrow_and_update();
        let (last_seq, stored) = cache.snapshot();
        KvEventsFeed {
            cache,
            changed,
            shutdown,
            serving,
            seq: last_seq,
            pending: VecDeque::from([batch(last_seq, true, stored)]),
            push,
        }
    }

    pub async fn next_batch(&mut self) -> Option<pb::KvEventBatch> {
        loop {
            if let Some(mut next) = self.pending.pop_front() {
                if self.pending.is_empty() {
                    next.stats = self.push.as_mut().and_then(LoadPush::take_due);
                }
                return Some(next);
            }
            tokio::select! {
                _ = self.shutdown.begun() => return None,
                () = stops_serving(&mut self.serving) => return None,
                changed = self.changed.changed() => {
                    changed.ok()?;
                    self.changed.borrow_and_update();
                    self.queue_events();
                }
                alive = push_due(&mut self.push) => {
                    if !alive {
                        return None;
                    }
                    if let Some(stats) = self.push.as_mut().and_then(LoadPush::take_due) {
                        // Only the load changed: a batch of no events, a repeat of `seq`.
                        let mut only_stats = batch(self.seq, false, Vec::new());
                        only_stats.stats = Some(stats);
                        return Some(only_stats);
                    }
                }
            }
        }
    }

    fn queue_events(&mut self) {
        match self.cache.events_after(self.seq) {
            EventsAfter::Events(events) => {
                for event in events {
                    self.seq = event.seq;
                    self.pending.push_back(pb::KvEventBatch {
                        evicted: event.evicted,
                        ..batch(event.seq, false, event.stored)
                    });
                }
            }
            EventsAfter::Snapshot { last_seq, hashes } => {
                self.seq = last_seq;
                self.pending.push_back(batch(last_seq, true, hashes));
            }
        }
    }
}
