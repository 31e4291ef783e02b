"""Unit tests of the decision arithmetic: SLO checks over outcomes, role switches, placements,
the closed loop."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

import router_core
from pyrouter.outcomes import Outcome, RecentOutcomes, slo_met
from pyrouter.planning import placement
from pyrouter.planning.chunk_control import backlog_chunk, lcu_chunk, lcu_option
from pyrouter.planning.interference import PrefillShare, prefill_extra_ms, tpot_under
from pyrouter.planning.placement import (
    DP,
    FITS,
    PD,
    QUEUE_SATURATED,
    SOONEST,
    STEP_SATURATED,
    Placement,
    Slo,
    choose,
    choose_with_rule,
    commit,
)
from pyrouter.planning.prediction_feedback import PredictedOutcome, PredictionFeedback
from pyrouter.planning.slo_fit import MUX, PREFILL, MuxRoles, queue_saturated
from router_core import EngineTable


def test_slo_met_needs_every_given_objective() -> None:
    assert slo_met(0.5, 0.05, None, None) is None
    assert slo_met(0.5, 0.05, 1000, 100) is True
    assert slo_met(1.5, 0.05, 1000, 100) is False
    assert slo_met(0.5, 0.15, 1000, 100) is False
    assert slo_met(None, None, 1000, None) is False  # failed before a first token
    assert slo_met(0.5, None, 1000, 100) is True     # one token: no TPOT to miss


def test_outcome_window_by_pattern_and_age() -> None:
    window = RecentOutcomes(max_age_s=10)
    for i, (pattern, met) in enumerate([("pd", True), ("pd", False), ("tandem", True)]):
        window.record(Outcome(100.0 + i, pattern, True, 0.1, 0.01, met))
    window.record(Outcome(80.0, "pd", False, 9.0, 1.0, False))  # too old at t=105
    assert window.summary("pd", now=105).attainment == 0.5
    assert window.summary(now=105).requests == 3
    assert window.patterns() == []  # relative to the real clock: all long gone


def test_role_switch_rules_and_interval() -> None:
    roles = MuxRoles()
    roles.sync({"e0": "prefill", "e1": "decode", "e2": "any"})
    assert roles.of(PREFILL) == ["e0"] and roles.of(MUX) == ["e1", "e2"]
    full = {"e1": True, "e2": True}
    assert roles.maybe_switch(full, {}, {}, 5.0, 0.5, now=10) == \
        "e0:prefill->mux (decode_kv_over_watermark)"
    assert roles.maybe_switch(full, {}, {}, 5.0, 0.5, now=12) is None  # within the interval
    roles.late.extend([True] * 10)
    assert roles.maybe_switch({}, {"e0": 5, "e1": 1, "e2": 3}, {}, 5.0, 0.5, now=20) == \
        "e1:mux->prefill (prefill_waiting)"
    roles.sync({"e0": "prefill", "e2": "any"})  # e1 left the cluster
    assert "e1" not in roles.roles
    undeclared = MuxRoles()
    undeclared.sync({"e0": "any", "e1": "any", "e2": "any"})  # someone must prefill
    assert undeclared.of(PREFILL) == ["e0"] and undeclared.of(MUX) == ["e1", "e2"]



def test_a_queue_is_saturated_net_of_its_longest_prefill_but_not_of_a_kv_wait() -> None:
    model = {"const": 5.0, "prefill_tokens": 0.5, "decode_seqs": 2.0, "decode_context": 0.001}
    core = router_core.RouterCore(16, router_core.model_seed("m"))
    core.table.upsert(0, "any")
    # 6000 prefill tokens queued (~3 s at 0.5 ms a token), KV with room: no KV wait.
    core.table.update_stats(0, 6000, 0, 6000, 10, 1000, 0.0, latency_model=model,
                            prefill_chunk_size=512, queued_requests=3)
    (pred,) = core.predict(list(range(100)))
    assert pred.kv_wait_ms == 0.0 and pred.queue_ms > 2000.0
    assert queue_saturated(pred, 0, 2000.0)         # not reported: the whole queue
    assert queue_saturated(pred, 2000, 2000.0)      # three prompts: 2 s behind the longest
    assert not queue_saturated(pred, 6000, 2000.0)  # one prompt: the engine keeps up
    assert not queue_saturated(pred, 0, 5000.0)     # within the SLO
    # The same queue on an engine whose KV is full, 30 decoding: requests wait for running
    # ones to finish, however long the longest prompt is.
    core.table.update_stats(0, 6000, 30, 12000, 99, 100, 0.0, latency_model=model,
                            prefill_chunk_size=512, decode_context_tokens=9000,
                            queued_requests=3)
    (pred,) = core.predict(list(range(100)))
    assert pred.kv_wait_ms > 2000.0
    assert queue_saturated(pred, 6000, 2000.0)

# ---- the closed loop ----
def _outcome(ttft: float, tpot: float, raw_ttft: float | None = None,
             raw_tpot: float | None = None) -> PredictedOutcome:
    return PredictedOutcome("dp", "e0", "e1", ttft, tpot,
                            ttft if raw_ttft is None else raw_ttft,
                            tpot if raw_tpot is None else raw_tpot)


def test_feedback_learns_the_ratio_per_engine_pattern_and_kind() -> None:
    fb = PredictionFeedback()
    assert fb.correction("e0", "dp", "ttft") == 1.0
    fb.observe(_outcome(100.0, 10.0), ttft_s=0.2, tpot_s=0.010)   # TTFT twice as long
    assert math.isclose(fb.correction("e0", "dp", "ttft"), 2.0)   # set by the first one
    assert math.isclose(fb.correction("e1", "dp", "tpot"), 1.0)   # TPOT was exact
    # TTFT's correction is the pattern's across engines (its error is the queue nobody saw);
    # TPOT's is the engine's own
    assert math.isclose(fb.correction("e1", "dp", "ttft"), 2.0)
    # a pattern not seen yet takes every pattern's error, not 1.0 (it would look cheaper)
    assert math.isclose(fb.correction("e0", "pd", "ttft"), 2.0)
    fb.observe(_outcome(100.0, 10.0), ttft_s=0.1, tpot_s=0.030)
    assert math.isclose(fb.correction("e1", "dp", "tpot"), math.sqrt(3))  # e1 decoded it
    assert fb.correction("e0", "dp", "tpot") == 1.0
    assert math.isclose(fb.correction("e1", "pd", "tpot"), math.sqrt(3))
    # learned from the raw prediction: corrected predictions that are now right keep it at 2
    for _ in range(50):
        fb.observe(_outcome(200.0, 10.0, raw_ttft=100.0), ttft_s=0.2, tpot_s=0.010)
    assert math.isclose(fb.correction("e0", "dp", "ttft"), 2.0, rel_tol=1e-2)
    summary = fb.summary()
    assert summary["ttft/dp"]["n"] == 52 and summary["ttft/dp"]["median_abs_error"] == 0.0
    # absurd outcomes are clamped; failed requests (no TTFT) and NaN predictions are ignored
    for _ in range(200):
        fb.observe(_outcome(1.0, 10.0), ttft_s=100.0, tpot_s=None)
    fb.observe(_outcome(math.nan, 10.0), ttft_s=1.0, tpot_s=None)
    assert fb.correction("e0", "dp", "ttft") == 4.0


def test_tpot_correction_does_not_learn_the_prefills_placed_after_the_prediction() -> None:
    """A burst: each request decodes beside prefills the router placed on its engine after it
    (unforeseen by its raw prediction). That is not the step model's error: the correction
    stays at 1. The same TPOT with no prefill placed since is the model's error: learned. Nor
    is a lull, fewer prefills than foreseen."""
    fb = PredictionFeedback()
    for _ in range(5):
        outcome = replace(_outcome(100.0, 10.0), placed_ms=fb.placed("e1"))
        fb.note_prefill("e1", 400.0)   # 20 more ms per token over the 20 decoded tokens
        fb.note_prefill("e0", 900.0)   # another engine's prefills slow nothing on e1
        fb.observe(outcome, ttft_s=0.1, tpot_s=0.030, decoded_tokens=20)
    assert math.isclose(fb.correction("e1", "dp", "tpot"), 1.0)
    # the share of later prefills the prediction foresaw is not unforeseen: with all of them
    # foreseen, the same TPOT is 3x the raw prediction (the 6th observation weighs 1/6)
    foreseen = replace(_outcome(100.0, 10.0), foreseen_prefill_ms=20.0, placed_ms=fb.placed("e1"))
    fb.note_prefill("e1", 400.0)
    fb.observe(foreseen, ttft_s=0.1, tpot_s=0.030, decoded_tokens=20)
    assert math.isclose(fb.correction("e1", "dp", "tpot"), 3.0 ** (1 / 6))
    # fewer prefills came than the prediction foresaw (none here): the step model was right,
    # and the lower TPOT is not learned as over-prediction (crediting only an excess would
    # learn 1/3 here, and optimism wherever arrivals fall short of the share)
    quiet = PredictionFeedback()
    short = replace(_outcome(100.0, 30.0), foreseen_prefill_ms=20.0, placed_ms=quiet.placed("e1"))
    quiet.observe(short, ttft_s=0.1, tpot_s=0.010, decoded_tokens=20)
    assert math.isclose(quiet.correction("e1", "dp", "tpot"), 1.0)
    # prefill work placed while it decoded counts at most as its whole decode time
    fresh = PredictionFeedback()
    capped = replace(_outcome(100.0, 10.0), placed_ms=0.0)
    fresh.note_prefill("e1", 10_000.0)
    fresh.observe(capped, ttft_s=0.1, tpot_s=0.030, decoded_tokens=20)
    assert math.isclose(fresh.correction("e1", "dp", "tpot"), 30.0 / 40.0)
    # a policy that does not say what it places (placed_ms None) learns the plain ratio
    plain = PredictionFeedback()
    plain.note_prefill("e1", 400.0)
    plain.observe(_outcome(100.0, 10.0), ttft_s=0.1, tpot_s=0.030, decoded_tokens=20)
    assert math.isclose(plain.correction("e1", "dp", "tpot"), 3.0)


def test_feedback_holds_running_predictions_and_which_are_still_within_slo() -> None:
    fb = PredictionFeedback()
    assert fb.share_within_slo("e1") == 1.0          # nothing placed there: assume within
    fb.running("a", replace(_outcome(100.0, 10.0), ttft_slo_ms=500.0))
    fb.running("b", replace(_outcome(900.0, 10.0), meets=False))   # placed late anyway
    fb.running("c", replace(_outcome(100.0, 10.0), ttft_slo_ms=500.0))
    assert math.isclose(fb.share_within_slo("e1"), 2 / 3) and fb.share_within_slo("e0") == 1.0
    fb.first_token("a", 400.0)                       # on time: still within
    fb.first_token("c", 600.0)                       # late with its first token
    fb.first_token("c", 700.0)                       # (counted once)
    assert math.isclose(fb.share_within_slo("e1"), 1 / 3)
    # a retry places the request again: the new placement replaces the old one
    fb.running("b", replace(_outcome(100.0, 10.0), decode_engine="e0"))
    assert fb.running_requests == 3
    assert math.isclose(fb.share_within_slo("e1"), 1 / 2) and fb.share_within_slo("e0") == 1.0
    for key in ("a", "b", "c", "never-placed"):
        fb.ended(key)
    assert fb.running_requests == 0 and fb.share_within_slo("e1") == 1.0


def test_feedback_reports_each_ratio_to_its_sink() -> None:
    seen: list[tuple[str, str, float]] = []
    fb = PredictionFeedback(lambda kind, pattern, ratio: seen.append((kind, pattern, ratio)))
    fb.observe(_outcome(100.0, 10.0), ttft_s=0.05, tpot_s=0.02)
    assert seen == [("ttft", "dp", 0.5), ("tpot", "dp", 2.0)]


# ---- interference ----
def test_prefill_share_decays_over_the_horizon_and_slows_decodes() -> None:
    share = PrefillShare()
    share.note_decode_time(2.0)                      # the first sets the horizon
    assert share.horizon_s == 2.0
    assert share.share("e0", now=0.0) == 0.0
    share.add("e0", now=0.0, extra_ms=1000.0)        # 1 s of extra prefill work in 2 s
    assert math.isclose(share.share("e0", now=0.0), 0.5)
    assert math.isclose(share.share("e0", now=2.0), 0.5 * math.exp(-1))
    assert share.share("e1", now=0.0) == 0.0
    assert math.isclose(share.share("e0", now=0.0, extra_ms=1000.0), 0.95)  # capped
    assert math.isclose(tpot_under(20.0, 0.5), 40.0)
    assert prefill_extra_ms(300.0, 4, 50.0) == 100.0
    assert prefill_extra_ms(100.0, 4, 50.0) == 0.0
    assert prefill_extra_ms(math.nan, 4, 50.0) == 0.0


# ---- placement ----
def _placement(pattern: str, prefill: str, decode: str, ttft: float, meets: bool, harm: int,
               queue: float = 0.0, kv_ok: bool = True, step_now: float = 5.0) -> Placement:
    outcome = PredictedOutcome(pattern, prefill, decode, ttft, 10.0, ttft, 10.0)
    return Placement(pattern, prefill, decode, ttft, 10.0, meets, harm, kv_ok, queue, outcome,
                     decode_step_now_ms=step_now)


def test_commit_learns_the_horizon_only_from_requests_placed_to_meet_their_slo() -> None:
    share, fb = PrefillShare(), PredictionFeedback()
    commit(_placement(DP, "e0", "e0", 100.0, True, 0), share, fb, 0.0, 200, False)
    assert share.horizon_s == 2.0                    # 200 tokens x 10 ms
    # placed late on a saturated engine, predicted at 60 ms a token: not a life the router can
    # keep within SLO, and it would stretch every engine's horizon
    late = replace(_placement(DP, "e1", "e1", 5000.0, False, 0), tpot_ms=60.0,
                   prefill_extra_ms=500.0)
    commit(late, share, fb, 0.0, 200, False)
    assert share.horizon_s == 2.0
    assert share.share("e1", 0.0) == 0.25            # its prefill still counts: 500 ms of 2 s


def test_choose_most_within_slo_then_least_ttft_then_least_harm_on_the_longest_queue() -> None:
    fast_harmful = _placement(DP, "e0", "e0", 100.0, True, 3)
    slow_clean = _placement(PD, "e1", "e0", 900.0, True, 0)
    slo = Slo(1000.0, 50.0)
    assert choose([fast_harmful, slow_clean], slo) is slow_clean
    dp1 = _placement(DP, "e1", "e1", 500.0, True, 0)
    pd1 = _placement(PD, "e1", "e0", 500.0, True, 0)
    assert choose([pd1, dp1], slo) is dp1            # a tie moves no bytes
    doomed = [_placement(DP, "e0", "e0", 9000.0, False, 0, queue=8000.0),
              _placement(DP, "e1", "e1", 4000.0, False, 0, queue=3000.0),
              _placement(PD, "e1", "e0", 4100.0, False, 2, queue=3000.0)]
    assert choose(doomed, slo) is doomed[0]          # late by queueing: onto the longest queue
    too_long = [_placement(DP, "e0", "e0", 9000.0, False, 0, queue=1000.0),
                _placement(DP, "e1", "e1", 8000.0, False, 0, queue=0.0)]
    assert choose(too_long, slo) is too_long[1]      # late on any engine: soonest
    # saturated in decode steps (no queue past the TTFT SLO, some engine's decodes already
    # stepping slower than the TPOT SLO): onto the slowest, so the others' decodes keep theirs
    slow_steps = [_placement(DP, "e0", "e0", 300.0, False, 0, step_now=60.0),
                  _placement(DP, "e1", "e1", 200.0, False, 0, step_now=90.0)]
    assert choose(slow_steps, slo) is slow_steps[1]
    # ...unless an engine still steps within the SLO and this request harms nobody there: the
    # slowest would only get slower
    one_calm = [_placement(DP, "e0", "e0", 300.0, False, 0, step_now=30.0),
                _placement(DP, "e1", "e1", 200.0, False, 0, step_now=90.0)]
    assert choose_with_rule(one_calm, slo) == (one_calm[0], SOONEST)
    # ...not when a request misses only by its own prediction (steps now within the SLO)
    busy = [_placement(DP, "e0", "e0", 300.0, False, 0, step_now=40.0),
            _placement(DP, "e1", "e1", 200.0, False, 0, step_now=45.0)]
    assert choose(busy, slo) is busy[1]
    over_kv = _placement(DP, "e0", "e0", 10.0, True, 0, kv_ok=False)
    assert choose([over_kv, dp1], slo) is dp1
    assert choose([over_kv], slo) is over_kv         # nothing under the watermark: still runs
    # the rule each took, as the route's why= says it
    assert choose_with_rule([pd1, dp1], slo) == (dp1, FITS)
    assert choose_with_rule(doomed, slo) == (doomed[0], QUEUE_SATURATED)
    assert choose_with_rule(too_long, slo) == (too_long[1], SOONEST)
    assert choose_with_rule(slow_steps, slo) == (slow_steps[1], STEP_SATURATED)
    assert choose_with_rule(busy, slo) == (busy[1], SOONEST)


def _busy_engine(chunk: int) -> router_core.RouterCore:
    """One engine running 8 decodes at `chunk`; a step is 2 ms + 1 per decode + 0.05 per
    prefill token (a GPU's: small fixed cost, so small chunks prefill nearly as fast)."""
    core = router_core.RouterCore(16, router_core.model_seed("m"))
    core.table.upsert(0, "any")
    core.index.add_engine(0)
    core.table.update_stats(0, 0, 8, 100, 1, 1000, 10.0, prefill_chunk_size=chunk,
                            latency_model={"const": 2.0, "prefill_tokens": 0.05,
                                           "decode_seqs": 1.0})
    return core


def test_a_prefill_that_harms_at_the_current_chunk_is_weighed_again_at_the_lcu_chunk() -> None:
    core = _busy_engine(2048)
    prompt = list(range(4000))
    # 2048-token chunks: steps of ~112 ms. The LCU chunk for the 8 decodes and this one:
    # 2 + 9 + 0.05 x chunk <= 50, ~780 tokens, at ~49 ms a step beside the 8
    option = lcu_option(core.table, 0, 50.0, len(prompt), lo=32, hi=2048)
    assert option is not None and 730 <= option.chunk <= 780 and option.step_ms <= 50.0
    assert option.cost_ratio == pytest.approx((option.step_ms / option.chunk) / (112.4 / 2048),
                                              rel=1e-3)
    assert 1.0 < option.cost_ratio < 1.2           # ~13% more time per prompt token
    # already at that chunk, or a model whose every step misses the SLO: nothing to lower
    assert lcu_option(_busy_engine(760).table, 0, 50.0, len(prompt), 32, 2048) is None
    assert lcu_option(core.table, 0, 5.0, len(prompt), 32, 2048) is None

    slo, share, fb = Slo(1000.0, 50.0), PrefillShare(), PredictionFeedback()
    share.note_decode_time(0.1)                    # decodes live 100 ms more: ~10 steps
    pred = core.predict(prompt, tpot_slo_ms=50.0)[0]
    e = placement.EngineState("e0", 0, True, True, 8, pred)
    [dp] = placement.candidates([e], len(prompt), 10, slo, share, placement.TransferCost(), fb,
                                0.0)
    # its prefill's two steps of ~112 ms, over the decodes' ~10-step life: pushed over 50 ms
    assert dp.meets and dp.harm == 8 and dp.chunk == 0
    low = placement.at_chunk(dp, e, option, len(prompt), 10, slo, share, fb, 0.0)
    assert low.harm == 0 and low.meets and low.chunk == option.chunk
    assert low.ttft_ms == pytest.approx(dp.ttft_ms * option.cost_ratio)
    assert low.outcome.ttft_ms == low.ttft_ms and low.outcome.meets
    assert choose([dp, low], slo) is low           # 1 within SLO against 1 - 8
    # where the lowered chunk costs the TTFT SLO, it is no better than the harm
    tight = Slo(dp.ttft_ms * 1.01, 50.0)
    assert not placement.at_chunk(dp, e, option, len(prompt), 10, tight, share, fb, 0.0).meets


# ---- the LCU prefill chunk ----
def test_lcu_chunk_fits_the_itl_and_an_idle_engine_keeps_the_largest() -> None:
    table = EngineTable()
    table.upsert(0, "any")
    model = {"const": 2.0, "prefill_tokens": 0.5, "decode_seqs": 1.0}
    # 8 running decodes: a step is 2 + 8 + 0.5 per chunk token, so 50 ms fits a chunk of ~80
    table.update_stats(0, 0, 8, 100, 1, 10, 20.0, latency_model=model)
    chunk = lcu_chunk(table, 0, 50.0, 0, lo=16, hi=2048)
    assert chunk is not None and 75 <= chunk <= 80
    assert lcu_chunk(table, 0, 50.0, 0, lo=16, hi=2048, idle_full=True) == chunk
    assert lcu_chunk(table, 0, 5.0, 0, lo=16, hi=2048) == 16  # even the smallest misses
    # no decode running: the ITL binds nothing; without idle_full the chunk still fits the ITL
    table.update_stats(0, 0, 0, 0, 1, 10, 0.0, latency_model=model)
    assert lcu_chunk(table, 0, 50.0, 0, lo=16, hi=2048, idle_full=True) == 2048
    assert lcu_chunk(table, 0, 50.0, 0, lo=16, hi=2048) == pytest.approx(96, abs=6)


def test_backlog_chunk_keeps_the_largest_only_where_decodes_absorb_the_backlog() -> None:
    table = EngineTable()
    table.upsert(0, "any")
    model = {"const": 2.0, "prefill_tokens": 0.5, "decode_seqs": 1.0}
    assert backlog_chunk(table, 0, 50.0, 100, 10.0, lo=16, hi=2048) is None  # no model yet
    # 8 decodes running, 2 requests waiting behind 1000 queued prompt tokens
    table.update_stats(0, 1000, 8, 100, 1, 10, 20.0, latency_model=model, queued_requests=2)
    # decodes that live 4 more steps spend all of them in the backlog: a full 2048-token chunk's
    # step (~1 s) is their TPOT, so the chunk is the LCU one — for the 8 running decodes and the
    # 3 that join them (the waiting two and this request): 2 + 11 + 0.5 x chunk <= 50
    short = backlog_chunk(table, 0, 50.0, 100, 4.0, lo=16, hi=2048)
    assert short is not None and 68 <= short <= 74
    plain_lcu = lcu_chunk(table, 0, 50.0, 50, lo=16, hi=2048)
    assert plain_lcu is not None and short < plain_lcu  # the joining decodes count
    # decodes that live 10,000 steps spend half a step's worth of them in the backlog: their
    # mean step stays within the SLO at the largest chunk, which prefills fastest
    assert backlog_chunk(table, 0, 50.0, 100, 10_000.0, lo=16, hi=2048) == 2048


def test_backlog_chunk_keeps_the_largest_on_an_idle_engine_for_the_ttft() -> None:
    table = EngineTable()
    table.upsert(0, "any")
    model = {"const": 2.0, "prefill_tokens": 0.5, "decode_seqs": 1.0}
    table.update_stats(0, 0, 0, 0, 1, 10, 0.0, latency_model=model)
    # Idle: the LCU chunk for this request's own decode (2 + 1 + 0.5 x chunk <= 50: ~94 tokens)
    # prefills its 1000 tokens in 11 steps of ~49 ms (~540 ms); the largest chunk in one step
    # of 502 ms. Where only the largest meets the TTFT SLO, it is kept.
    lcu = backlog_chunk(table, 0, 50.0, 1000, 4.0, lo=16, hi=2048)
    assert lcu is not None and 88 <= lcu <= 94
    assert backlog_chunk(table, 0, 50.0, 1000, 4.0, lo=16, hi=2048, ttft_ms=520.0) == 2048
    assert backlog_chunk(table, 0, 50.0, 1000, 4.0, lo=16, hi=2048, ttft_ms=600.0) == lcu
    assert backlog_chunk(table, 0, 50.0, 1000, 4.0, lo=16, hi=2048, ttft_ms=400.0) == lcu
    # with a decode running the chunk keeps its steps within its ITL, TTFT or not
    table.update_stats(0, 0, 1, 100, 1, 10, 20.0, latency_model=model)
    busy = backlog_chunk(table, 0, 50.0, 1000, 4.0, lo=16, hi=2048, ttft_ms=520.0)
    assert busy is not None and busy < 2048
