"""Per-caller rate and concurrency limits (429 with Retry-After), on top of the router-wide
in-flight limit.

A caller is its API key when keys are configured, else its client address. Each caller has a
token bucket (`rps` requests per second, bursts up to `burst`) and a cap on requests in flight
(`max_inflight`); 0 turns a limit off. Callers are tracked in a bounded LRU table, so a flood of
distinct addresses costs bounded memory (an evicted caller starts with a full bucket again).
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from pyrouter.errors import Busy

_MAX_CALLERS = 10_000


@dataclass(frozen=True, slots=True)
class RateRules:
    rps: float = 0.0           # sustained requests per second per caller (0 = unlimited)
    burst: int = 0             # bucket size (0 = max(1, rps))
    max_inflight: int = 0      # requests in flight per caller (0 = unlimited)

    def __post_init__(self) -> None:
        if self.rps < 0 or self.burst < 0 or self.max_inflight < 0 or not math.isfinite(self.rps):
            raise ValueError("rate limits must be finite and >= 0")

    @property
    def active(self) -> bool:
        return bool(self.rps or self.max_inflight)


@dataclass(slots=True)
class _Caller:
    tokens: float
    updated: float
    inflight: int = 0


@dataclass(slots=True)
class CallerLimiter:
    rules: RateRules
    _callers: OrderedDict[str, _Caller] = field(default_factory=OrderedDict)

    def _caller(self, key: str, now: float) -> _Caller:
        caller = self._callers.get(key)
        if caller is None:
            caller = self._callers[key] = _Caller(self._capacity, now)
            while len(self._callers) > _MAX_CALLERS:
                oldest, entry = next(iter(self._callers.items()))
                if entry.inflight:  # never forget a caller with requests in flight
                    self._callers.move_to_end(oldest)
                    break
                del self._callers[oldest]
        else:
            self._callers.move_to_end(key)
        return caller

    @property
    def _capacity(self) -> float:
        return float(self.rules.burst or max(1.0, self.rules.rps))

    def acquire(self, key: str, now: float | None = None) -> None:
        """Count one request of `key` in; Busy (429, with retry_after_s) when over a limit.
        Every successful acquire is paired with one release()."""
        if not self.rules.active:
            return
        now = time.monotonic() if now is None else now
        caller = self._caller(key, now)
        rules = self.rules
        if rules.max_inflight and caller.inflight >= rules.max_inflight:
            raise Busy(f"{caller.inflight} requests of this caller in flight (limit "
                       f"{rules.max_inflight})", code="too_many_concurrent_requests",
                       retry_after_s=1.0)
        if rules.rps:
            caller.tokens = min(self._capacity, caller.tokens + (now - caller.updated) * rules.rps)
            caller.updated = now
            if caller.tokens < 1.0:
                wait = (1.0 - caller.tokens) / rules.rps
                raise Busy(f"over the rate limit of {rules.rps:g} requests/s for this caller",
                           code="rate_limit_exceeded", retry_after_s=wait)
            caller.tokens -= 1.0
        caller.inflight += 1

    def release(self, key: str) -> None:
        if not self.rules.active:
            return
        caller = self._callers.get(key)
        if caller is not None and caller.inflight:
            caller.inflight -= 1

    def inflight(self, key: str) -> int:
        caller = self._callers.get(key)
        return caller.inflight if caller is not None else 0
