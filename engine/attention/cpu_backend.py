"""The fast CPU mode's attention: one kernel call per layer does RoPE on q and k, writes the
new K/V into the pages and attends every query over its pages in place (no gathered copies),
batch-invariantly (engine/kernels/csrc/paged_attention.cpp).

plan() turns the step's layout into three small index tensors once per step; run_qkv() is what
FastLlamaModel calls. The q/k/v form of run() is the torch backend's job.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.attention.base import AttentionBackend
from engine.attention.context import ForwardContext
from engine.kernels import ops
from engine.model.rope import RopeTable


@dataclass(slots=True)
class CpuPlan:
    positions: torch.Tensor  # int64 [T]: absolute position of each token
    token_seq: torch.Tensor  # int32 [T]: row of page_table for each token
    page_table: torch.Tensor  # int32 [S, max pages]


class CpuPagedBackend(AttentionBackend):
    name = "cpu"

    def plan(self, ctx: ForwardContext) -> None:
        page_size = ctx.batch.page_size
        positions: list[int] = []
        token_seq: list[int] = []
        tables: list[list[int]] = []
        for i, seq in enumerate(ctx.batch.seqs):
            needed = -(-seq.ctx_len // page_size)
            if needed > len(seq.page_table):
                raise ValueError(f"sequence needs {needed} pages for {seq.ctx_len} tokens, page "
                                 f"table has {len(seq.page_table)}")
            start = seq.ctx_len - seq.q_len
            positions.extend(range(start, seq.ctx_len))
            token_seq.extend([i] * seq.q_len)
            tables.append(seq.page_table[:needed])
        width = max((len(t) for t in tables), default=1)
        ctx.plan = CpuPlan(
            torch.tensor(positions, dtype=torch.int64),
            torch.tensor(token_seq, dtype=torch.int32),
            torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32))

    def run_qkv(self, layer: int, qkv: torch.Tensor, rope: RopeTable,
                ctx: ForwardContext) -> torch.Tensor:
        """qkv `[T, (H + 2 KvH) * D]` float32 (un-rotated) -> attention output `[T, H * D]`."""
        plan = ctx.plan
        assert isinstance(plan, CpuPlan), "plan(ctx) must run before run_qkv()"
        kv = ctx.kv
        heads = qkv.shape[1] // kv.head_dim - 2 * kv.num_kv_heads
        return ops().paged_attention(qkv, plan.positions, plan.token_seq, plan.page_table,
                                     rope.cos, rope.sin, kv.layer(layer), heads,
                                     kv.num_kv_heads, kv.head_dim ** -0.5)

    def run(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            ctx: ForwardContext) -> torch.Tensor:
        raise NotImplementedError("the cpu backend runs fused (run_qkv, FastLlamaModel); use "
                                  "the torch backend for q/k/v")
