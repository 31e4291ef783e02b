"""Wall-clock nanoseconds (what spans carry) from the monotonic clocks the code measures with.

Offsets are taken once per process, so converting a timestamp costs one addition; spans from
different processes on one host line up to the wall clock's accuracy.
"""
from __future__ import annotations

import time

_PERF_TO_WALL_NS = time.time_ns() - time.perf_counter_ns()


def perf_to_wall_ns(perf_s: float) -> int:
    """time.perf_counter() seconds -> Unix nanoseconds."""
    return int(perf_s * 1e9) + _PERF_TO_WALL_NS

