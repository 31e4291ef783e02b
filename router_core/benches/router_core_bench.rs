//! `cargo bench -p router_core`: per-request hash+match+score and hash+match+predict at 8/64/256
//! engines over ~1M indexed blocks, KV event ingestion, and detokenise+encode per token. First a percentile pass
//! prints p50/p99 against the targets; then criterion measures means (kept short: 3 s each).

mod common;

use common::*;
use criterion::{black_box, BenchmarkId, Criterion, Throughput};
use router_core::detok::{DetokenizerVocab, IncrementalDetokenizer};
use router_core::hashing::block_hashes;
use router_core::prediction::PredictParams;
use router_core::prefix_index::PrefixIndex;
use router_core::router::{lock, RouterCore};
use router_core::sse::{SseEncoder, StreamKind};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOTAL_BLOCKS: usize = 1_000_000;
const TARGET_SCORE_P99_US: f64 = 20.0;
const TARGET_EVENTS_PER_S: f64 = 2.0e6;
const TARGET_NS_PER_TOKEN: f64 = 1000.0;

fn score_once(core: &RouterCore, prompt: &[u32]) -> usize {
    let result = core.score(prompt, None, None, 0.0).expect("valid prompt");
    result.candidates.len()
}

fn predict_once(core: &RouterCore, prompt: &[u32]) -> usize {
    let params = PredictParams::new(Some(50.0), 0.9).expect("valid params");
    core.predict(prompt, &params, 0.0)
        .expect("valid prompt")
        .len()
}

/// (p50, p99) in µs of `call` over the prompts, after a warm-up.
fn time_calls(
    core: &RouterCore,
    prompts: &[Vec<u32>],
    call: fn(&RouterCore, &[u32]) -> usize,
) -> (f64, f64) {
    for p in &prompts[..200] {
        black_box(call(core, p));
    }
    let mut samples: Vec<u64> = prompts
        .iter()
        .map(|p| {
            let t = Instant::now();
            black_box(call(core, p));
            t.elapsed().as_nanos() as u64
        })
        .collect();
    let (p50, p99) = percentiles(&mut samples);
    (p50 as f64 / 1000.0, p99 as f64 / 1000.0)
}

fn percentile_pass(cores: &[(u32, RouterCore, u64)]) {
    println!("router_core percentiles (2048-token prompts, {TOTAL_BLOCKS} indexed blocks)");
    for (engines, core, docs) in cores {
        let prompts: Vec<Vec<u32>> = (0..2000).map(|i| request(i, *docs)).collect();
        for (what, call) in [
            ("score", score_once as fn(&RouterCore, &[u32]) -> usize),
            ("predict", predict_once),
        ] {
            let (p50, p99) = time_calls(core, &prompts, call);
            println!(
                "  hash+match+{what:<7} {engines:>3} engines: p50 {p50:>6.2} us  p99 {p99:>6.2} us  (target p99 < {TARGET_SCORE_P99_US} us: {:.2}x of target)",
                p99 / TARGET_SCORE_P99_US
            );
        }
    }
    let (events_per_s, blocks) = ingestion_rate();
    println!(
        "  KV event ingestion: {:.2}M events/s (batches of 32 stored + 32 evicted blocks, {blocks} blocks indexed; target > 2M/s: {:.2}x)",
        events_per_s / 1e6,
        events_per_s / TARGET_EVENTS_PER_S
    );
    let ns = detok_ns_per_token();
    println!(
        "  detokenise+SSE encode: {ns:.0} ns/token (target < {TARGET_NS_PER_TOKEN} ns: {:.2}x of target)",
        ns / TARGET_NS_PER_TOKEN
    );
}

/// Steady state at ~1M blocks on 64 engines: batch i stores 32 new blocks on engine i % 64 and
/// evicts that engine's blocks from 64 batches earlier; an "event" is one stored or evicted block.
fn ingestion_rate() -> (f64, usize) {
    let (core, _) = populated_core(64, TOTAL_BLOCKS);
    let mut index = lock(&core.index);
    let batches: Vec<Vec<u64>> = (0..20_000u64)
        .map(|b| {
            (0..32)
                .map(|k| (b << 32 | k).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect()
        })
        .collect();
    let start = Instant::now();
    let mut events = 0usize;
    for (i, stored) in batches.iter().enumerate() {
        let evicted: &[u64] = if i >= 64 { &batches[i - 64] } else { &[] };
        let seq = 1_000_000 + (i / 64) as u64;
        index
            .apply_events((i % 64) as u32, seq, seq, stored, evicted)
            .expect("known engine");
        events += stored.len() + evicted.len();
    }
    (
        events as f64 / start.elapsed().as_secs_f64(),
        index.num_blocks(),
    )
}

fn detok_ns_per_token() -> f64 {
    let vocab = Arc::new(
        DetokenizerVocab::from_tokenizer_json(&synthetic_tokenizer_json()).expect("valid json"),
    );
    let ids: Vec<u32> = tokens(42, 100_000)
        .into_iter()
        .map(|t| 256 + t % 40_000)
        .collect();
    let encoder = SseEncoder::new(
        "chatcmpl-bench",
        "SmolLM2-135M-Instruct",
        0,
        StreamKind::Chat,
    );
    let mut detok =
        IncrementalDetokenizer::new(vocab, vec!["\n\nUser:".into()], true).expect("valid stops");
    let start = Instant::now();
    let mut bytes = 0usize;
    for id in &ids {
        let (text, _) = detok.push(std::slice::from_ref(id)).expect("known id");
        bytes += encoder.delta(&text, None).len();
    }
    black_box(bytes);
    start.elapsed().as_nanos() as f64 / ids.len() as f64
}

fn criterion_benches(c: &mut Criterion, cores: &[(u32, RouterCore, u64)]) {
    let mut group = c.benchmark_group("hash_match_score_2k_tokens");
    for (engines, core, docs) in cores {
        let prompts: Vec<Vec<u32>> = (0..256).map(|i| request(i, *docs)).collect();
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::from_parameter(engines), core, |b, core| {
            b.iter(|| {
                i = (i + 1) % prompts.len();
                black_box(score_once(core, &prompts[i]))
            })
        });
    }
    group.finish();

    let prompt = request(1, 100);
    c.bench_function("block_hashes_2k_tokens", |b| {
        b.iter(|| black_box(block_hashes(&prompt, BLOCK, SEED).expect("valid block size")))
    });

    let mut group = c.benchmark_group("kv_event_ingestion");
    group.throughput(Throughput::Elements(64));
    let mut index = PrefixIndex::new(1 << 24, 120.0).expect("valid config");
    index.add_engine(0, false);
    let mut seq = 0u64;
    group.bench_function("store32_evict32", |b| {
        b.iter(|| {
            seq += 1;
            let stored: Vec<u64> = (0..32)
                .map(|k| (seq << 8 | k).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            let evicted: Vec<u64> = (0..32)
                .map(|k| ((seq.saturating_sub(4)) << 8 | k).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            index
                .apply_events(0, seq, seq, &stored, &evicted)
                .expect("known engine")
        })
    });
    group.finish();

    let vocab = Arc::new(
        DetokenizerVocab::from_tokenizer_json(&synthetic_tokenizer_json()).expect("valid json"),
    );
    let encoder = SseEncoder::new("chatcmpl-bench", "m", 0, StreamKind::Chat);
    let ids: Vec<u32> = tokens(7, 4096)
        .into_iter()
        .map(|t| 256 + t % 40_000)
        .collect();
    let mut detok =
        IncrementalDetokenizer::new(vocab.clone(), vec!["</s>".into()], true).expect("valid stops");
    let mut i = 0usize;
    c.bench_function("detok_push_and_sse_delta_per_token", |b| {
        b.iter(|| {
            i += 1;
            if i.is_multiple_of(ids.len()) {
                detok = IncrementalDetokenizer::new(vocab.clone(), vec!["</s>".into()], true)
                    .expect("valid stops");
            }
            let (text, _) = detok
                .push(&ids[i % ids.len()..i % ids.len() + 1])
                .expect("known id");
            black_box(encoder.delta(&text, None))
        })
    });
}

fn main() {
    let cores: Vec<(u32, RouterCore, u64)> = [8u32, 64, 256]
        .into_iter()
        .map(|e| {
            let (core, docs) = populated_core(e, TOTAL_BLOCKS);
            (e, core, docs)
        })
        .collect();
    percentile_pass(&cores);
    let mut criterion = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30)
        .configure_from_args();
    criterion_benches(&mut criterion, &cores);
    criterion.final_summary();
}
