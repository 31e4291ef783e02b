"""What the router-replica load tests share: mock engines slow enough that a long stream keeps
running while the test looks, the streams themselves, one engine's row in a replica's
/admin/engines, and the check that a replica routes short requests around the streams."""
from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import requests
from router_procs import mock_engines

from engine.server.launcher import EngineProcess

LONG_TOKENS = 300  # at one token per 40 ms chunk: about 12 s of running work on an engine


@pytest.fixture
def engines() -> Iterator[list[EngineProcess]]:
    with mock_engines(2, "--chunk-delay-ms", "40") as procs:
        yield procs


def long_stream(base: str, done: threading.Event) -> None:
    """A completion of LONG_TOKENS through the router at `base`; `done` is set when it ends."""
    try:
        r = requests.post(f"{base}/v1/completions", timeout=120,
                          json={"prompt": "long", "max_tokens": LONG_TOKENS, "ignore_eos": True})
        assert r.status_code == 200, r.text
    finally:
        done.set()


def start_long_streams(base: str, count: int) -> list[threading.Event]:
    """`count` long_streams through the router at `base`, each in its own thread; one event
    each, set when it ends."""
    done = [threading.Event() for _ in range(count)]
    for event in done:
        threading.Thread(target=long_stream, args=(base, event), daemon=True).start()
    return done


def assert_short_requests_go_to(base: str, engine_id: str, label: str,
                                done: list[threading.Event]) -> None:
    """Four short completions through the router at `base` all go to engine `engine_id` (the
    route header names it) while the long streams behind `done` run; then those end."""
    for i in range(4):
        r = requests.post(f"{base}/v1/completions", timeout=60,
                          json={"prompt": f"short {i} {label}", "max_tokens": 2})
        assert r.status_code == 200, r.text
        route = r.headers["X-Switchyard-Route"]
        assert f"engine={engine_id} " in route + " ", (
            route, "A's streams had ended" if all(e.is_set() for e in done) else "")
    for event in done:
        assert event.wait(120)


def engine_view(base: str, address: str) -> dict:
    """The engine at `address` as the router at `base` lists it (GET /admin/engines)."""
    engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
    return next(e for e in engines if e["address"] == address)
