"""A cell's capacity: the highest Poisson rate at which a baseline policy (round_robin unless
told otherwise) keeps `target` (90%) of the SLO attainment it has at light load, found by
bracketing and geometric bisection on the rate.

Why this definition:
- SLO attainment, not throughput: the tournament compares attainment, so "load 1.0" should be
  where the plainest data-parallel router stops meeting the SLO; loads above it are where a
  smarter policy has to earn its keep. Throughput saturation is a poor edge for a finite
  open-loop run: its duration includes the queue's drain, so throughput / offered rate falls
  below 1 long before the engines saturate when runs are short.
- Relative to light load: a fixed SLO can be out of reach for some requests even alone on an
  engine (Mooncake's longest prompts under TTFT <= 1 s), and then no rate reaches 90%
  absolute. "Keeps 90% of what it attains unloaded" is 90% absolute whenever the unloaded
  attainment is 100%, and still defined when it is not (the report says which).
- round_robin: stateless, so its attainment falls with the rate almost monotonically (a clean
  bisection), and it is the baseline every router has.

A finite run measures a sustained rate only when it sends many more requests than are in flight
at that rate (Little's law: rate x mean JCT); with fewer, the edge found is the burst the
engines absorb (every request in flight at once), which on big engines (the H100 profile's
256-sequence batches) can be far above the sustainable rate. The report flags such groups and
the --num-prompts that would measure a steady load.

Bisection assumes attainment falls as the rate rises; a non-monotone stretch (one seed's
arrivals) only moves the edge within it. Each probe is one full simulated run, so the search
costs about log2(range / tolerance) runs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MAX_DOUBLINGS = 12  # the bracket search gives up past start x 2^12 (or start / 2^12)


@dataclass(slots=True)
class CapacityResult:
    rate: float  # highest rate found to pass (the capacity)
    light_rate: float
    light_attainment: float
    threshold: float  # attainment a rate must keep to pass: target x light_attainment
    bounded: bool  # False: the bracket search hit its limit (rate is a bound, not an edge)
    probes: list[tuple[float, float]] = field(default_factory=list)  # (rate, attainment)

    @property
    def basis(self) -> str:
        """How the capacity was found, in words for the report."""
        edge = "" if self.bounded else " (search limit: a bound, not an edge)"
        if self.light_attainment >= 1.0:
            return f"attainment >= {self.threshold:.0%}{edge}"
        return (f"attainment >= {self.threshold:.1%} = 90% of its light-load "
                f"{self.light_attainment:.1%}{edge}")


def find_capacity(attainment_at: Callable[[float], float], start_rate: float,
                  light_rate: float, target: float = 0.9,
                  tolerance: float = 0.05) -> CapacityResult:
    """Bracket the edge by doubling or halving from `start_rate`, then bisect geometrically
    until the bracket's ratio is within 1 + tolerance. `attainment_at(rate)` runs one probe."""
    if not (0 < light_rate and 0 < start_rate and 0 < target <= 1 and tolerance > 0):
        raise ValueError("rates, target (0, 1] and tolerance must be > 0")
    probes: list[tuple[float, float]] = []
    seen: dict[float, float] = {}

    def probe(rate: float) -> float:
        if rate not in seen:  # the halving may come back to the light rate
            seen[rate] = attainment_at(rate)
            probes.append((rate, seen[rate]))
        return seen[rate]

    light = probe(light_rate)
    threshold = target * light

    def passes(rate: float) -> bool:
        return probe(rate) >= threshold

    lo: float | None = None
    hi: float | None = None
    rate = max(start_rate, light_rate)
    for _ in range(MAX_DOUBLINGS):
        if passes(rate):
            lo = rate
            if hi is not None:
                break
            rate *= 2
        else:
            hi = rate
            if lo is not None or rate <= light_rate:
                break
            rate = max(rate / 2, light_rate)
    if lo is None:  # even light load misses the threshold (cannot, unless non-monotone)
        return CapacityResult(light_rate, light_rate, light, threshold, False, probes)
    if hi is None:
        return CapacityResult(lo, light_rate, light, threshold, False, probes)
    while hi / lo > 1 + tolerance:
        mid = (lo * hi) ** 0.5
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return CapacityResult(lo, light_rate, light, threshold, True, probes)
