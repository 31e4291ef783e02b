"""One load view across router replicas (issue 25, deliver 3): the dispatch deltas between peers.

Replica B polls its engines' Stats once a minute (--poll-s 60), and the engines here do not push
their load (SWITCHYARD_MOCK_PUSH_STATS=0: engines from before issue 48), so within the test the
only way it can learn of work replica A sends to engine X after B is ready is A's dispatch-delta
stream (router_core/src/peer/). A sends two long streams to X (A knows only X); B, over X and Y
with X listed first, still reads X's Stats as idle and has dispatched nothing to it itself, yet
its least_load and cache_aware send new requests to Y. Without the stream B's view of X and Y ties
and it takes X, the first engine (test_router_replicas_load_view.py shows the Stats path, one
poll behind).
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from replica_load import (
    LONG_TOKENS,
    assert_short_requests_go_to,
    engine_view,
    start_long_streams,
)
from router_procs import free_port, mock_engines, start_router, wait_ready, wait_until

from engine.server.launcher import EngineProcess

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]


@pytest.fixture
def engines() -> Iterator[list[EngineProcess]]:
    """replica_load's engines, but polled only: their load reaches B by no push."""
    with mock_engines(2, "--chunk-delay-ms", "40",
                      env={"SWITCHYARD_MOCK_PUSH_STATS": "0"}) as procs:
        yield procs


def _metric(base: str, line_start: str) -> float:
    text = requests.get(f"{base}/metrics", timeout=10).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(line_start)]
    assert values, f"{line_start} not in /metrics"
    return values[0]


@pytest.mark.parametrize("policy", ["least_load", "cache_aware"])
def test_a_replica_counts_a_peers_dispatches_before_any_stats_shows_them(
        engines: list[EngineProcess], policy: str) -> None:
    x, y = (e.address for e in engines)
    port_a, port_b = free_port(), free_port()
    a = start_router(port_a, [engines[0].port], "--policy", policy,
                     "--peer", f"127.0.0.1:{port_b}")
    b = start_router(port_b, [e.port for e in engines], "--policy", policy, "--poll-s", "60",
                     "--peer", f"127.0.0.1:{port_a}")
    base_a, base_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    try:
        wait_ready(base_a, a, want_engines=1)
        # B's first Stats per engine is behind it (a poll that failed on a loaded machine is
        # retried a minute later: hence the longer wait).
        wait_ready(base_b, b, want_engines=2, timeout_s=150)
        wait_until(lambda: _metric(base_a, "switchyard:router_peer_streams_up") == 1, 120,
                   "A's delta stream to B")
        y_id = engine_view(base_b, y)["id"]
        done = start_long_streams(base_a, 2)
        # Each of A's streams is its prompt plus LONG_TOKENS, all dispatched since B's Stats.
        wait_until(lambda: engine_view(base_b, x)["load"]["router_tokens"] >= 2 * LONG_TOKENS,
                   120, "B to count A's two dispatches")
        assert _metric(
            base_b, 'switchyard:router_peer_deltas_received_total{engine_known="true"}') >= 1
        seen_by_b = engine_view(base_b, x)
        # Neither B's Stats (asked before A's work: else this fails, it does not pass wrongly)
        # nor B's own dispatches show A's work.
        assert seen_by_b["load"]["unfinished_tokens"] == 0, seen_by_b
        assert seen_by_b["load"]["inflight"] == 0, seen_by_b
        assert_short_requests_go_to(base_b, y_id, policy, done)
    finally:
        a.stop()
        b.stop()


def test_a_peer_without_the_deployment_token_is_not_counted(
        engines: list[EngineProcess]) -> None:
    """B requires the deployment's engine token of its peers; A, started without it, is
    refused: B counts nothing of A's (and keeps serving)."""
    port_a, port_b = free_port(), free_port()
    token_env = {"SWITCHYARD_ENGINE_TOKEN": "deployment-secret"}
    # The mock engines are open, so only the peer service differs between the two.
    a = start_router(port_a, [engines[0].port], "--peer", f"127.0.0.1:{port_b}")
    b = start_router(port_b, [engines[0].port], "--peer", f"127.0.0.1:{port_a}",
                     env=token_env)
    base_a, base_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    try:
        wait_ready(base_a, a)
        wait_ready(base_b, b)
        for i in range(3):
            r = requests.post(f"{base_a}/v1/completions", timeout=60,
                              json={"prompt": f"from a {i}", "max_tokens": 2})
            assert r.status_code == 200, r.text
        # B's stream to A is taken (A asks for no token); A's to B never stays up.
        wait_until(lambda: _metric(base_b, "switchyard:router_peer_streams_up") == 1, 60,
                   "B's delta stream to A")
        r = requests.post(f"{base_b}/v1/completions", timeout=60,
                          json={"prompt": "from b", "max_tokens": 2})
        assert r.status_code == 200, r.text
        wait_until(lambda: _metric(
            base_a, 'switchyard:router_peer_deltas_received_total{engine_known="true"}') >= 1,
            60, "A to receive B's dispatch")
        # By now A has dispatched three requests and taken one of B's: none of A's reached B.
        assert _metric(
            base_b, 'switchyard:router_peer_deltas_received_total{engine_known="true"}') == 0
        assert _metric(base_b, "switchyard:router_peer_streams_in") == 0
    finally:
        a.stop()
        b.stop()
