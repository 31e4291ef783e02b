"""RouterCore / PrefixIndex / EngineTable bindings: one score call per request, shared state,
typed errors for bad input."""
from __future__ import annotations

import math
import threading
import time

import pytest

import router_core

BLOCK = 16
_TERMS = ("const", "prefill_tokens", "prefill_seqs", "prefill_attention", "prefill_context",
          "decode_seqs", "decode_context")


def _core(engines: int = 3) -> router_core.RouterCore:
    core = router_core.RouterCore(BLOCK, router_core.model_seed("test-model"))
    for e in range(engines):
        core.table.upsert(e, "any")
        core.index.add_engine(e)
    return core


def test_score_prefers_the_engine_holding_the_prefix() -> None:
    core = _core()
    prompt = list(range(1000, 1000 + 160))
    hashes = router_core.block_hashes(prompt, BLOCK, core.seed)
    assert core.index.apply_events(2, 1, 1, hashes[:8], [])
    result = core.score(prompt)
    assert result.best == 2
    assert result.hashes == hashes
    assert result.matched(2) == 128 and result.matched(0) == 0
    assert result.matches == {2: 128}
    best = result.candidates[0]
    assert (best.engine_id, best.matched_tokens, best.uncached_tokens) == (2, 128, 32)
    assert best.prefill_cost == 32.0
    assert math.isclose(best.cost, best.prefill_cost + best.decode_cost + best.kv_cost)
    assert [c.cost for c in result.candidates] == sorted(c.cost for c in result.candidates)


def test_load_outweighs_overlap_and_dispatch_spreads_requests() -> None:
    core = _core(engines=2)
    prompt = list(range(64))
    core.index.apply_events(0, 1, 1, router_core.block_hashes(prompt, BLOCK, core.seed), [])
    core.table.update_stats(0, 0, 3, 5000, 10, 100, 12.0)
    assert core.score(prompt).best == 1
    # Router-side dispatches count before the next Stats poll.
    core.table.on_dispatch(1, 64, 10_000)
    assert core.score(prompt).best == 0
    load = core.table.get(1)
    assert (load.inflight, load.router_tokens) == (1, 10_064)
    # Once a Stats asked for after the dispatch arrives, the engine's own count carries the
    # request: it is not counted twice.
    core.table.stats_requested(1)
    core.table.update_stats(1, 0, 1, 10_064, 10, 100, 12.0)
    load = core.table.get(1)
    assert (load.unfinished_tokens, load.router_tokens) == (10_064, 0)
    core.table.on_complete(1)
    assert core.table.get(1).inflight == 0


def test_roles_and_health_filter_candidates() -> None:
    core = _core(engines=0)
    for e, role in enumerate(["prefill", "decode", "any"]):
        core.table.upsert(e, role)
    assert {c.engine_id for c in core.score([1] * 40, "decode").candidates} == {1, 2}
    assert {c.engine_id for c in core.score([1] * 40, "prefill").candidates} == {0, 2}
    assert len(core.score([1] * 40, "any").candidates) == 3
    core.table.set_health(2, False)
    core.table.set_health(1, False)
    result = core.score([1] * 40, "decode")
    assert result.best is None and result.candidates == []
    with pytest.raises(ValueError):
        core.score([1], "both")


def test_gap_makes_engine_stale_until_snapshot() -> None:
    index = router_core.PrefixIndex(BLOCK, 0)
    index.add_engine(5)
    assert index.apply_events(5, 1, 2, [11, 12], [])
    assert not index.apply_events(5, 4, 4, [13], [])
    assert index.is_stale(5)
    index.apply_snapshot(5, 4, [11, 13])
    assert not index.is_stale(5)
    assert index.last_seq(5) == 4
    assert index.match([11, 12]) == {5: 1}
    assert index.engine_blocks(5) == 2 and index.num_blocks() == 2
    assert index.memory_bytes() > 0
    index.remove_engine(5)
    assert index.num_blocks() == 0 and index.engine_ids() == []


def test_approximate_engine_expires_after_ttl() -> None:
    index = router_core.PrefixIndex(BLOCK, 0, approx_ttl_s=0.2)
    index.add_engine(1, approximate=True)
    index.record_routed(1, [7, 8])
    assert index.match([7, 8, 9]) == {1: 2}
    time.sleep(0.35)
    assert index.match([7, 8]) == {}
    with pytest.raises(ValueError):
        index.apply_events(1, 1, 1, [7], [])


def test_index_is_memory_bounded() -> None:
    index = router_core.PrefixIndex(BLOCK, 0, max_blocks=100)
    index.add_engine(0)
    index.apply_events(0, 1, 1, list(range(250)), [])
    assert index.num_blocks() == 100
    assert index.dropped_blocks() == 150


def test_table_predictions() -> None:
    table = router_core.EngineTable()
    table.upsert(0, "decode")
    assert math.isnan(table.predict_prefill_ms(0, 100, 0)), "no model yet"
    model = {"const": 2.0, "prefill_tokens": 0.5, "decode_seqs": 1.0, "decode_context": 0.01}
    table.update_stats(0, 0, 8, 100, 1, 10, 20.0, latency_model=model, prefill_chunk_size=64,
                       decode_context_tokens=800)
    # 100 tokens at chunk 64: 2 steps of (2 + 8 decodes + 0.01 * their context, growing by 8).
    steps = sum(2.0 + 8.0 + 0.01 * (800 + 8 * k) for k in range(2))
    assert table.predict_prefill_ms(0, 100, 900) == pytest.approx(steps + 50.0)
    assert table.predict_step_ms(0, [(0, 10)], 3, 300) == pytest.approx(2.0 + 5.0 + 3.0 + 3.0)
    assert table.predict_step_ms(0) == pytest.approx(2.0)
    load = table.all()[0]
    assert (load.role, load.running_decodes, load.prefill_chunk_size) == ("decode", 8, 64)
    assert load.latency_model == {**dict.fromkeys(_TERMS, 0.0), **model}
    assert load.decode_context_tokens == 800
    assert len(table) == 1


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda t: t.get(99), KeyError),
        (lambda t: t.set_health(99, True), KeyError),
        (lambda t: t.upsert(1, "leader"), ValueError),
        (lambda t: t.update_stats(0, -1, 0, 0, 0, 0, 0.0), OverflowError),
        (lambda t: t.update_stats(0, 0, 0, 0, 0, 0, float("nan")), ValueError),
        (lambda t: t.update_stats(0, 0, 0, 0, 0, 0, 1.0, latency_model={"warp": 1.0}), ValueError),
        (lambda t: t.update_stats(0, 0, 0, 0, 0, 0, 1.0, latency_model={"const": math.inf}),
         ValueError),
        (lambda t: t.update_stats(0, 0, 0, 0, 0, 0, 1.0, prefill_chunk_size=-1), OverflowError),
        (lambda t: t.update_stats(0, 0, 0, 0, 0, 0, 1.0, [1.0]), TypeError),  # old positional form
        (lambda t: t.predict_step_ms(7), KeyError),
    ],
)
def test_table_bad_input_raises(call: object, exc: type[Exception]) -> None:
    table = router_core.EngineTable()
    table.upsert(0, "any")
    with pytest.raises(exc):
        call(table)  # type: ignore[operator]


def test_constructor_and_weight_validation() -> None:
    with pytest.raises(ValueError):
        router_core.RouterCore(0, 0)
    with pytest.raises(ValueError):
        router_core.RouterCore(16, 0, prefill_weight=-1.0)
    with pytest.raises(ValueError):
        router_core.PrefixIndex(16, 0, approx_ttl_s=0.0)
    core = _core(engines=1)
    core.set_weights(2.0, 0.0, 0.5, 0.0)
    assert core.weights == (2.0, 0.0, 0.5, 0.0)
    with pytest.raises(ValueError):
        core.set_weights(float("nan"), 1.0, 1.0, 1.0)
    with pytest.raises(KeyError):
        core.index.apply_events(42, 1, 1, [], [])
    with pytest.raises(OverflowError):
        core.score([-5])


def test_index_and_table_are_shared_with_the_core() -> None:
    core = _core(engines=1)
    assert core.index is core.index and core.table is core.table
    core.index.apply_snapshot(0, 3, router_core.block_hashes(list(range(32)), BLOCK, core.seed))
    assert core.score(list(range(32))).matched(0) == 32


def test_concurrent_scoring_and_events_from_threads() -> None:
    # The GIL is released inside; concurrent calls must stay consistent and not deadlock.
    core = _core(engines=8)
    prompt = list(range(512))
    hashes = router_core.block_hashes(prompt, BLOCK, core.seed)
    errors: list[BaseException] = []

    def feed(engine: int) -> None:
        try:
            for seq in range(1, 200):
                core.index.apply_events(engine, seq, seq, hashes[: seq % 32], hashes[seq % 32:])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def score() -> None:
        try:
            for _ in range(300):
                result = core.score(prompt)
                assert len(result.candidates) == 8
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=feed, args=(e,)) for e in range(4)]
    threads += [threading.Thread(target=score) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert all(not t.is_alive() for t in threads)


def test_record_routed_from_a_score_result() -> None:
    core = router_core.RouterCore(BLOCK, 1, approx_ttl_s=60.0)
    for e in range(2):
        core.table.upsert(e, "any")
        core.index.add_engine(e, approximate=True)
    prompt = list(range(48))
    first = core.score(prompt)
    assert first.matches == {}
    core.record_routed(1, first)
    again = core.score(prompt + [7] * 16)
    assert again.matched(1) == 48 and again.best == 1


def test_hash_arguments_accept_tuples_and_arrays() -> None:
    import array

    index = router_core.PrefixIndex(BLOCK, 0)
    index.add_engine(0)
    assert index.apply_events(0, 1, 1, (2**64 - 1, 5), array.array("Q", [6]))
    assert index.match(array.array("Q", [2**64 - 1, 5])) == {0: 2}
    with pytest.raises(OverflowError):
        index.apply_events(0, 2, 2, [2**64], [])
    with pytest.raises(TypeError):
        index.match(["x"])  # type: ignore[list-item]
