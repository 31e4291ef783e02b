use super::*;

fn pred(engine_id: u32, role: Role, ttft_ms: f64, decode_step_ms: f64) -> EnginePrediction {
    EnginePrediction {
        engine_id,
        role,
        healthy: true,
        has_latency_model: true,
        prefill_chunk_size: 512,
        matched_tokens: 0,
        prefill_tokens: 100,
        prefill_steps: 1,
        prefill_ms: 10.0,
        prefill_step_ms: 10.0,
        queued_prefill_tokens: 0,
        kv_wait_ms: 0.0,
        queue_ms: 0.0,
        ttft_ms,
        decode_step_ms,
        decode_step_now_ms: decode_step_ms,
        backlog_step_ms: decode_step_ms,
        tpot_slack_ms: f64::NAN,
        new_pages: 1,
        kv_use: 0.1,
        kv_ok: true,
    }
}

fn ids(preds: &[EnginePrediction]) -> Vec<u32> {
    preds.iter().map(|p| p.engine_id).collect()
}

#[test]
fn a_fleet_no_larger_than_k_is_kept_whole_but_its_unhealthy_engines() {
    let mut preds: Vec<_> = (0..4).map(|i| pred(i, Role::Any, 10.0, 5.0)).collect();
    preds[2].healthy = false;
    assert_eq!(ids(&shortlist(preds.clone(), 4)), vec![0, 1, 3]);
    assert_eq!(ids(&shortlist(preds, 3)), vec![0, 1, 3]);
}

#[test]
fn keeps_the_soonest_first_tokens_and_the_fastest_decodes() {
    // TTFT falls with the id, the decode step rises with it: the two ends of the fleet.
    let preds: Vec<_> = (0..10)
        .map(|i| pred(i, Role::Any, 100.0 - i as f64, 1.0 + i as f64))
        .collect();
    assert_eq!(ids(&shortlist(preds, 2)), vec![0, 1, 8, 9]);
}

#[test]
fn each_side_is_drawn_from_the_roles_that_take_it() {
    let mut preds = vec![
        pred(0, Role::Prefill, 1.0, 1.0),
        pred(1, Role::Prefill, 2.0, 1.0),
        pred(2, Role::Decode, 1.0, 3.0),
        pred(3, Role::Decode, 1.0, 2.0),
        pred(4, Role::Decode, 1.0, 9.0),
    ];
    assert_eq!(ids(&shortlist(preds.clone(), 1)), vec![0, 3]);
    // A decode engine out of KV room ranks after every one with room, however fast it steps.
    preds[3].kv_ok = false;
    assert_eq!(ids(&shortlist(preds, 1)), vec![0, 2]);
}

#[test]
fn ties_and_missing_predictions_are_settled_deterministically() {
    let mut preds: Vec<_> = (0..6).map(|i| pred(i, Role::Any, 50.0, 5.0)).collect();
    preds[0].ttft_ms = f64::NAN;
    preds[0].decode_step_ms = f64::NAN;
    // Equal predictions: the lowest ids; no prediction (NaN) last.
    assert_eq!(ids(&shortlist(preds, 2)), vec![1, 2]);
}
