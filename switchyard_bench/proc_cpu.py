"""CPU time and memory of process trees, for "CPU per request" and "RSS per engine" figures:
user + system seconds of each process and of every descendant alive at the time, and their
resident memory (psutil)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import psutil


def _tree(pids: Iterable[int]) -> Iterator[psutil.Process]:
    """These processes and their live descendants (those gone meanwhile left out)."""
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            yield from [root, *root.children(recursive=True)]


def tree_cpu_s(pids: Iterable[int]) -> float:
    """user + system seconds used so far by these processes and their live descendants (plus
    descendants that already exited and were waited for, which psutil reports as children_*)."""
    total = 0.0
    for proc in _tree(pids):
        with contextlib.suppress(psutil.NoSuchProcess):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_rss_mb(pids: Iterable[int]) -> float:
    """Resident memory (MB) of these processes and their live descendants, summed (shared pages
    counted once per process: an upper bound)."""
    total = 0
    for proc in _tree(pids):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total / 1e6
