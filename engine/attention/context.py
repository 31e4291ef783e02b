"""ForwardContext: everything attention needs to know about one step, built once by the runner.

Model code reads only this object, so it contains no batching logic of its own (nano-vllm's idea).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from engine.batch import LayerHook

if TYPE_CHECKING:
    from engine.attention.base import AttentionBackend
    from engine.kvcache.kv_storage import KVStorage


@dataclass(slots=True)
class SeqLayout:
    """One sequence of the step: its queries are rows [q_start, q_start + q_len) of the flattened
    token dimension, and after this step its KV covers positions [0, ctx_len)."""

    q_start: int
    q_len: int
    ctx_len: int
    page_table: list[int]

    @property
    def is_decode(self) -> bool:
        return self.q_len == 1


@dataclass(slots=True)
class BatchLayout:
    seqs: list[SeqLayout]
    page_size: int

    @property
    def num_tokens(self) -> int:
        return sum(s.q_len for s in self.seqs)


@dataclass(slots=True)
class ForwardContext:
    batch: BatchLayout
    # Flat KV slot (page * page_size + offset) for each new token, [T].
    slot_mapping: torch.Tensor
    # Rows of the flattened token dimension whose logits the model returns.
    sample_indices: torch.Tensor
    kv: KVStorage
    backend: AttentionBackend
    layer_hook: LayerHook | None = None
    # Whatever the backend's plan() computed for this step (index tensors, masks, wrappers).
    plan: object | None = None
