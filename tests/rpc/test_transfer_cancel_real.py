"""Finding 1 on real engines: RemoteSend cancelled by client deadlines and cancellations at random
points, hundreds of times, several at once. Afterwards no link thread has died, a PD round trip
works at once with every byte landing, and both pools are back to baseline (pages held only by
the prefix cache). Before the fix, ~135 such cancellations killed the prefill engine's
acknowledgement thread and every later PD request waited 120 s on the dead link."""
from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import grpc
import pytest

from engine.server.launcher import EngineProcess, EngineSpec, start_engines, stop_engines
from switchyard_engine_api.client import EngineClient
from tests.rpc import patterns
from tests.rpc.accounting import assert_accounted

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(600)]
ROUNDS = 60
CONCURRENT = 4  # 240 cancelled sends


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EngineProcess]]:
    logs = tmp_path_factory.mktemp("cancel-engines")
    engines = start_engines([EngineSpec(f"cancel-{r}", role=r, threads=1, num_pages=1024,
                                        env={"SWITCHYARD_LOG_LEVEL": "WARNING"})
                             for r in ("prefill", "decode")], logs)
    yield engines
    stop_engines(engines)


async def _cancelled_send(p: EngineClient, d: EngineClient, rid: str, rng: random.Random) -> str:
    prompt = [rng.randrange(300, 40000) for _ in range(rng.randrange(20, 260))]
    kv = await d.prep_recv(rid, prompt, end=-1)
    delay = rng.choice([0.0, 0.001, 0.005, 0.02, 0.05, 0.1, 0.2, 0.4])
    how = "deadline" if rng.random() < 0.5 else "cancel"
    try:
        if how == "deadline":  # the gRPC deadline ends the call (DEADLINE_EXCEEDED)
            await p.remote_send(rid, prompt, kv.kv_addr, d.address, kv.matched_len, kv.end,
                                timeout_s=max(delay, 0.001))
        else:  # the caller gives up (its task is cancelled)
            await asyncio.wait_for(p.remote_send(rid, prompt, kv.kv_addr, d.address,
                                                 kv.matched_len, kv.end), max(delay, 0.001))
        outcome = "landed"
    except (TimeoutError, grpc.aio.AioRpcError):
        outcome = "cut"
    await d.abort(rid)  # what the router's request scope does when a send fails
    await p.abort(rid)
    return outcome


async def test_hundreds_of_cancelled_sends_leave_links_and_pools_sound(pair, make_prompts) -> None:
    p_proc, d_proc = pair
    rng = random.Random(13)
    async with p_proc.client() as p, d_proc.client() as d:
        outcomes: list[str] = []
        for round_no in range(ROUNDS):
            outcomes += await asyncio.gather(*(
                _cancelled_send(p, d, f"c{round_no}-{i}", rng) for i in range(CONCURRENT)))
        assert outcomes.count("cut") > ROUNDS, outcomes  # most really were cut mid-way

        # The link still works: a PD round trip lands every byte, promptly.
        prompt = make_prompts("after-cancels")[4]
        before = (await d.stats()).kv_bytes_received
        run = await asyncio.wait_for(patterns.pd(p, d, "after-cancels", prompt), 120)
        assert len(run.tokens) == patterns.MAX_TOKENS
        moved = (await d.stats()).kv_bytes_received - before
        assert moved == run.sends[0].bytes_expected > 0
        await assert_accounted(p)
        await assert_accounted(d)
    for proc in pair:
        log = proc.log_tail(400)
        assert "Exception in thread" not in log and "KV link to" not in log, log
