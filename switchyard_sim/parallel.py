"""A sweep's runs on several cores: worker processes forked from the sweep's own.

Runs of a sweep share nothing (each builds a fresh cluster on a fresh virtual-time loop and
leaves nothing another run reads: tests/sim/test_sim_determinism.py checks a run alone against
the same run late in a sweep), so they can run side by side, and a sweep's results do not depend
on how many processes ran it or which ran what. The workers are forked before any run, so they
hold what the parent loaded (policies from --policy-file included); each then takes runs in
order as it frees up. Only a run's index crosses to a worker and only its (JSON-like) result
comes back; the function and its arguments are inherited through the fork, never pickled.
"""
from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

J = TypeVar("J")
R = TypeVar("R")

# What the forked children run: set in the parent just before the pool forks them.
_work: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def _run_index(index: int) -> Any:
    assert _work is not None, "a sweep worker started without its work"
    fn, jobs = _work
    return fn(jobs[index])


def in_processes(fn: Callable[[J], R], jobs: Sequence[J], workers: int) -> Iterator[R]:
    """fn(job) for every job, yielded in the jobs' order; with `workers` > 1, in that many
    worker processes forked from this one before the first job, each taking the next job as it
    frees up (a job must leave nothing behind that a later one reads)."""
    global _work
    workers = min(workers, len(jobs))
    # What is alive before the first run (the imported modules: torch's alone are hundreds of
    # thousands of objects) outlives every run: out of the collector's reach, the full
    # collections a run's garbage triggers do not walk it again and again, and a forked
    # worker's collections do not touch (and copy) every page it lives in. (Left frozen when
    # a caller froze it already: this may run inside a worker's job.)
    frozen_before = gc.get_freeze_count()
    # Collect first: an earlier run's cluster can outlast one collection (what the first frees
    # lets the rest go), and garbage frozen here would stay for the whole sweep.
    gc.collect()
    gc.freeze()
    try:
        if workers <= 1:
            for job in jobs:
                yield fn(job)
            return
        saved, _work = _work, (fn, jobs)
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                yield from pool.imap(_run_index, range(len(jobs)))
        finally:
            _work = saved
    finally:
        if not frozen_before:
            gc.unfreeze()
