"""Session affinity under the data-parallel built-ins, through the front as a client sends it (the
X-Session-Id header): a request of a session goes to its session's engine — router_core's ring
with bounded load — and the route says `session=stuck`, or `session=overflow` once that engine
is over the bound in force when the request arrived (FakeCluster: constructed engine states, no
processes)."""
from __future__ import annotations

import pytest

from pyrouter.request import RouterRequest
from pyrouter.session_affinity import DEFAULT_LOAD_BOUND
from router_core import session_pick
from switchyard_sim.fake import FakeCluster, FakeEngine

PROMPT = list(range(1000, 1048))
DP = ["round_robin", "least_load", "cache_aware"]


async def _route(cluster: FakeCluster, policy: str, session: str | None,
                 load_bound: float | None = None) -> dict[str, str]:
    """The route params `policy` gives a request of `session`."""
    cluster.front(policy).set_session_affinity(load_bound or DEFAULT_LOAD_BOUND, False)
    req: RouterRequest = cluster.request(PROMPT)
    req.session_id = session
    run = await cluster.run(policy, req)
    assert run.error is None, run.error
    return dict(kv.split("=", 1) for kv in run.route.split()[1:])


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
