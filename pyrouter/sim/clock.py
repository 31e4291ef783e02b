"""Virtual time: an asyncio event loop whose clock jumps to the next timer whenever nothing is
ready (looptime), plus the process clocks the router reads directly pointed at it.

No real I/O happens in a simulation, so "nothing ready" means every task waits on a timer or on
another task, and jumping to the next timer is exact. Policies and the dispatcher also read
`time.monotonic()` / `time.perf_counter()` themselves (adaptive's evaluation interval, the
chunk controller's rate limit, SLO outcomes, verb timings); `virtual_clocks` points both at the
loop's clock for the duration of a run, so those intervals are virtual seconds too.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

try:
    import looptime
except ImportError as err:  # serving images leave the simulator's extra out
    raise SystemExit("switchyard bench simulate needs looptime: pip install 'switchyard[sim]'"
                     ) from err

T = TypeVar("T")
# The real clock, for measuring how long a simulation takes while the process clocks are virtual.
real_perf_counter = time.perf_counter
# A simulation with nothing scheduled at all is deadlocked (every request waits on something
# that will never happen): fail its tasks after this much (virtual) idle time, not hang.
_IDLE_TIMEOUT_S = 0.001


def new_virtual_loop(start: float = 0.0) -> asyncio.AbstractEventLoop:
    """A fresh event loop in virtual time starting at `start` seconds. noop_cycles=0: time
    moves as soon as no callback is ready (no I/O can make one ready in a simulation)."""
    loop: asyncio.AbstractEventLoop = looptime.new_event_loop(
        start=start, noop_cycles=0, idle_timeout=_IDLE_TIMEOUT_S)
    return loop


@contextmanager
def virtual_clocks(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """time.monotonic and time.perf_counter read `loop`'s virtual clock inside the block."""
    saved = time.monotonic, time.perf_counter
    time.monotonic = time.perf_counter = loop.time  # type: ignore[assignment]
    try:
        yield
    finally:
        time.monotonic, time.perf_counter = saved  # type: ignore[assignment]


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
