//! The router's per-request metrics, counted where requests run (the HTTP front) and exported
//! by the Python side's Prometheus registry under their existing names (pyrouter/metrics.py
//! reads a snapshot at scrape time): requests by policy and status, the pattern that ran, time
//! to first token, request latency, prompt and completion tokens. One lock per finished
//! request.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::router::lock;

/// Bucket upper bounds (seconds), as pyrouter/metrics.py's `_LATENCY_BUCKETS`.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last entry is +Inf.
    pub counts: [u64; LATENCY_BUCKETS.len() + 1],
    pub sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, value: f64) {
        let i = LATENCY_BUCKETS
            .iter()
            .position(|le| value <= *le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[i] += 1;
        self.sum += value;
    }

    /// Cumulative counts, bucket by bucket (the last is the total count).
    pub fn cumulative(&self) -> Vec<u64> {
        self.counts
            .iter()
            .scan(0u64, |total, c| {
                *total += c;
                Some(*total)
            })
            .collect()
    }
}

/// One finished request, as the metrics see it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord<'a> {
    pub policy: &'a str,
    /// "ok" or "error".
    pub status: &'a str,
    /// The pattern that ran (None: the request was never admitted).
    pub pattern: Option<&'a str>,
    pub ttft_s: Option<f64>,
    pub latency_s: f64,
    /// Tokens of a response that completed (None: it failed mid-way, nothing accounted).
    pub tokens: Option<(u64, u64)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    pub requests: HashMap<(String, String), u64>,
    pub routes: HashMap<String, u64>,
    pub ttft: Histogram,
    pub latency: Histogram,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Default)]
pub struct RequestMetrics {
    inner: Mutex<MetricsSnapshot>,
}

impl RequestMetrics {
    pub fn record(&self, rec: &RequestRecord<'_>) {
        let mut m = lock(&self.inner);
        let key = (rec.policy.to_owned(), rec.status.to_owned());
        *m.requests.entry(key).or_default() += 1;
        if let Some(pattern) = rec.pattern {
            match m.routes.get_mut(pattern) {
                Some(n) => *n += 1,
                None => {
                    m.routes.insert(pattern.to_owned(), 1);
                }
            }
        }
        if let Some(ttft) = rec.ttft_s {
            m.ttft.observe(ttft);
        }
        m.latency.observe(rec.latency_s);
        if let Some((prompt, completion)) = rec.tokens {
            m.prompt_tokens += prompt;
            m.completion_tokens += completion;
        }
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        lock(&self.inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets() {
        let m = RequestMetrics::default();
        for (status, latency) in [("ok", 0.003), ("ok", 200.0), ("error", 0.0005)] {
            m.record(&RequestRecord {
                policy: "round_robin",
                status,
                pattern: (status == "ok").then_some("dp"),
                ttft_s: Some(0.002),
                latency_s: latency,
                tokens: (status == "ok").then_some((4, 16)),
            });
        }
        let s = m.snapshot();
        assert_eq!(s.requests[&("round_robin".into(), "ok".into())], 2);
        assert_eq!(s.routes["dp"], 2);
        assert_eq!((s.prompt_tokens, s.completion_tokens), (8, 32));
        let cumulative = s.latency.cumulative();
        assert_eq!(cumulative[0], 1); // 0.0005 <= 0.001
        assert_eq!(cumulative[2], 2); // 0.003 <= 0.005
        assert_eq!(*cumulative.last().unwrap(), 3); // 200 s in +Inf
        assert_eq!(s.ttft.cumulative()[1], 3);
    }
}
