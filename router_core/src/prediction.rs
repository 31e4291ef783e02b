//! Per-request predictions for every engine, from its table row and the prefix index's match:
//! what the seeds decide with (DynaServe's split from predicted prefill time, Tropical's
//! TTFT = queue + prefill and TPOT slack, KV against a watermark).
//!
//! For a request of `L` tokens of which the engine holds `M` (block-aligned, from the index):
//!
//! ```text
//! prefill_tokens = L - min(M, L - 1)          (the engine always computes the last token)
//! kv_wait_ms     = on an engine whose KV is full, the time until enough running requests
//!                  have finished to admit the waiting ones and this one (`kv_wait_steps`);
//!                  0 while it has room
//! queue_ms       = the engine's queued prefill tokens (its Stats plus what the router sent
//!                  since), chunked, decodes riding along — or kv_wait_ms, if longer
//! prefill_ms     = this request's prefill after the queue, chunked at the engine's chunk
//!                  size on top of its cached prefix, decodes riding along
//! ttft_ms        = queue_ms + prefill_ms
//! prefill_step_ms= the longest step of that prefill (the step time the engine's running
//!                  decodes see meanwhile: their TPOT under interference)
//! decode_step_ms = a decode step of the batch this request joins once prefilled, with it: the
//!                  running decodes, those the router sent since the engine's Stats and the
//!                  requests queued there (they prefill ahead of it and decode beside it;
//!                  EngineLoad::joining_decode_batch) — its TPOT
//! decode_step_now_ms = a decode step of the running decodes alone (the step its queue and
//!                  prefill ride along with; what this request and the queue ahead of it add to
//!                  the running decodes' steps is the difference)
//! backlog_step_ms= a step carrying a full chunk of another prefill beside that joined batch:
//!                  every step's time while the engine has prefills queued
//! tpot_slack_ms  = tpot_slo_ms - decode_step_ms   (inf without an SLO)
//! kv_use         = (pages requests hold + pages this request allocates) / pages total
//!                  (pages only the prefix cache holds are free on demand, so not counted)
//! ```
//!
//! Times are ms, NaN when the engine has sent no latency model (a mock, or before its first
//! Stats); the rest does not need the model.

use crate::engine_table::{EngineLoad, Role};
use crate::error::{Result, RouterCoreError};
use crate::latency_model::{chunked_prefill, queued_prefill, DecodeBatch, StepWork};

/// The request-level inputs besides its tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictParams {
    /// The request's (or policy's) TPOT objective; None = no objective (slack is infinite).
    pub tpot_slo_ms: Option<f64>,
    /// Fraction of KV pages (0, 1] an engine may use after this request's allocation.
    pub kv_watermark: f64,
}

impl PredictParams {
    pub fn new(tpot_slo_ms: Option<f64>, kv_watermark: f64) -> Result<Self> {
        if let Some(slo) = tpot_slo_ms {
            if !(slo.is_finite() && slo > 0.0) {
                return Err(RouterCoreError::InvalidArgument(format!(
                    "tpot_slo_ms must be a positive number or None, got {slo}"
                )));
            }
        }
        if !(kv_watermark > 0.0 && kv_watermark <= 1.0) {
            return Err(RouterCoreError::InvalidArgument(format!(
                "kv_watermark must be in (0, 1], got {kv_watermark}"
            )));
        }
        Ok(PredictParams {
            tpot_slo_ms,
            kv_watermark,
        })
    }
}

/// One engine's predictions for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct EnginePrediction {
    pub engine_id: u32,
    pub role: Role,
    pub healthy: bool,
    pub has_latency_model: bool,
    pub prefill_chunk_size: u64,
    pub matched_tokens: u64,
    pub prefill_tokens: u64,
    pub prefill_steps: u64,
    pub prefill_ms: f64,
    pub prefill_step_ms: f64,
    pub queued_prefill_tokens: u64,
    pub kv_wait_ms: f64,
    pub queue_ms: f64,
    pub ttft_ms: f64,
    pub decode_step_ms: f64,
    pub decode_step_now_ms: f64,
    pub backlog_step_ms: f64,
    pub tpot_slack_ms: f64,
    pub new_pages: u64,
    pub kv_use: f64,
    pub kv_ok: bool,
}

/// Predictions for a request of `tokens` tokens of which `load`'s engine holds `matched_tokens`.
/// `page_size` (> 0) is the engine's KV page size (the router's block size).
pub fn predict_engine(
    load: &EngineLoad,
    tokens: u64,
    matched_tokens: u64,
    page_size: u64,
    params: &PredictParams,
) -> EnginePrediction {
    let matched_tokens = matched_tokens.min(tokens);
    let cached = matched_tokens.min(tokens.saturating_sub(1));
    let prefill_tokens = tokens - cached;
    let chunk = load.prefill_chunk_size;
    // What the router dispatched since the engine's latest Stats counts as queued and decoding
    // (engine_table.rs, `router_prefill_tokens`).
    let queued_prefill_tokens = load.pending_prefill_tokens();
    let decode = load.pending_decode_batch();
    let model = &load.latency;

    let (queue_steps, queue_work) = queued_prefill(queued_prefill_tokens, chunk, decode);
    let prefill_queue_ms = model.time_ms(&queue_work);
    let decode_step_now_ms = model.time_ms(&StepWork::one_step(&[], &decode));
    let kv_wait_ms = kv_wait_steps(load, page_size) * decode_step_now_ms;
    // NaN (no model) stays NaN: the comparison is false.
    let queue_ms = if kv_wait_ms > prefill_queue_ms {
        kv_wait_ms
    } else {
        prefill_queue_ms
    };
    let run = chunked_prefill(cached, prefill_tokens, chunk, decode, queue_steps);
    let prefill_ms = model.time_ms(&run.total);
    let prefill_step_ms = [run.last_full, run.tail]
        .iter()
        .flatten()
        .map(|w| model.time_ms(w))
        .fold(0.0, f64::max);
    // Once prefilled, the request decodes reading its tokens plus the one being generated,
    // beside what decodes now and what was queued ahead of it.
    let joined = load.joining_decode_batch();
    let with_request_batch = DecodeBatch {
        seqs: joined.seqs + 1,
        context: joined.context.saturating_add(tokens + 1),
        ..joined
    };
    let with_request = StepWork::one_step(&[], &with_request_batch);
    let decode_step_ms = model.time_ms(&with_request);
    let backlog_chunk = if chunk == 0 { prefill_tokens } else { chunk };
    let backlog_step_ms = model.time_ms(&StepWork::one_step(
        &[(0, backlog_chunk)],
        &with_request_batch,
    ));
    let tpot_slack_ms = params
        .tpot_slo_ms
        .map_or(f64::INFINITY, |slo| slo - decode_step_ms);

    let page_size = page_size.max(1);
    // Pages for the prompt and the first generated token, less the cached prefix's full pages.
    let new_pages = (tokens + 1).div_ceil(page_size) - cached / page_size;
    let kv_use = load.kv_pressure(new_pages);
    EnginePrediction {
        engine_id: load.engine_id,
        role: load.role,
        healthy: load.healthy,
        has_latency_model: model.is_known(),
        prefill_chunk_size: chunk,
        matched_tokens,
        prefill_tokens,
        prefill_steps: run.steps,
        prefill_ms,
        prefill_step_ms: if model.is_known() {
            prefill_step_ms
        } else {
            f64::NAN
        },
        queued_prefill_tokens,
        kv_wait_ms,
        queue_ms,
        ttft_ms: queue_ms + prefill_ms,
        decode_step_ms,
        decode_step_now_ms,
        backlog_step_ms,
        tpot_slack_ms,
        new_pages,
        kv_use,
        kv_ok: kv_use <= params.kv_watermark,
    }
}

/// Decode steps before a request sent now could be admitted on `load`'s engine, whose KV may
/// be full. An engine admits a waiting request only while its pages have room (and preempts
/// the newest when a running one needs a page and none is free), so once its KV is full the
/// requests waiting there — and one sent now, behind them — start only as running ones finish
/// and free theirs: a wait that counts decode steps, not the queued prefill's compute. At a
/// full KV the running requests are the engine's concurrency, and each of their places turns
/// over once per request's output (Little's law), so `need` admissions take
/// `need x output / running` steps, where
///
/// ```text
/// output    = the decode tokens still owed (Stats' unfinished less queued prefill tokens)
///             over the waiting requests (all of theirs to go) and half the running ones
///             (half done, on average): a request's output
/// footprint = the running requests' mean context now (pages held / running) plus the half
///             of their output still to come: the KV one request holds by its end
/// need      = waiting + 1 (this one) - free KV / footprint
/// ```
///
/// 0 while the free KV fits them all, or when the engine reports no pages, no running decode
/// or no waiting count (older engines: `queued_requests` 0 leaves only this request's own
/// need, at most one turnover).
pub fn kv_wait_steps(load: &EngineLoad, page_size: u64) -> f64 {
    let page = page_size.max(1) as f64;
    let running = load.running_decodes as f64;
    if load.kv_pages_total == 0 || running <= 0.0 {
        return 0.0;
    }
    let total = load.kv_pages_total as f64 * page;
    let held = load.kv_pages_used.saturating_sub(load.kv_pages_evictable) as f64 * page;
    let waiting = load.queued_requests.saturating_add(load.router_seqs) as f64;
    let owed = load
        .unfinished_tokens
        .saturating_sub(load.queued_prefill_tokens) as f64;
    let output = owed / (waiting + running / 2.0);
    let footprint = held / running + output / 2.0;
    if footprint <= 0.0 {
        return 0.0;
    }
    let need = waiting + 1.0 - (total - held).max(0.0) / footprint;
    if need <= 0.0 {
        0.0
    } else {
        need * output / running
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_table::{EngineTable, StatsUpdate};
    use crate::latency_model::TERMS;

    /// One coefficient per term, in `TERMS` order.
    const COEFFS: [f64; 8] = [3.0, 0.2, 1.5, 2e-5, 1e-3, 0.4, 2e-4, 5e-4];
    const KNEE: u64 = 10_000;

    /// The model as an engine names its terms: the hinge with its knee.
    fn term_names() -> impl Iterator<Item = String> {
        TERMS.iter().map(|t| match *t {
            "decode_context_over" => format!("{t}:{KNEE}"),
            _ => (*t).to_owned(),
        })
    }

    fn engine(queued: u64, decodes: u64, decode_ctx: u64, chunk: u64) -> EngineLoad {
        let mut t = EngineTable::new();
        t.upsert(0, Role::Any);
        let stats = StatsUpdate {
            queued_prefill_tokens: queued,
            running_decodes: decodes,
            queued_requests: 0,
            unfinished_tokens: 0,
            kv_pages_used: 60,
            kv_pages_evictable: 0,
            kv_pages_total: 100,
            decode_step_ms: 0.0,
            decode_context_tokens: decode_ctx,
            latency_model: term_names().zip(COEFFS).collect(),
            prefill_chunk_size: chunk,
        };
        t.update_stats(0, &stats).unwrap();
        t.get(0).unwrap().clone()
    }

    /// The naive reference: simulate the engine's FCFS chunked scheduler step by step — queued
    /// tokens first (each chunk a fresh sequence), then this request's chunks — with every
    /// running decode adding one token of context per step, and sum each step's dot product;
    /// then one decode step of the running decodes, the queued requests and this one.
    fn naive(load: &EngineLoad, tokens: u64, matched: u64) -> (f64, f64, f64, f64) {
        let step_ms = |chunks: &[(u64, u64)], decodes: u64, ctx: u64| -> f64 {
            let mut f = [1.0, 0.0, 0.0, 0.0, 0.0, decodes as f64, ctx as f64, 0.0];
            f[7] = (ctx as f64 - KNEE as f64).max(0.0);
            for &(before, n) in chunks {
                f[1] += n as f64;
                f[2] += 1.0;
                f[3] += (0..n).map(|i| (before + i + 1) as f64).sum::<f64>();
                f[4] += (before + n) as f64;
            }
            COEFFS.iter().zip(f).map(|(c, x)| c * x).sum::<f64>()
        };
        let chunk = if load.prefill_chunk_size == 0 {
            u64::MAX
        } else {
            load.prefill_chunk_size
        };
        let (b, mut ctx) = (load.running_decodes, load.decode_context_tokens);
        let (mut queue_ms, mut left) = (0.0, load.queued_prefill_tokens);
        while left > 0 {
            let n = chunk.min(left);
            queue_ms += step_ms(&[(0, n)], b, ctx);
            left -= n;
            ctx += b;
        }
        let mut done = matched.min(tokens - 1);
        let (mut prefill_ms, mut worst) = (0.0, 0.0f64);
        while done < tokens {
            let n = chunk.min(tokens - done);
            let t = step_ms(&[(done, n)], b, ctx);
            prefill_ms += t;
            worst = worst.max(t);
            done += n;
            ctx += b;
        }
        // It decodes beside the running decodes and everything queued ahead of it (their
        // prompts its context).
        let decode = step_ms(
            &[],
            b + load.queued_requests + 1,
            load.decode_context_tokens + load.queued_prefill_tokens + tokens + 1,
        );
        (queue_ms, prefill_ms, worst, decode)
    }

    #[test]
    fn predictions_match_the_step_by_step_reference() {
        let params = PredictParams::new(Some(50.0), 0.9).unwrap();
        for (queued, decodes, ctx, chunk) in [
            (0, 0, 0, 512),
            (700, 8, 9000, 256),
            (5, 1, 30, 0),
            (4096, 32, 1 << 16, 64),
            (3000, 16, 9950, 128),
        ] {
            let load = engine(queued, decodes, ctx, chunk);
            for (tokens, matched) in [(1, 0), (17, 16), (2000, 0), (2000, 1024), (64, 64)] {
                let p = predict_engine(&load, tokens, matched, 16, &params);
                let (queue, prefill, worst, decode) = naive(&load, tokens, matched);
                let near = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
                assert!(near(p.queue_ms, queue), "{:?} vs {queue}", p.queue_ms);
                assert!(near(p.prefill_ms, prefill), "{} vs {prefill}", p.prefill_ms);
                assert!(near(p.prefill_step_ms, worst));
                assert!(near(p.ttft_ms, queue + prefill));
                assert!(near(p.decode_step_ms, decode));
                assert!(p.decode_step_now_ms <= p.decode_step_ms);
                assert!(p.backlog_step_ms > p.decode_step_ms);
                assert!(near(p.tpot_slack_ms, 50.0 - decode));
                assert_eq!(p.prefill_tokens, tokens - matched.min(tokens - 1));
            }
        }
    }

    #[test]
    fn requests_queued_on_the_engine_decode_beside_the_new_one() {
        let params = PredictParams::new(Some(50.0), 1.0).unwrap();
        let idle_queue = engine(900, 8, 9000, 256);
        let mut load = idle_queue.clone();
        // 3 requests wait there with 900 prompt tokens between them: by the time this one
        // decodes they decode too, so its step counts 8 + 3 + 1 sequences and their context.
        load.queued_requests = 3;
        let joined = load.joining_decode_batch();
        assert_eq!((joined.seqs, joined.context), (8 + 3, 9000 + 900));
        let p = predict_engine(&load, 100, 0, 16, &params);
        let (queue, prefill, _, _) = naive(&load, 100, 0);
        let step = load.latency.time_ms(&StepWork::one_step(
            &[],
            &load.latency.decode_batch(8 + 3 + 1, 9000 + 900 + 100 + 1),
        ));
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(
            near(p.decode_step_ms, step),
            "{} vs {step}",
            p.decode_step_ms
        );
        assert!(near(p.tpot_slack_ms, 50.0 - step));
        let backlog = load.latency.time_ms(&StepWork::one_step(
            &[(0, 256)],
            &load.latency.decode_batch(8 + 3 + 1, 9000 + 900 + 100 + 1),
        ));
        assert!(near(p.backlog_step_ms, backlog));
        // The queue ahead and this prefill still ride along with the decodes running now, and
        // the step of those alone is unchanged.
        let before = predict_engine(&idle_queue, 100, 0, 16, &params);
        assert!(near(p.queue_ms, queue) && near(p.prefill_ms, prefill));
        assert_eq!(p.decode_step_now_ms, before.decode_step_now_ms);
        assert!(p.decode_step_ms > before.decode_step_ms);
        // What the router sent since the Stats joins as well (pending_decode_batch).
        load.router_seqs = 2;
        load.router_prefill_tokens = 300;
        let joined = load.joining_decode_batch();
        assert_eq!((joined.seqs, joined.context), (8 + 2 + 3, 9000 + 300 + 900));
    }

    #[test]
    fn kv_pages_and_watermark() {
        let load = engine(0, 0, 0, 512);
        let params = PredictParams::new(None, 0.8).unwrap();
        // 100 tokens + 1 generated = 7 pages of 16; 64 cached tokens = 4 full pages.
        let p = predict_engine(&load, 100, 64, 16, &params);
        assert_eq!(
            (p.new_pages, p.matched_tokens, p.prefill_tokens),
            (3, 64, 36)
        );
        assert!((p.kv_use - 0.63).abs() < 1e-12 && p.kv_ok);
        assert!(p.tpot_slack_ms.is_infinite());
        // Fully cached, page-aligned: the last token is recomputed into a fresh page.
        let p = predict_engine(&load, 64, 64, 16, &params);
        assert_eq!((p.new_pages, p.prefill_tokens, p.prefill_steps), (2, 1, 1));
        let p = predict_engine(&load, 16 * 40, 0, 16, &params);
        assert_eq!(p.new_pages, 41);
        assert!(!p.kv_ok, "60 + 41 pages of 100 is over 0.8");
    }

    #[test]
    fn a_full_kv_makes_waiting_requests_wait_for_running_ones_to_finish() {
        let params = PredictParams::new(None, 1.0).unwrap();
        // 32 decoding, 1417 of 1456 16-token pages held, 52 requests waiting with 13,765
        // prompt tokens, 39,564 tokens owed in all: each output is 25,799 / (52 + 16) = 379.4
        // tokens, a request ends holding 22,672 / 32 + 379.4 / 2 = 898.2 tokens of KV, 624
        // tokens are free, so 53 - 0.69 admissions wait 52.3 x 379.4 / 32 = 620 steps.
        let mut load = engine(13_765, 32, 20_000, 512);
        load.kv_pages_total = 1456;
        load.kv_pages_used = 1456;
        load.kv_pages_evictable = 39;
        load.queued_requests = 52;
        load.unfinished_tokens = 39_564;
        let steps = kv_wait_steps(&load, 16);
        assert!((steps - 620.0).abs() < 1.0, "{steps}");
        let p = predict_engine(&load, 100, 0, 16, &params);
        let step = load
            .latency
            .time_ms(&StepWork::one_step(&[], &load.pending_decode_batch()));
        assert!((p.kv_wait_ms - steps * step).abs() < 1e-6 * p.kv_wait_ms);
        assert!(p.queue_ms == p.kv_wait_ms && p.ttft_ms == p.queue_ms + p.prefill_ms);
        // Room for them all (half the pages free): no wait; the queue is the prefill's again.
        load.kv_pages_used = 700;
        load.kv_pages_evictable = 0;
        load.queued_requests = 5;
        let p = predict_engine(&load, 100, 0, 16, &params);
        assert_eq!(p.kv_wait_ms, 0.0);
        let (queue, ..) = naive(&load, 100, 0);
        assert!((p.queue_ms - queue).abs() <= 1e-9 * queue);
        // Nothing decoding, or no pages reported: nothing to wait for.
        load.running_decodes = 0;
        assert_eq!(kv_wait_steps(&load, 16), 0.0);
        load.running_decodes = 32;
        load.kv_pages_total = 0;
        assert_eq!(kv_wait_steps(&load, 16), 0.0);
    }

    #[test]
    fn no_model_means_nan_times() {
        let mut load = engine(10, 2, 100, 64);
        load.latency = crate::latency_model::StepModel::unknown();
        let p = predict_engine(
            &load,
            50,
            0,
            16,
            &PredictParams::new(Some(40.0), 1.0).unwrap(),
        );
        assert!(!p.has_latency_model);
        for t in [
            p.queue_ms,
            p.prefill_ms,
            p.ttft_ms,
            p.prefill_step_ms,
            p.decode_step_ms,
        ] {
            assert!(t.is_nan());
        }
        assert!(p.tpot_slack_ms.is_nan());
        assert_eq!(p.prefill_tokens, 50);
    }

    #[test]
    fn params_are_validated() {
        assert!(PredictParams::new(Some(0.0), 0.5).is_err());
        assert!(PredictParams::new(Some(f64::INFINITY), 0.5).is_err());
        assert!(PredictParams::new(None, 0.0).is_err());
        assert!(PredictParams::new(None, 1.5).is_err());
        assert!(PredictParams::new(None, f64::NAN).is_err());
        assert!(PredictParams::new(Some(1.0), 1.0).is_ok());
    }
}
