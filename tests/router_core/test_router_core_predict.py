"""RouterCore.predict (per-engine predicted times for one request) against a step-by-step Python
reference, and per-call scoring weights (no shared state)."""
from __future__ import annotations

import math

import pytest

import router_core

BLOCK = 16
MODEL = {"const": 3.0, "prefill_tokens": 0.2, "prefill_seqs": 1.5, "prefill_attention": 2e-5,
         "prefill_context": 1e-3, "decode_seqs": 0.4, "decode_context": 2e-4}


def _step_ms(chunks: list[tuple[int, int]], decodes: int, decode_ctx: int) -> float:
    """One step from the term definitions (proto StepTimeModel), written out independently."""
    feats = {"const": 1.0, "prefill_tokens": 0.0, "prefill_seqs": 0.0, "prefill_attention": 0.0,
             "prefill_context": 0.0, "decode_seqs": float(decodes),
             "decode_context": float(decode_ctx)}
    for before, n in chunks:
        feats["prefill_tokens"] += n
        feats["prefill_seqs"] += 1
        feats["prefill_attention"] += sum(before + i + 1 for i in range(n))  # query-key pairs
        feats["prefill_context"] += before + n
    return sum(MODEL[t] * feats[t] for t in MODEL)


def _reference(tokens: int, matched: int, queued: int, decodes: int, decode_ctx: int,
               chunk: int, slo: float | None) -> dict[str, float]:
    """Simulate the engine's FCFS chunked scheduler step by step."""
    ctx = decode_ctx
    queue_ms = 0.0
    left = queued
    while left:
        n = min(chunk, left)
        queue_ms += _step_ms([(0, n)], decodes, ctx)
        left -= n
        ctx += decodes
    done = min(matched, tokens - 1)
    prefill_ms, worst = 0.0, 0.0
    while done < tokens:
        n = min(chunk, tokens - done)
        step = _step_ms([(done, n)], decodes, ctx)
        prefill_ms, worst = prefill_ms + step, max(worst, step)
        done += n
        ctx += decodes
    # The batch it joins: the running decodes, the queued requests (none reported here) and
    # the context of the queued prefill, which decodes beside it (EngineLoad::joining_decode_batch).
    decode = _step_ms([], decodes + 1, decode_ctx + queued + tokens + 1)
    return {"queue_ms": queue_ms, "prefill_ms": prefill_ms, "ttft_ms": queue_ms + prefill_ms,
            "prefill_step_ms": worst, "decode_step_ms": decode,
            "tpot_slack_ms": math.inf if slo is None else slo - decode}


def _core(states: list[tuple[int, int, int, int]]) -> router_core.RouterCore:
    """Engines with (queued prefill tokens, decodes, decode context, chunk size)."""
    core = router_core.RouterCore(BLOCK, router_core.model_seed("m"))
    for e, (queued, decodes, ctx, chunk) in enumerate(states):
        core.table.upsert(e, "any")
        core.index.add_engine(e)
        core.table.update_stats(e, queued, decodes, 0, 30, 100, 0.0, latency_model=MODEL,
                                prefill_chunk_size=chunk, decode_context_tokens=ctx)
    return core


@pytest.mark.parametrize("slo", [None, 40.0])
def test_predictions_match_a_step_by_step_reference(slo: float | None) -> None:
    states = [(0, 0, 0, 512), (700, 8, 9000, 256), (4096, 32, 40_000, 64)]
    core = _core(states)
    prompt = list(range(2000, 2000 + 777))
    hashes = router_core.block_hashes(prompt, BLOCK, core.seed)
    core.index.apply_events(1, 1, 1, hashes[:20], [])  # engine 1 holds 320 tokens
    core.index.apply_events(2, 1, 1, hashes, [])  # engine 2 holds all full blocks (768)
    preds = core.predict(prompt, tpot_slo_ms=slo, kv_watermark=0.5)
    assert [p.engine_id for p in preds] == [0, 1, 2]
    for pred, (queued, decodes, ctx, chunk), matched in zip(preds, states, (0, 320, 768),
                                                            strict=True):
        assert pred.matched_tokens == matched
        assert pred.prefill_tokens == len(prompt) - matched
        assert pred.prefill_steps == -(-(len(prompt) - matched) // chunk)
        assert pred.queued_prefill_tokens == queued and pred.prefill_chunk_size == chunk
        want = _reference(len(prompt), matched, queued, decodes, ctx, chunk, slo)
        for field, value in want.items():
            assert getattr(pred, field) == pytest.approx(value, rel=1e-9), field
        # KV: prompt + 1 generated token, less the cached full pages.
        new_pages = -(-(len(prompt) + 1) // BLOCK) - matched // BLOCK
        assert pred.new_pages == new_pages
        assert pred.kv_use == pytest.approx((30 + new_pages) / 100)
        assert pred.kv_ok == (pred.kv_use <= 0.5)
        assert pred.has_latency_model and pred.healthy and pred.role == "any"


def test_a_full_kv_queues_a_request_behind_the_waiting_ones_until_running_ones_finish() -> None:
    # 20 decoding (context 8000), 98 of 100 16-token pages held, 30 requests waiting with 3000
    # prompt tokens, 9000 tokens owed: outputs (9000 - 3000) / (30 + 10) = 150 tokens, a
    # request ends holding 1568 / 20 + 75 = 153.4 tokens, 32 tokens free, so 31 - 0.21
    # admissions wait 30.79 x 150 / 20 = 230.9 decode steps of the 20 running.
    core = router_core.RouterCore(BLOCK, router_core.model_seed("m"))
    core.table.upsert(0, "any")
    core.table.update_stats(0, 3000, 20, 9000, 98, 100, 0.0, latency_model=MODEL,
                            prefill_chunk_size=512, decode_context_tokens=8000,
                            queued_requests=30)
    assert core.table.get(0).queued_requests == 30
    (pred,) = core.predict(list(range(100)))
    steps = (31 - 32 / (1568 / 20 + 75)) * 150 / 20
    assert pred.kv_wait_ms == pytest.approx(steps * _step_ms([], 20, 8000), rel=1e-9)
    assert pred.queue_ms == pred.kv_wait_ms
    assert pred.ttft_ms == pytest.approx(pred.queue_ms + pred.prefill_ms, rel=1e-12)
    # With room for them all (950 of 1000 pages free: 132 requests of 115 tokens), no wait:
    # the queue is the prefill's again.
    core.table.update_stats(0, 3000, 20, 9000, 50, 1000, 0.0, latency_model=MODEL,
                            prefill_chunk_size=512, decode_context_tokens=8000,
                            queued_requests=30)
    (pred,) = core.predict(list(range(100)))
    assert pred.kv_wait_ms == 0.0
    assert pred.queue_ms == pytest.approx(_reference(100, 0, 3000, 20, 8000, 512, None)
                                          ["queue_ms"], rel=1e-9)


def test_without_a_model_times_are_nan_and_the_rest_holds() -> None:
    core = router_core.RouterCore(BLOCK, 0)
    core.table.upsert(0, "decode")
    core.table.set_health(0, False)
    (pred,) = core.predict(list(range(40)), tpot_slo_ms=50.0)
    assert not pred.has_latency_model and not pred.healthy and pred.role == "decode"
    for t in (pred.prefill_ms, pred.queue_ms, pred.ttft_ms, pred.decode_step_ms,
              pred.prefill_step_ms, pred.tpot_slack_ms):
        assert math.isnan(t)
    assert (pred.prefill_tokens, pred.prefill_steps, pred.kv_use, pred.kv_ok) == (40, 1, 0.0, True)
    assert "EnginePrediction(engine_id=0" in repr(pred)


def test_the_last_token_is_always_computed() -> None:
    core = _core([(0, 0, 0, 512)])
    prompt = list(range(64))
    core.index.apply_events(0, 1, 1, router_core.block_hashes(prompt, BLOCK, core.seed), [])
    (pred,) = core.predict(prompt)
    assert (pred.matched_tokens, pred.prefill_tokens, pred.new_pages) == (64, 1, 2)
    assert math.isinf(pred.tpot_slack_ms)


@pytest.mark.parametrize("kwargs, exc", [
    ({"tokens": []}, ValueError),
    ({"tokens": [1], "tpot_slo_ms": 0.0}, ValueError),
    ({"tokens": [1], "tpot_slo_ms": math.nan}, ValueError),
    ({"tokens": [1], "kv_watermark": 0.0}, ValueError),
    ({"tokens": [1], "kv_watermark": 1.01}, ValueError),
    ({"tokens": [-1]}, OverflowError),
])
def test_predict_bad_input(kwargs: dict[str, object], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        _core([(0, 0, 0, 512)]).predict(**kwargs)  # type: ignore[arg-type]


def test_per_call_weights_do_not_touch_the_default() -> None:
    core = _core([(0, 0, 0, 512), (0, 0, 0, 512)])
    prompt = list(range(64))
    core.index.apply_events(1, 1, 1, router_core.block_hashes(prompt, BLOCK, core.seed), [])
    core.table.on_dispatch(1, 0, 500)
    assert core.score(prompt).best == 0  # default weights: 500 dispatched tokens > 64 cached
    cache_only = router_core.ScoreWeights(prefill_weight=1.0, queue_weight=0.0,
                                          decode_weight=0.0, kv_weight=0.0)
    assert core.score(prompt, None, cache_only).best == 1
    assert core.score(prompt, weights=cache_only).best == 1
    assert core.weights == (1.0, 1.0, 1.0, 1.0)
    assert core.score(prompt).best == 0
    params = {"prefill_weight": 2.0, "queue_weight": 0.5, "decode_weight": 1.0, "kv_weight": 0.0}
    weights = router_core.ScoreWeights(**params)
    assert (weights.prefill_weight, weights.queue_weight, weights.decode_weight,
            weights.kv_weight) == (2.0, 0.5, 1.0, 0.0)
    assert weights == router_core.ScoreWeights(**params) and weights != cache_only
    assert "prefill_weight=2" in repr(weights)
    for bad in ({"prefill_weight": -1.0}, {"kv_weight": math.nan}, {"queue_weight": math.inf}):
        with pytest.raises(ValueError):
            router_core.ScoreWeights(**bad)


def test_work_dispatched_since_the_last_stats_is_queued_in_predictions() -> None:
    # Without it every request of a poll interval sees the same idle engine and they herd.
    core = _core([(0, 2, 100, 256), (0, 2, 100, 256)])
    prompt = list(range(3000, 3300))
    before = {p.engine_id: p for p in core.predict(prompt)}
    core.table.on_dispatch(0, 500, 16)       # a generation of 500 prompt tokens
    core.table.on_prefill_dispatch(0, 200)   # a RemoteSend's 200 tokens of K/V
    after = {p.engine_id: p for p in core.predict(prompt)}
    assert after[0].queued_prefill_tokens == 700 and after[1].queued_prefill_tokens == 0
    assert after[0].queue_ms > 0 and after[0].ttft_ms > before[0].ttft_ms
    assert after[1].ttft_ms == before[1].ttft_ms
    # the dispatched generation decodes next to ours: one more sequence in the step
    assert after[0].decode_step_ms > before[0].decode_step_ms
    assert after[0].decode_step_now_ms < after[0].decode_step_ms
    load = core.table.get(0)
    assert (load.router_prefill_tokens, load.router_seqs) == (700, 1)
    # The next Stats covers what was dispatched before it was asked for: gone from the router.
    core.table.stats_requested(0)
    core.table.update_stats(0, 700, 3, 0, 30, 100, 0.0, latency_model=MODEL,
                            prefill_chunk_size=256, decode_context_tokens=100)
    load = core.table.get(0)
    assert (load.router_prefill_tokens, load.router_seqs) == (0, 0)
    assert {p.engine_id: p for p in core.predict(prompt)}[0].queued_prefill_tokens == 700


def test_predictions_for_named_engines_and_a_shortlist() -> None:
    # Queues shrink and decode batches grow with the id: the soonest first tokens are the last
    # engines, the fastest decodes the first ones.
    core = _core([(4000 - 400 * e, e, 1000 * e, 512) for e in range(10)])
    prompt = list(range(300))
    every = core.predict(prompt)
    assert [p.engine_id for p in core.predict(prompt, engines=[7, 2, 99])] == [7, 2]
    named = {p.engine_id: p for p in core.predict(prompt, engines=[7, 2])}
    assert named[7].ttft_ms == every[7].ttft_ms and named[2].decode_step_ms == every[2].decode_step_ms
    assert [p.engine_id for p in core.predict(prompt, shortlist=2)] == [0, 1, 8, 9]
    assert [p.engine_id for p in core.predict(prompt, engines=[3, 4, 5], shortlist=1)] == [3, 5]
    # Unhealthy engines are never on it; a fleet no larger than k is kept whole.
    core.table.set_health(9, False)
    assert [p.engine_id for p in core.predict(prompt, shortlist=2)] == [0, 1, 7, 8]
    assert len(core.predict(prompt, shortlist=9)) == 9
    with pytest.raises(ValueError, match="shortlist"):
        core.predict(prompt, shortlist=0)
