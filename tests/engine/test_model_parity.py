"""Our LlamaModel + ModelRunner over paged KV == transformers' LlamaForCausalLM on the same GGUF.

fp32, real SmolLM2 weights. Tolerance: max |logit difference| < 1e-3 (measured ~6e-5; logits
have magnitude ~30), and the greedy token equal at every step unless the reference's top two
logits are within 1e-3 (a near-tie, where a different matmul shape may legitimately flip it).
Sequences run with shuffled (non-contiguous) page tables, single- and multi-chunk prefills,
decode steps, and batches that mix one sequence's prefill chunks with others' decodes.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.model.loader import LoadedModel

pytestmark = pytest.mark.model

LOGIT_TOL = 1e-3


def _assert_matches_reference(hf_model: Any, seq: Any) -> None:
    with torch.no_grad():
        ref = hf_model(torch.tensor([seq.tokens])).logits[0, len(seq.prompt) - 1:].float()
    ours = torch.stack(seq.logits)[: ref.shape[0]]
    assert ours.shape == ref.shape
    diff = (ours - ref).abs().max().item()
    assert diff < LOGIT_TOL, f"{seq.key}: max logit diff {diff}"
    top2 = ref.topk(2, dim=-1).values
    decided = (top2[:, 0] - top2[:, 1]) > LOGIT_TOL
    assert torch.equal(ours.argmax(-1)[decided], ref.argmax(-1)[decided])


@pytest.mark.timeout(300)
# 13 is deliberately not a multiple of the page size: chunk boundaries fall inside pages.
@pytest.mark.parametrize("chunk", [4096, 13], ids=["one_chunk", "chunk13"])
def test_batched_paged_logits_match_transformers(
        loaded_model_fp32: LoadedModel, hf_smollm2_fp32: Any, chat_prompt_ids: list[list[int]],
        run_staggered: Any, chunk: int) -> None:
    assert max(len(p) for p in chat_prompt_ids) > 2 * 16  # the long prompt spans several chunks
    seqs = run_staggered(loaded_model_fp32, chat_prompt_ids, chunk, chunk)
    for seq in seqs:
        assert len(seq.logits) == seq.decode_steps + 1
        _assert_matches_reference(hf_smollm2_fp32, seq)


@pytest.mark.timeout(120)
def test_single_sequence_alone_matches_transformers(
        loaded_model_fp32: LoadedModel, hf_smollm2_fp32: Any, chat_prompt_ids: list[list[int]],
        run_staggered: Any) -> None:
    prompt = chat_prompt_ids[0]
    (seq,) = run_staggered(loaded_model_fp32, [prompt], 4096, 1)
    _assert_matches_reference(hf_smollm2_fp32, seq)
    text = loaded_model_fp32.tokenizer.decode(seq.tokens[len(prompt):])
    assert text.startswith("The capital of France")
