"""The seeds' patterns on constructed engine states (FakeCluster): tandem's split point and chunk
control, slo_mux's slack fit, watermark and role switches, adaptive's per-request placements.
Every run also gives the single-engine tokens and leaves nothing behind."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyrouter.errors import BadRequest
from pyrouter.planning.chunk_control import ChunkController
from pyrouter.planning.prediction_feedback import PredictedOutcome
from pyrouter.runtime.policy_registry import get_policy
from switchyard_sim.fake import FakeCluster, FakeEngine

# ms per unit: a 512-token prefill ~261 ms; a step of 8 decodes ~21 ms.
MODEL = {"const": 5.0, "prefill_tokens": 0.5, "decode_seqs": 2.0, "decode_context": 0.001}
PROMPT = list(range(5000, 5200))  # 200 tokens


def _engine(**kw: Any) -> FakeEngine:
    return FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256, **kw)


def _params(route: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in route.split()[1:])


async def _run(cluster: FakeCluster, policy: str, prompt: list[int] = PROMPT, max_tokens: int = 8,
               **params: Any) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    run = await cluster.run(policy, prompt, params=params, max_tokens=max_tokens)
    assert run.error is None, run.error
    assert run.tokens == cluster.reference(prompt, max_tokens)
    cluster.assert_clean()
    return run.route.split()[0], _params(run.route), run.verbs


# ---- tandem ----
async def test_tandem_idle_pair_lead_emits_the_first_token() -> None:
    cluster = FakeCluster([_engine(), _engine()])
    pattern, p, verbs = await _run(cluster, "tandem")
    assert pattern == "tandem" and p["k"] == "1" and p["reason"] == "lead_first_tokens"
    assert p["lead"] != p["follow"]
    assert verbs == [("start_generate", p["lead"]), ("prep_recv", p["follow"]),
                     ("remote_send", p["lead"]), ("start_generate", p["follow"])]


async def test_tandem_backlogged_prefill_engine_gets_a_smaller_share_of_the_prompt() -> None:
    # the prefill engine is far behind, the decode engine idle: the follow takes the prompt
    cluster = FakeCluster([_engine(role="prefill", queued_prefill_tokens=4000),
                           _engine(role="decode")])
    _, p, verbs = await _run(cluster, "tandem", k_default=0)
    assert p["reason"] == "balanced_prefill" and p["k"] == "0"
    assert (p["lead"], p["follow"]) == ("e0", "e1") and int(p["s"]) < len(PROMPT) - 1
    assert verbs[-1] == ("start_generate", "e1")
    # ...and with the decode engine further behind, the split inside a long prompt leaves the
    # two equally busy: 55 + 0.5 s = 210 + 0.5 (1000 - s) + decoding  =>  s ~ 680
    both = FakeCluster([_engine(role="prefill", queued_prefill_tokens=100),
                        _engine(role="decode", queued_prefill_tokens=400)])
    _, p, _ = await _run(both, "tandem", list(range(9000, 10000)), k_default=0)
    assert 600 <= int(p["s"]) <= 760, p


async def test_tandem_follow_over_the_itl_slo_makes_the_lead_decode_longer() -> None:
    cluster = FakeCluster([_engine(role="prefill"),
                           _engine(role="decode", running_decodes=120,
                                   decode_context_tokens=120 * 300)])
    _, p, _ = await _run(cluster, "tandem", max_tokens=12, k_max=6)
    assert (p["lead"], p["follow"], p["k"], p["reason"]) == ("e0", "e1", "6",
                                                             "follow_decode_over_itl")


async def test_tandem_without_a_latency_model_still_splits_and_matches() -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine()])
    _, p, _ = await _run(cluster, "tandem")
    assert p["reason"] == "no_latency_model"


async def test_tandem_sets_each_engines_chunk_at_its_lcu_point() -> None:
    cluster = FakeCluster([_engine(running_decodes=4, decode_context_tokens=2000), _engine()])
    await _run(cluster, "tandem", tpot_ms=100.0)
    chunks = {e: int(c) for e in ("e0", "e1")
              for verb, c in cluster.client(e).calls if verb == "configure"}
    # 5 + 0.5 c + (2 x 4 decodes + 0.001 x 2000 ctx) <= 100  =>  c ~ 170 on e0; ~ 190 on e1
    assert 150 <= chunks["e0"] < chunks["e1"] <= 200, chunks


async def test_adaptive_gives_a_busy_engine_the_chunk_its_decodes_can_bear() -> None:
    # Both engines have decodes running and a backlog longer than those decodes live: every step
    # until it drains carries a full chunk, so by default adaptive sends the engine it places the
    # request on the LCU chunk for its decodes plus this one:
    # 5 + 0.5 c + 2 x 5 decodes + 0.001 x 2200 ctx <= 100  =>  c ~ 165 (the engines' own: 256)
    busy = {"running_decodes": 4, "decode_context_tokens": 2000, "queued_prefill_tokens": 4000}
    cluster = FakeCluster([_engine(**busy), _engine(**busy)])
    await _run(cluster, "adaptive", tpot_ms=100.0)
    sent = [int(c) for e in ("e0", "e1") for verb, c in cluster.client(e).calls
            if verb == "configure"]
    assert len(sent) == 1 and 140 <= sent[0] <= 190, sent
    # ...and with chunk_control off the engines keep their own chunk
    off = FakeCluster([_engine(**busy), _engine(**busy)])
    await _run(off, "adaptive", tpot_ms=100.0, chunk_control=False)
    assert not [c for e in ("e0", "e1") for verb, c in off.client(e).calls if verb == "configure"]


async def test_a_chunk_held_for_a_placement_stays_while_its_engine_has_prefill_queued() -> None:
    cluster = FakeCluster([_engine(queued_prefill_tokens=1000)])
    engine, table = cluster.engines["e0"], cluster.core.table
    chunks = ChunkController(interval_s=60.0)
    for chunk in (100, 64):  # each sent at once, the interval notwithstanding
        chunks.hold(engine, table, chunk)
        for _ in range(3):
            await asyncio.sleep(0)  # the background Configure
        assert cluster.client("e0").calls[-1] == ("configure", str(chunk))
        assert chunks.held(engine, table) and not chunks.due("e0")
    cluster.set_load("e0", _engine(queued_prefill_tokens=0))  # the queue it was held for drained
    assert not chunks.held(engine, table)


async def test_a_policy_switch_gives_the_engines_their_own_chunk_back() -> None:
    # tandem keeps each engine at its LCU chunk; the policy after it starts from the chunk the
    # engines were configured with (256), not from the one tandem chose for its own load
    cluster = FakeCluster([_engine(running_decodes=4, decode_context_tokens=2000), _engine()])
    await _run(cluster, "tandem", tpot_ms=100.0)
    assert all(cluster.client(e).prefill_chunk_size < 256 for e in ("e0", "e1"))
    await _run(cluster, "round_robin")
    assert [cluster.client(e).prefill_chunk_size for e in ("e0", "e1")] == [256, 256]
    assert [c for verb, c in cluster.client("e0").calls if verb == "configure"][-1] == "256"


# ---- slo_mux ----
async def test_slo_mux_short_prefill_fits_the_multiplexing_engine() -> None:
    cluster = FakeCluster([_engine(role="prefill"), _engine(role="decode", running_decodes=2)])
    _, p, verbs = await _run(cluster, "slo_mux")
    assert p["path"] == "mux" and p["engine"] == "e1" and verbs == [("start_generate", "e1")]


async def test_slo_mux_prefill_that_would_break_tpot_goes_to_the_prefill_engine() -> None:
    long_prompt = list(range(6000, 7000))
    cluster = FakeCluster([_engine(role="prefill"), _engine(role="decode", running_decodes=6)])
    _, p, verbs = await _run(cluster, "slo_mux", long_prompt, tpot_ms=60.0)
    assert p["path"] == "pd" and (p["prefill"], p["decode"]) == ("e0", "e1")
    assert "prefill_step_over_tpot" in p["reason"]
    assert ("remote_send", "e0") in verbs


async def test_slo_mux_is_data_parallel_where_decodes_have_slack() -> None:
    # Two undeclared engines: e0 takes the prefill role, yet with slack everywhere a request
    # runs whole on the engine with the least predicted TTFT — e0 here, its queue is empty.
    cluster = FakeCluster([_engine(), _engine(running_decodes=2, queued_prefill_tokens=600)])
    _, p, verbs = await _run(cluster, "slo_mux")
    assert p["path"] == "mux" and p["engine"] == "e0" and verbs == [("start_generate", "e0")]


@pytest.mark.parametrize("longest, path", [(0, "pd"), (1_000, "pd"), (6_000, "dp")])
async def test_slo_mux_tells_one_long_prompt_from_a_saturated_queue(longest: int, path: str) -> None:
    # The prefill engine has 6000 tokens queued (~3 s, past the 2 s TTFT SLO). As six 1000-token
    # prompts (or not reported: 0) that is an engine falling behind, and slo_mux switches to
    # Tropical's rules: the 1000-token prompt would break the decode engine's 60 ms TPOT in one
    # step, so it is prefilled on e0 and sent (pd). As one 6000-token prompt it is not: the
    # engines keep up, and the request runs whole on e1, whose decodes absorb its prefill within
    # their slack over its 64 tokens (dp) — instead of waiting out e0's long prompt.
    long_prompt = list(range(6000, 7000))
    cluster = FakeCluster([_engine(role="prefill", queued_prefill_tokens=6_000,
                                   longest_queued_prefill_tokens=longest),
                           _engine(role="decode", running_decodes=6)], policy_timeout_s=60.0)
    _, p, verbs = await _run(cluster, "slo_mux", long_prompt, max_tokens=64, tpot_ms=60.0)
    assert p["path"] == path, p
    if path == "dp":
        assert p["engine"] == "e1" and verbs == [("start_generate", "e1")]
    else:
        assert (p["prefill"], p["decode"]) == ("e0", "e1")


async def test_slo_mux_kv_watermark_and_the_role_switch_it_triggers() -> None:
    cluster = FakeCluster([_engine(role="prefill"),
                           _engine(role="decode", kv_pages_used=990, kv_pages_total=1000)])
    _, p, _ = await _run(cluster, "slo_mux", switch_interval_s=0.0)
    assert p["path"] == "pd" and "kv_over_watermark" in p["reason"]
    assert p["switched"] == "e0:prefill->mux"  # every multiplexing engine was over the mark
    _, p, _ = await _run(cluster, "slo_mux", PROMPT[:100], switch_interval_s=0.0)
    assert p["path"] == "mux" and p["engine"] == "e0"  # the new multiplexing engine



async def test_slo_mux_prefills_waiting_turn_a_multiplexing_engine_into_prefill() -> None:
    mux = dict(role="decode", running_decodes=6, queued_prefill_tokens=20_000)
    cluster = FakeCluster([_engine(role="prefill", queued_prefill_tokens=20_000),
                           _engine(**mux), _engine(**mux)], policy_timeout_s=60.0)
    switched = []
    for i in range(12):
        _, p, _ = await _run(cluster, "slo_mux", [7] + PROMPT[:60] + [i], switch_interval_s=0.0,
                             ttft_ms=500.0)
        if "switched" in p:
            switched.append(p["switched"])
    assert switched == ["e1:mux->prefill"]


# ---- adaptive: per-request placement from predicted outcomes ----
async def test_adaptive_idle_engines_run_data_parallel() -> None:
    cluster = FakeCluster([_engine(), _engine(queued_prefill_tokens=600)])
    pattern, p, verbs = await _run(cluster, "adaptive")
    assert (pattern, p["chose"], p["engine"], p["fits"], p["harm"], p["why"]) == \
        ("adaptive", "dp", "e0", "1", "0", "fits")  # the least predicted TTFT, no bytes moved
    assert verbs == [("start_generate", "e0")]
    # the prediction is kept for the closed loop: compared when the request ended
    assert cluster.feedback.summary()["ttft/dp"]["n"] == 1


async def test_the_closed_loop_learns_a_ttft_at_the_first_token_and_a_tpot_at_the_end() -> None:
    # Learned at the request's end, a long decode's TTFT reached the placements after it seconds
    # late: after a phase of long prompts, every short queue looked late. What a request taught
    # reaches the policy before its next decision (the observations router_core delivers then):
    # by the first token, the TTFT is there to deliver; the TPOT only at the end.
    cluster = FakeCluster([_engine(), _engine()])
    learned: list[set[str]] = []

    async def on_tokens(harness: Any, n: int) -> None:
        harness.front.deliver_observations()  # as the next decision would
        learned.append(set(cluster.feedback.summary()))

    run = await cluster.run("adaptive", PROMPT, max_tokens=8, on_tokens=on_tokens)
    assert run.error is None, run.error
    assert learned[0] == {"ttft/dp"}
    assert set(cluster.feedback.summary()) == {"ttft/dp", "tpot/dp"}
    cluster.assert_clean()


async def test_adaptive_disaggregates_a_prefill_that_would_push_decodes_over_tpot() -> None:
    # e0 and e1 decode 20 sequences at ~65 ms a step against a 100 ms TPOT SLO: a 1500-token
    # prefill next to them (~750 ms of extra step time) would push all of them over it; the
    # idle prefill engine computes it and the K/V crosses (only one more sequence on e0).
    busy = {"running_decodes": 20, "decode_context_tokens": 20_000}
    cluster = FakeCluster([_engine(**busy), _engine(**busy), _engine(role="prefill")])
    prompt = list(range(20_000, 21_500))
    _, p, verbs = await _run(cluster, "adaptive", prompt, tpot_ms=100.0)
    assert (p["chose"], p["prefill"], p["decode"], p["fits"], p["harm"]) == \
        ("pd", "e2", "e0", "1", "0")
    assert [v for v, _ in verbs] == ["prep_recv", "remote_send", "start_generate"]
    # allowed data parallel only, at the engines' own chunk, it says what that costs the running
    # decodes (a fresh cluster: the fake engines answer at once, so the first request taught the
    # closed loop nothing real)
    cluster = FakeCluster([_engine(**busy), _engine(**busy), _engine(role="prefill")])
    _, p, _ = await _run(cluster, "adaptive", prompt[1:], tpot_ms=100.0, patterns="dp",
                         chunk_control=False)
    assert p["chose"] == "dp" and p["harm"] == "20"
    # With chunk control (the default) it lowers that engine's chunk instead, to the LCU one
    # for its 20 decodes and this one (5 + 0.5 c + 2 x 21 + 0.001 x 21,500 <= 100: ~63), where
    # every step stays within the TPOT SLO: no decode harmed, this request's TTFT late (~2.3 s
    # against 2 s) — one request past its SLO instead of twenty. The chunk is sent at once.
    cluster = FakeCluster([_engine(**busy), _engine(**busy), _engine(role="prefill")])
    _, p, _ = await _run(cluster, "adaptive", prompt[1:], tpot_ms=100.0, patterns="dp")
    assert (p["chose"], p["harm"], p["fits"]) == ("dp", "0", "0")
    sent = [int(c) for verb, c in cluster.client(p["engine"]).calls if verb == "configure"]
    assert sent == [int(p["chunk"])] and 55 <= sent[0] <= 63, p
    # Slowing decodes that are late anyway costs no request within SLO: with three of the four
    # requests the router placed on e0 and e1 known late, a quarter of their decodes count
    # (a fresh cluster again, for the same reason).
    cluster = FakeCluster([_engine(**busy), _engine(**busy), _engine(role="prefill")])
    for i, engine in enumerate(["e0", "e0", "e0", "e1", "e1", "e1", "e0", "e1"]):
        late = PredictedOutcome("dp", engine, engine, 1.0, 1.0, 1.0, 1.0, meets=i >= 6)
        cluster.feedback.running(f"earlier-{i}", late)
    run = await cluster.run("adaptive", prompt[2:], params={"tpot_ms": 100.0, "patterns": "dp",
                                                           "chunk_control": False})
    assert run.error is None, run.error
    p = _params(run.route)
    assert p["chose"] == "dp" and p["harm"] == "5"
    for i in range(8):
        cluster.feedback.ended(f"earlier-{i}")
    cluster.assert_clean()


async def test_adaptive_under_overload_keeps_the_shorter_queue_for_requests_that_fit() -> None:
    # Neither engine can give this request its 1 s TTFT (~10 s and ~4 s of queue): it joins
    # the longer queue, so the other engine drains for requests that can still meet theirs.
    cluster = FakeCluster([_engine(queued_prefill_tokens=20_000),
                           _engine(queued_prefill_tokens=8_000)], policy_timeout_s=60.0)
    _, p, _ = await _run(cluster, "adaptive", ttft_ms=1000.0)
    assert (p["chose"], p["engine"], p["fits"], p["why"]) == ("dp", "e0", "0", "queue_saturated")
    # ...but not past the router's first-output timeout (5 s here), where it would fail after
    # waiting: refused at once, and nothing was sent to an engine
    short = FakeCluster([_engine(queued_prefill_tokens=20_000),
                         _engine(queued_prefill_tokens=8_000)], policy_timeout_s=5.0)
    run = await short.run("adaptive", PROMPT, params={"ttft_ms": 1000.0})
    assert run.error is not None and (run.error.status, run.error.code) == (503, "overloaded")
    assert run.verbs == []
    short.assert_clean()
    # ...while a request that fits somewhere goes there
    fits = FakeCluster([_engine(queued_prefill_tokens=20_000),
                        _engine(queued_prefill_tokens=1_000)])
    _, p, _ = await _run(fits, "adaptive", ttft_ms=1000.0)
    assert (p["chose"], p["engine"], p["fits"]) == ("dp", "e1", "1")


async def test_adaptive_over_a_fleet_weighs_its_shortlist_and_chooses_as_the_whole_grid() -> None:
    # Twelve engines, all but e7 and e9 with a queue; e7 and e9 also decode fastest (fewest
    # decodes). With a shortlist of 2, the planner weighs 2 prefill and 2 decode
    # candidates (the same two here) instead of all 144 placements, and takes what the full
    # grid takes.
    def fleet() -> FakeCluster:
        return FakeCluster([
            _engine(queued_prefill_tokens=0 if i in (7, 9) else 3000 + 100 * i,
                    running_decodes={7: 2, 9: 1}.get(i, 4))
            for i in range(12)])
    cluster = fleet()
    preds = cluster.view("adaptive").predict(cluster.request(PROMPT), shortlist=2)
    assert set(preds) == {"e7", "e9"}
    _, whole, _ = await _run(fleet(), "adaptive", shortlist=100)
    _, short, _ = await _run(fleet(), "adaptive", shortlist=2)
    assert whole == short and (short["chose"], short["engine"]) == ("dp", "e9"), short


def test_adaptive_rejects_unknown_patterns() -> None:
    with pytest.raises(BadRequest, match="patterns"):
        get_policy("adaptive").check_params({"patterns": "dp,warp"})


async def test_tandem_fixed_splits_for_baselines_and_experiments() -> None:
    cluster = FakeCluster([_engine(), _engine()])
    _, p, verbs = await _run(cluster, "tandem", split_ratio=0.5)
    assert (p["s"], p["k"], p["reason"]) == ("96", "0", "fixed")  # 199 * 0.5 aligned to 16
    assert [v for v, _ in verbs] == ["prep_recv", "remote_send", "start_generate"]
    _, p, verbs = await _run(cluster, "tandem", list(range(20, 90)), lead_tokens=5)
    assert (p["k"], p["reason"]) == ("5", "fixed") and verbs[0][0] == "start_generate"


async def test_adaptive_with_one_role_left_runs_degraded() -> None:
    # A pd pair whose prefill engine died: the decode engine stands in, and the header says so.
    cluster = FakeCluster([_engine(role="decode")])
    run = await cluster.run("adaptive", PROMPT)
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 8)
    assert "chose=dp" in run.route and "degraded=prefill->e0" in run.route
    cluster.assert_clean()
