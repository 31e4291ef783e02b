"""Wall-clock nanoseconds (what spans carry) from the monotonic clock the code measures with.

The offset between the two clocks is read at each conversion (two clock reads), not once per
process: the wall clock may be slewed while a process runs, and the router's spans made in Rust
read the wall clock directly, so a span converted here lines up with a Rust span made at the
same moment. The spans of one tree are converted with one offset read (`wall_offset_ns`): two
reads differ by the jitter between clock reads, enough to put a child's end a fraction of a
microsecond past its parent's when both ended at the same monotonic instant.
"""
from __future__ import annotations

import time


def wall_offset_ns() -> int:
    """Unix nanoseconds minus time.perf_counter() nanoseconds, now."""
    return time.time_ns() - time.perf_counter_ns()


def perf_to_wall_ns(perf_s: float, offset_ns: int | None = None) -> int:
    """time.perf_counter() seconds -> Unix nanoseconds, through `offset_ns` when given (one
    read shared by a tree of spans), else the offset read now."""
    return int(perf_s * 1e9) + (wall_offset_ns() if offset_ns is None else offset_ns)
