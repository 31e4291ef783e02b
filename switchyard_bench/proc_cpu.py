"""CPU time of process trees, for "CPU per request" figures: user + system seconds of each
process and of every descendant alive at the time (psutil)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterable

import psutil


def tree_cpu_s(pids: Iterable[int]) -> float:
    """user + system seconds used so far by these processes and their live descendants (plus
    descendants that already exited and were waited for, which psutil reports as children_*)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    t = proc.cpu_times()
                    total += t.user + t.system + t.children_user + t.children_system
    return total
