"""A request's TTFT objective reaches its engines as a first-token deadline (the calls'
`first_token_due_ms`, ms from the engine's receipt): on the calls before its first token — a
data-parallel StartGenerate, a PD request's RemoteSend and its decode engine's StartGenerate —
and never on a later segment's, whose first token is not the request's. Without an objective
(its own `slo.ttft_ms`, else the deployment's) no call carries one. The fake engines record what
each call carried; the values are bounded by the objective, never compared with a clock."""
from __future__ import annotations

import pytest

import router_core
from pyrouter.request import SloSpec
from switchyard_sim.fake import FakeCluster, FakeEngine

PROMPT = list(range(100, 140))
TTFT_MS = 5000.0


def _deadlines(cluster: FakeCluster, *names: str) -> list[tuple[str, float]]:
    """(verb, first_token_due_ms) of every call the named engines recorded, in order."""
    return [(verb, due) for name in names for verb, _, due in cluster.client(name).deadlines]


def _within_objective(due_ms: float, objective_ms: float = TTFT_MS) -> bool:
    return 0.0 < due_ms <= objective_ms


async def test_a_request_with_a_ttft_objective_reaches_its_engine_with_a_deadline() -> None:
    cluster = FakeCluster([FakeEngine()])
    run = await cluster.run("round_robin",
                            cluster.request(PROMPT, slo=SloSpec(ttft_ms=TTFT_MS)))
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 8)
    [(verb, due)] = _deadlines(cluster, "e0")
    assert verb == "start_generate" and _within_objective(due), due
    cluster.assert_clean()


async def test_no_objective_no_deadline() -> None:
    cluster = FakeCluster([FakeEngine()])
    run = await cluster.run("round_robin", PROMPT)
    assert run.error is None
    assert _deadlines(cluster, "e0") == [("start_generate", 0.0)]


async def test_the_deployment_objective_stands_in_for_a_missing_one() -> None:
    cluster = FakeCluster([FakeEngine()])
    router_core.set_admission(cluster.front("round_robin"), max_inflight_per_engine=0,
                              max_queued_prefill_tokens=0, max_queue_len=16,
                              queue_timeout_s=30.0, weights={}, slo_ttft_ms=800.0)
    run = await cluster.run("round_robin", PROMPT)
    assert run.error is None
    [(_, due)] = _deadlines(cluster, "e0")
    assert _within_objective(due, 800.0), due


async def test_a_pd_request_carries_its_deadline_on_the_send_and_the_decode() -> None:
    cluster = FakeCluster([FakeEngine(role="prefill"), FakeEngine(role="decode")])
    run = await cluster.run("pd", cluster.request(PROMPT, slo=SloSpec(ttft_ms=TTFT_MS)))
    assert run.error is None and run.route.startswith("pd"), run.route
    sends = [due for verb, due in _deadlines(cluster, "e0", "e1") if verb == "remote_send"]
    starts = [due for verb, due in _deadlines(cluster, "e0", "e1") if verb == "start_generate"]
    assert len(sends) == 1 and len(starts) == 1
    assert _within_objective(sends[0]) and _within_objective(starts[0])
    # Sent later, the decode's carries no more time than the send's did.
    assert starts[0] <= sends[0]
    cluster.assert_clean()


@pytest.mark.parametrize("k", [0, 2])
async def test_a_later_segment_carries_no_deadline(lead_follow: str, k: int) -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine()])
    run = await cluster.run(lead_follow, cluster.request(PROMPT, slo=SloSpec(ttft_ms=TTFT_MS)),
                            params={"k": k})
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 8)
    lead, follow = run.verbs[-2][1], run.verbs[-1][1]
    follow_calls = [(verb, due) for verb, _, due in cluster.client(follow).deadlines]
    lead_calls = [(verb, due) for verb, _, due in cluster.client(lead).deadlines]
    if k:
        # The lead's generation makes the first token; the follow's send and start come after.
        assert [verb for verb, _ in lead_calls] == ["start_generate", "remote_send"]
        assert _within_objective(lead_calls[0][1])
        assert lead_calls[1][1] == 0.0 and follow_calls == [("start_generate", 0.0)]
    else:
        # No lead tokens: the follow's generation makes the first token, after the send.
        [(send, send_due)] = lead_calls
        [(start, start_due)] = follow_calls
        assert (send, start) == ("remote_send", "start_generate")
        assert _within_objective(send_due) and _within_objective(start_due)
    cluster.assert_clean()
