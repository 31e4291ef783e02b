"""Pure-PyTorch paged attention for CPU (and a reference on any device).

Mixed batches are split once per step (in plan): all single-token queries (decodes) are
attended together through one padded page gather and a key mask; each multi-token chunk
(prefill) attends over its own gathered pages with a causal mask offset by its cached prefix.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.attention.base import AttentionBackend
from engine.attention.context import ForwardContext, SeqLayout


@dataclass(slots=True)
class _DecodeGroup:
    rows: torch.Tensor  # [B] token rows of the single-token queries
    page_index: torch.Tensor  # [B, max_pages], padded with page 0
    key_mask: torch.Tensor  # [B, 1, 1, max_pages * page_size], True = attend


@dataclass(slots=True)
class _PrefillSeq:
    q_start: int
    q_len: int
    ctx_len: int
    page_index: torch.Tensor  # [pages]
    causal_mask: torch.Tensor | None  # [q_len, ctx_len]; None when there is no cached prefix


@dataclass(slots=True)
class TorchPlan:
    write_pages: torch.Tensor  # [T]
    write_offsets: torch.Tensor  # [T]
    decode: _DecodeGroup | None
    prefills: list[_PrefillSeq]


def _pages_for(seq: SeqLayout, page_size: int) -> list[int]:
    needed = -(-seq.ctx_len // page_size)
    if needed > len(seq.page_table):
        raise ValueError(f"sequence needs {needed} pages for {seq.ctx_len} tokens, page table has "
                         f"{len(seq.page_table)}")
    return seq.page_table[:needed]


def _plan_decodes(seqs: list[SeqLayout], page_size: int, device: torch.device) -> _DecodeGroup:
    tables = [_pages_for(s, page_size) for s in seqs]
    max_pages = max(len(t) for t in tables)
    page_index = torch.tensor([t + [0] * (max_pages - len(t)) for t in tables], dtype=torch.long)
    ctx_lens = torch.tensor([s.ctx_len for s in seqs], dtype=torch.long)
    key_mask = torch.arange(max_pages * page_size)[None, :] < ctx_lens[:, None]
    rows = torch.tensor([s.q_start for s in seqs], dtype=torch.long)
    return _DecodeGroup(rows.to(device), page_index.to(device),
                        key_mask[:, None, None, :].to(device))


def _plan_prefill(seq: SeqLayout, page_size: int, device: torch.device) -> _PrefillSeq:
    page_index = torch.tensor(_pages_for(seq, page_size), dtype=torch.long, device=device)
    mask = None
    prefix = seq.ctx_len - seq.q_len
    if prefix > 0:
        # Query i sits at position prefix + i and sees keys 0..prefix + i.
        q_pos = torch.arange(seq.q_len, device=device)[:, None] + prefix
        mask = torch.arange(seq.ctx_len, device=device)[None, :] <= q_pos
    return _PrefillSeq(seq.q_start, seq.q_len, seq.ctx_len, page_index, mask)


def _gather(cache: torch.Tensor, page_index: torch.Tensor,
            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of the given pages `[..., pages]`, each `[..., kv_heads, pages * page_size, D]`
    in `dtype`: one gather and one copy (layout change and dtype cast together)."""
    pages = cache[page_index]  # [..., pages, 2, page_size, kv_heads, D]
    kv_first = pages.transpose(-5, -4).to(dtype, memory_format=torch.contiguous_format)
    merged = kv_first.flatten(-4, -3)  # [..., 2, tokens, kv_heads, D]
    return merged.select(-4, 0).transpose(-3, -2), merged.select(-4, 1).transpose(-3, -2)


def _decode_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                      key_mask: torch.Tensor) -> torch.Tensor:
    """Single-token queries `[B, H, D]` over float32 keys/values `[B, KvH, L, D]`.

    Written out rather than via scaled_dot_product_attention: for one query row the CPU SDPA
    kernels are 2-4x slower in bf16 (and no faster in fp32). The H query heads are grouped by
    their KV head, so GQA needs no repeated K/V.
    """
    batch, heads, dim = queries.shape
    kv_heads = keys.shape[1]
    grouped = queries.view(batch, kv_heads, heads // kv_heads, dim).float()
    scores = grouped @ keys.transpose(-1, -2) * dim ** -0.5  # [B, KvH, G, L]
    scores = scores.masked_fill(~key_mask, float("-inf"))
    attended = scores.softmax(-1) @ values  # [B, KvH, G, D]
    return attended.view(batch, heads, dim).to(queries.dtype)


class TorchPagedBackend(AttentionBackend):
    name = "torch"

    def plan(self, ctx: ForwardContext) -> None:
        device = ctx.slot_mapping.device
        page_size = ctx.batch.page_size
        decodes = [s for s in ctx.batch.seqs if s.q_len == 1]
        prefills = [_plan_prefill(s, page_size, device) for s in ctx.batch.seqs if s.q_len > 1]
        ctx.plan = TorchPlan(
            write_pages=torch.div(ctx.slot_mapping, page_size, rounding_mode="floor"),
            write_offsets=ctx.slot_mapping % page_size,
            decode=_plan_decodes(decodes, page_size, device) if decodes else None,
            prefills=prefills,
        )

    def run(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            ctx: ForwardContext) -> torch.Tensor:
        plan = ctx.plan
        assert isinstance(plan, TorchPlan), "plan(ctx) must run before run()"
        cache = ctx.kv.layer(layer)
        cache[plan.write_pages, :, plan.write_offsets] = torch.stack((k, v), dim=1).to(cache.dtype)
        out = torch.empty_like(q)
        if plan.decode is not None:
            group = plan.decode
            keys, values = _gather(cache, group.page_index, torch.float32)
            out[group.rows] = _decode_attention(q[group.rows], keys, values, group.key_mask)
        for seq in plan.prefills:
            rows = slice(seq.q_start, seq.q_start + seq.q_len)
            queries = q[rows].transpose(0, 1).unsqueeze(0)  # [1, H, q_len, D]
            keys, values = _gather(cache, seq.page_index, q.dtype)
            keys = keys[:, : seq.ctx_len].unsqueeze(0)
            values = values[:, : seq.ctx_len].unsqueeze(0)
            attended = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=seq.causal_mask,
                is_causal=seq.causal_mask is None, enable_gqa=True)
            out[rows] = attended.squeeze(0).transpose(0, 1)
        return out
