"""Per-caller rate and concurrency limits (429 with Retry-After), on top of the router-wide
in-flight limit: the rules as the command line and the admin API give them. router_core applies
them to every request (router_core/src/front/caller_limits.rs: a caller is its API key when keys
are configured, else its client address; a token bucket of `rps` requests per second and bursts
up to `burst`, and a cap of `max_inflight` requests in flight; 0 turns a limit off).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


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
