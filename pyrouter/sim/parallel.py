"""A sweep's runs on several cores: each run in its own forked copy of this process.

Runs of a sweep share nothing (each builds a fresh cluster on a fresh virtual-time loop), so
they can run side by side. Each is forked from the parent as it was before any run, so it sees
exactly the state a serial sweep's runs see (policies loaded from --policy-file included, nothing
left over from another run), and a sweep's results do not depend on how many processes ran it.
Only the run's index crosses to the child and only its (JSON-like) result comes back; the
function and its arguments are inherited through the fork, never pickled.
"""
from __future__ import annotations

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
    """fn(job) for every job, yielded in the jobs' order as they finish; with `workers` > 1,
    each job in a fresh forked process, at most `workers` at once."""
    workers = min(workers, len(jobs))
    if workers <= 1:
        for job in jobs:
            yield fn(job)
        return
    global _work
    _work = (fn, jobs)
    try:
        # maxtasksperchild=1: every job in a new child forked from this process as it is now.
        with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=1) as pool:
            yield from pool.imap(_run_index, range(len(jobs)))
    finally:
        _work = None
