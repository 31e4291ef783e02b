//! An engine's KV event stream, followed: its batches' events applied to the prefix index (a
//! snapshot first, then the engine's stores and evictions) and the load it pushes with them
//! (`KVEventBatch.stats`) applied to the engine table, as they arrive. While the stream pushes,
//! the engine's poll loop only checks that it lives (`liveness_s`); once the stream fails or
//! ends, the loop is back at `poll_s` at once and nothing else is marked: the next poll decides
//! the engine's health. On a sequence gap, a failed stream, a stream the engine ended or a push
//! that does not apply, the stream is opened again (after `poll_s`), asking for a snapshot
//! again: a stream resumed without one would start past a gap anyway.

use super::{stats, EngineUpkeep};
use crate::engine_rpc::KvEventsCall;
use crate::router::lock;
use crate::rpc::pb;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Cancels the stream when the follower ends (or is aborted): the engine stops sending.
struct OpenStream(Arc<KvEventsCall>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Held while a stream pushes the engine's load: the upkeep counts it from the first push on,
/// and stops counting it when the stream ends or the follower is aborted.
struct PushingStream(Arc<EngineUpkeep>);

impl PushingStream {
    fn begin(upkeep: &Arc<EngineUpkeep>) -> Self {
        upkeep.push_began();
        PushingStream(upkeep.clone())
    }
}

impl Drop for PushingStream {
    fn drop(&mut self) {
        self.0.push_ended();
    }
}

/// Follows the engine's events for as long as the upkeep runs (it aborts this task).
pub async fn follow(upkeep: Arc<EngineUpkeep>) {
    loop {
        let stream = OpenStream(upkeep.rpc.kv_events(true, &upkeep.runtime));
        let mut pushing = None;
        while let Ok(Some(batch)) = stream.0.next().await {
            if let Some(pushed) = &batch.stats {
                if !apply_pushed(&upkeep, pushed) {
                    break;
                }
                pushing.get_or_insert_with(|| PushingStream::begin(&upkeep));
            }
            if !apply(&upkeep, &batch) {
                break;
            }
        }
        drop(pushing);
        drop(stream);
        tokio::time::sleep(Duration::from_secs_f64(upkeep.pace.poll_s())).await;
    }
}

/// The pushed Stats into the current core's table (the core may have been replaced since the
/// stream opened); false when it does not apply (an engine no longer in the table, an unusable
/// step model: the polls, back at `poll_s`, tell the engine's health).
fn apply_pushed(upkeep: &EngineUpkeep, pushed: &pb::StatsResponse) -> bool {
    let core = upkeep.core();
    let mut table = lock(&core.table);
    let applied = stats::apply_pushed_stats(&mut table, upkeep.engine_id, pushed).is_ok();
    if applied {
        // Under the table's lock: a poll compares this count under it too (EngineUpkeep::poll).
        upkeep.pushes.fetch_add(1, Ordering::Relaxed);
    }
    applied
}

/// False when the view needs a snapshot (a gap, or a batch the index refused). A batch with no
/// events (only pushed Stats) leaves the index alone.
fn apply(upkeep: &EngineUpkeep, batch: &pb::KvEventBatch) -> bool {
    if !batch.snapshot && batch.stored.is_empty() && batch.evicted.is_empty() {
        return true;
    }
    let core = upkeep.core();
    let mut index = lock(&core.index);
    if batch.snapshot {
        index
            .apply_snapshot(upkeep.engine_id, batch.last_seq, &batch.stored)
            .is_ok()
    } else {
        index
            .apply_events(
                upkeep.engine_id,
                batch.first_seq,
                batch.last_seq,
                &batch.stored,
                &batch.evicted,
            )
            .unwrap_or(false)
    }
}
