"""How wrong a pattern's predictions have been lately: the mean |log(actual / predicted)| over
the last `window` requests of that pattern, per kind (TTFT, TPOT).

The closed loop's correction (prediction_feedback.py) is a slow average meant to remove a steady
bias; it says nothing about how far off single predictions still are. A pattern whose
predictions scatter widely around a right average is one whose "best" placement is a guess:
adaptive's fallback (error_fallback.py) reads this window to stop trusting it. Log space, so
twice too slow and twice too fast weigh the same; a mean over a ring with a running sum, so an
observation costs O(1) whatever the window.
"""
from __future__ import annotations

import math


class _Window:
    """The last `size` values and their sum."""

    __slots__ = ("values", "next", "total")

    def __init__(self, size: int) -> None:
        self.values: list[float] = []
        self.next = 0      # where the next value goes once the ring is full
        self.total = 0.0

    def add(self, value: float, size: int) -> None:
        if len(self.values) < size:
            self.values.append(value)
        else:
            self.total -= self.values[self.next]
            self.values[self.next] = value
            self.next = (self.next + 1) % size
        self.total += value

    def mean(self) -> float:
        # The running sum drifts by rounding over many observations; clamped at 0, never negative.
        return max(0.0, self.total / len(self.values)) if self.values else 0.0


class RecentError:
    def __init__(self, window: int = 16) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.window = window
        self._windows: dict[tuple[str, str], _Window] = {}

    def observe(self, kind: str, pattern: str, ratio: float) -> None:
        """One request of `pattern`: its actual `kind` over the prediction it was placed with."""
        if ratio > 0 and math.isfinite(ratio):
            self._windows.setdefault((kind, pattern), _Window(self.window)).add(
                abs(math.log(ratio)), self.window)

    def error(self, kind: str, pattern: str) -> tuple[float, int]:
        """The mean |log ratio| over the window and how many requests it holds (0.0, 0: none)."""
        w = self._windows.get((kind, pattern))
        return (w.mean(), len(w.values)) if w is not None else (0.0, 0)
