"""A request has ended: its timeline becomes metrics, an outcome for the policies, and (when
sampled) spans. The one place this happens, called once per request by the HTTP handler."""
from __future__ import annotations

import time

from pyrouter.metrics import RouterMetrics
from pyrouter.request import RouterRequest
from pyrouter.state import RouterState

# (pattern, engine id, engine role): the latency histograms' labels.
Labels = tuple[str, str, str]


def record_request_metrics(m: RouterMetrics, policy: str, pattern: str, status: str,
                           error_type: str, first: Labels | None, last: Labels | None,
                           ttft_s: float | None, e2e_s: float, tpot_s: float | None,
                           prompt_tokens: int, completion_tokens: int) -> None:
    """A finished request into the request metrics: `first`/`last` label its first and last
    segment's engine (None: it never reached one). Requests the Rust front's fast path served
    come here too (pyrouter/fast_path.py)."""
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


def record_request_end(state: RouterState, req: RouterRequest, policy: str, status: str,
                       error_type: str) -> None:
    tl = req.timeline
    tl.ended = time.perf_counter()
    m = state.metrics
    pattern = req.route.label()
    first, last = tl.first_segment, tl.last_segment
    n = req.completion_tokens
    ttft = None if tl.first_token is None else tl.first_token - tl.started
    tpot = ((tl.arrival_times[-1] - tl.first_token) / (n - 1)
            if n > 1 and tl.first_token is not None and tl.arrival_times else None)
    record_request_metrics(
        m, policy, pattern, status, error_type,
        None if first is None else (pattern, first.engine, first.role),
        None if last is None else (pattern, last.engine, last.role),
        ttft, tl.ended - tl.started, tpot, req.prompt_len, n)
    m.child(m.model_requests, req.model, status).inc()
    itl = m.itl
    for segment, gap, count in tl.inter_token_gaps():
        itl.observe_many((pattern, segment.engine, segment.role), gap, count)
    state.group(req.model).dispatcher.record(req, status == "ok", tl.started, tl.first_token,
                                             tl.ended)
    if tl.trace is not None:
        tl.trace.finish(req)
