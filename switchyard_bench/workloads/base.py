"""What every workload is: the i-th request's prompt and output length, plus (for traces) the
trace's own arrival times, and the parameters that must be printed next to any result.

A workload is indexed, not iterated, so the open-loop runner takes the first N requests and a
Locust user (closed loop, no end) cycles through them. `salt` decides the prompt's token
*content* and nothing else: two runs with different salts send requests of the same shapes
whose prompts share no prefix, so no run inherits another's prefix cache. Lengths come from
the workload's own seed, so every run of a sweep sees the same lengths.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple


class WorkloadError(ValueError):
    """A workload's parameters or data file are invalid (said plainly, never a traceback)."""


class RequestShape(NamedTuple):
    prompt: list[int] | str  # token ids (sent as /v1/completions' `prompt` list) or text
    max_tokens: int  # sent with ignore_eos, so this is the output length


class WorkItem(NamedTuple):
    arrival_s: float  # offset from the run's start at which the request is sent
    prompt: list[int] | str
    max_tokens: int


class Workload(ABC):
    name: str = ""

    @abstractmethod
    def shape(self, index: int, salt: int) -> RequestShape:
        """The request at `index` (0-based; callers keep it below `size()` when that is set)."""

    def size(self) -> int | None:
        """How many requests the workload has (a trace's length), or None (unbounded)."""
        return None

    def trace_offsets(self, count: int) -> list[float] | None:
        """The trace's own arrival offsets in seconds (first = 0, unscaled), or None when the
        workload has no timestamps and needs an arrival process."""
        return None

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Name and every parameter that changes what is measured (scales, lengths, file)."""


def scaled_length(length: int, scale: float) -> int:
    """A trace length times a scale, at least one token."""
    return max(1, round(length * scale))


def check_positive(**values: float) -> None:
    for key, value in values.items():
        if not value > 0:
            raise WorkloadError(f"{key.replace('_', '-')} must be > 0, got {value}")
