"""AttentionBackend: FlashInfer's plan/run split, so a CUDA backend drops in later.

plan(ctx) runs once per step and prepares whatever is shared by all layers (index tensors,
masks, kernel workspaces); run(...) is called by every layer.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from engine.attention.context import ForwardContext


class AttentionBackend(ABC):
    name: str = "abstract"

    @abstractmethod
    def plan(self, ctx: ForwardContext) -> None:
        """Prepare the step; may store its result in `ctx.plan`."""

    @abstractmethod
    def run(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            ctx: ForwardContext) -> torch.Tensor:
        """Write k/v `[T, kv_heads, D]` at `ctx.slot_mapping` into layer `layer`'s pages, then
        return causal attention of each sequence's queries `q[T, heads, D]` over its pages,
        `[T, heads, D]`."""
