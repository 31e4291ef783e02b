"""RetryBudget: how many engine failures the router hides from clients by trying elsewhere.

A request whose engine failed before it produced anything is tried again on another engine (the
failed one leaves rotation). Two bounds keep a sick cluster from multiplying its own load: a
request is tried at most `per_request` more times, and across the router retries spend from a
bucket that every admitted request refills by `ratio` (up to `reserve`), so once a burst of
failures has spent the reserve at most `ratio` extra attempts per request remain. Retries the
budget refuses surface as the engine's error.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RetryBudget:
    per_request: int = 2
    ratio: float = 0.2
    reserve: float = 100.0
    tokens: float = -1.0  # starts full
    spent: int = 0        # retries granted (metrics, tests)
    refused: int = 0      # retries the budget refused

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.reserve

    def admitted(self) -> None:
        """One request admitted: it earns the router `ratio` of a retry."""
        self.tokens = min(self.reserve, self.tokens + self.ratio)

    def allow(self, retries_so_far: int) -> bool:
        """May this request, retried `retries_so_far` times already, be tried once more?"""
        if retries_so_far >= self.per_request or self.tokens < 1.0:
            self.refused += 1
            return False
        self.tokens -= 1.0
        self.spent += 1
        return True
