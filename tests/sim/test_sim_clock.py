"""The virtual clock: time jumps to the next timer, timers fire in order at their exact virtual
times, asyncio timeouts are virtual, the process clocks the router reads follow it during a run
and are real again after, and a deadlocked simulation fails instead of hanging."""
from __future__ import annotations

import asyncio
import time

import pytest

from switchyard_sim.clock import real_perf_counter, run_virtual


def test_an_hour_of_sleep_passes_at_once_and_exactly() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(3600)
        return t0, loop.time()

    began = real_perf_counter()
    t0, t1 = run_virtual(main)
    assert t1 - t0 == pytest.approx(3600.0, abs=1e-6)
    assert real_perf_counter() - began < 30  # no real hour (generous for a loaded machine)


def test_timers_fire_in_order_at_their_virtual_times() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []

        async def sleeper(name: str, delays: list[float]) -> None:
            for d in delays:
                await asyncio.sleep(d)
                seen.append((name, round(loop.time(), 6)))

        await asyncio.gather(sleeper("a", [0.3, 0.3]), sleeper("b", [0.5]),
                             sleeper("c", [0.1, 0.05]))
        return seen

    assert run_virtual(main) == [("c", 0.1), ("c", 0.15), ("a", 0.3), ("b", 0.5), ("a", 0.6)]


def test_asyncio_timeout_and_call_later_are_virtual() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        loop.call_later(2.5, lambda: fired.append(loop.time()))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(7.0):
                await asyncio.sleep(100)
        return fired[0], loop.time()

    fired, timed_out = run_virtual(main)
    assert fired == pytest.approx(2.5)
    assert timed_out == pytest.approx(7.0)


def test_process_clocks_follow_the_loop_during_a_run_only() -> None:
    async def main() -> tuple[float, float, float, float]:
        loop = asyncio.get_running_loop()
        m0, p0 = time.monotonic(), time.perf_counter()
        await asyncio.sleep(42.0)
        return m0, time.monotonic(), p0, time.perf_counter() - loop.time()

    real_before = time.monotonic()
    m0, m1, p0, skew = run_virtual(main)
    assert m1 - m0 == pytest.approx(42.0)
    assert skew == 0.0
    assert abs(time.monotonic() - real_before) < 60  # real again, not 42 s further on


def test_a_deadlocked_simulation_fails_instead_of_hanging() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()  # nobody will ever set it

    with pytest.raises(TimeoutError):
        run_virtual(main)
