"""One engine's upkeep in router_core (router_core.EngineUpkeep, router_core/src/engine_upkeep/):
KV events followed into the prefix index and the load pushed with them into the engine table,
health and Stats polled (only for liveness while the engine pushes) and applied in Rust, and
Python told only when the engine turns healthy or unhealthy. The mock engine
(router_core.MockEngineServer) is the fault injector here: a health file it watches, a shutdown,
a restart on the same port. The real engines' upkeep runs in every real-engine router test
(membership: pyrouter/engines/membership.py)."""
from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from pathlib import Path

import pytest

from pyrouter.engines.rust_client import dial
from router_core import EngineUpkeep, MockEngineServer, RouterCore, UpkeepPace, block_hashes
from switchyard_engine_api.client import EngineClient, sampling

PROMPT = list(range(100, 140))  # 40 tokens: two full 16-token blocks


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "the upkeep did not get there in time"
        await asyncio.sleep(0.02)


def _upkeep(server: MockEngineServer, core: RouterCore, poll_s: float = 0.05,
            liveness_s: float = 0.2) -> EngineUpkeep:
    """The mock pushes its load: a health flip it does not end its stream for (the unhealthy
    file) is found by the liveness poll, hence the short default here."""
    return EngineUpkeep(dial(f"127.0.0.1:{server.port}", 5.0).rpc, core, 0,
                        UpkeepPace(poll_s, 0, liveness_s))


def _core(engine: int = 0) -> RouterCore:
    core = RouterCore(16, 7)
    core.table.upsert(engine, "any")
    core.table.set_health(engine, False)
    core.index.add_engine(engine)
    return core


async def _store_blocks(server: MockEngineServer) -> None:
    """Two blocks into the mock's prefix cache (a PrepRecv and a RemoteSend of PROMPT)."""
    async with EngineClient(f"127.0.0.1:{server.port}", timeout_s=10) as engine:
        kv = await engine.prep_recv("fill", PROMPT, end=-1)
        await engine.remote_send("fill", PROMPT, kv.kv_addr, dst="x", begin=0, end=kv.end)


async def test_stats_and_kv_events_reach_the_table_and_the_index_without_python() -> None:
    with MockEngineServer(0, page_size=16, seed=7) as server:
        core = _core()
        upkeep = _upkeep(server, core)
        try:
            assert await asyncio.wait_for(upkeep.next_change(False), 10) == (True, "")
            row = core.table.get(0)
            assert row.healthy and row.kv_pages_total > 0 and row.cached_blocks == 0
            await _store_blocks(server)
            hashes = block_hashes(PROMPT, 16, 7)
            await _until(lambda: core.index.match(hashes).get(0) == 2)  # the KV events
            await _until(lambda: core.table.get(0).cached_blocks == 2)  # pushed (or polled)
            polls = upkeep.polls
            await _until(lambda: upkeep.polls >= polls + 3)  # it keeps polling at its pace
        finally:
            upkeep.stop()


async def test_an_engine_that_stops_answering_is_found_and_its_load_forgotten(
        tmp_path: Path) -> None:
    unhealthy = tmp_path / "unhealthy"
    server = MockEngineServer(0, page_size=16, seed=7, unhealthy_file=str(unhealthy))
    port = server.port
    core = _core()
    upkeep = _upkeep(server, core)
    try:
        assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True
        await _store_blocks(server)
        await _until(lambda: core.table.get(0).cached_blocks == 2)

        unhealthy.touch()  # health NOT_SERVING
        serving, reason = await asyncio.wait_for(upkeep.next_change(True), 10)
        assert serving is False and "health" in reason
        row = core.table.get(0)
        assert not row.healthy and row.cached_blocks == 0 and row.kv_pages_used == 0
        unhealthy.unlink()
        assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True

        server.shutdown()  # gone: connection refused
        assert (await asyncio.wait_for(upkeep.next_change(True), 10))[0] is False
        assert not core.table.get(0).healthy
        server = MockEngineServer(port, page_size=16, seed=7)  # back on its port, empty
        assert (await asyncio.wait_for(upkeep.next_change(False), 15))[0] is True
        assert core.table.get(0).healthy and core.table.get(0).cached_blocks == 0
    finally:
        upkeep.stop()
        server.shutdown()


async def test_draining_a_failed_request_and_a_new_core() -> None:
    with MockEngineServer(0, page_size=16, seed=7) as server:
        core = _core()
        upkeep = _upkeep(server, core)
        try:
            assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True
            upkeep.set_draining(True)  # out of rotation at once, whatever its polls say
            assert not core.table.get(0).healthy
            await asyncio.sleep(0.2)
            assert not core.table.get(0).healthy and upkeep.healthy
            upkeep.set_draining(False)
            await _until(lambda: core.table.get(0).healthy)

            assert upkeep.mark_unhealthy("a request failed") is True
            assert not core.table.get(0).healthy and not upkeep.healthy
            assert upkeep.mark_unhealthy("again") is False
            assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True

            # The router rebuilt its core (the engines' KV layout learned): the table and the
            # index there are kept from now on, the prefix view from a fresh snapshot.
            await _store_blocks(server)
            fresh = _core()
            upkeep.set_core(fresh)
            hashes = block_hashes(PROMPT, 16, 7)
            await _until(lambda: fresh.index.match(hashes).get(0) == 2)
            await _until(lambda: fresh.table.get(0).healthy
                         and fresh.table.get(0).cached_blocks == 2)
        finally:
            upkeep.stop()


async def test_a_stopped_upkeep_polls_no_more() -> None:
    with MockEngineServer(0) as server:
        core = RouterCore(16, 0)
        core.table.upsert(0, "any")
        core.index.add_engine(0)
        upkeep = _upkeep(server, core, poll_s=0.02)
        await _until(lambda: upkeep.polls >= 2)
        upkeep.stop()
        await asyncio.sleep(0.1)
        stopped = upkeep.polls
        await asyncio.sleep(0.2)
        assert upkeep.polls == stopped


async def test_a_dropped_upkeep_polls_no_more(tmp_path: Path) -> None:
    """Its tasks hold the upkeep; dropping the Python object must still end them."""
    unhealthy = tmp_path / "unhealthy"
    with MockEngineServer(0, unhealthy_file=str(unhealthy)) as server:
        core = _core()
        upkeep = _upkeep(server, core, poll_s=0.02)
        assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True
        del upkeep
        gc.collect()
        unhealthy.touch()  # a live upkeep would mark it unhealthy within a poll or two
        await asyncio.sleep(0.3)
        assert core.table.get(0).healthy


def test_the_pace_is_checked() -> None:
    for poll_s, polls_per_s in ((0.0, 1.0), (0.5, -1.0), (float("nan"), 1.0)):
        with pytest.raises(ValueError):
            UpkeepPace(poll_s, polls_per_s)
    for liveness_s in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="liveness_s"):
            UpkeepPace(0.5, 256, liveness_s)
    pace = UpkeepPace(0.5, 256)
    assert pace.liveness_s == 10.0
    pace.set_engines(1024)
    assert pace.interval_s == 4.0
    # None pushes: the fleet's 1,024 engines at poll_s would poll 2,048 times a second, so
    # every interval is stretched 8x, a liveness interval too (pace.rs tests the mixed fleets).
    assert pace.liveness_interval_s == 80.0


async def test_an_engine_that_pushes_is_polled_only_for_liveness() -> None:
    """Its load reaches the table as it changes, with the polls a second apart, not 50 ms."""
    with MockEngineServer(0, page_size=16, seed=7, chunk_delay_ms=20) as server:
        core = _core()
        pace = UpkeepPace(0.05, 0, 1.0)
        upkeep = EngineUpkeep(dial(f"127.0.0.1:{server.port}", 5.0).rpc, core, 0, pace)
        try:
            assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True
            await _until(lambda: upkeep.pushing and upkeep.pushes >= 1)
            assert pace.pushing == 1
            await asyncio.sleep(0.3)  # a poll that began at poll_s's pace has ended by now
            loop = asyncio.get_running_loop()
            since, polls = loop.time(), upkeep.polls
            async with EngineClient(f"127.0.0.1:{server.port}", timeout_s=10) as engine:
                held = engine.start_generate("held", PROMPT, params=sampling(max_tokens=1000))
                await held.read()
                await _until(lambda: core.table.get(0).unfinished_tokens > 0, 5)  # pushed
                assert await engine.abort("held")
                held.cancel()
                await _until(lambda: core.table.get(0).unfinished_tokens == 0, 5)
            await asyncio.sleep(1.0)
            # Polls at least 0.75 s apart (1 s, jittered); at poll_s it would be 20 a second.
            polled = upkeep.polls - polls
            assert polled <= (loop.time() - since) / 0.75 + 1, polled
        finally:
            upkeep.stop()
        await _until(lambda: pace.pushing == 0)  # a stopped upkeep's stream pushes no more


async def test_an_engine_that_does_not_push_keeps_the_poll_pace() -> None:
    """An engine from before pushes (no Stats in its stream's first batch): polled every
    poll_s for its load, as before."""
    with MockEngineServer(0, page_size=16, seed=7, push_stats=False) as server:
        core = _core()
        upkeep = _upkeep(server, core, poll_s=0.05, liveness_s=60.0)
        try:
            assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True
            await _store_blocks(server)
            await _until(lambda: core.index.match(block_hashes(PROMPT, 16, 7)).get(0) == 2)
            await _until(lambda: core.table.get(0).cached_blocks == 2)  # by a poll
            polls = upkeep.polls
            await _until(lambda: upkeep.polls >= polls + 5)
            assert not upkeep.pushing and upkeep.pushes == 0
        finally:
            upkeep.stop()


async def test_a_stream_that_ends_puts_the_polls_back_at_poll_s(tmp_path: Path) -> None:
    """The engine shuts down: its KV event stream ends, and the next poll, at poll_s rather
    than a liveness interval away, finds it gone."""
    with MockEngineServer(0, page_size=16, seed=7) as server:
        core = _core()
        upkeep = _upkeep(server, core, poll_s=0.05, liveness_s=60.0)
        try:
            assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True
            await _until(lambda: upkeep.pushing)
            server.shutdown()
            serving, _reason = await asyncio.wait_for(upkeep.next_change(True), 10)
            assert serving is False and not upkeep.pushing
        finally:
            upkeep.stop()


async def test_a_failed_request_is_polled_back_at_poll_s() -> None:
    """mark_unhealthy on a pushing engine: back in rotation after a poll at poll_s, not after
    its liveness interval."""
    with MockEngineServer(0, page_size=16, seed=7) as server:
        core = _core()
        upkeep = _upkeep(server, core, poll_s=0.05, liveness_s=60.0)
        try:
            assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True
            await _until(lambda: upkeep.pushing)
            await asyncio.sleep(0.3)  # now waiting out its liveness interval
            assert upkeep.mark_unhealthy("a request failed") is True
            assert (await asyncio.wait_for(upkeep.next_change(False), 10))[0] is True
        finally:
            upkeep.stop()
