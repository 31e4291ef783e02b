"""Greedy tokens of EngineCore equal transformers' generate on the same GGUF weights (fp32).

All prompts run together in one engine with a 64-token prefill budget, so the batches mix
decodes with chunked prefills of long prompts. Numerics: a different batch shape may
change the last bits of a logit, so where the two runs pick different tokens the reference's
top-two logits must be a near-tie (within NEAR_TIE); the sequences legitimately part there.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch
from test_core_support import PROMPTS, drain, greedy, make_engine

from engine.model.loader import LoadedModel

pytestmark = pytest.mark.model

NEAR_TIE = 5e-3  # absolute logit difference treated as a tie in fp32
MAX_TOKENS = 12
LONG_TEXT = ("Switchyard routes each request to engines that share a paged key-value cache. "
             "The scheduler batches prefill chunks with running decodes on every step. ")


def _reference(hf_model: Any, prompt: list[int]) -> tuple[list[int], list[torch.Tensor]]:
    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS,
                                do_sample=False, output_scores=True,
                                return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[0, len(prompt):].tolist(), [s[0] for s in out.scores]


def assert_same_greedy(ours: list[int], ref: list[int], ref_scores: list[torch.Tensor]) -> None:
    for i, (a, b) in enumerate(zip(ours, ref, strict=False)):
        if a != b:
            gap = abs(float(ref_scores[i][a]) - float(ref_scores[i][b]))
            assert gap <= NEAR_TIE, f"token {i}: ours {a} vs reference {b}, logit gap {gap}"
            return  # a near-tie: the continuations part here, legitimately
    assert len(ours) == len(ref), f"lengths differ: {ours} vs {ref}"


@pytest.mark.timeout(600)
def test_greedy_matches_transformers_in_a_mixed_batch(
        loaded_model_fp32: LoadedModel, hf_smollm2_fp32: Any) -> None:
    tok = loaded_model_fp32.tokenizer
    prompts = [tok.encode(p) for p in PROMPTS[:7]]
    prompts.append(tok.encode(LONG_TEXT * 3))  # > 1 prefill chunk
    prompts.append(tok.encode(LONG_TEXT * 5 + "In summary,"))  # > 2 prefill chunks
    assert max(len(p) for p in prompts) > 2 * 64 and min(len(p) for p in prompts) < 16

    core = make_engine(loaded_model_fp32, chunk_size=64)
    for i, prompt in enumerate(prompts):
        core.add_request(f"r{i}", prompt, greedy(MAX_TOKENS))
    run = drain(core)
    assert core.latency.decode_step_ms() > 0  # decode-only steps happened too
    for i, prompt in enumerate(prompts):
        ref, scores = _reference(hf_smollm2_fp32, prompt)
        assert_same_greedy(run.tokens[f"r{i}"], ref, scores)
        assert run.finish[f"r{i}"] in ("length", "stop")
