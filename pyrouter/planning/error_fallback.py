"""adaptive's fallback: while a pattern's recent predictions are far off, do not bet on them.

adaptive picks the placement whose predicted outcome is best; that is only as good as the
prediction. Past capacity under bursty decode-heavy load its disaggregated (pd) predictions
scattered widely — the transfer and the decode engine's queue are what the router sees least —
and it trailed least-load data parallel, whose outcome depends on a ranking of queues, not on
their predicted lengths (docs/experiments.md "adaptive's fallback when its predictions are off").

The rule, per pattern other than dp, from the closed loop's window of the corrected predictions'
error (recent_error.py: mean |log(actual / predicted)| over the pattern's last 16 requests, TTFT
and TPOT apart):

- untrusted once either kind's error, over at least MIN_OBS requests, exceeds ENTER (log 1.5:
  predictions off by 1.5x either way on average);
- trusted again once every kind with MIN_OBS requests is below LEAVE (log 1.25; the gap between
  the two keeps a pattern near the threshold from flapping).

While a pattern is untrusted, a request adaptive would place on it goes instead to data parallel
on the engine with the least predicted TTFT (least-load; the route says `fallback=dp`) — except
every PROBE_EVERY-th such request, which runs as chosen (`probe=pd`): an avoided pattern is not
observed, and without the probes its window would keep the old error for ever.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from pyrouter.planning.prediction_feedback import TPOT, TTFT
from pyrouter.planning.recent_error import RecentError

ENTER = math.log(1.5)
LEAVE = math.log(1.25)
MIN_OBS = 8
PROBE_EVERY = 4
_KINDS = (TTFT, TPOT)


@dataclass(slots=True)
class ErrorFallback:
    avoided: set[str] = field(default_factory=set)
    substituted: int = 0  # requests that would have run on an avoided pattern

    def update(self, recent: RecentError, patterns: Iterable[str], trusted: str) -> None:
        """Move each pattern but `trusted` in or out of `avoided` by its recent error."""
        for pattern in patterns:
            if pattern == trusted:
                continue
            errors = [e for e, n in (recent.error(k, pattern) for k in _KINDS) if n >= MIN_OBS]
            if pattern in self.avoided:
                if all(e < LEAVE for e in errors):
                    self.avoided.discard(pattern)
            elif any(e > ENTER for e in errors):
                self.avoided.add(pattern)

    def overrides(self, pattern: str) -> bool:
        """Whether a request chosen to run on `pattern` falls back instead (False: trusted, or a
        probe)."""
        if pattern not in self.avoided:
            return False
        self.substituted += 1
        return self.substituted % PROBE_EVERY != 0

    def probing(self, pattern: str) -> bool:
        """Whether `pattern`, chosen and not overridden, ran as a probe."""
        return pattern in self.avoided
