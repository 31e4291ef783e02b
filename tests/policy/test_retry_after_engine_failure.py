"""Issue 24: an engine that fails before a request (or a segment of it) produced anything is
replaced, whatever gRPC status its death leaves — UNKNOWN "transport error", CANCELLED by the
dying peer, a reset stream (INTERNAL), UNAVAILABLE — within the retry budget; the client gets
the tokens one engine alone would have produced.
"""
from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from router_core import retry_engine_request_id
from switchyard_sim.fake import FakeCluster, FakeEngine, Fault

PROMPT = list(range(3000, 3050))
MAX_TOKENS = 8
DEATHS = [grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL,
          grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ALREADY_EXISTS]
TANDEM = {"lead_tokens": 2}  # the lead produces 2 tokens, then hands off to the follow


def _cluster(faults: dict[int, list[Fault]] | None = None, engines: int = 2) -> FakeCluster:
    return FakeCluster([FakeEngine(faults=(faults or {}).get(i, [])) for i in range(engines)],
                       policy_timeout_s=1.0)


def _run(cluster: FakeCluster, policy: str, params: dict[str, Any] | None = None) -> Any:
    return asyncio.run(cluster.run(policy, PROMPT, params=params, max_tokens=MAX_TOKENS))


def _tandem_pair() -> tuple[int, int]:
    """(lead, follow) engine numbers tandem picks for PROMPT on a fresh cluster."""
    run = _run(_cluster(), "tandem", TANDEM)
    assert run.error is None and run.segments == 2, run
    starts = [int(engine[1:]) for verb, engine in run.verbs if verb == "start_generate"]
    return starts[0], starts[1]


@pytest.mark.parametrize("code", DEATHS, ids=lambda c: c.name)
@pytest.mark.parametrize("after", [False, True], ids=["refused", "died-after-starting"])
def test_an_engine_dying_before_output_is_retried_elsewhere(code: grpc.StatusCode,
                                                             after: bool) -> None:
    cluster = _cluster({0: [Fault("start_generate", 0, code=code, after=after)]})
    run = _run(cluster, "round_robin")
    assert run.error is None, run.error
    assert run.tokens == cluster.reference(PROMPT, MAX_TOKENS)
    assert not cluster.engines["e0"].healthy  # out of rotation until its health says otherwise
    first, retry = [rid for verb, rid in cluster.client("e0").calls + cluster.client("e1").calls
                    if verb == "start_generate"]
    # A fresh engine-side id, named by the one scheme both request paths use, after a first id
    # the router made (not the request's own id).
    assert retry == retry_engine_request_id(first, 1)
    assert run.request.request_id not in first
    cluster.assert_clean()


@pytest.mark.parametrize("code", DEATHS, ids=lambda c: c.name)
def test_tandem_lead_dying_before_it_emits_retries_from_the_start(code: grpc.StatusCode
                                                                    ) -> None:
    lead, _ = _tandem_pair()
    cluster = _cluster({lead: [Fault("start_generate", 0, code=code, after=True)]})
    run = _run(cluster, "tandem", TANDEM)
    assert run.error is None, run.error
    assert run.tokens == cluster.reference(PROMPT, MAX_TOKENS)
    cluster.assert_clean()


@pytest.mark.parametrize("code", DEATHS, ids=lambda c: c.name)
@pytest.mark.parametrize("verb", ["prep_recv", "start_generate"])
def test_tandem_follow_dying_after_the_hand_off_continues_on_a_live_engine(
        code: grpc.StatusCode, verb: str) -> None:
    lead, follow = _tandem_pair()
    cluster = _cluster({follow: [Fault(verb, 0, code=code, after=True)]})
    run = _run(cluster, "tandem", TANDEM)
    assert run.error is None, run.error
    # The lead's 2 tokens, then the rest from a re-prefill on the live engine: the tokens one
    # engine alone produces.
    assert run.tokens == cluster.reference(PROMPT, MAX_TOKENS)
    assert f"resumed=e{follow}->e{lead}" in run.route
    assert not cluster.engines[f"e{follow}"].healthy
    cluster.assert_clean()


def test_the_retry_budget_bounds_retries() -> None:
    cluster = _cluster({0: [Fault("start_generate", 0, code=grpc.StatusCode.UNKNOWN)],
                        1: [Fault("start_generate", 0, code=grpc.StatusCode.UNKNOWN)],
                        2: [Fault("start_generate", 0, code=grpc.StatusCode.UNKNOWN)]},
                       engines=3)
    run = _run(cluster, "round_robin")  # per request: two retries, then the error
    assert run.error is not None and run.error.status == 502
    assert run.error.code == "engine_error"
    assert "engine error during generate: UNKNOWN" in run.error.message
    assert sum(c.calls.count(("start_generate", c.calls[0][1])) for c in
               (cluster.client(f"e{i}") for i in range(3)) if c.calls) == 3
    cluster.assert_clean()


def test_a_spent_budget_surfaces_the_failure() -> None:
    cluster = _cluster({0: [Fault("start_generate", 0, code=grpc.StatusCode.CANCELLED)]})

    async def scenario() -> Any:
        cluster.front("round_robin").set_retry_budget(reserve=0.5)
        return await cluster.run("round_robin", PROMPT, max_tokens=MAX_TOKENS)

    run = asyncio.run(scenario())
    assert run.error is not None and run.error.status == 502 and run.error.code == "engine_error"
    assert "CANCELLED" in run.error.message
    cluster.assert_clean()


def _run_with_e0_back_after(cluster: FakeCluster, policy: str, delay_s: float) -> Any:
    """Run PROMPT; once e0 is taken out of rotation, it answers its health check again
    `delay_s` later."""
    async def scenario() -> Any:
        async def health_watcher() -> None:
            while cluster.engines["e0"].healthy:
                await asyncio.sleep(0.01)
            await asyncio.sleep(delay_s)
            cluster.engines["e0"].healthy = True
            cluster.core.table.set_health(0, True)

        watcher = asyncio.create_task(health_watcher())
        run = await cluster.run(policy, PROMPT, max_tokens=MAX_TOKENS)
        await watcher
        return run

    return asyncio.run(scenario())


def test_a_retry_that_finds_no_engine_waits_for_one_to_come_back() -> None:
    """The failure before a retry can take a live engine out of rotation (a dead peer's error
    surfacing on its stream); its health check brings it back within a poll, and the retry
    waits for that rather than answering 503 at once."""
    cluster = _cluster({0: [Fault("start_generate", 0, code=grpc.StatusCode.UNKNOWN)]},
                       engines=1)
    run = _run_with_e0_back_after(cluster, "round_robin", 0.2)
    assert run.error is None, run.error
    assert run.tokens == cluster.reference(PROMPT, MAX_TOKENS)
    cluster.assert_clean()


def test_the_closed_loop_times_a_retried_request_from_the_attempt_that_answered() -> None:
    """The retry's prediction is made when the retry begins: the failed attempt and the wait for
    an engine before it (here 0.2 s, against ~30 ms predicted) are in the client's TTFT, not in
    what the closed loop compares the prediction with. Counted, they taught it that engines
    answer later than they do, by as much as the failed attempts took, and every later TTFT
    prediction grew with it (up to the loop's clamp, 4x), adaptive's refusals past the router's
    first-output timeout included."""
    model = {"const": 5.0, "prefill_tokens": 0.5, "decode_seqs": 2.0, "decode_context": 0.001}
    cluster = FakeCluster([FakeEngine(latency_model=model, faults=[
        Fault("start_generate", 0, code=grpc.StatusCode.UNKNOWN)])], policy_timeout_s=5.0)
    seen: list[tuple[str, float]] = []
    cluster.feedback.sink = lambda kind, pattern, ratio: seen.append((kind, ratio))
    run = _run_with_e0_back_after(cluster, "adaptive", 0.2)
    assert run.error is None, run.error
    assert run.tokens == cluster.reference(PROMPT, MAX_TOKENS)
    ttft_ratios = [ratio for kind, ratio in seen if kind == "ttft"]
    # The fake engine answers at once: far under the prediction, not 0.2 s over it.
    assert len(ttft_ratios) == 1 and ttft_ratios[0] < 1.0, seen
    cluster.assert_clean()


def test_a_full_engine_refusing_a_reservation_stays_in_rotation() -> None:
    # No KV pages for pd's PrepRecv (RESOURCE_EXHAUSTED): the engine is well and full. The client
    # gets a 503 with Retry-After; neither engine leaves rotation, nothing is left held.
    faults = {i: [Fault("prep_recv", 0, code=grpc.StatusCode.RESOURCE_EXHAUSTED)]
              for i in range(2)}
    cluster = _cluster(faults)
    run = _run(cluster, "pd")
    assert run.error is not None and (run.error.status, run.error.code) == (503, "engine_full")
    assert "RESOURCE_EXHAUSTED" in run.error.message
    assert all(cluster.engines[e].healthy for e in ("e0", "e1"))
    cluster.assert_clean()


def test_a_policy_waiting_on_a_slow_engine_past_the_timeout_is_an_engine_timeout() -> None:
    # pd's RemoteSend waits for the prefill engine's queue; an engine that does not answer
    # within the policy timeout is an overloaded engine, reported as the first-output timeout
    # is (502 engine_timeout, naming the engine and verb) — not as a policy bug (500), which
    # would count towards the router falling back to the previous policy. Nothing stays held.
    faults = {i: [Fault("remote_send", 0, kind="hang")] for i in range(2)}
    cluster = _cluster(faults)
    run = _run(cluster, "pd")
    assert run.error is not None
    assert (run.error.status, run.error.code) == (502, "engine_timeout"), run.error
    assert "did not answer remote_send within 1 s" in run.error.message
    assert all(cluster.engines[e].healthy for e in ("e0", "e1"))
    cluster.assert_clean()


def test_a_policy_that_hangs_by_itself_is_still_a_policy_failure() -> None:
    # The same timeout with no engine verb outstanding: the policy's own doing (500).
    from pyrouter.runtime.policy_registry import policy

    @policy("sleeps_then_generates")
    async def sleeps(req: Any, cluster: Any) -> Any:
        await asyncio.sleep(3600)
        return cluster.engines("any")[0].start_generate(req)

    cluster = _cluster()
    run = _run(cluster, "sleeps_then_generates")
    assert run.error is not None
    assert (run.error.status, run.error.code) == (500, "policy_error"), run.error
    assert "did not decide within 1 s" in run.error.message
    cluster.assert_clean()
