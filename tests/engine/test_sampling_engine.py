"""Sampling on the real model: seeded runs reproduce across batch compositions; stop token ids,
min_tokens and ignore_eos behave as OpenAI/vLLM define them."""
from __future__ import annotations

import pytest
from test_core_support import PROMPTS, drain, generate, greedy, make_engine

from engine.model.loader import LoadedModel
from switchyard_engine_api.sampling_params import SamplingParams

pytestmark = [pytest.mark.model, pytest.mark.timeout(300)]


def test_seeded_sampling_is_reproducible_whatever_the_batch(
        loaded_model_fp32: LoadedModel) -> None:
    tok = loaded_model_fp32.tokenizer
    prompt = tok.encode(PROMPTS[3])
    params = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=1234, max_tokens=12)
    alone = generate(make_engine(loaded_model_fp32), prompt, params)
    core = make_engine(loaded_model_fp32)
    core.add_request("other1", tok.encode(PROMPTS[0]), SamplingParams(temperature=1.0,
                                                                      max_tokens=12))
    core.add_request("seeded", prompt, params)
    core.add_request("other2", tok.encode(PROMPTS[5] * 3), greedy(5))
    assert drain(core).tokens["seeded"] == alone
    other_seed = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=99, max_tokens=12)
    assert generate(core, prompt, other_seed, "x") != alone


def test_seeded_sampling_continues_across_a_handoff(loaded_model_fp32: LoadedModel) -> None:
    """A request run as two calls (3 tokens here, the rest with output_offset=3, as a later
    segment on another engine would) samples exactly the sequence of one uninterrupted call."""
    tok = loaded_model_fp32.tokenizer
    prompt = tok.encode(PROMPTS[3])
    params = SamplingParams(temperature=1.0, seed=77, max_tokens=9, ignore_eos=True)
    whole = generate(make_engine(loaded_model_fp32), prompt, params)
    first = make_engine(loaded_model_fp32)
    first.add_request("lead", prompt, params, max_new_tokens_here=3)
    run = drain(first)
    assert run.finish["lead"] == "handoff" and run.tokens["lead"] == whole[:3]
    rest = SamplingParams(temperature=1.0, seed=77, max_tokens=6, ignore_eos=True)
    follow = make_engine(loaded_model_fp32)
    follow.add_request("follow", prompt + whole[:3], rest, output_offset=3)
    assert drain(follow).tokens["follow"] == whole[3:]
    # Without the offset the follow engine would restart the draw sequence: a different text.
    follow.add_request("restart", prompt + whole[:3], rest)
    assert drain(follow).tokens["restart"] != whole[3:]


def test_stop_token_ids_and_min_tokens(loaded_model_fp32: LoadedModel) -> None:
    core = make_engine(loaded_model_fp32)
    prompt = loaded_model_fp32.tokenizer.encode(PROMPTS[4])
    free = generate(core, prompt, greedy(8, ignore_eos=True), "free")
    stop_at = free[3]
    first = free.index(stop_at)
    core.add_request("stopped", prompt, greedy(8, stop_token_ids=[stop_at]))
    run = drain(core)
    assert run.tokens["stopped"] == free[:first + 1] and run.finish["stopped"] == "stop"
    # min_tokens masks the stop id until enough tokens exist: output differs and is longer.
    core.add_request("min", prompt, greedy(8, stop_token_ids=[stop_at], min_tokens=first + 2))
    run = drain(core)
    assert len(run.tokens["min"]) >= first + 2 and stop_at not in run.tokens["min"][:first + 2]


def test_eos_stops_unless_ignored(loaded_model_fp32: LoadedModel) -> None:
    core = make_engine(loaded_model_fp32)
    eos = loaded_model_fp32.config.eos_token_ids
    tok = loaded_model_fp32.tokenizer
    chat = tok.apply_chat_template([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Is the sky blue? Answer yes or no."}])
    prompt = tok.encode(chat)
    free = generate(core, prompt, greedy(16, ignore_eos=True), "free")
    hits = [i for i, t in enumerate(free) if t in eos]
    assert hits, f"the chat reply should end with EOS within 16 tokens: {free}"
    core.add_request("eos", prompt, greedy(16))
    run = drain(core)
    assert run.tokens["eos"] == free[:hits[0] + 1] and run.finish["eos"] == "stop"


def test_stop_strings_and_streamed_text(loaded_model_fp32: LoadedModel) -> None:
    tok = loaded_model_fp32.tokenizer
    core = make_engine(loaded_model_fp32)
    prompt = tok.encode(PROMPTS[3])
    core.add_request("free", prompt, greedy(16, ignore_eos=True))
    free = drain(core)
    text = free.text["free"]
    assert text == tok.decode(free.tokens["free"], skip_special_tokens=True)
    words = text.split()
    stop = " " + words[len(words) // 2]  # a word that first appears mid-stream
    assert stop in text
    core.add_request("stopped", prompt, greedy(16, ignore_eos=True, stop=[stop]))
    run = drain(core)
    assert run.finish["stopped"] == "stop"
    assert run.text["stopped"] == text[:text.index(stop)]
    got = run.tokens["stopped"]
    assert got == free.tokens["free"][:len(got)] and len(got) < 16
    assert stop in tok.decode(got) and stop not in tok.decode(got[:-1])
