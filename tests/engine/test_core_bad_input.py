"""Bad input raises InvalidRequest with a clear message, and the engine keeps serving."""
from __future__ import annotations

import math

import pytest
from test_core_support import assert_pool_idle, drain, generate, greedy, make_engine

from engine.config import EngineConfig, EngineConfigError
from engine.core.engine_core import EngineCore
from engine.model.loader import LoadedModel
from switchyard_engine_api.errors import InvalidRequest
from switchyard_engine_api.sampling_params import SamplingParams

pytestmark = [pytest.mark.model, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def core(loaded_model_fp32: LoadedModel) -> EngineCore:
    return make_engine(loaded_model_fp32, max_context=256)


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": math.nan}, "temperature"),
    ({"temperature": -1.0}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -3}, "max_tokens"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"temperature": 2.5}, "temperature"),
    ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
    ({"stop": [""]}, "stop"),
])
def test_bad_sampling_params(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_sampling_rules_name_the_field_and_normalise_off_values() -> None:
    with pytest.raises(InvalidRequest) as info:
        SamplingParams(top_p=3.0)
    assert info.value.param == "top_p"
    params = SamplingParams(top_k=-1, top_p=0.0)  # vLLM's and proto3's spellings of "off"
    assert params.top_k == 0 and params.top_p == 1.0


def test_bad_requests_are_rejected_and_engine_keeps_serving(
        core: EngineCore, loaded_model_fp32: LoadedModel) -> None:
    vocab = loaded_model_fp32.config.vocab_size
    prompt = loaded_model_fp32.tokenizer.encode("Hello there")
    reference = generate(core, prompt, greedy(6), "before")
    cases: list[tuple[dict[str, object], str]] = [
        ({"tokens": []}, "empty"),
        ({"tokens": [1] * 256}, "context"),
        ({"tokens": prompt + [vocab]}, "vocabulary"),
        ({"tokens": [-1] + prompt}, "vocabulary"),
        ({"begin": -1}, "begin"),
        ({"begin": len(prompt) + 1}, "begin"),
        ({"request_id": ""}, "request_id"),
        ({"max_new_tokens_here": -1}, "max_new_tokens_here"),
        ({"output_offset": len(prompt)}, "output_offset"),
        ({"sampling": "greedy"}, "SamplingParams"),
        ({"first_token_due_ms": math.nan}, "first_token_due_ms"),
        ({"first_token_due_ms": -1.0}, "first_token_due_ms"),
        ({"first_token_due_ms": math.inf}, "first_token_due_ms"),
    ]
    for overrides, message in cases:
        args: dict[str, object] = {"request_id": "bad", "tokens": prompt, "sampling": greedy(4)}
        args.update(overrides)
        with pytest.raises(InvalidRequest, match=message):
            core.add_request(**args)  # type: ignore[arg-type]
    core.add_request("dup", prompt, greedy(2))
    with pytest.raises(InvalidRequest, match="duplicate"):
        core.add_request("dup", prompt, greedy(2))
    with pytest.raises(InvalidRequest, match="duplicate"):
        core.prep_recv("dup", prompt, -1)
    with pytest.raises(InvalidRequest, match="end"):
        core.prep_recv("r", prompt, len(prompt) + 1)
    with pytest.raises(InvalidRequest, match="begin"):
        core.add_send("s", prompt * 4, 5, 3, lambda chunk: None)
    with pytest.raises(InvalidRequest, match="first_token_due_ms"):
        core.add_send("s", prompt * 4, 0, 3, lambda chunk: None, first_token_due_ms=-0.5)
    drain(core)
    assert generate(core, prompt, greedy(6), "after") == reference
    assert_pool_idle(core)


def test_request_larger_than_the_pool_is_rejected(loaded_model_fp32: LoadedModel) -> None:
    small = make_engine(loaded_model_fp32, num_pages=2)
    with pytest.raises(InvalidRequest, match="pages"):
        small.add_request("big", [1] * 40, greedy(2))


def test_generation_stops_at_the_context_limit(loaded_model_fp32: LoadedModel) -> None:
    core = make_engine(loaded_model_fp32, max_context=24)
    prompt = loaded_model_fp32.tokenizer.encode("Count: one two three four five")
    core.add_request("cap", prompt, greedy(100, ignore_eos=True))
    run = drain(core)
    assert run.finish["cap"] == "length" and len(prompt) + len(run.tokens["cap"]) == 24


@pytest.mark.parametrize("settings", [
    {"page_size": 0}, {"num_pages": -1}, {"chunk_size": 0}, {"role": "boss"},
    {"dtype": "int3"}, {"lease_s": math.nan}, {"max_context": 1}, {"device": "tpu"},
])
def test_bad_engine_config(settings: dict[str, object]) -> None:
    with pytest.raises(EngineConfigError):
        EngineConfig(**settings)  # type: ignore[arg-type]


def test_stats_track_queue_running_and_latency(core: EngineCore,
                                               loaded_model_fp32: LoadedModel) -> None:
    prompt = loaded_model_fp32.tokenizer.encode("Stats, please")
    core.add_request("s1", prompt, greedy(3))
    core.add_request("s2", prompt + prompt, greedy(4))
    stats = core.stats()
    assert (stats.queued_requests, stats.running_requests) == (2, 0)
    assert stats.queued_prefill_tokens == 3 * len(prompt)
    assert stats.unfinished_tokens == (3 * len(prompt) - 2) + 3 + 4
    core.step()
    stats = core.stats()
    assert (stats.queued_requests, stats.running_requests) == (0, 2)
    assert (stats.decode_requests, stats.queued_prefill_tokens) == (2, 0)
    assert stats.decode_context_tokens == (len(prompt) + 1) + (2 * len(prompt) + 1)
    assert stats.kv_pages_used > 0 and stats.kv_pages_total == core.pool.num_pages
    drain(core)
    stats = core.stats()
    assert stats.unfinished_tokens == 0 and stats.running_requests == 0
    assert {t.split(":")[0] for t in stats.latency_model} == set(core.latency.terms)
    assert stats.recent_step_ms
    assert stats.latency_model_source == "online" and stats.decode_step_ms > 0
    assert stats.prefill_chunk_size == core.config.chunk_size
    assert stats.cached_blocks == len(core.cache) and stats.page_size == 16
    assert stats.engine_id == "e0" and stats.role == "any" and stats.leases == 0
