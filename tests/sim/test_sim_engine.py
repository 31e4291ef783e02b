"""The simulated engine schedules as the real engine's scheduler does — decodes first, chunked
prefill under the token budget, preemption when pages run out — and each step takes what the
profile's latency model says. Step times below are computed by hand from the tiny profile:
step_ms = 10 + 0.5 x prefill tokens + 1 x decodes + 0.01 x decode context (context = tokens
with KV + the new one), 64-token prefill chunks."""
from __future__ import annotations

import asyncio

import pytest

from switchyard_sim.clock import run_virtual
from switchyard_sim.cluster import SimCluster
from switchyard_sim.fake import FakeCluster
from switchyard_sim.profile import HardwareProfile
from tests.sim.sim_helpers import assert_clean, run_requests, tiny_profile

PROMPT = list(range(1000, 1100))  # 100 tokens


def test_one_request_step_by_step(tiny: HardwareProfile) -> None:
    out = run_requests(tiny, "round_robin", [PROMPT], max_tokens=3, engines=1)
    # chunk 64: 10 + 32 = 42; chunk 36: 10 + 18 = 28 -> first token at 70;
    # decodes reading 101, then 102 positions: 10 + 1 + 1.01, 10 + 1 + 1.02.
    assert out.token_times_ms == [[70.0, 82.01, 94.03]]
    assert out.runs[0].tokens == FakeCluster.reference(PROMPT, 3)
    assert_clean(out)


def test_decodes_ride_along_with_the_next_prefill_chunk(tiny: HardwareProfile) -> None:
    b_prompt = list(range(2000, 2100))
    out = run_requests(tiny, "round_robin", [PROMPT, b_prompt], max_tokens=3,
                       arrivals_ms=[0.0, 50.0], engines=1)
    # A alone: 42, 28 (A's first token at 70). B arrived at 50, waits for the step in flight.
    # [70, 114.01]: A decode (101) + B chunk 64: 10 + 32 + 1 + 1.01 = 44.01
    # [114.01, 144.03]: A decode (102) + B chunk 36: 10 + 18 + 1 + 1.02 = 30.02 (B's 1st token)
    # then B decodes alone: 12.01, 12.02.
    assert out.token_times_ms[0] == [70.0, 114.01, 144.03]
    assert out.token_times_ms[1] == pytest.approx([94.03, 106.04, 118.06])
    assert [r.tokens for r in out.runs] == [FakeCluster.reference(PROMPT, 3),
                                           FakeCluster.reference(b_prompt, 3)]
    assert_clean(out)


def test_configure_changes_the_prefill_budget_of_later_steps(tiny: HardwareProfile) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        cluster = SimCluster(tiny, ["any"])
        await cluster.start()
        client = cluster.client("e0")
        resp = await client.configure(prefill_chunk_size=32)
        assert (resp.prefill_chunk_size, resp.previous_prefill_chunk_size) == (32, 64)
        from switchyard_rpc import engine_pb2 as pb

        t0 = loop.time()
        call = client.start_generate_request(pb.StartGenerateRequest(
            request_id="c", tokens=PROMPT, sampling=pb.SamplingParams(max_tokens=1)))
        chunk = await call.read()
        assert chunk.finish_reason == "length" and chunk.prompt_tokens == 100
        await cluster.stop()
        return [(loop.time() - t0) * 1e3]

    # chunks of 32, 32, 32, 4: 26 + 26 + 26 + 12 = 90 ms to the first (and only) token
    assert run_virtual(main) == pytest.approx([90.0])


def test_preemption_when_pages_run_out_keeps_the_tokens() -> None:
    # 12 pages of 16 tokens: two 100-token prompts generating 60 tokens each need 10 pages
    # apiece at the end, so the newer one is preempted (recomputed later) and still yields the
    # single-engine tokens.
    small = tiny_profile(kv_pages=12)
    b_prompt = list(range(2000, 2100))
    out = run_requests(small, "round_robin", [PROMPT, b_prompt], max_tokens=60, engines=1)
    assert [r.tokens for r in out.runs] == [FakeCluster.reference(PROMPT, 60),
                                           FakeCluster.reference(b_prompt, 60)]
    core = out.cluster.sim("e0").core
    assert core.pool.num_pages == 12
    # B finished after A although both started together: it lost its pages and waited.
    assert out.token_times_ms[1][-1] > out.token_times_ms[0][-1]
    assert_clean(out)


def test_stats_report_the_profile_model_and_live_load(tiny: HardwareProfile) -> None:
    async def main() -> None:
        cluster = SimCluster(tiny, ["prefill", "decode"])
        await cluster.start()
        load = cluster.core.table.get(0)
        assert load.role == "prefill" and load.kv_pages_total == 256
        assert {k: v for k, v in load.latency_model.items() if v} == {
            "const": 10.0, "prefill_tokens": 0.5, "decode_seqs": 1.0, "decode_context": 0.01}
        assert load.prefill_chunk_size == 64
        # router_core predicts with the very model the engines step with
        assert cluster.core.table.predict_step_ms(0, [(0, 64)], 1, 101) == pytest.approx(44.01)
        await cluster.stop()

    run_virtual(main)


def test_queued_requests_go_earliest_deadline_first_in_virtual_time(tiny: HardwareProfile
                                                                     ) -> None:
    """The simulated engine queues by the real scheduler's rule: three requests with deadlines,
    arriving after a long prompt without one and in the reverse of their deadlines' order, get
    their first tokens earliest deadline first and the long prompt last; each deadline is a time
    on the simulation's clock."""
    from switchyard_rpc import engine_pb2 as pb

    async def main() -> tuple[list[str], dict[str, float]]:
        loop = asyncio.get_running_loop()
        cluster = SimCluster(tiny, ["any"])
        await cluster.start()
        client = cluster.client("e0")
        firsts: list[str] = []

        async def first_token(rid: str, tokens: list[int], due_ms: float) -> None:
            call = client.start_generate_request(pb.StartGenerateRequest(
                request_id=rid, tokens=tokens, sampling=pb.SamplingParams(max_tokens=1),
                first_token_due_ms=due_ms))
            await call.read()
            firsts.append(rid)

        calls = [first_token("long", list(range(3000, 3300)), 0.0)]
        calls += [first_token(rid, list(range(base, base + 100)), due_ms)
                  for rid, base, due_ms in (("c", 4000, 3000.0), ("b", 5000, 2000.0),
                                            ("a", 6000, 1000.0))]
        tasks = [asyncio.ensure_future(c) for c in calls]
        await asyncio.sleep(0)  # every call is on the engine, none has finished
        core = cluster.sim("e0").core
        due = {rid: core.request(rid).first_token_due - loop.time() for rid in "abc"}
        await asyncio.gather(*tasks)
        await cluster.stop()
        return firsts, due

    firsts, due = run_virtual(main)
    assert firsts == ["a", "b", "c", "long"], firsts
    assert due == pytest.approx({"a": 1.0, "b": 2.0, "c": 3.0})
