"""A run's summary from its request records, with vLLM `bench serve`'s definitions (and
DistServe's SLO attainment); docs/benchmarking.md states each one.

- TTFT: send -> first token event. TPOT: (JCT - TTFT) / (completion_tokens - 1), only requests
  with more than one output token. ITL: every gap between consecutive token events, pooled over
  requests. JCT (vLLM's E2EL): send -> end of the stream. Statistics over completed requests.
- Throughput: completed requests, and their output tokens, per second of the run's duration
  (first send -> last response, or -> Ctrl-C).
- Goodput: completed requests meeting every given SLO per second of duration (vLLM).
- SLO attainment: requests meeting the SLO / requests sent (failed ones count as misses;
  DistServe). Requests cut short by Ctrl-C count in neither.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from switchyard_bench.serve.stream_record import RequestRecord

LATENCIES = ("ttft", "tpot", "itl", "jct")
STATISTICS = ("mean", "median", "p90", "p99")


def describe_ms(values: Sequence[float]) -> dict[str, float | None]:
    """mean / median / P90 / P99 (linear interpolation, as numpy and vLLM); None when empty."""
    if not values:
        return dict.fromkeys(STATISTICS)
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "median": float(np.median(arr)),
            "p90": float(np.percentile(arr, 90)), "p99": float(np.percentile(arr, 99))}


def summarize(records: Sequence[RequestRecord], duration_s: float,
              slo_given: bool) -> dict[str, Any]:
    counted = [r for r in records if not r.interrupted]
    done = [r for r in counted if r.ok]
    per_latency: dict[str, list[float]] = {
        "ttft": [r.ttft_ms for r in done if r.ttft_ms is not None],
        "tpot": [r.tpot_ms for r in done if r.tpot_ms is not None],
        "itl": [gap for r in done for gap in r.itl_ms],
        "jct": [r.jct_ms for r in done if r.jct_ms is not None],
    }
    out_tokens = sum(r.completion_tokens for r in done)
    in_tokens = sum(r.prompt_tokens for r in done)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    summary: dict[str, Any] = {
        "requests": len(counted), "completed": len(done), "failed": len(counted) - len(done),
        "interrupted": len(records) - len(counted), "duration_s": duration_s,
        "input_tokens": in_tokens, "output_tokens": out_tokens,
        "cached_tokens": sum(r.cached_tokens for r in done),
        "request_throughput": len(done) * per_s, "output_throughput": out_tokens * per_s,
        "total_token_throughput": (in_tokens + out_tokens) * per_s,
    }
    for name, values in per_latency.items():
        for stat, value in describe_ms(values).items():
            summary[f"{stat}_{name}_ms"] = value
    met = sum(1 for r in counted if r.slo_met)
    summary["goodput"] = met * per_s if slo_given else None
    summary["slo_attainment"] = (met / len(counted) if counted else None) if slo_given else None
    errors: dict[str, int] = {}
    for r in counted:
        if not r.ok:
            errors[r.error] = errors.get(r.error, 0) + 1
    summary["errors"] = dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5])
    summary["routes"] = _route_patterns(done)
    # Refused by the router's admission gate (X-Switchyard-Route "... admitted=shed"): how many,
    # and how long after it was sent each was answered.
    refused = [r for r in counted if "admitted=shed" in r.route]
    summary["refused"] = len(refused)
    for stat, value in describe_ms([r.jct_ms for r in refused if r.jct_ms is not None]).items():
        summary[f"{stat}_refused_ms"] = value
    return summary


def _route_patterns(records: Sequence[RequestRecord]) -> dict[str, int]:
    """How many completed requests each pattern served (first word of X-Switchyard-Route)."""
    counts: dict[str, int] = {}
    for r in records:
        pattern = r.route.split(" ", 1)[0] if r.route else "?"
        counts[pattern] = counts.get(pattern, 0) + 1
    return counts
