//! An engine's Stats answer into the engine table: the one mapping, for the router's upkeep
//! (which applies it in Rust as a poll's answer or a push arrives) and the simulator's engines
//! (whose answers cross once, serialized, through `EngineTable.apply_stats`).

use crate::engine_table::{EngineTable, Role, StatsUpdate};
use crate::rpc::pb;
use crate::Result;

fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// `answer` into `engine_id`'s row: the load, the step-time model, the longest queued prefill
/// and the blocks its prefix cache holds.
pub fn apply_stats(
    table: &mut EngineTable,
    engine_id: u32,
    answer: &pb::StatsResponse,
) -> Result<()> {
    let update = StatsUpdate {
        queued_prefill_tokens: count(answer.queued_prefill_tokens),
        running_decodes: count(answer.decode_requests.into()),
        queued_requests: count(answer.queued_requests.into()),
        unfinished_tokens: count(answer.unfinished_tokens),
        kv_pages_used: count(answer.kv_pages_used.into()),
        kv_pages_evictable: count(answer.kv_pages_evictable.into()),
        kv_pages_total: count(answer.kv_pages_total.into()),
        decode_step_ms: answer.decode_step_ms,
        decode_context_tokens: count(answer.decode_context_tokens),
        latency_model: answer
            .latency_model
            .as_ref()
            .map(|model| {
                model
                    .coeffs_ms
                    .iter()
                    .map(|(term, ms)| (term.clone(), *ms))
                    .collect()
            })
            .unwrap_or_default(),
        prefill_chunk_size: count(answer.prefill_chunk_size.into()),
    };
    table.update_stats(engine_id, &update)?;
    table.set_longest_queued_prefill(engine_id, count(answer.longest_queued_prefill_tokens))?;
    table.set_cached_blocks(engine_id, count(answer.cached_blocks.into()))
}

/// Whether `answer` would apply (a poll's answer that a newer push made moot is still checked).
pub fn check_stats(answer: &pb::StatsResponse) -> Result<()> {
    let mut scratch = EngineTable::new();
    scratch.upsert(0, Role::Any);
    apply_stats(&mut scratch, 0, answer)
}

/// A Stats the engine pushed on its KV event stream, applied as a poll's answer would be. No one
/// asked for it, so what does it cover? It is taken to cover everything dispatched to the engine
/// before it arrived (as if asked for the moment it arrived): work still on the wire when the
/// engine built it goes uncounted only until the engine receives that work, its Stats change and
/// it pushes again (one coalescing interval, 50 ms). Keeping that work counted instead would
/// count it twice until a next push, which an engine that has gone idle never sends.
pub fn apply_pushed_stats(
    table: &mut EngineTable,
    engine_id: u32,
    pushed: &pb::StatsResponse,
) -> Result<()> {
    table.stats_requested(engine_id)?;
    apply_stats(table, engine_id, pushed)
}

/// What an unreachable engine's last Stats said no longer holds (a restarted process starts
/// empty): its load reads zero until it answers again; its page count stays.
pub fn forget_load(table: &mut EngineTable, engine_id: u32) -> Result<()> {
    let row = table.get(engine_id)?;
    let total = row.kv_pages_total;
    let loaded = row.unfinished_tokens != 0
        || row.kv_pages_used != 0
        || row.running_decodes != 0
        || row.queued_prefill_tokens != 0;
    if loaded {
        table.update_stats(engine_id, &StatsUpdate::idle(total, 0.0))?;
    }
    table.set_cached_blocks(engine_id, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> pb::StatsResponse {
        pb::StatsResponse {
            queued_requests: 2,
            queued_prefill_tokens: 300,
            decode_requests: 3,
            unfinished_tokens: 900,
            kv_pages_used: 40,
            kv_pages_evictable: 10,
            kv_pages_total: 100,
            cached_blocks: 25,
            decode_step_ms: 12.5,
            decode_context_tokens: 700,
            prefill_chunk_size: 256,
            longest_queued_prefill_tokens: 200,
            latency_model: Some(pb::StepTimeModel {
                coeffs_ms: [("prefill_tokens".to_owned(), 0.05)].into_iter().collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn every_field_of_the_answer_lands_in_its_column() {
        let mut table = EngineTable::new();
        table.upsert(3, Role::Any);
        apply_stats(&mut table, 3, &answer()).unwrap();
        let row = table.get(3).unwrap();
        let got = (
            row.queued_requests,
            row.queued_prefill_tokens,
            row.running_decodes,
            row.unfinished_tokens,
            row.kv_pages_used,
            row.kv_pages_evictable,
            row.kv_pages_total,
            row.cached_blocks,
            row.decode_context_tokens,
            row.prefill_chunk_size,
            row.longest_queued_prefill,
        );
        assert_eq!(got, (2, 300, 3, 900, 40, 10, 100, 25, 700, 256, 200));
        assert_eq!(row.decode_step_ms, 12.5);
        assert!(row.predict_prefill_ms(100, 0).is_finite());
    }

    #[test]
    fn a_lost_engine_keeps_its_page_count_and_nothing_else() {
        let mut table = EngineTable::new();
        table.upsert(0, Role::Any);
        apply_stats(&mut table, 0, &answer()).unwrap();
        forget_load(&mut table, 0).unwrap();
        let row = table.get(0).unwrap();
        assert_eq!(
            (
                row.unfinished_tokens,
                row.kv_pages_used,
                row.running_decodes
            ),
            (0, 0, 0)
        );
        assert_eq!(
            (
                row.queued_prefill_tokens,
                row.cached_blocks,
                row.kv_pages_total
            ),
            (0, 0, 100)
        );
        assert!(forget_load(&mut table, 9).is_err());
    }

    #[test]
    fn a_push_covers_what_was_dispatched_before_it_and_no_more() {
        let mut table = EngineTable::new();
        table.upsert(0, Role::Any);
        let _stamp = table.on_dispatch(0, 100, 50).unwrap();
        assert_eq!(table.get(0).unwrap().router_tokens, 150);
        apply_pushed_stats(&mut table, 0, &answer()).unwrap();
        let row = table.get(0).unwrap();
        assert_eq!((row.router_tokens, row.unfinished_tokens), (0, 900));
        // Dispatched after the push: the router's own count until the next one.
        let _stamp = table.on_dispatch(0, 10, 5).unwrap();
        assert_eq!(table.get(0).unwrap().router_tokens, 15);
        apply_pushed_stats(&mut table, 0, &answer()).unwrap();
        assert_eq!(table.get(0).unwrap().router_tokens, 0);
        assert!(apply_pushed_stats(&mut table, 9, &answer()).is_err());
    }

    #[test]
    fn a_prefill_dispatched_before_a_push_finishes_against_the_pushed_queue() {
        let mut table = EngineTable::new();
        table.upsert(0, Role::Any);
        let stamp = table.on_dispatch(0, 200, 10).unwrap();
        apply_pushed_stats(&mut table, 0, &answer()).unwrap(); // 300 queued, those 200 among them
        table.on_prefill_done(0, 200, stamp).unwrap();
        assert_eq!(table.get(0).unwrap().pending_prefill_tokens(), 100);
    }

    #[test]
    fn a_bad_step_model_is_refused() {
        let mut table = EngineTable::new();
        table.upsert(0, Role::Any);
        let mut bad = answer();
        bad.latency_model = Some(pb::StepTimeModel {
            coeffs_ms: [("no_such_term".to_owned(), 1.0)].into_iter().collect(),
            ..Default::default()
        });
        assert!(apply_stats(&mut table, 0, &bad).is_err());
        assert!(check_stats(&bad).is_err() && check_stats(&answer()).is_ok());
    }
}
