"""Wall-clock nanoseconds (what spans carry) from the monotonic clock the code measures with.

The offset between the two clocks is read at each conversion (two clock reads), not once per
process: the wall clock may be slewed while a process runs, and the router's spans made in Rust
read the wall clock directly, so a span converted here lines up with a Rust span made at the
same moment.
"""
from __future__ import annotations

import time


def perf_to_wall_ns(perf_s: float) -> int:
    """time.perf_counter() seconds -> Unix nanoseconds."""
    return int(perf_s * 1e9) + time.time_ns() - time.perf_counter_ns()
