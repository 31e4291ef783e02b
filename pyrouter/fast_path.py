"""The Rust front's fast path, from the deciding side.

Under a pure-selection built-in (round_robin, least_load, cache_aware) the Rust front picks the
engine itself (router_core/src/front/fast_path.rs, the same decision as the Python policy for
the same engine table) and no Python runs for the request. This module says when that holds,
keeps the front's policy in step with the router's active one, and records what the fast path
served — the request metrics and the outcome window — from the records the front keeps, a few
times a second rather than once per request.
"""
from __future__ import annotations

import asyncio
import logging
import time

from pyrouter.policies.cache_aware import WEIGHTS
from pyrouter.policy_registry import ActivePolicy
from pyrouter.request_end import Labels, record_request_metrics
from pyrouter.state import RouterState
from router_core import RouterFront, engine_name

log = logging.getLogger("switchyard.router")
FAST_POLICIES = ("round_robin", "least_load", "cache_aware")
RECORD_INTERVAL_S = 0.25  # how stale the metrics and outcomes of fast requests may be
Weights = tuple[float, float, float, float]


def fast_policy_for(active: ActivePolicy, in_python: bool) -> tuple[str, Weights | None] | None:
    """The fast path for `active`, or None when its requests must run in Python: a policy that
    is not a pure-selection built-in, a policy file's own policy under a built-in's name, or
    `in_python` (per-caller limits on: they live on the Python side). Tracing does not take
    requests off the fast path: the front makes their spans itself."""
    name = active.name
    if in_python or name not in FAST_POLICIES:
        return None
    if getattr(active.spec.route, "__module__", "") != f"pyrouter.policies.{name}":
        return None
    if name != "cache_aware":
        return name, None
    w = {**active.spec.defaults, **active.params}
    return name, (float(w[WEIGHTS[0]]), float(w[WEIGHTS[1]]), float(w[WEIGHTS[2]]),
                  float(w[WEIGHTS[3]]))


def sync_fast_policy(state: RouterState, front: RouterFront) -> None:
    """Give the front the fast path of each served model's active policy (or none)."""
    in_python = state.limiter.rules.active
    groups = list(state.models.values()) or [state.group()]
    for group in groups:
        choice = fast_policy_for(group.slot.current, in_python)
        if choice is None:
            front.set_fast_policy(None, model=group.name)
        else:
            front.set_fast_policy(*choice, model=group.name)


class FastRequestRecorder:
    """Turns the front's fast-path records into the router's metrics and outcomes."""

    def __init__(self, state: RouterState, front: RouterFront) -> None:
        self.state = state
        self.front = front
        self._dropped = 0

    def record(self) -> int:
        """Record every finished fast-path request the front holds; returns how many."""
        records, dropped = self.front.drain_fast_records()
        if dropped > self._dropped:
            log.warning("fast path: %d finished request(s) were not recorded (the recorder "
                        "fell behind)", dropped - self._dropped)
            self._dropped = dropped
        if not records:
            return 0
        state, m = self.state, self.state.metrics
        now = time.monotonic()
        for r in records:
            pattern = r.pattern or "none"
            labels: Labels | None = None
            if r.engine is not None:
                name = engine_name(r.engine)
                handle = state.engines.engines.get(name)
                labels = (pattern, name, handle.role if handle else "any")
                m.count_selection(r.policy, pattern)
            m.child(m.model_requests, r.model, "ok" if r.ok else "error").inc()
            record_request_metrics(m, r.policy, pattern, "ok" if r.ok else "error",
                                   r.error_type, labels, labels, r.ttft_s, r.e2e_s, r.tpot_s,
                                   r.prompt_tokens, r.completion_tokens)
            if labels is not None and r.tpot_s is not None:
                # One arrival time per request on this path: its mean gap stands for each.
                m.itl.observe_many(labels, r.tpot_s, r.completion_tokens - 1)
            state.group(r.model).dispatcher.record_outcome(
                now - r.age_s, pattern, r.ok, r.ttft_s, r.tpot_s, r.slo_ttft_ms, r.slo_tpot_ms)
        return len(records)

    async def run(self) -> None:
        """Record every RECORD_INTERVAL_S until cancelled (then once more)."""
        try:
            while True:
                await asyncio.sleep(RECORD_INTERVAL_S)
                self.record()
        finally:
            self.record()
