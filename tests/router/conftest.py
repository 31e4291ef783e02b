"""Router tests with mock engines: two `python -m engine.mock` processes + one router process,
started once per module."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from router_procs import (  # noqa: E402
    Proc,
    free_port,
    start_mock,
    start_router,
    wait_ready,
)


@dataclass
class MockCluster:
    base: str
    router: Proc
    engine_ports: list[int]
    engines: list[Proc]


@pytest.fixture(scope="module")
def mock_cluster() -> Iterator[MockCluster]:
    ports = [free_port(), free_port()]
    engines = [start_mock(p) for p in ports]
    router_port = free_port()
    router = start_router(router_port, ports)
    base = f"http://127.0.0.1:{router_port}"
    try:
        wait_ready(base, router, want_engines=2)
        yield MockCluster(base, router, ports, engines)
    finally:
        router.stop()
        for e in engines:
            e.stop()
