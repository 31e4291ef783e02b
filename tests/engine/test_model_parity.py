"""Our LlamaModel + ModelRunner over paged KV == transformers' LlamaForCausalLM on the same GGUF.

fp32, real SmolLM2 weights. Tolerance: max |logit difference| < 1e-3 (measured ~6e-5; logits
have magnitude ~30), and the greedy token equal at every step unless the reference's top two
logits are within 1e-3 (a near-tie, where a different matmul shape may legitimately flip it).
Sequences run with shuffled (non-contiguous) page tables, single- and multi-chunk prefills,
decode steps, and batches that mix one sequence's prefill chunks with others' decodes.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from engine.core.batch import ScheduledChunk
from engine.kvcache.kv_storage import KVStorage
from engine.model.loader import LoadedModel
from engine.model.runner import ModelRunner

LOGIT_TOL = 1e-3
PAGE_SIZE = 16
DECODE_STEPS = 5

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Translate to French: I would like a cup of coffee, please. 🙂",
    "Explain, step by step and in detail, how a paged KV cache lets a serving engine batch "
    "many requests of different lengths together without fragmenting memory, and why "
    "prefix caching over full pages pays off for chat workloads with a shared system prompt.",
]


def _prompt_ids(loaded: LoadedModel, text: str) -> list[int]:
    tok = loaded.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


@dataclass
class _Seq:
    key: str
    prompt: list[int]
    chunk: int
    pages: list[int]
    tokens: list[int] = field(default_factory=list)
    done_prefill: int = 0
    logits: list[torch.Tensor] = field(default_factory=list)

    def next_chunk(self) -> ScheduledChunk | None:
        if self.done_prefill < len(self.prompt):
            start = self.done_prefill
            piece = self.prompt[start:start + self.chunk]
            self.done_prefill += len(piece)
            last = self.done_prefill == len(self.prompt)
            return ScheduledChunk(self.key, piece, start, self.pages, need_logits=last)
        if len(self.logits) > DECODE_STEPS:
            return None
        return ScheduledChunk(self.key, [self.tokens[-1]], len(self.tokens) - 1, self.pages, True)


def _run_staggered(loaded: LoadedModel, prompts: list[list[int]], chunk: int,
                   seed: int) -> list[_Seq]:
    """Sequence i joins at step i, so prefill chunks and decodes of others share steps."""
    rng = random.Random(seed)
    need = [-(-(len(p) + DECODE_STEPS + 1) // PAGE_SIZE) for p in prompts]
    free = list(range(sum(need) + 8))
    rng.shuffle(free)
    kv = KVStorage.for_model(loaded.config, len(free), PAGE_SIZE)
    runner = ModelRunner(loaded, kv)
    seqs = []
    for i, prompt in enumerate(prompts):
        pages, free = free[:need[i]], free[need[i]:]
        seqs.append(_Seq(f"s{i}", prompt, chunk, pages, tokens=list(prompt)))
    step = 0
    while True:
        active = [(s, c) for s in seqs[: step + 1] if (c := s.next_chunk()) is not None]
        if not active and step >= len(seqs):
            return seqs
        step += 1
        if not active:
            continue
        logits = runner.run([c for _, c in active])
        row = 0
        for seq, chunk_ in active:
            if chunk_.need_logits:
                seq.logits.append(logits[row])
                if len(seq.logits) <= DECODE_STEPS:
                    seq.tokens.append(int(logits[row].argmax()))
                row += 1


def _assert_matches_reference(hf_model: Any, seq: _Seq) -> None:
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
        loaded_model_fp32: LoadedModel, hf_smollm2_fp32: Any, chunk: int) -> None:
    prompts = [_prompt_ids(loaded_model_fp32, p) for p in PROMPTS]
    assert max(len(p) for p in prompts) > 2 * 16  # the long prompt spans several chunks
    seqs = _run_staggered(loaded_model_fp32, prompts, chunk, seed=chunk)
    for seq in seqs:
        assert len(seq.logits) == DECODE_STEPS + 1
        _assert_matches_reference(hf_smollm2_fp32, seq)


@pytest.mark.timeout(120)
def test_single_sequence_alone_matches_transformers(
        loaded_model_fp32: LoadedModel, hf_smollm2_fp32: Any) -> None:
    prompt = _prompt_ids(loaded_model_fp32, PROMPTS[0])
    (seq,) = _run_staggered(loaded_model_fp32, [prompt], chunk=4096, seed=1)
    _assert_matches_reference(hf_smollm2_fp32, seq)
    text = loaded_model_fp32.tokenizer.decode(seq.tokens[len(prompt):])
    assert text.startswith("The capital of France")
