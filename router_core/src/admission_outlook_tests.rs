use super::*;

fn engine(
    id: u32,
    queue_ms: f64,
    prefill_ms: f64,
    step_now: f64,
    step_with: f64,
) -> EnginePrediction {
    EnginePrediction {
        engine_id: id,
        role: Role::Any,
        healthy: true,
        has_latency_model: true,
        prefill_chunk_size: 512,
        matched_tokens: 0,
        prefill_tokens: 1000,
        prefill_steps: 2,
        prefill_ms,
        prefill_step_ms: prefill_ms / 2.0,
        queued_prefill_tokens: 0,
        kv_wait_ms: 0.0,
        queue_ms,
        ttft_ms: queue_ms + prefill_ms,
        decode_step_ms: step_with,
        decode_step_now_ms: step_now,
        backlog_step_ms: step_with,
        tpot_slack_ms: f64::INFINITY,
        new_pages: 1,
        kv_use: 0.1,
        kv_ok: true,
    }
}

fn standing(budget_ms: f64, tokens_ahead: u64) -> Standing {
    Standing {
        budget_ms,
        queue_cap_ms: 1e9,
        tokens_ahead,
        in_transit: 0,
        margin: 0.0,
        correction: 1.0,
    }
}

#[test]
fn the_best_engine_is_the_quickest_that_keeps_the_tpot_objective() {
    let engines = [
        engine(0, 0.0, 100.0, 40.0, 60.0), // quickest, but its decodes would pass 50 ms
        engine(1, 300.0, 100.0, 30.0, 45.0),
        engine(2, 500.0, 100.0, 0.0, 20.0),
    ];
    let o = outlook(engines.iter(), Some(50.0), 0.0, 1.0).unwrap();
    assert_eq!((o.best_ttft_ms, o.tpot_fits, o.engines), (400.0, true, 3));
    assert!((o.mean_queue_ms - 800.0 / 3.0).abs() < 1e-9);
    assert!((o.ms_per_token - 0.1).abs() < 1e-12);
    // Without a TPOT objective the quickest wins.
    let o = outlook(engines.iter(), None, 0.0, 1.0).unwrap();
    assert_eq!(o.best_ttft_ms, 100.0);
    // When none keeps it, the quickest, marked as not fitting.
    let o = outlook(engines[..2].iter(), Some(10.0), 0.0, 1.0).unwrap();
    assert_eq!((o.best_ttft_ms, o.tpot_fits), (100.0, false));
}

#[test]
fn engines_that_cannot_take_or_predict_it_are_left_out() {
    let mut decode = engine(0, 0.0, 10.0, 0.0, 10.0);
    decode.role = Role::Decode;
    let mut sick = engine(1, 0.0, 10.0, 0.0, 10.0);
    sick.healthy = false;
    let mut unknown = engine(2, f64::NAN, f64::NAN, f64::NAN, f64::NAN);
    unknown.has_latency_model = false;
    assert!(outlook([decode, sick, unknown].iter(), None, 0.0, 1.0).is_none());
}

#[test]
fn a_request_goes_when_it_fits_waits_when_the_queue_may_drain_in_time_else_is_shed() {
    let o = outlook([engine(0, 600.0, 200.0, 0.0, 10.0)].iter(), None, 0.0, 1.0).unwrap();
    assert!(matches!(
        standing(1000.0, 0).at_arrival(&o),
        Verdict::Go { predicted_ms, raw_ms } if predicted_ms == 800.0 && raw_ms == 800.0
    ));
    // 700 ms left: not now, and the queue (600) plus its prefill (200) leave no time.
    assert_eq!(
        standing(700.0, 0).at_arrival(&o),
        Verdict::Shed { drain_s: 0.6 }
    );
    // The margin lets a prediction pass its budget by that share.
    let lenient = Standing {
        margin: 0.2,
        ..standing(700.0, 0)
    };
    assert!(matches!(lenient.at_arrival(&o), Verdict::Go { .. }));
    // Someone ahead in the router: it waits behind them, if their work leaves it time...
    assert_eq!(standing(1000.0, 1000).at_arrival(&o), Verdict::Wait);
    // ...and is refused when it does not (1000 tokens at 0.2 ms each, on one engine).
    assert_eq!(
        standing(950.0, 1000).at_arrival(&o),
        Verdict::Shed { drain_s: 0.8 }
    );
}

#[test]
fn the_head_goes_when_it_fits_and_is_shed_once_its_engines_queue_cannot_drain_in_time() {
    let o = outlook([engine(0, 600.0, 200.0, 0.0, 10.0)].iter(), None, 0.0, 1.0).unwrap();
    assert!(matches!(
        standing(500.0, 0).at_head(&o),
        Verdict::Shed { .. }
    ));
    assert!(matches!(standing(900.0, 0).at_head(&o), Verdict::Go { .. }));
    assert!(matches!(
        standing(150.0, 0).at_head(&o),
        Verdict::Shed { .. }
    ));
    // Requests let through but not placed yet: one per engine at most.
    let busy = Standing {
        in_transit: 1,
        ..standing(900.0, 0)
    };
    assert_eq!(busy.at_head(&o), Verdict::Wait);
    // The correction scales every prediction.
    let pessimist = Standing {
        correction: 2.0,
        ..standing(900.0, 0)
    };
    assert!(matches!(pessimist.at_head(&o), Verdict::Shed { .. }));
}

#[test]
fn the_correction_learns_the_ratio_in_log_space_within_its_clamp() {
    let mut c = Correction::default();
    assert_eq!(c.factor(), 1.0);
    for _ in 0..200 {
        c.observe(150.0, 100.0);
    }
    assert!((c.factor() - 1.5).abs() < 1e-3, "{}", c.factor());
    for _ in 0..200 {
        c.observe(1e6, 1.0);
    }
    assert_eq!(c.factor(), 4.0);
    c.observe(f64::NAN, 1.0);
    c.observe(10.0, 0.0);
    assert_eq!(c.observed(), 400);
}

#[test]
fn the_engines_queue_is_capped_and_the_head_judged_at_the_cap() {
    let o = outlook([engine(0, 600.0, 200.0, 0.0, 10.0)].iter(), None, 0.0, 1.0).unwrap();
    let capped = |budget_ms| Standing {
        queue_cap_ms: 250.0,
        ..standing(budget_ms, 0)
    };
    // In time, but the engine holds more than the cap: it waits in the router.
    assert_eq!(capped(1000.0).at_arrival(&o), Verdict::Wait);
    assert_eq!(capped(1000.0).at_head(&o), Verdict::Wait);
    // At the head it is refused once its TTFT there (800 ms) no longer fits.
    assert_eq!(capped(810.0).at_head(&o), Verdict::Wait);
    assert!(matches!(capped(790.0).at_head(&o), Verdict::Shed { .. }));
    let short = outlook([engine(0, 200.0, 200.0, 0.0, 10.0)].iter(), None, 0.0, 1.0).unwrap();
    assert!(matches!(capped(1000.0).at_head(&short), Verdict::Go { .. }));
}

#[test]
fn the_tpot_correction_scales_the_decode_step_judged_against_the_objective() {
    let engines = [engine(0, 0.0, 100.0, 30.0, 40.0)];
    assert!(
        outlook(engines.iter(), Some(50.0), 0.0, 1.0)
            .unwrap()
            .tpot_fits
    );
    // Its decodes have been stepping 1.5x what the model predicts (chunks beside them).
    let o = outlook(engines.iter(), Some(50.0), 0.0, 1.5).unwrap();
    assert!(!o.tpot_fits);
    assert_eq!(o.best_step_ms, 40.0);
}
