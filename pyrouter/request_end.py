"""A finished request into the request metrics: the one mapping, for every request router_core
records (pyrouter/runtime/records.py)."""
from __future__ import annotations

from pyrouter.metrics.router_metrics import RouterMetrics

# (pattern, engine id, engine role): the latency histograms' labels.
Labels = tuple[str, str, str]


def record_request_metrics(m: RouterMetrics, policy: str, pattern: str, status: str,
                           error_type: str, first: Labels | None, last: Labels | None,
                           ttft_s: float | None, e2e_s: float, tpot_s: float | None,
                           prompt_tokens: int, completion_tokens: int) -> None:
    """A finished request into the request metrics: `first`/`last` label its first and last
    segment's engine (None: it never reached one)."""
    m.child(m.requests, policy, pattern, status).inc()
    if status != "ok":
        m.count_error(error_type or status)
    if first is not None and ttft_s is not None:
        m.child(m.ttft, *first).observe(ttft_s)
    if last is not None:
        m.child(m.e2e, *last).observe(e2e_s)
        if tpot_s is not None:
            m.child(m.tpot, *last).observe(tpot_s)
        m.child(m.prompt_tokens, pattern).inc(prompt_tokens)
        m.child(m.generation_tokens, pattern).inc(completion_tokens)
