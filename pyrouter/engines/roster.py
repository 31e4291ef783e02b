"""The roster's version: a number that moves whenever an engine joins or leaves a directory, or
changes what decides whether a policy may choose it (health, draining, role, served model).

A directory's usable engines are listed, filtered and sorted once per such change, not once per
request (pyrouter/engines/usable_engines.py): over 1,024 engines that listing cost a Python
policy about 0.15 ms a request (docs/benchmarks.md, "One router, N engines"). One number for
every directory of the process: a change anywhere re-lists everywhere, which costs nothing that
matters at the rate engines change.
"""
from __future__ import annotations

# The fields of an EngineHandle that decide whether a policy may choose it (and for which role).
ROSTER_FIELDS = frozenset({"healthy", "draining", "role", "model"})

_version = 0


def roster_changed() -> None:
    """Some directory's engines, or a roster field of one of them, changed."""
    global _version
    _version += 1


def roster_version() -> int:
    return _version
