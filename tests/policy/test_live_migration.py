"""Live migration and taking control back mid-segment, on FakeCluster: the stream moves to
another engine at a token boundary and the client's tokens stay exactly one engine's."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyrouter.errors import NotFound
from pyrouter.runtime.policy_registry import PolicySpec, policy
from switchyard_sim.fake import FakeCluster, FakeEngine
from switchyard_sim.fake.front_run import FrontHarness

Moves = list["asyncio.Task[dict[str, Any]]"]


def move_at(cluster: FakeCluster, moves: Moves, at: int, target: str
            ) -> Any:
    """An on_tokens callback: once the client has `at` tokens, move the request to `target`
    (as POST /admin/migrate; its answer comes when the move is done)."""
    async def on_tokens(harness: FrontHarness, n: int) -> None:
        if n == at and not moves:
            moves.append(asyncio.ensure_future(
                harness.migrate("fake-req", cluster.engines[target])))

    return on_tokens

PROMPT = list(range(3000, 3040))


@pytest.mark.parametrize("policy_name, params", [("round_robin", {}), ("pd", {}),
                                                  ("lead_follow", {"k": 3})])
async def test_migrating_a_running_request_keeps_its_tokens(lead_follow: str, policy_name: str,
                                                           params: dict[str, object]) -> None:
    roles = ("prefill", "decode", "any") if policy_name == "pd" else ("any", "any", "any")
    cluster = FakeCluster([FakeEngine(role=r) for r in roles])
    moves: Moves = []
    run = await cluster.run(policy_name, PROMPT, params=params, max_tokens=12,
                            on_tokens=move_at(cluster, moves, 5, "e2"))
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 12)
    moved = await moves[0]
    assert moved["outcome"] == "migrated" and moved["to"] == "e2"
    assert "migrated=" in run.route
    finished_on_e2 = cluster.client("e2").finished[-1]
    assert finished_on_e2.prefilled == 1  # the KV of prompt + generated tokens crossed
    cluster.assert_clean()


async def test_a_migration_racing_the_end_of_the_request_is_harmless() -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine()])
    moves: Moves = []
    # The engine has already sent its finish with the 6th token's chunk.
    run = await cluster.run("round_robin", PROMPT, max_tokens=6,
                            on_tokens=move_at(cluster, moves, 6, "e1"))
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 6)
    try:
        assert (await moves[0])["outcome"] == "finished"
    except NotFound:
        pass  # the request had ended (and left the router) before the move was asked for
    cluster.assert_clean()


async def _every_two(req, cluster):  # type: ignore[no-untyped-def]
    engines = cluster.engines()
    turn = 0
    while True:
        end = yield engines[turn % 2].start_generate(req, begin=len(req.tokens) - 1
                                                     if turn else 0, control_after_s=0.0001)
        assert end.reason == "interrupted" and end.detail == {"after_s": 0.0001}
        turn += 1
        kv = await engines[turn % 2].prep_recv(req)
        if kv.matched < kv.end:
            await end.engine.remote_send(req, kv, begin=kv.matched, end=kv.end)


async def test_control_after_s_gives_a_segmented_policy_control_back() -> None:
    spec = PolicySpec("ping_pong", _every_two)
    cluster = FakeCluster([FakeEngine(), FakeEngine()])
    run = await cluster.run(spec, PROMPT, max_tokens=10)
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 10)
    cluster.assert_clean()


async def test_a_plain_policy_cannot_ask_for_control_back() -> None:
    @policy("plain_with_limit")
    async def plain(req, cluster):  # type: ignore[no-untyped-def]
        return cluster.engines()[0].start_generate(req, max_new_tokens_here=2)

    cluster = FakeCluster([FakeEngine()])
    run = await cluster.run("plain_with_limit", PROMPT)
    assert run.error is not None and "async generator" in run.error.message
    cluster.assert_clean()


@pytest.mark.parametrize("verb", ["prep_recv", "start_generate"])
async def test_a_migration_whose_target_dies_says_failed_and_the_request_goes_on(
        verb: str) -> None:
    # Issue 24: /admin/migrate answered "migrated" when the target died during the move.
    import grpc

    from switchyard_sim.fake import Fault

    cluster = FakeCluster([FakeEngine(), FakeEngine(), FakeEngine(
        faults=[Fault(verb, 0, code=grpc.StatusCode.UNKNOWN, after=True)])])
    moves: Moves = []
    run = await cluster.run("round_robin", PROMPT, max_tokens=10,
                            on_tokens=move_at(cluster, moves, 4, "e2"))
    assert (await moves[0])["outcome"] == "failed"
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 10)
    assert "resumed=e2->" in run.route
    cluster.assert_clean()
