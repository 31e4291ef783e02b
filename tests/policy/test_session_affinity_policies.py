"""Session affinity in the Python versions of the data-parallel built-ins (they run instead of the
Rust fast path when per-caller limits are on): a request with `req.session_id` goes to its
session's engine — router_core's ring with bounded load, the one the fast path uses — and the
route says `session=stuck`, or `session=overflow` once that engine is over the bound the
request arrived with (FakeCluster: constructed engine states, no processes)."""
from __future__ import annotations

import pytest

import pyrouter.policies  # noqa: F401  (registers the built-ins)
from pyrouter.policy_registry import get_policy
from pyrouter.request import RouterRequest
from router_core import session_pick
from switchyard_sim.fake import FakeCluster, FakeEngine

PROMPT = list(range(1000, 1048))
DP = ["round_robin", "least_load", "cache_aware"]


async def _route(cluster: FakeCluster, policy: str, session: str | None,
                 load_bound: float | None = None) -> dict[str, str]:
    """The route params `policy` gives a request of `session` (its stream is left unread)."""
    req: RouterRequest = cluster.request(PROMPT)
    req.session_id = session
    if load_bound is not None:
        req.session_load_bound = load_bound
    req.scope.open(cluster.counters)
    try:
        await get_policy(policy).route(req, cluster.view(policy))
        return dict(kv.split("=", 1) for kv in req.route.header().split()[1:])
    finally:
        req.scope.close()


@pytest.mark.parametrize("policy", DP)
async def test_a_session_goes_to_its_ring_engine(policy: str) -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine(), FakeEngine()])
    homes = set()
    for s in range(12):
        ring = session_pick(cluster.core, f"chat-{s}", [0, 1, 2], 1.25)
        assert ring is not None
        for _ in range(3):
            params = await _route(cluster, policy, f"chat-{s}")
            assert (params["engine"], params["session"]) == (f"e{ring[0]}", "stuck")
        homes.add(params["engine"])
    assert len(homes) > 1
    assert "session" not in await _route(cluster, policy, None)
    cluster.assert_clean()


@pytest.mark.parametrize("policy", DP)
async def test_an_engine_over_the_bound_passes_the_session_on(policy: str) -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine()])
    pick = session_pick(cluster.core, "busy", [0, 1], 1.25)
    assert pick is not None
    home = pick[0]
    for _ in range(2):  # two requests in flight there: ceil(1.25 × 3 / 2) = 2 is full
        cluster.core.table.on_dispatch(home, 0, 0)
    try:
        params = await _route(cluster, policy, "busy")
        assert (params["engine"], params["session"]) == (f"e{1 - home}", "overflow")
        # The bound the request arrived with decides: ceil(2 × 3 / 2) = 3 still fits.
        params = await _route(cluster, policy, "busy", load_bound=2.0)
        assert (params["engine"], params["session"]) == (f"e{home}", "stuck")
    finally:
        for _ in range(2):
            cluster.core.table.on_complete(home)
    cluster.assert_clean()
