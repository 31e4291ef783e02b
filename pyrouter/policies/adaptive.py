"""adaptive: switches among cache_aware, pd, balanced_pd, tandem and slo_mux while traffic flows.

Each request feeds the signals (cache hits, prefill:decode time, TPOT slack); every `eval_s`
the rule in pyrouter/planning/adaptive_rules.py proposes a pattern, and a proposal that wins
`hysteresis` evaluations in a row (and `min_dwell_s` after the last switch) becomes the pattern
new requests run. Each switch is logged with its reason and counted; every response says what
ran: `adaptive chose=tandem reason=decode_heavy lead=e0 ...`. Sub-policies keep their own
parameters (`sub_params`: {"tandem": {...}}) and state.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncGenerator, Awaitable
from typing import Any, cast

from pyrouter.cluster import ClusterView
from pyrouter.engines.handle import GenerationStream
from pyrouter.errors import NoCapacity
from pyrouter.planning.adaptive_rules import (
    AdaptiveSignals,
    AdaptiveThresholds,
    Hysteresis,
    propose,
)
from pyrouter.policy_registry import ActivePolicy, get_policy, policy
from pyrouter.request import RouteNote, RouterRequest
from pyrouter.session import SegmentEnd

log = logging.getLogger("switchyard.router")
PARAMS: dict[str, Any] = {
    "candidates": "cache_aware,pd,balanced_pd,tandem,slo_mux", "start": "cache_aware",
    "eval_s": 1.0, "hysteresis": 2, "min_dwell_s": 5.0, "hit_threshold": 0.5,
    "prefill_heavy": 1.0, "decode_heavy": 0.2, "attainment_margin": 0.15, "min_samples": 10,
    "window_s": 30.0, "ttft_ms": 2000.0, "tpot_ms": 200.0, "sub_params": {}}


def _observe(req: RouterRequest, cluster: ClusterView, signals: AdaptiveSignals) -> None:
    preds = cluster.predict(req)
    if not preds:
        return
    hit = max(p.matched_tokens for p in preds.values()) / max(1, len(req.tokens))
    modelled = [p for p in preds.values() if p.has_latency_model and p.healthy]
    ratio = None
    if modelled:
        best = min(modelled, key=lambda p: p.ttft_ms)
        decode_ms = req.sampling.max_tokens * best.decode_step_ms
        ratio = best.prefill_ms / decode_ms if decode_ms > 0 else None
    busy = [p for p in modelled if cluster.core.table.get(p.engine_id).running_decodes]
    slack_ok = all(p.tpot_slack_ms >= 0 or math.isinf(p.tpot_slack_ms) for p in busy)
    signals.observe(hit, ratio, slack_ok)


def _choose(cluster: ClusterView, req: RouterRequest) -> tuple[str, str]:
    params, state = cluster.params, cluster.state
    candidates = [c.strip() for c in str(params["candidates"]).split(",") if c.strip()]
    if "mode" not in state:
        start = str(params["start"])
        state["mode"] = Hysteresis(start if start in candidates else candidates[0],
                                   int(params["hysteresis"]), float(params["min_dwell_s"]))
        state["signals"], state["reason"], state["evaluated"] = AdaptiveSignals(), "start", 0.0
    mode: Hysteresis = state["mode"]
    signals: AdaptiveSignals = state["signals"]
    _observe(req, cluster, signals)
    now = time.monotonic()
    if now - state["evaluated"] >= float(params["eval_s"]):
        state["evaluated"] = now
        thresholds = AdaptiveThresholds(
            float(params["hit_threshold"]), float(params["prefill_heavy"]),
            float(params["decode_heavy"]), float(params["attainment_margin"]),
            int(params["min_samples"]), float(params["window_s"]))
        proposal, reason = propose(signals, thresholds, mode.current, cluster.outcomes,
                                   candidates)
        note = mode.vote(proposal, reason, now)
        if note is not None:
            state["reason"] = reason
            log.info("adaptive switch %s", note)
            cluster.note_event("adaptive_switch", note)
    return mode.current, str(state["reason"])


def _sub_view(cluster: ClusterView, name: str) -> ClusterView:
    subs: dict[str, ActivePolicy] = cluster.state.setdefault("subs", {})
    if name not in subs:
        spec = get_policy(name)
        own = dict(cluster.params["sub_params"].get(name, {}))
        for key in ("ttft_ms", "tpot_ms"):  # the adaptive policy's SLO is every pattern's
            if key in spec.defaults and key not in own:
                own[key] = cluster.params[key]
        subs[name] = ActivePolicy(spec, spec.check_params(own))
    return cluster.sub(subs[name])


def _label(req: RouterRequest, chose: str, reason: str) -> None:
    inner = req.route
    params: dict[str, object] = {"chose": chose, "reason": reason}
    params.update({k: v for k, v in inner.params.items() if k not in params})
    req.route = RouteNote("adaptive", params)


@policy("adaptive", params=PARAMS)
async def route(req: RouterRequest, cluster: ClusterView
                ) -> AsyncGenerator[GenerationStream, SegmentEnd]:
    if not cluster.engines("any"):
        raise NoCapacity("no healthy engine", code="no_capacity")
    chose, reason = _choose(cluster, req)
    sub = _sub_view(cluster, chose)
    decision = sub.policy.spec.route(req, sub)
    if not sub.policy.spec.segmented:
        stream = await cast(Awaitable[GenerationStream], decision)
        _label(req, chose, reason)
        yield stream
        return
    segments = cast(AsyncGenerator[GenerationStream, SegmentEnd], decision)
    try:
        stream = await segments.__anext__()
        _label(req, chose, reason)
        while True:
            end = yield stream
            stream = await segments.asend(end)
    except StopAsyncIteration:
        return
    finally:
        await segments.aclose()
