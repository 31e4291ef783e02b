"""The admission gate on the in-process path (router_core.InProcessFront, which FakeCluster and
the simulator send through): it runs the one prepare -> gate -> run path of the HTTP listener
(router_core/src/front/request_start.rs), so while the engines are saturated a request is held,
one past the queue's size is shed with 429, and the held one goes through when room frees."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import router_core
from switchyard_sim.fake.fake_cluster import FakeCluster, FakeEngine
from switchyard_sim.fake.front_run import FAKE_MODEL
from switchyard_sim.fake.in_process import ClientView, send, until_ready

# The first request's tokens outnumber the events its response buffers: while its client reads
# the first one, the request cannot end (it holds the engine's one place).
RUNNING_TOKENS = 32


def _body(n: int, max_tokens: int = 4) -> dict[str, Any]:
    return {"model": FAKE_MODEL, "prompt": [5, 6, 7, n], "max_tokens": max_tokens,
            "stream": True, "return_token_ids": True}


async def _until(check: Any, what: str) -> None:
    for _ in range(10_000):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never: {what}")


def _queued(front: router_core.InProcessFront) -> int:
    return sum(q.length for q in router_core.admission_queue_lengths(front))


def _gated(queue: int) -> tuple[FakeCluster, router_core.InProcessFront]:
    """One engine, which one request saturates; the gate's queue holds `queue`."""
    cluster = FakeCluster([FakeEngine()])
    front = cluster.front("round_robin")
    router_core.set_admission(front, max_inflight_per_engine=1, max_queued_prefill_tokens=0,
                              max_queue_len=queue, queue_timeout_s=30.0, weights={})
    return cluster, front


async def test_the_gate_holds_sheds_and_lets_through_in_process() -> None:
    cluster, front = _gated(queue=1)
    seen: dict[str, Any] = {}

    async def while_the_first_runs(n: int) -> None:
        if n != 1:
            return
        # The first request holds the engine: the second waits at the gate...
        seen["waiting"] = asyncio.ensure_future(send(front, _body(2)))
        await _until(lambda: _queued(front) == 1, "the second request queued")
        # ...and the third finds the queue full.
        seen["full"] = await send(front, _body(3))
        seen["held"] = not seen["waiting"].done()

    first = await send(front, _body(1, RUNNING_TOKENS), on_tokens=while_the_first_runs)
    second: ClientView = await seen["waiting"]
    full: ClientView = seen["full"]
    assert seen["held"]
    assert (first.status, first.error, len(first.tokens)) == (200, None, RUNNING_TOKENS)
    assert full.status == 429 and full.error is not None and full.error.code == "queue_full"
    assert not full.tokens
    # The held request went through once the first ended, and ran as usual.
    assert (second.status, second.error) == (200, None)
    assert second.tokens == cluster.reference([5, 6, 7, 2], 4)
    waits = [w.outcome for w in router_core.drain_admission_waits(front)]
    assert waits == ["admitted", "queue_full", "admitted"]
    await _until(lambda: front.inflight == 0,
                 "every request closed")
    cluster.assert_clean()


async def test_a_client_that_leaves_the_queue_reaches_no_engine() -> None:
    cluster, front = _gated(queue=4)
    seen: dict[str, Any] = {}

    async def while_the_first_runs(n: int) -> None:
        if n != 1:
            return
        request = front.request("completion", json.dumps(_body(2)).encode())
        task = asyncio.ensure_future(until_ready(lambda wake: (request.poll_task(wake), None)))
        await _until(lambda: _queued(front) == 1, "the second request queued")
        request.disconnect()
        await task
        seen["queued_after"] = _queued(front)

    await send(front, _body(1, RUNNING_TOKENS), on_tokens=while_the_first_runs)
    assert seen["queued_after"] == 0
    waits = [w.outcome for w in router_core.drain_admission_waits(front)]
    assert waits == ["admitted", "gone"]
    await _until(lambda: front.inflight == 0,
                 "every request closed")
    # Only the first request ever reached the engine.
    assert [verb for verb, _ in cluster.client("e0").calls] == ["start_generate"]
    cluster.assert_clean()
