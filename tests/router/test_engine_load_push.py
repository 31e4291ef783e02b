"""Engines push their load (issue 48, deliver 1): on the KV event stream the router already holds
open, so an engine that pushes is polled only every --liveness-s, to find it dead.

Real processes over real gRPC. The mock engine is the fault injector and the load here (a
generation held open on it, a SIGSTOP); the real engine's push is checked in
tests/rpc/test_failures.py, the upkeep's pace in tests/router/test_engine_upkeep.py and
router_core/src/engine_upkeep/pace.rs.
"""
from __future__ import annotations

import asyncio
import os
import signal
from argparse import Namespace
from collections.abc import Callable

import pytest
import requests
from replica_load import assert_short_requests_go_to, engine_view, engines
from router_procs import free_port, start_mock, start_router, wait_ready

from engine.server.launcher import EngineProcess
from pyrouter.engines.rust_client import dial
from pyrouter.errors import BadRequest
from pyrouter.router_command import _membership
from router_core import EngineUpkeep, RouterCore, UpkeepPace
from switchyard_engine_api.client import sampling

__all__ = ["engines"]  # the fixture, from replica_load: two mock engines, 40 ms a token

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]

PROMPT = list(range(100, 140))
# The router's health check times out after this (router_core/src/engine_upkeep/mod.rs).
HEALTH_TIMEOUT_S = 2.0


async def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await asyncio.to_thread(condition):
        assert loop.time() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.05)


async def test_a_pushed_load_change_reaches_the_engine_choice(
        engines: list[EngineProcess]) -> None:
    """The router polls each engine once a minute (--poll-s and --liveness-s 60), and the load
    on X is a generation sent to X directly, not through the router: within the test only X's
    push can tell the router of it — and of its end."""
    x, y = engines
    port = free_port()
    router = start_router(port, [x.port, y.port], "--policy", "least_load",
                          "--poll-s", "60", "--liveness-s", "60")
    base = f"http://127.0.0.1:{port}"
    try:
        # Each engine's first poll is behind it (one that failed on a loaded machine is retried
        # a minute later: hence the longer wait).
        await asyncio.to_thread(wait_ready, base, router, 2, 150)
        await _until(lambda: all(engine_view(base, e.address)["upkeep"]["pushing"]
                                 for e in engines), 10, "both engines pushing")
        y_id = engine_view(base, y.address)["id"]
        polls = engine_view(base, x.address)["upkeep"]["polls"]
        async with x.client() as engine:
            held = engine.start_generate("held", PROMPT, params=sampling(max_tokens=1000))
            await held.read()
            await _until(lambda: engine_view(base, x.address)["load"]["unfinished_tokens"] > 0,
                         5, "X's load at the router")
            # least_load, X listed first: on a tie it would take X.
            await asyncio.to_thread(assert_short_requests_go_to, base, y_id, "pushed", [])
            assert await engine.abort("held")
            held.cancel()
            await _until(lambda: engine_view(base, x.address)["load"]["unfinished_tokens"] == 0,
                         5, "X idle again at the router")
        assert engine_view(base, x.address)["upkeep"]["polls"] == polls, "X was polled"
    finally:
        router.stop()


async def test_an_engine_that_stops_pushing_is_found_dead_by_the_liveness_poll() -> None:
    """A hung engine (SIGSTOP) keeps its connections: its KV event stream just goes quiet. The
    liveness poll finds it within liveness_s (jittered up to 1.25x) plus the health check's
    timeout; once it runs again (SIGCONT) it is back at the next poll."""
    liveness_s = 1.0
    engine = start_mock(free_port())
    core = RouterCore(16, 0)
    core.table.upsert(0, "any")
    core.table.set_health(0, False)
    core.index.add_engine(0)
    upkeep = EngineUpkeep(dial(engine.address, 5.0).rpc, core, 0,
                          UpkeepPace(0.5, 0, liveness_s))
    try:
        assert (await asyncio.wait_for(upkeep.next_change(False), 30))[0] is True
        await _until(lambda: upkeep.pushing, 10, "the engine pushing")
        os.kill(engine.proc.pid, signal.SIGSTOP)
        found_within = 1.25 * liveness_s + HEALTH_TIMEOUT_S + 5.0  # the slack: a loaded machine
        serving, reason = await asyncio.wait_for(upkeep.next_change(True), found_within)
        assert serving is False and "health" in reason
        assert not core.table.get(0).healthy
        os.kill(engine.proc.pid, signal.SIGCONT)
        assert (await asyncio.wait_for(upkeep.next_change(False), 30))[0] is True
        assert core.table.get(0).healthy
    finally:
        upkeep.stop()
        os.kill(engine.proc.pid, signal.SIGCONT)
        engine.stop()


def test_the_liveness_flag_is_checked() -> None:
    """A bad --liveness-s is a clear error, before any engine is dialled."""
    port = free_port()
    router = start_router(port, [free_port()], "--liveness-s", "0")
    try:
        assert router.popen.wait(60) == 2
        out = router.output()
        assert "--liveness-s" in out and "liveness_s 0" in out, out
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/health", timeout=1)
    finally:
        router.stop()


def test_the_prefix_index_bound_is_a_flag() -> None:
    with pytest.raises(BadRequest, match="--prefix-index-max-blocks"):
        _membership(Namespace(prefix_index_max_blocks=0))
    members = _membership(Namespace(prefix_index_max_blocks=4))
    members.core.index.add_engine(0)
    members.core.index.apply_events(0, 1, 1, list(range(10)), [])
    assert (members.core.index.num_blocks(), members.core.index.dropped_blocks()) == (4, 6)
    # The core rebuilt for the engines' KV layout keeps the bound.
    members._adopt_layout(32, 7)
    members.core.index.add_engine(0)
    members.core.index.apply_events(0, 1, 1, list(range(10)), [])
    assert members.core.index.num_blocks() == 4
