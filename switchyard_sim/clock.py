"""Virtual time: an asyncio event loop whose clock jumps to the next timer whenever nothing is
ready, plus the process clocks the router reads directly pointed at it.

No real I/O happens in a simulation, so "nothing ready" means every task waits on a timer or on
another task, and jumping to the next timer is exact. Policies and the dispatcher also read
`time.monotonic()` / `time.perf_counter()` themselves (adaptive's evaluation interval, the
chunk controller's rate limit, SLO outcomes, verb timings); `virtual_clocks` points both at the
loop's clock for the duration of a run, so those intervals are virtual seconds too.

The clock counts whole microseconds (an integer, so 0.2 - 0.05 is 0.15 exactly and a run's
timers land on the same ticks on every machine). It is asyncio's own selector loop with the
selector's wait replaced: where the loop would sleep until its next timer, the clock moves there
at once, in the same iteration (one `select` per time step, no real wait, no polling of threads
the simulation does not have).
"""
from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
# The real clock, for measuring how long a simulation takes while the process clocks are virtual.
real_perf_counter = time.perf_counter
_TICKS_PER_S = 1_000_000
# A simulation with nothing scheduled at all is deadlocked (every request waits on something
# that will never happen): after this long a real wait (a thread's wake-up could still come),
# its tasks fail with SimulationDeadlock instead of the run hanging.
_IDLE_WAIT_S = 0.001


class SimulationDeadlock(TimeoutError):
    """Nothing scheduled and nothing ready: every task waits on something that never comes."""


class _VirtualSelector(selectors.DefaultSelector):
    """The loop's selector (it still watches the loop's self-pipe), whose wait is virtual."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return []  # callbacks are ready: run them, time stands still
        ready = super().select(0 if timeout is not None else _IDLE_WAIT_S)
        if ready:
            return ready
        if timeout is None:
            self._loop.deadlocked()
        else:
            self._loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop in virtual time starting at `start` seconds."""

    def __init__(self, start: float = 0.0) -> None:
        self._ticks = round(start * _TICKS_PER_S)
        super().__init__(_VirtualSelector(self))

    def time(self) -> float:
        return self._ticks / _TICKS_PER_S

    def advance(self, seconds: float) -> None:
        """Move the clock to the next timer, `seconds` ahead. A wait shorter than a tick still
        moves it (by one more tick than it rounds to), or the loop would wait for ever."""
        ticks = round(seconds * _TICKS_PER_S)
        if seconds < 1 / _TICKS_PER_S:
            ticks += 1
        self._ticks += ticks

    def deadlocked(self) -> None:
        """Fail every task (the future it waits on raises SimulationDeadlock)."""
        error = "nothing scheduled and nothing ready: the simulation is deadlocked"
        for task in asyncio.all_tasks(self):
            waiter: Any = getattr(task, "_fut_waiter", None)
            if waiter is not None and not waiter.done():
                waiter.set_exception(SimulationDeadlock(error))
            else:
                task.cancel()


def new_virtual_loop(start: float = 0.0) -> asyncio.AbstractEventLoop:
    """A fresh event loop in virtual time starting at `start` seconds."""
    return VirtualTimeLoop(start)


@contextmanager
def virtual_clocks(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """time.monotonic and time.perf_counter read `loop`'s virtual clock inside the block, and so
    does time.process_time: a simulated step's CPU time is its (virtual) duration, not the
    simulator's own CPU, which would make the engines' step samples differ run to run."""
    saved = time.monotonic, time.perf_counter, time.process_time
    time.monotonic = time.perf_counter = time.process_time = loop.time  # type: ignore[assignment]
    try:
        yield
    finally:
        time.monotonic, time.perf_counter, time.process_time = saved  # type: ignore[assignment]


def run_virtual(main: Callable[[], Awaitable[T]], start: float = 0.0) -> T:
    """Run `main()` to completion in virtual time; the process clocks are real again after."""
    loop = new_virtual_loop(start)
    try:
        with virtual_clocks(loop):
            try:
                return loop.run_until_complete(main())
            finally:
                _cancel_leftovers(loop)
    finally:
        loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what `main` left running (as asyncio.run does) and close async generators."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
