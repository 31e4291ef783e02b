"""Open-loop arrival times: a gamma renewal process (Poisson when burstiness = 1), as vLLM's
`bench serve` draws them, or a trace's own timestamps stretched by a time scale.

Gamma inter-arrival gaps with shape k = burstiness and scale 1 / (rate * k) keep the mean rate at
`rate` while the squared coefficient of variation of the gaps is 1 / k: k < 1 is burstier than
Poisson, k > 1 smoother. The first request goes out at offset 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from switchyard_bench.workloads.base import WorkloadError


class Arrivals(Protocol):
    """What `schedule` needs of an arrival process (this gamma one, or a synthetic workload's
    own, switchyard_bench/workloads/synthetic.py)."""

    def offsets(self, count: int, seed: int) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class ArrivalProcess:
    rate: float  # requests per second; math.inf sends everything at once
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        if not self.rate > 0 or math.isnan(self.rate):
            raise WorkloadError(f"rate must be > 0 (or inf), got {self.rate}")
        if not self.burstiness > 0 or math.isinf(self.burstiness):
            raise WorkloadError(f"burstiness must be a finite number > 0, got {self.burstiness}")

    def offsets(self, count: int, seed: int) -> list[float]:
        if count <= 0:
            return []
        if math.isinf(self.rate):
            return [0.0] * count
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=self.burstiness, scale=1.0 / (self.rate * self.burstiness),
                         size=count - 1)
        return [0.0, *np.cumsum(gaps).tolist()]

    def label(self) -> str:
        kind = "Poisson" if self.burstiness == 1.0 else f"gamma, burstiness {self.burstiness:g}"
        return f"{self.rate:g} req/s ({kind})"


def scaled_trace_offsets(offsets: list[float], time_scale: float) -> list[float]:
    """A trace's offsets times `time_scale` (0.5 replays twice as fast)."""
    if not time_scale > 0 or math.isinf(time_scale):
        raise WorkloadError(f"time-scale must be a finite number > 0, got {time_scale}")
    return [t * time_scale for t in offsets]
