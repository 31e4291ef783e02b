//! An engine's KV event stream applied to the prefix index as batches arrive: a snapshot first,
//! then the engine's stores and evictions; on a sequence gap, a failed stream or a stream the
//! engine ended, the stream is opened again (after `poll_s`), asking for a snapshot again: a
//! stream resumed without one would start past a gap anyway.

use super::EngineUpkeep;
use crate::engine_rpc::KvEventsCall;
use crate::router::lock;
use crate::rpc::pb;
use std::sync::Arc;
use std::time::Duration;

/// Cancels the stream when the follower ends (or is aborted): the engine stops sending.
struct OpenStream(Arc<KvEventsCall>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Follows the engine's events for as long as the upkeep runs (it aborts this task).
pub async fn follow(upkeep: Arc<EngineUpkeep>) {
    loop {
        let stream = OpenStream(upkeep.rpc.kv_events(true, &upkeep.runtime));
        while let Ok(Some(batch)) = stream.0.next().await {
            if !apply(&upkeep, &batch) {
                break;
            }
        }
        drop(stream);
        tokio::time::sleep(Duration::from_secs_f64(upkeep.pace.poll_s())).await;
    }
}

/// False when the view needs a snapshot (a gap, or a batch the index refused).
fn apply(upkeep: &EngineUpkeep, batch: &pb::KvEventBatch) -> bool {
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
