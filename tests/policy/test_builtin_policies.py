"""Each built-in policy's decisions on constructed engine states (FakeCluster, no processes).

Every run must also give the single-engine tokens and leave nothing behind (assert_clean).
"""
from __future__ import annotations

import grpc

from switchyard_sim.fake import FakeCluster, FakeEngine, Fault

PROMPT = list(range(1000, 1048))  # three full blocks of 16


def _route(run_route: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in run_route.split()[1:])


async def _check(cluster: FakeCluster, policy: str, prompt: list[int] = PROMPT,
                 **params: object) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    run = await cluster.run(policy, prompt, params=dict(params), max_tokens=6)
    assert run.error is None, run.error
    assert run.tokens == cluster.reference(prompt, 6)
    cluster.assert_clean()
    return run.route.split()[0], _route(run.route), run.verbs


async def test_round_robin_takes_turns_over_healthy_engines() -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine(healthy=False), FakeEngine()])
    chosen = [(await _check(cluster, "round_robin", PROMPT + [i]))[1]["engine"] for i in range(4)]
    assert chosen == ["e0", "e2", "e0", "e2"]


async def test_least_load_picks_the_fewest_unfinished_tokens() -> None:
    cluster = FakeCluster([FakeEngine(unfinished_tokens=900), FakeEngine(unfinished_tokens=10),
                           FakeEngine(unfinished_tokens=400)])
    _, params, _ = await _check(cluster, "least_load")
    assert params["engine"] == "e1"


async def test_cache_aware_follows_the_prefix_unless_the_load_outweighs_it() -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine(cached=[PROMPT])])
    _, params, _ = await _check(cluster, "cache_aware")
    assert params["engine"] == "e1" and params["matched"] == "48"
    busy = FakeCluster([FakeEngine(), FakeEngine(cached=[PROMPT], unfinished_tokens=10_000)])
    _, params, _ = await _check(busy, "cache_aware")
    assert params["engine"] == "e0"
    # the policy's weights are its own: ignoring decode load sends it back to the cache
    busy = FakeCluster([FakeEngine(), FakeEngine(cached=[PROMPT], unfinished_tokens=10_000)])
    _, params, _ = await _check(busy, "cache_aware", PROMPT, decode_weight=0.0)
    assert params["engine"] == "e1"


async def test_pd_prefills_on_the_prefill_engine_and_decodes_on_the_decode_engine() -> None:
    cluster = FakeCluster([FakeEngine(role="prefill"), FakeEngine(role="decode")])
    pattern, params, verbs = await _check(cluster, "pd")
    assert pattern == "pd" and params["prefill"] == "e0" and params["decode"] == "e1"
    assert verbs == [("prep_recv", "e1"), ("remote_send", "e0"), ("start_generate", "e1")]
    assert params["decode_start"] == str(len(PROMPT) - 1)
    assert cluster.client("e1").finished[-1].prefilled == 1  # KV came across


async def test_pd_skips_the_transfer_when_the_decode_engine_holds_the_prompt() -> None:
    cluster = FakeCluster([FakeEngine(role="prefill"), FakeEngine(role="decode",
                                                                  cached=[PROMPT])])
    _, params, verbs = await _check(cluster, "pd", PROMPT + [5])
    assert params["skipped"] == "remote_send" and params["matched"] == "48"
    assert verbs == [("prep_recv", "e1"), ("start_generate", "e1")]
    # mostly cached (32 of 47): prefilling the rest on the decode engine beats a transfer
    mostly = FakeCluster([FakeEngine(role="prefill"),
                          FakeEngine(role="decode", cached=[PROMPT[:32]])])
    _, params, verbs = await _check(mostly, "pd", PROMPT, local_prefill_ratio=0.6)
    assert params["skipped"] == "prefill" and ("remote_send", "e0") not in verbs


async def test_pd_falls_back_to_local_prefill_when_the_transfer_fails() -> None:
    cluster = FakeCluster([FakeEngine(role="prefill", faults=[Fault("remote_send")]),
                           FakeEngine(role="decode")])
    _, params, _ = await _check(cluster, "pd")
    assert params["fallback"] == "transfer_failed" and params["decode_start"] == "0"


async def test_pd_falls_back_when_the_reservation_expired_before_the_send() -> None:
    # An overloaded prefill engine queues the send past the decode engine's lease.
    expired = Fault("remote_send", code=grpc.StatusCode.FAILED_PRECONDITION)
    cluster = FakeCluster([FakeEngine(role="prefill", faults=[expired]),
                           FakeEngine(role="decode")])
    _, params, _ = await _check(cluster, "pd")
    assert params["fallback"] == "transfer_failed" and params["decode_start"] == "0"


async def test_pd_without_a_prefill_engine_runs_colocated() -> None:
    cluster = FakeCluster([FakeEngine(role="decode"), FakeEngine(role="prefill", healthy=False)])
    _, params, _ = await _check(cluster, "pd")
    assert params["fallback"] == "no_prefill_engine" and params["decode"] == "e0"


async def test_balanced_pd_splits_by_ratio_and_by_load() -> None:
    cluster = FakeCluster([FakeEngine(role="prefill"), FakeEngine(role="decode")])
    _, params, verbs = await _check(cluster, "balanced_pd", ratio=0.5)
    assert params["decode_start"] == "16"  # half of 47, aligned down to a page
    assert verbs[1] == ("remote_send", "e0")
    # live load: a busy prefill engine gets no share of the prompt
    busy = FakeCluster([FakeEngine(role="prefill", unfinished_tokens=5000),
                        FakeEngine(role="decode")])
    _, params, verbs = await _check(busy, "balanced_pd")
    assert params["decode_start"] == "0" and verbs == [("start_generate", "e1")]


async def test_an_engine_failing_before_output_is_retried_elsewhere() -> None:
    cluster = FakeCluster([FakeEngine(faults=[Fault("start_generate")]), FakeEngine()])
    run = await cluster.run("round_robin", PROMPT, max_tokens=4)
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 4)
    assert _route(run.route)["engine"] == "e1" and not cluster.engines["e0"].healthy
    cluster.assert_clean()


async def test_an_invalid_request_is_the_clients_error_not_the_policys() -> None:
    cluster = FakeCluster([FakeEngine(faults=[Fault("start_generate",
                                                     code=grpc.StatusCode.INVALID_ARGUMENT)])])
    run = await cluster.run("round_robin", PROMPT)
    assert run.error is not None and run.error.status == 400
    cluster.assert_clean()
