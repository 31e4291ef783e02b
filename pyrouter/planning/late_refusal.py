"""Refuse at once what would fail late: a placement predicted to answer past the router's
first-output timeout. (Not the admission queue, pyrouter/admission.py, which holds requests while
the engines are saturated: this refusal is a policy's own, from its TTFT predictions.)

A request waits for its first output at most `--policy-timeout-s` (the dispatcher's
first-output timeout; policies read it as `cluster.first_output_timeout_s`) and then fails with
502 `engine_timeout`. Under sustained overload a policy's chosen engine can be predicted to
answer only past that line; queueing the request there spends the client's wait and the
engine's queue on a request that fails anyway, and the queue keeps growing. Every policy that
predicts TTFT (adaptive, slo_mux, tandem) refuses such a request now instead: 503 `overloaded`
with Retry-After — when the soonest placement would answer — so the client learns at once and
the requests already queued are served.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from pyrouter.errors import NoCapacity


def refuse_past_timeout(chosen_ttft_ms: float, every_ttft_ms: Iterable[float],
                        timeout_s: float) -> None:
    """Raise 503 `overloaded` when the chosen placement's predicted TTFT reaches the timeout.

    `every_ttft_ms`: the TTFT each placement the policy had predicts; the soonest is the
    Retry-After (whole seconds, at least 1). A NaN prediction (no latency model) never refuses."""
    timeout_ms = timeout_s * 1000.0
    if not chosen_ttft_ms >= timeout_ms:
        return
    soonest_ms = min((t for t in every_ttft_ms if math.isfinite(t)), default=timeout_ms)
    soonest_s = soonest_ms / 1000.0
    raise NoCapacity(f"overloaded: first output predicted in {chosen_ttft_ms / 1000:.0f} s, "
                     f"past the router's {timeout_s:g} s first-output timeout",
                     code="overloaded", retry_after_s=max(1.0, math.ceil(soonest_s)))
