"""Restarts the supervisor's children when they die: each after its own backoff (1 s, doubling up
to its kind's maximum), on its own port, at most `max_restarts` times in a row (a child that then
runs for its kind's `stable_s` starts its count afresh); past that it is left down, and serve
says so. Each child waits out its own backoff while the others are still watched: one engine's
60 s backoff never delays another's restart."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from pyrouter.supervisor.child import Child

BACKOFF_START_S = 1.0
WATCH_S = 0.5


def say(text: str) -> None:
    print(text, flush=True)


class Keeper:
    def __init__(self, children: Sequence[Child], max_restarts: int,
                 on_start: Callable[[], None]) -> None:
        """`on_start` runs after each restart (serve records the new process)."""
        self.children = children
        self.max_restarts = max_restarts
        self.on_start = on_start

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.check(time.monotonic())
            try:
                await asyncio.wait_for(stop.wait(), WATCH_S)
            except TimeoutError:
                pass

    def check(self, now: float) -> None:
        """One look at every child: restart those whose backoff is over, schedule the dead."""
        for child in self.children:
            if child.given_up:
                continue
            if child.restart_due is not None:
                if now >= child.restart_due:
                    child.restart_due = None
                    self._restart(child)
                continue
            if child.alive():  # a Popen's poll() also reaps an exited child: no zombie
                continue
            if now - child.since > child.stable_s:
                child.restarts = 0
            if child.restarts >= self.max_restarts:
                child.given_up = True
                say(f"{child.label} on port {child.port} {child.exit_text()} after "
                    f"{child.restarts} restart(s) in a row; left down (see {child.log_path})")
                continue
            delay = min(child.backoff_max_s, BACKOFF_START_S * 2 ** child.restarts)
            child.restarts += 1
            child.restart_due = now + delay
            say(f"{child.label} on port {child.port} {child.exit_text()}; restarting in "
                f"{delay:.0f} s ({child.restarts}/{self.max_restarts}; see {child.log_path})")

    def _restart(self, child: Child) -> None:
        child.restarts_total += 1
        try:
            child.start()
        except OSError as exc:  # it could not even be started: counts as dying again
            say(f"{child.label} could not be started on port {child.port}: {exc}")
            return
        say(child.started_text())
        self.on_start()
