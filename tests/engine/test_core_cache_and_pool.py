"""Prefix-cache hits, aborts and preemption on the real model: tokens stay those of a cold run
and the page pool's accounting returns to its initial state."""
from __future__ import annotations

import pytest
from test_core_support import PROMPTS, assert_pool_idle, drain, generate, greedy, make_engine

from engine.model.loader import LoadedModel

pytestmark = [pytest.mark.model, pytest.mark.timeout(300)]

SHARED = ("You are a helpful assistant. Answer briefly and precisely. " * 4)


@pytest.fixture(scope="module")
def prompts(loaded_model_fp32: LoadedModel) -> list[list[int]]:
    tok = loaded_model_fp32.tokenizer
    return [tok.encode(SHARED + p) for p in PROMPTS[:3]]


@pytest.fixture(scope="module")
def cold(loaded_model_fp32: LoadedModel, prompts: list[list[int]]) -> list[list[int]]:
    """Each prompt alone on a fresh engine: the reference tokens."""
    out = []
    for prompt in prompts:
        out.append(generate(make_engine(loaded_model_fp32), prompt, greedy(16)))
    return out


def test_prefix_cache_hit_yields_cold_tokens(loaded_model_fp32: LoadedModel,
                                             prompts: list[list[int]],
                                             cold: list[list[int]]) -> None:
    core = make_engine(loaded_model_fp32)
    assert generate(core, prompts[0], greedy(16), "warm") == cold[0]
    # The shared system prompt is now cached; the second prompt reuses those pages.
    shared_pages = len(loaded_model_fp32.tokenizer.encode(SHARED)) // 16
    assert core.match_prefix(prompts[1]) >= shared_pages * 16
    core.add_request("hit", prompts[1], greedy(16))
    run = drain(core)
    assert run.tokens["hit"] == cold[1]
    first = next(o for o in run.outputs if o.request_id == "hit" and o.first)
    assert first.cached_tokens >= shared_pages * 16 and first.prompt_tokens == len(prompts[1])
    # Exactly the same prompt again: everything but the last partial page is a hit.
    assert generate(core, prompts[1], greedy(16), "again") == cold[1]
    assert_pool_idle(core)


def test_preemption_by_recompute_keeps_tokens_and_pages(
        loaded_model_fp32: LoadedModel) -> None:
    tok = loaded_model_fp32.tokenizer
    distinct = [tok.encode(p * 5) for p in PROMPTS[4:7]]  # no shared pages between them
    cold = [generate(make_engine(loaded_model_fp32), p, greedy(16)) for p in distinct]
    # Together they need ~12 pages; give them 7, so running requests must be preempted.
    need = sum(-(-(len(p) + 16) // 16) for p in distinct)
    core = make_engine(loaded_model_fp32, num_pages=7, chunk_size=32)
    assert need > 7 + 3
    for i, prompt in enumerate(distinct):
        core.add_request(f"p{i}", prompt, greedy(16))
    requests = [core.request(f"p{i}") for i in range(3)]
    run = drain(core)
    assert sum(r.num_preemptions for r in requests) > 0, "the test must force preemption"
    for i in range(3):
        assert run.tokens[f"p{i}"] == cold[i], f"p{i} differs after preemption"
    assert_pool_idle(core)


def test_abort_at_any_moment_returns_every_page(loaded_model_fp32: LoadedModel,
                                                prompts: list[list[int]]) -> None:
    core = make_engine(loaded_model_fp32, chunk_size=32, max_running=2)
    long_prompt = prompts[0] * 3
    core.add_request("mid-prefill", long_prompt, greedy(8))
    core.add_request("mid-decode", prompts[1], greedy(50))
    core.add_request("waiting", prompts[2], greedy(8))  # max_running=2 keeps it queued
    finish = {}
    for _ in range(2):
        core.step()
    assert core.request("mid-prefill").num_computed > 0
    assert core.abort("mid-prefill") and core.abort("waiting")
    for _ in range(6):
        finish.update({o.request_id: o.finish_reason for o in core.step() if o.finish_reason})
    assert core.request("mid-decode").output_ids
    assert core.abort("mid-decode")
    assert not core.abort("mid-decode") and not core.abort("never-existed")
    finish.update(drain(core).finish)
    assert finish == {"mid-prefill": "abort", "waiting": "abort", "mid-decode": "abort"}
    assert_pool_idle(core)


def test_kv_events_mirror_the_cache(loaded_model_fp32: LoadedModel,
                                    prompts: list[list[int]]) -> None:
    core = make_engine(loaded_model_fp32, num_pages=8)
    generate(core, prompts[0], greedy(2), "a")  # ~4 pages stay cached
    other = loaded_model_fp32.tokenizer.encode(PROMPTS[5] * 20)  # ~5 pages of its own
    generate(core, other, greedy(2), "b")  # so some of a's pages must be evicted
    held: set[int] = set()
    last = 0
    for event in core.kv_events_since(0):
        assert event.seq == last + 1
        last = event.seq
        (held.update if event.kind == "stored" else held.difference_update)(event.hashes)
    seq, snapshot = core.kv_snapshot()
    assert seq == last == core.stats().kv_event_seq
    assert held == set(snapshot) and any(e.kind == "evicted" for e in core.kv_events_since(0))


def test_stats_count_pages_only_the_cache_holds_as_evictable(loaded_model_fp32: LoadedModel,
                                                            prompts: list[list[int]]) -> None:
    core = make_engine(loaded_model_fp32)
    core.add_request("running", prompts[0], greedy(8))
    while not core.stats().decode_requests:  # prefilled, now decoding: its pages are held
        core.step()
    busy = core.stats()
    assert busy.kv_pages_used > busy.kv_pages_evictable
    drain(core)
    idle = core.stats()
    # Finished: every page is the cache's alone, so none of it is KV pressure.
    assert idle.kv_pages_evictable == idle.kv_pages_used == idle.cached_blocks > 0
