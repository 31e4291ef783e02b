"""pyrouter/replicas/peer_exchange.py and router_core's RouterPeerExchange in one process (no child
processes): the peers' ports, the router alone, a port that cannot be bound, and one replica's
dispatch reaching another's engine table through the Python binding."""
from __future__ import annotations

import socket
import time
from types import SimpleNamespace
from typing import Any

import pytest

from pyrouter.errors import BadRequest
from pyrouter.replicas.peer_exchange import _shifted, start_peer_exchange
from pyrouter.replicas.peers import RouterPeers
from router_core import RouterCore, RouterPeerExchange

ENGINE = "10.1.2.3:50051"


def test_peers_are_dialled_at_their_port_plus_the_offset() -> None:
    assert _shifted("10.0.0.5:8000", 1000) == "10.0.0.5:9000"
    assert _shifted("[::1]:8001", 1000) == "[::1]:9001"
    assert _shifted("routers.ns.svc:8000", -10) == "routers.ns.svc:7990"


def test_a_router_alone_starts_no_exchange() -> None:
    engines: Any = SimpleNamespace(core=RouterCore(16, 0), engines={})
    assert start_peer_exchange(RouterPeers(), "127.0.0.1", 8000, None, engines, None) is None


def test_a_peer_port_in_use_is_a_clear_error() -> None:
    engines: Any = SimpleNamespace(core=RouterCore(16, 0), engines={})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BadRequest, match=f"router peer service on 127.0.0.1:{port}"):
            start_peer_exchange(RouterPeers(("127.0.0.1:1",)), "127.0.0.1", 8000, port,
                                engines, None)


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ValueError, match="flush_s must be > 0"):
        RouterPeerExchange(RouterCore(16, 0), "127.0.0.1", 0, peers=[], flush_s=0.0)


def _wait_for(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 30  # generous: a loaded machine, not a timing assertion
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_dispatch_on_one_core_reaches_the_peer_core_by_engine_address() -> None:
    a_core, b_core = RouterCore(16, 0), RouterCore(16, 0)
    for core in (a_core, b_core):
        core.table.upsert(0, "any")
        core.table.upsert(1, "any")
    b = RouterPeerExchange(b_core, "127.0.0.1", 0, peers=[])
    a = RouterPeerExchange(a_core, "127.0.0.1", 0, peers=[f"127.0.0.1:{b.port}"])
    try:
        a.set_engine(1, ENGINE)  # A's engine 1 is B's engine 0
        b.set_engine(0, ENGINE)
        _wait_for(lambda: a.counters()[0] == 1, "A's stream to B")
        a_core.table.on_dispatch(1, 40, 8)
        _wait_for(lambda: b_core.table.get(0).router_tokens == 48, "B to count A's dispatch")
        row = b_core.table.get(0)
        assert row.inflight == 0
        assert b_core.table.get(1).router_tokens == 0
        assert b.counters()[2] == 1  # one engine delta received
        b_core.table.stats_requested(0)
        b_core.table.update_stats(0, 0, 0, 0, 0, 10, 1.0)
        assert b_core.table.get(0).router_tokens == 0, "the next Stats covers it"
    finally:
        a.shutdown()
        b.shutdown()


def test_a_replaced_core_is_followed() -> None:
    """The router rebuilds its core once the engines tell their block layout: the exchange
    records on the new one's table (and no longer on the old one's)."""
    old_core, new_core, b_core = RouterCore(16, 0), RouterCore(32, 7), RouterCore(16, 0)
    for core in (old_core, new_core, b_core):
        core.table.upsert(0, "any")
    b = RouterPeerExchange(b_core, "127.0.0.1", 0, peers=[])
    a = RouterPeerExchange(old_core, "127.0.0.1", 0, peers=[f"127.0.0.1:{b.port}"])
    try:
        a.set_engine(0, ENGINE)
        b.set_engine(0, ENGINE)
        a.set_core(new_core)
        _wait_for(lambda: a.counters()[0] == 1, "A's stream to B")
        old_core.table.on_dispatch(0, 1000, 0)  # no longer this router's table
        new_core.table.on_dispatch(0, 5, 1)
        _wait_for(lambda: b_core.table.get(0).router_tokens >= 6, "B to count A's dispatch")
        assert b_core.table.get(0).router_tokens == 6
    finally:
        a.shutdown()
        b.shutdown()
