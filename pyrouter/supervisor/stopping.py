"""Stopping a group of children: SIGTERM to all of them at once, then SIGKILL to any still running
after the group's grace. serve stops its routers first (each drains: new requests get 503 while
the streams in flight finish, up to --drain-s) and its engines only once every router is gone,
so no stream a router is still draining loses its engine."""
from __future__ import annotations

import signal
from collections.abc import Sequence

from pyrouter.supervisor.process import ChildProcess, wait_gone

ENGINE_GRACE_S = 15.0  # an engine with no router left has nothing to finish
ROUTER_GRACE_S = 15.0  # beyond the drain: for the front's connections to close
_KILLED_WAIT_S = 10.0


async def stop_processes(processes: Sequence[ChildProcess],
                         grace_s: float) -> list[ChildProcess]:
    """Returns those still running even after SIGKILL (a process stuck in the kernel)."""
    for process in processes:
        process.send(signal.SIGTERM)
    for process in await wait_gone(processes, grace_s):
        process.send(signal.SIGKILL)
    return await wait_gone(processes, _KILLED_WAIT_S)  # reaped before serve goes on
