"""Router replicas see each other's load through the engines (issue 25, deliver 3 in part).

A replica's engine table takes each engine's load from the engine's own Stats (work from every
replica), plus what it dispatched itself since the latest Stats was asked for. So work that
replica A sends to an engine reaches replica B's view within one Stats poll, with no traffic
between the replicas. Mock engines (slow synthetic tokens, so A's streams stay running): A sends
two long streams to engine X (A knows only X); B, over X and Y with X listed first, sees X's
unfinished tokens while having dispatched nothing itself, and its least_load and cache_aware
send new requests to Y — with no view of A's work they would tie and take X, the first engine.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import requests
from router_procs import free_port, mock_engines, start_router, wait_ready, wait_until

from engine.server.launcher import EngineProcess

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]

LONG_TOKENS = 300  # at one token per 40 ms chunk: about 12 s of running work on X


@pytest.fixture
def engines() -> Iterator[list[EngineProcess]]:
    with mock_engines(2, "--chunk-delay-ms", "40") as procs:
        yield procs


def _long_stream(base: str, done: threading.Event) -> None:
    try:
        r = requests.post(f"{base}/v1/completions", timeout=120,
                          json={"prompt": "long", "max_tokens": LONG_TOKENS, "ignore_eos": True})
        assert r.status_code == 200, r.text
    finally:
        done.set()


def _engine_view(base: str, address: str) -> dict:
    engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
    return next(e for e in engines if e["address"] == address)


@pytest.mark.parametrize("policy", ["least_load", "cache_aware"])
def test_a_replica_routes_around_the_load_another_replica_put_on_an_engine(
        engines: list[EngineProcess], policy: str) -> None:
    x, y = (e.address for e in engines)
    port_a, port_b = free_port(), free_port()
    a = start_router(port_a, [engines[0].port], "--policy", policy,
                     "--peer", f"127.0.0.1:{port_b}")
    b = start_router(port_b, [e.port for e in engines], "--policy", policy,
                     "--peer", f"127.0.0.1:{port_a}")
    base_a, base_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    try:
        wait_ready(base_a, a, want_engines=1)
        wait_ready(base_b, b, want_engines=2)
        y_id = _engine_view(base_b, y)["id"]
        done = [threading.Event() for _ in range(2)]
        for event in done:
            threading.Thread(target=_long_stream, args=(base_a, event), daemon=True).start()
        wait_until(lambda: _engine_view(base_b, x)["load"]["unfinished_tokens"] > 0, 60,
                   "replica B to see replica A's work on X")
        assert _engine_view(base_b, x)["load"]["inflight"] == 0  # none of it B's own
        for i in range(4):
            r = requests.post(f"{base_b}/v1/completions", timeout=60,
                              json={"prompt": f"short {i} {policy}", "max_tokens": 2})
            assert r.status_code == 200, r.text
            route = r.headers["X-Switchyard-Route"]
            assert f"engine={y_id} " in route + " ", (
                route, "A's streams had ended" if all(e.is_set() for e in done) else "")
        for event in done:
            assert event.wait(120)
    finally:
        a.stop()
        b.stop()
