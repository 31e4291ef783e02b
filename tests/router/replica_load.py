"""What the router-replica load tests share: mock engines slow enough that a long stream keeps
running while the test looks, the stream itself, and one engine's row in a replica's
/admin/engines."""
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


def engine_view(base: str, address: str) -> dict:
    """The engine at `address` as the router at `base` lists it (GET /admin/engines)."""
    engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
    return next(e for e in engines if e["address"] == address)
