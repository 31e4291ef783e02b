"""RecentOutcomes: a sliding window of finished requests — latency, SLO met or not, pattern.

The router records every request when it ends; policies read the window through the cluster
view (`cluster.outcomes`), e.g. the adaptive policy's SLO attainment per pattern. Bounded in
size and age, O(1) to record; summaries walk the window (hundreds of entries) per call.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Outcome:
    at: float              # monotonic seconds when the request ended
    pattern: str           # the route header's first word ("pd", "tandem", "dp", ...)
    ok: bool               # finished without an error
    ttft_s: float | None
    tpot_s: float | None   # None for a single-token answer
    slo_met: bool | None   # None when the request had no SLO


@dataclass(frozen=True, slots=True)
class WindowSummary:
    requests: int
    errors: int
    with_slo: int
    slo_met: int
    mean_ttft_s: float | None
    mean_tpot_s: float | None

    @property
    def attainment(self) -> float | None:
        """Share of requests with an SLO that met it (None: none had one)."""
        return self.slo_met / self.with_slo if self.with_slo else None


def slo_met(ttft_s: float | None, tpot_s: float | None, ttft_ms: float | None,
            tpot_ms: float | None) -> bool | None:
    """Both given objectives met (DistServe's definition); None when there is none."""
    if ttft_ms is None and tpot_ms is None:
        return None
    if ttft_ms is not None and (ttft_s is None or ttft_s * 1000 > ttft_ms):
        return False
    return not (tpot_ms is not None and tpot_s is not None and tpot_s * 1000 > tpot_ms)


class RecentOutcomes:
    def __init__(self, max_requests: int = 512, max_age_s: float = 60.0) -> None:
        self.max_age_s = max_age_s
        self._items: deque[Outcome] = deque(maxlen=max_requests)

    def record(self, outcome: Outcome) -> None:
        self._items.append(outcome)

    def _recent(self, window_s: float | None, now: float | None) -> list[Outcome]:
        now = time.monotonic() if now is None else now
        horizon = now - (self.max_age_s if window_s is None else min(window_s, self.max_age_s))
        return [o for o in self._items if o.at >= horizon]

    def summary(self, pattern: str | None = None, window_s: float | None = None,
                now: float | None = None) -> WindowSummary:
        items = [o for o in self._recent(window_s, now) if pattern is None or o.pattern == pattern]
        ttfts = [o.ttft_s for o in items if o.ttft_s is not None]
        tpots = [o.tpot_s for o in items if o.tpot_s is not None]
        with_slo = [o for o in items if o.slo_met is not None]
        return WindowSummary(len(items), sum(not o.ok for o in items), len(with_slo),
                             sum(bool(o.slo_met) for o in with_slo),
                             sum(ttfts) / len(ttfts) if ttfts else None,
                             sum(tpots) / len(tpots) if tpots else None)

    def patterns(self, window_s: float | None = None) -> list[str]:
        return sorted({o.pattern for o in self._recent(window_s, None)})
