"""Router replicas see each other's load through the engines (issue 25, deliver 3 in part).

A replica's engine table takes each engine's load from the engine's own Stats (work from every
replica), plus what it dispatched itself since the latest Stats was asked for. So work that
replica A sends to an engine reaches replica B's view within one Stats poll, with no traffic
between the replicas (they are not each other's peers here). Mock engines (slow synthetic
tokens, so A's streams stay running): A sends two long streams to engine X (A knows only X); B,
over X and Y with X listed first, sees X's unfinished tokens while having dispatched nothing
itself, and its least_load and cache_aware send new requests to Y — with no view of A's work
they would tie and take X, the first engine.
"""
from __future__ import annotations

import pytest
from replica_load import assert_short_requests_go_to, engine_view, engines, start_long_streams
from router_procs import free_port, start_router, wait_ready, wait_until

from engine.server.launcher import EngineProcess

__all__ = ["engines"]  # the fixture, from replica_load

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]


@pytest.mark.parametrize("policy", ["least_load", "cache_aware"])
def test_a_replica_routes_around_the_load_another_replica_put_on_an_engine(
        engines: list[EngineProcess], policy: str) -> None:
    x, y = (e.address for e in engines)
    port_a, port_b = free_port(), free_port()
    # Not each other's --peer: the dispatch-delta stream would show B A's work at once
    # (test_router_peer_deltas.py); this is the Stats path alone.
    a = start_router(port_a, [engines[0].port], "--policy", policy)
    b = start_router(port_b, [e.port for e in engines], "--policy", policy)
    base_a, base_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    try:
        wait_ready(base_a, a, want_engines=1)
        wait_ready(base_b, b, want_engines=2)
        y_id = engine_view(base_b, y)["id"]
        done = start_long_streams(base_a, 2)
        wait_until(lambda: engine_view(base_b, x)["load"]["unfinished_tokens"] > 0, 60,
                   "replica B to see replica A's work on X")
        assert engine_view(base_b, x)["load"]["inflight"] == 0  # none of it B's own
        assert_short_requests_go_to(base_b, y_id, policy, done)
    finally:
        a.stop()
        b.stop()
