"""A process that `switchyard serve` launched (an engine, a router replica) dies with it, even
when serve is SIGKILLed.

The launcher only sets an environment variable (the parent's pid); the child itself asks the
kernel for SIGTERM on the parent's death (PR_SET_PDEATHSIG) as it starts. It is not done in a
`preexec_fn`: Python code between fork and exec, in a parent whose gRPC threads are busy (serve
runs the router in-process), crashes the child now and then — gRPC's fork handlers are skipped
and its poller hits closed descriptors (SIGSEGV/SIGABRT before exec, about 1 spawn in 6 under
traffic; the soak in docs/reliability.md found it). Without a preexec_fn, subprocess spawns
with vfork/posix_spawn and runs no Python in the child.
"""
from __future__ import annotations

import ctypes
import os
import signal

PARENT_PID_ENV = "SWITCHYARD_DIE_WITH_PARENT"
_PR_SET_PDEATHSIG = 1


def die_with_parent_if_asked() -> None:
    """Call first thing in the launched process."""
    # Popped: the process's own children do not inherit it.
    parent = os.environ.pop(PARENT_PID_ENV, "")
    if not parent:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return  # not Linux: the engine outlives a killed parent, as before
    if os.getppid() != int(parent):  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
