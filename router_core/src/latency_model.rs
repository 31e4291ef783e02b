//! The engines' step-time model as the router evaluates it: a linear model over named terms,
//! fitted by each engine (engine/core/latency_model.py) and sent in `Stats`, evaluated here for
//! shapes that have not run yet — this request's chunked prefill, the queue ahead of it, the
//! decode batch with it added.
//!
//! ```text
//! step_ms = Σ coeff[term] · feature[term]          (features of one step, below)
//! ```
//!
//! | term                | feature of one step                                              |
//! |---------------------|------------------------------------------------------------------|
//! | `const`             | 1                                                                |
//! | `prefill_tokens`    | new tokens of prefill chunks                                     |
//! | `prefill_seqs`      | prefill chunks                                                   |
//! | `prefill_attention` | query-key pairs of prefill chunks: Σ n·ctx_before + n(n+1)/2     |
//! | `prefill_context`   | KV positions prefill chunks read: Σ ctx_before + n               |
//! | `decode_seqs`       | decoding sequences (one token each)                              |
//! | `decode_context`    | KV positions decodes read: Σ ctx (incl. the new token)           |
//! | `decode_context_over:K` | max(0, decode_context - K): the KV read past a knee          |
//!
//! The last term is a hinge: on a CPU the decodes' gathered K/V stops fitting the last-level
//! cache past some total context K and each further position costs several times more; the
//! engine names its K in the term (`decode_context_over:21845`).
//! Features are additive, so a run of steps is summed into one [`StepWork`] and costs one dot
//! product: a prefill of any length is O(1) to predict. The engine may send any subset of the
//! terms; a term this crate does not know is an error, so a newer engine is never mispredicted
//! silently.

use crate::error::{Result, RouterCoreError};

/// The terms this crate knows, in feature order.
pub const TERMS: [&str; NUM_TERMS] = [
    "const",
    "prefill_tokens",
    "prefill_seqs",
    "prefill_attention",
    "prefill_context",
    "decode_seqs",
    "decode_context",
    "decode_context_over",
];
pub const NUM_TERMS: usize = 8;
/// The one term that carries a parameter, written `decode_context_over:K`.
const HINGE_TERM: &str = "decode_context_over";

/// Summed features of one or more steps (`steps` is the `const` feature).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepWork {
    pub steps: f64,
    pub prefill_tokens: f64,
    pub prefill_seqs: f64,
    pub prefill_attention: f64,
    pub prefill_context: f64,
    pub decode_seqs: f64,
    pub decode_context: f64,
    pub decode_context_over: f64,
}

impl StepWork {
    fn features(&self) -> [f64; NUM_TERMS] {
        [
            self.steps,
            self.prefill_tokens,
            self.prefill_seqs,
            self.prefill_attention,
            self.prefill_context,
            self.decode_seqs,
            self.decode_context,
            self.decode_context_over,
        ]
    }

    /// One step: prefill chunks `(ctx_before, tokens)` plus `decode`'s sequences reading its
    /// context (in all) this step.
    pub fn one_step(prefill_chunks: &[(u64, u64)], decode: &DecodeBatch) -> Self {
        let (decode_seqs, decode_context, decode_context_over) = decode.over(0, 1);
        let mut work = StepWork {
            steps: 1.0,
            decode_seqs,
            decode_context,
            decode_context_over,
            ..StepWork::default()
        };
        for &(before, n) in prefill_chunks.iter().filter(|(_, n)| *n > 0) {
            let (before, n) = (before as f64, n as f64);
            work.prefill_tokens += n;
            work.prefill_seqs += 1.0;
            work.prefill_attention += n * before + n * (n + 1.0) / 2.0;
            work.prefill_context += before + n;
        }
        work
    }

    pub fn add(&mut self, other: &StepWork) {
        self.steps += other.steps;
        self.prefill_tokens += other.prefill_tokens;
        self.prefill_seqs += other.prefill_seqs;
        self.prefill_attention += other.prefill_attention;
        self.prefill_context += other.prefill_context;
        self.decode_seqs += other.decode_seqs;
        self.decode_context += other.decode_context;
        self.decode_context_over += other.decode_context_over;
    }
}

/// The decodes riding along in every step: `seqs` sequences reading `context` KV positions in
/// the first step, one more position each per step after it; `knee` is the engine model's
/// hinge (infinite when it has none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeBatch {
    pub seqs: u64,
    pub context: u64,
    pub knee: f64,
}

impl DecodeBatch {
    pub fn new(seqs: u64, context: u64) -> Self {
        DecodeBatch {
            seqs,
            context,
            knee: f64::INFINITY,
        }
    }

    /// (decode_seqs, decode_context, decode_context_over) summed over `steps` steps that start
    /// `offset` steps from now; step k reads context + (offset + k)·seqs positions.
    fn over(&self, offset: u64, steps: u64) -> (f64, f64, f64) {
        let (b, s, o, d) = (
            self.seqs as f64,
            steps as f64,
            offset as f64,
            self.context as f64,
        );
        let context = s * d + b * (s * o + s * (s - 1.0) / 2.0);
        // Σ max(0, d + (o + k)·b - knee) over k < s: the steps from the first past the knee.
        let first = if d + o * b > self.knee {
            0.0
        } else if b == 0.0 {
            s
        } else {
            ((self.knee - d) / b - o).floor() + 1.0
        };
        let first = first.clamp(0.0, s);
        let n = s - first;
        let over = if n > 0.0 {
            n * (d + o * b - self.knee) + b * (first + s - 1.0) * n / 2.0
        } else {
            0.0
        };
        (s * b, context, over)
    }
}

/// A prefill of `tokens` new tokens on top of `cached` positions already in KV, cut into chunks
/// of `chunk` tokens (0 = one step), with `decode` riding along, starting `offset` steps from
/// now. `largest_step` is the work of its most expensive step (the last full chunk or the
/// shorter tail, which reads more context).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ChunkedPrefill {
    pub steps: u64,
    pub total: StepWork,
    pub last_full: Option<StepWork>,
    pub tail: Option<StepWork>,
}

/// `tokens` (> 0) cut into chunks of `chunk` (0 = one chunk of all): (chunk size, full chunks,
/// the shorter tail's tokens or 0, steps).
fn split_chunks(tokens: u64, chunk: u64) -> (u64, u64, u64, u64) {
    let chunk = if chunk == 0 {
        tokens
    } else {
        chunk.min(tokens)
    };
    let (full, rem) = (tokens / chunk, tokens % chunk);
    (chunk, full, rem, full + u64::from(rem > 0))
}

/// Closed form of summing [`StepWork::one_step`] over the chunks (the tests check it against
/// that loop): the query-key pairs of a causal prefill do not depend on how it is chunked, the
/// other sums are arithmetic series.
pub fn chunked_prefill(
    cached: u64,
    tokens: u64,
    chunk: u64,
    decode: DecodeBatch,
    offset: u64,
) -> ChunkedPrefill {
    if tokens == 0 {
        return ChunkedPrefill::default();
    }
    let (chunk, full, rem, steps) = split_chunks(tokens, chunk);
    let (m, p, c, k) = (cached as f64, tokens as f64, chunk as f64, full as f64);
    let (decode_seqs, decode_context, decode_context_over) = decode.over(offset, steps);
    let total = StepWork {
        steps: steps as f64,
        prefill_tokens: p,
        prefill_seqs: steps as f64,
        prefill_attention: p * m + p * (p + 1.0) / 2.0,
        prefill_context: steps as f64 * m + c * k * (k + 1.0) / 2.0 + if rem > 0 { p } else { 0.0 },
        decode_seqs,
        decode_context,
        decode_context_over,
    };
    let step_at = |index: u64, before: u64, n: u64| {
        let at = DecodeBatch {
            context: decode.context + (offset + index) * decode.seqs,
            ..decode
        };
        StepWork::one_step(&[(cached + before, n)], &at)
    };
    ChunkedPrefill {
        steps,
        total,
        last_full: Some(step_at(full - 1, (full - 1) * chunk, chunk)),
        tail: (rem > 0).then(|| step_at(full, full * chunk, rem)),
    }
}

/// `tokens` queued prefill tokens of other requests, cut into chunks of `chunk` (0 = one step),
/// each chunk counted as a fresh sequence (their cached prefixes are not known here), with
/// `decode` riding along.
pub fn queued_prefill(tokens: u64, chunk: u64, decode: DecodeBatch) -> (u64, StepWork) {
    if tokens == 0 {
        return (0, StepWork::default());
    }
    let (chunk, full, rem, steps) = split_chunks(tokens, chunk);
    let (c, r) = (chunk as f64, rem as f64);
    let (decode_seqs, decode_context, decode_context_over) = decode.over(0, steps);
    let work = StepWork {
        steps: steps as f64,
        prefill_tokens: tokens as f64,
        prefill_seqs: steps as f64,
        prefill_attention: full as f64 * c * (c + 1.0) / 2.0 + r * (r + 1.0) / 2.0,
        prefill_context: tokens as f64,
        decode_seqs,
        decode_context,
        decode_context_over,
    };
    (steps, work)
}

/// Coefficients (ms per unit of each term's feature) of one engine's fitted model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepModel {
    coeffs: [f64; NUM_TERMS],
    /// `decode_context_over`'s K (infinite when the engine sent no such term).
    knee: f64,
    known: bool,
}

impl Default for StepModel {
    fn default() -> Self {
        StepModel::unknown()
    }
}

impl StepModel {
    /// No model yet (engine not profiled, or a mock): every prediction is NaN.
    pub fn unknown() -> Self {
        StepModel {
            coeffs: [0.0; NUM_TERMS],
            knee: f64::INFINITY,
            known: false,
        }
    }

    /// From (term name, ms) pairs; terms not named are 0. Empty = [`StepModel::unknown`].
    /// Unknown names, repeated names and non-finite coefficients are errors.
    pub fn from_named<'a>(named: impl IntoIterator<Item = (&'a str, f64)>) -> Result<Self> {
        let mut model = StepModel::unknown();
        let mut seen = [false; NUM_TERMS];
        for (full_name, coeff) in named {
            let (name, knee) = split_hinge(full_name)?;
            if let Some(knee) = knee {
                model.knee = knee;
            }
            let Some(i) = TERMS.iter().position(|t| *t == name) else {
                return Err(RouterCoreError::InvalidArgument(format!(
                    "unknown latency model term {name:?} (known: {TERMS:?})"
                )));
            };
            if seen[i] {
                return Err(RouterCoreError::InvalidArgument(format!(
                    "latency model term {name:?} given twice"
                )));
            }
            if !coeff.is_finite() {
                return Err(RouterCoreError::InvalidArgument(format!(
                    "latency model coefficient {name:?} must be finite, got {coeff}"
                )));
            }
            seen[i] = true;
            model.coeffs[i] = coeff;
            model.known = true;
        }
        Ok(model)
    }

    pub fn is_known(&self) -> bool {
        self.known
    }

    /// (term, ms) for every term (none when unknown); the hinge carries its K when it has one.
    pub fn named(&self) -> Vec<(String, f64)> {
        if !self.known {
            return Vec::new();
        }
        TERMS
            .iter()
            .zip(self.coeffs)
            .filter(|(t, _)| **t != HINGE_TERM || self.knee.is_finite())
            .map(|(t, c)| match *t {
                HINGE_TERM => (format!("{t}:{}", self.knee), c),
                _ => (t.to_string(), c),
            })
            .collect()
    }

    /// The decodes now running on an engine with this model.
    pub fn decode_batch(&self, seqs: u64, context: u64) -> DecodeBatch {
        DecodeBatch {
            seqs,
            context,
            knee: self.knee,
        }
    }

    /// Predicted time of `work` in ms (>= 0); NaN when the model is unknown.
    pub fn time_ms(&self, work: &StepWork) -> f64 {
        if !self.known {
            return f64::NAN;
        }
        let dot: f64 = self
            .coeffs
            .iter()
            .zip(work.features())
            .map(|(c, f)| c * f)
            .sum();
        dot.max(0.0)
    }
}

/// `decode_context_over:K` -> ("decode_context_over", Some(K)); other names pass through.
fn split_hinge(name: &str) -> Result<(&str, Option<f64>)> {
    let bad = |why: &str| {
        Err(RouterCoreError::InvalidArgument(format!(
            "latency model term {name:?}: {why}"
        )))
    };
    match name.split_once(':') {
        Some((HINGE_TERM, k)) => match k.parse::<u64>() {
            Ok(k) => Ok((HINGE_TERM, Some(k as f64))),
            Err(_) => bad("K must be a non-negative integer"),
        },
        Some(_) => bad("only decode_context_over takes a parameter"),
        None if name == HINGE_TERM => bad("needs its knee, as decode_context_over:K"),
        None => Ok((name, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step's features written out from the definitions (independent of `one_step`).
    fn naive_step(chunks: &[(u64, u64)], seqs: u64, ctx: u64, knee: f64) -> StepWork {
        let mut w = StepWork {
            steps: 1.0,
            decode_seqs: seqs as f64,
            decode_context: ctx as f64,
            decode_context_over: (ctx as f64 - knee).max(0.0),
            ..StepWork::default()
        };
        for &(before, n) in chunks.iter().filter(|(_, n)| *n > 0) {
            w.prefill_tokens += n as f64;
            w.prefill_seqs += 1.0;
            w.prefill_attention += (0..n).map(|i| (before + i + 1) as f64).sum::<f64>();
            w.prefill_context += (before + n) as f64;
        }
        w
    }

    /// The naive reference: one step at a time, exactly as the engine's scheduler cuts a prefill.
    fn naive_chunked(
        cached: u64,
        tokens: u64,
        chunk: u64,
        decode: DecodeBatch,
        offset: u64,
    ) -> (u64, StepWork, Vec<StepWork>) {
        let chunk = if chunk == 0 { tokens } else { chunk };
        let (mut done, mut step, mut total, mut each) = (0, 0, StepWork::default(), Vec::new());
        while done < tokens {
            let n = chunk.min(tokens - done);
            let ctx = decode.context + (offset + step) * decode.seqs;
            let work = naive_step(&[(cached + done, n)], decode.seqs, ctx, decode.knee);
            total.add(&work);
            each.push(work);
            done += n;
            step += 1;
        }
        (step, total, each)
    }

    fn close(a: &StepWork, b: &StepWork) -> bool {
        a.features()
            .iter()
            .zip(b.features())
            .all(|(x, y)| (x - y).abs() <= 1e-9 * y.abs().max(1.0))
    }

    fn model() -> StepModel {
        let coeffs = [1.0, 0.1, 2.0, 1e-4, 0.01, 0.5, 0.02, 0.3];
        let names = TERMS.map(|t| match t {
            HINGE_TERM => format!("{t}:710"),
            _ => t.to_string(),
        });
        StepModel::from_named(names.iter().map(String::as_str).zip(coeffs)).unwrap()
    }

    #[test]
    fn closed_form_prefill_equals_the_step_by_step_sum() {
        let model = model();
        let decodes = [
            DecodeBatch::new(0, 0),
            model.decode_batch(3, 700), // crosses the knee (710) after a few steps
            model.decode_batch(1, 2000),
            DecodeBatch::new(3, 700),
        ];
        for cached in [0, 16, 1000] {
            for tokens in [0, 1, 15, 16, 17, 512, 513, 2049] {
                for chunk in [0, 1, 16, 512, 4096] {
                    for decode in decodes {
                        for offset in [0, 5] {
                            let got = chunked_prefill(cached, tokens, chunk, decode, offset);
                            let (steps, total, each) =
                                naive_chunked(cached, tokens, chunk, decode, offset);
                            assert_eq!(got.steps, steps);
                            assert!(close(&got.total, &total), "{got:?} vs {total:?}");
                            let worst = each.iter().map(|w| model.time_ms(w)).fold(0.0, f64::max);
                            let got_worst = [got.last_full, got.tail]
                                .iter()
                                .flatten()
                                .map(|w| model.time_ms(w))
                                .fold(0.0, f64::max);
                            assert!((worst - got_worst).abs() < 1e-9 * worst.max(1.0));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn queued_prefill_counts_fresh_chunks() {
        for decode in [DecodeBatch::new(2, 100), model().decode_batch(2, 700)] {
            for tokens in [0, 1, 511, 512, 513, 5000] {
                for chunk in [0, 64, 512] {
                    let (steps, work) = queued_prefill(tokens, chunk, decode);
                    let c = if chunk == 0 { tokens.max(1) } else { chunk };
                    let mut expect = StepWork::default();
                    let (mut left, mut step) = (tokens, 0);
                    while left > 0 {
                        let n = c.min(left);
                        let ctx = decode.context + step * 2;
                        expect.add(&naive_step(&[(0, n)], 2, ctx, decode.knee));
                        left -= n;
                        step += 1;
                    }
                    assert_eq!(steps, step);
                    assert!(
                        close(&work, &expect),
                        "{tokens} {chunk}: {work:?} vs {expect:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn one_step_matches_the_definitions() {
        let decode = model().decode_batch(4, 900);
        let chunks = [(0, 5), (16, 3), (7, 0)];
        assert!(close(
            &StepWork::one_step(&chunks, &decode),
            &naive_step(&chunks, 4, 900, 710.0)
        ));
    }

    #[test]
    fn named_terms_and_errors() {
        let model = StepModel::from_named([("const", 2.0), ("decode_seqs", 0.5)]).unwrap();
        let work = StepWork::one_step(&[], &DecodeBatch::new(4, 400));
        assert_eq!(model.time_ms(&work), 4.0);
        assert_eq!(
            model.named().len(),
            NUM_TERMS - 1,
            "no hinge without a knee"
        );
        let hinged = StepModel::from_named([("decode_context_over:5000", 0.1)]).unwrap();
        assert!(hinged
            .named()
            .contains(&("decode_context_over:5000".to_string(), 0.1)));
        let batch = hinged.decode_batch(2, 5100);
        assert!((hinged.time_ms(&StepWork::one_step(&[], &batch)) - 10.0).abs() < 1e-9);
        for bad in [
            "warp",
            "decode_context_over",
            "decode_context_over:-1",
            "decode_context_over:x",
            "const:3",
        ] {
            assert!(StepModel::from_named([(bad, 1.0)]).is_err(), "{bad}");
        }
        assert!(StepModel::from_named([("const", 1.0), ("const", 2.0)]).is_err());
        assert!(StepModel::from_named([("const", f64::NAN)]).is_err());
        let unknown = StepModel::from_named([]).unwrap();
        assert!(!unknown.is_known() && unknown.time_ms(&work).is_nan());
        assert!(unknown.named().is_empty());
        let negative = StepModel::from_named([("const", -5.0)]).unwrap();
        assert_eq!(negative.time_ms(&work), 0.0, "never a negative time");
    }
}
