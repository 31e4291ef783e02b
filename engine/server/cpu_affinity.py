"""Engines pinned to their own cores (`switchyard serve --cpu-affinity`), as GPU engines own
their devices: two engines on one machine then never take turns on a core, and a step's time
does not depend on where the scheduler last put the other engine's threads.

The launcher only sets an environment variable (the cores, "0,1"); the engine pins itself, every
thread it has, first thing as it starts (`pin_if_asked`), and the threads it starts later
(torch's pool, gRPC's, the step loop) inherit the mask. Not done from the parent: a `preexec_fn`
runs Python between fork and exec in a process with busy gRPC threads (it crashed children:
docs/reliability.md, soak run 2), and setting a pid's mask after exec races the child's own
thread start-up.
"""
from __future__ import annotations

import os

CPUS_ENV = "SWITCHYARD_ENGINE_CPUS"


def usable_cores() -> list[int]:
    """The cores this process may run on (its own affinity mask: a container's or taskset's
    limit, not the machine's count)."""
    return sorted(os.sched_getaffinity(0))


def split_cores(cores: list[int], engines: int) -> list[list[int]] | None:
    """`engines` disjoint, contiguous groups of `cores`, as equal as they can be (the first
    groups take the remainder); None when there are fewer cores than engines."""
    if engines < 1 or len(cores) < engines:
        return None
    size, extra = divmod(len(cores), engines)
    groups, at = [], 0
    for i in range(engines):
        take = size + (1 if i < extra else 0)
        groups.append(cores[at:at + take])
        at += take
    return groups


def format_cpus(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


def parse_cpus(text: str) -> set[int]:
    """"0,1" or "0-3,6" (a Cpus_allowed_list, as /proc and taskset write it)."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    if not out:
        raise ValueError(f"no cores in {text!r}")
    return out


def pin_if_asked() -> set[int] | None:
    """Call first thing in the engine process: pin every thread it has to the cores named in
    SWITCHYARD_ENGINE_CPUS (popped once applied: its children inherit the mask itself)."""
    text = os.environ.pop(CPUS_ENV, "")
    if not text:
        return None
    cpus = parse_cpus(text)
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: the calling thread (the only one this early)
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
    return cpus
