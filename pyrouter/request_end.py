"""A request has ended: its timeline becomes metrics, an outcome for the policies, and (when
sampled) spans. The one place this happens, called once per request by the HTTP handler."""
from __future__ import annotations

import time

from pyrouter.request import RouterRequest
from pyrouter.state import RouterState


def record_request_end(state: RouterState, req: RouterRequest, policy: str, status: str,
                       error_type: str) -> None:
    tl = req.timeline
    tl.ended = time.perf_counter()
    m = state.metrics
    pattern = req.route.label()
    m.child(m.requests, policy, pattern, status).inc()
    if status != "ok":
        m.count_error(error_type or status)
    first, last = tl.first_segment, tl.last_segment
    if first is not None and tl.first_token is not None:
        m.child(m.ttft, pattern, first.engine, first.role).observe(tl.first_token - tl.started)
    if last is not None:
        labels = (pattern, last.engine, last.role)
        m.child(m.e2e, *labels).observe(tl.ended - tl.started)
        n = req.completion_tokens
        if n > 1 and tl.first_token is not None and tl.arrival_times:
            m.child(m.tpot, *labels).observe((tl.arrival_times[-1] - tl.first_token) / (n - 1))
        m.child(m.prompt_tokens, pattern).inc(req.prompt_len)
        m.child(m.generation_tokens, pattern).inc(n)
    itl = m.itl
    for segment, gap, count in tl.inter_token_gaps():
        itl.observe_many((pattern, segment.engine, segment.role), gap, count)
    state.dispatcher.record(req, status == "ok", tl.started, tl.first_token, tl.ended)
    if tl.trace is not None:
        tl.trace.finish(req, policy, status, error_type)
