"""Why a request went where it did, for its decision's span: the route, the prefix each engine
holds (the engines holding some: a fleet's others are 0), and what router_core predicted for each engine (when the policy asked) — as span
attributes, plus one line for `switchyard trace show`."""
from __future__ import annotations

import math
from typing import Any

from pyrouter.request import RouterRequest
from switchyard_telemetry import attributes as A

_PREDICTED = ("ttft_ms", "queue_ms", "prefill_ms", "decode_step_ms")


def explanation(req: RouterRequest) -> dict[str, Any]:
    """(router_core adds who decided, the segment, its engine and role, and leads the one line
    with the route as carried out.)"""
    attrs: dict[str, Any] = {A.PATTERN: req.route.pattern}
    parts: list[str] = []
    if req.matched_by_engine:
        for engine, n in sorted(req.matched_by_engine.items()):
            attrs[A.MATCHED_PREFIX + engine] = n
        parts.append("matched " + " ".join(f"{e}={n}" for e, n in
                                           sorted(req.matched_by_engine.items())))
    for engine, prediction in sorted((req.predictions or {}).items()):
        shown = []
        for quantity in _PREDICTED:
            value = float(getattr(prediction, quantity))
            if math.isfinite(value):
                attrs[f"{A.PREDICTED}{engine}.{quantity}"] = round(value, 3)
                shown.append(f"{quantity}={value:.1f}")
        if shown:
            parts.append(f"predicted {engine}: " + " ".join(shown))
    attrs[A.EXPLANATION] = "; ".join(parts)
    return attrs
