"""Run a Rust server object (router_core.MockEngineServer / MockOpenAIWorker) in the foreground
until SIGINT or SIGTERM, then shut it down cleanly.

The signals are blocked before the server starts, so its runtime threads inherit the mask and
only `sigwait` here receives them: no Python handler has to run while Rust holds the process.
"""
from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Protocol

_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class StoppableServer(Protocol):
    @property
    def port(self) -> int: ...

    def shutdown(self, grace_s: float = 1.0) -> None: ...


def serve_until_signal(start: Callable[[], StoppableServer], banner: str,
                       grace_s: float = 1.0) -> int:
    """`start()` builds (binds) the server; `banner` is printed with `{port}` filled in once it
    listens. Returns the exit code: 0 after a clean stop, 2 when the server could not start."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        server = start()
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    print(banner.format(port=server.port), flush=True)
    signal.sigwait(_STOP_SIGNALS)
    server.shutdown(grace_s)
    return 0
