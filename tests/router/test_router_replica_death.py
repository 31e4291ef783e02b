"""A router replica SIGKILLed mid-stream fails only its own streams (issue 25, deliver 6 in part).

Two `switchyard router` processes over the same two mock engines (fault injection: slow
synthetic tokens, so streams are still running when the replica dies), each naming the other as
--peer, as `serve --routers 2` starts them. Streams run through both; replica B is SIGKILLed:
B's streams break off without `[DONE]`, A's all finish whole, A takes new requests, and the
engines end up running nothing (B's engine streams were cancelled with its connections).
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import requests
from router_procs import free_port, mock_engines, start_router, wait_ready, wait_until
from streams import Stream

from engine.server.launcher import EngineProcess

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]

MAX_TOKENS = 150  # at 1 token per 40 ms chunk: about 6 s a stream, so all are mid-stream
STREAMS_EACH = 3


@pytest.fixture
def engines() -> Iterator[list[EngineProcess]]:
    with mock_engines(2, "--chunk-delay-ms", "40") as procs:
        yield procs


def _running(engine: EngineProcess) -> int:
    async def ask() -> int:
        client = engine.client()
        try:
            return int((await client.stats(timeout_s=10)).running_requests)
        finally:
            await client.close()

    return asyncio.run(ask())


def test_sigkill_of_one_replica_fails_only_its_own_streams(
        engines: list[EngineProcess]) -> None:
    ports = [e.port for e in engines]
    port_a, port_b = free_port(), free_port()
    a = start_router(port_a, ports, "--policy", "least_load", "--peer", f"127.0.0.1:{port_b}")
    b = start_router(port_b, ports, "--policy", "least_load", "--peer", f"127.0.0.1:{port_a}")
    base_a, base_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    try:
        wait_ready(base_a, a, want_engines=2)
        wait_ready(base_b, b, want_engines=2)
        streams = [Stream(base, MAX_TOKENS).start() for base in (base_a, base_b)
                   for _ in range(STREAMS_EACH)]
        for s in streams:
            assert s.started.wait(60)
        assert all(s.events > 0 and not s.ended.is_set() for s in streams), \
            [(s.base, s.events, s.error) for s in streams]
        assert sum(_running(e) for e in engines) == len(streams)  # every stream is running

        b.popen.kill()
        b.popen.wait(timeout=10)
        for s in streams:
            assert s.ended.wait(120)
        mine, theirs = streams[:STREAMS_EACH], streams[STREAMS_EACH:]
        assert all(s.whole for s in mine), [(s.tokens, s.error) for s in mine]
        assert all(not s.done and s.tokens < MAX_TOKENS for s in theirs), \
            [(s.tokens, s.done) for s in theirs]

        r = requests.post(f"{base_a}/v1/completions", timeout=60,
                          json={"prompt": "after", "max_tokens": 4, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 4
        assert requests.get(f"{base_a}/ready", timeout=10).status_code == 200
        for engine in engines:
            wait_until(lambda engine=engine: _running(engine) == 0, 60,
                       f"{engine.name} to drop the dead replica's streams")
    finally:
        a.stop()
        b.stop()
