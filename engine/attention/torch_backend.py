"""Pure-PyTorch paged attention for CPU (and a reference on any device).

Mixed batches are split once per step (in plan): all single-token queries (decodes) are
attended together as two batched matmuls over `[B * kv_heads, L, D]` K/V gathered by row indices
that plan() computes once per step (one copy per layer, in the KV dtype; padding masked by an
additive bias); each multi-token chunk (prefill) attends over its own gathered pages with a
causal mask offset by its cached prefix. New K/V land through one index_copy_ per layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.attention.base import AttentionBackend
from engine.attention.context import ForwardContext, SeqLayout


@dataclass(slots=True)
class _DecodeGroup:
    rows: torch.Tensor | None  # [B] token rows of the single-token queries; None = all rows
    k_rows: torch.Tensor  # [B * kv_heads * L] rows of the layer's `[-1, D]` view holding K
    v_rows: torch.Tensor  # the same for V
    key_bias: torch.Tensor  # [B, 1, 1, L] float32: 0 where the key is attended, -inf past ctx_len
    length: int  # L: the longest context among the decodes
    biases: dict[int, torch.Tensor]  # key_bias laid out [B * kv_heads, group, L], by group size


@dataclass(slots=True)
class _PrefillSeq:
    q_start: int
    q_len: int
    ctx_len: int
    page_index: torch.Tensor  # [pages]
    causal_mask: torch.Tensor | None  # [q_len, ctx_len]; None when there is no cached prefix


@dataclass(slots=True)
class TorchPlan:
    # [T * 2 * kv_heads] rows of the layer's `[-1, D]` view that the new K/V (`[T, 2, KvH, D]`)
    # land in: one index_copy_ per layer.
    write_rows: torch.Tensor
    decode: _DecodeGroup | None
    prefills: list[_PrefillSeq]


def _pages_for(seq: SeqLayout, page_size: int) -> list[int]:
    needed = -(-seq.ctx_len // page_size)
    if needed > len(seq.page_table):
        raise ValueError(f"sequence needs {needed} pages for {seq.ctx_len} tokens, page table has "
                         f"{len(seq.page_table)}")
    return seq.page_table[:needed]


def _plan_decodes(seqs: list[SeqLayout], page_size: int, kv_heads: int,
                  device: torch.device, all_rows: bool) -> _DecodeGroup:
    """Row indices into a layer's `[pages * 2 * page_size * kv_heads, D]` view, so each layer
    gathers K and V straight into `[B, kv_heads, L, D]` (one copy, in the KV dtype) for all
    decodes at once. Positions past a sequence's ctx_len point at page 0 and are masked."""
    tables = [_pages_for(s, page_size) for s in seqs]
    max_pages = max(len(t) for t in tables)
    length = max(s.ctx_len for s in seqs)
    page_index = torch.tensor([t + [0] * (max_pages - len(t)) for t in tables], dtype=torch.long)
    pos = torch.arange(length)
    pages = page_index[:, pos // page_size]  # [B, L]
    # Cache layout [pages, 2, page_size, kv_heads, D]: K of (page, offset, head) is row
    # ((page * 2 + 0) * page_size + offset) * kv_heads + head; V is page_size * kv_heads further.
    token_rows = pages * (2 * page_size) + pos % page_size
    k_rows = (token_rows[:, None, :] * kv_heads
              + torch.arange(kv_heads)[None, :, None]).reshape(-1)
    ctx_lens = torch.tensor([s.ctx_len for s in seqs], dtype=torch.long)
    key_bias = torch.zeros(len(seqs), 1, 1, length).masked_fill(
        (pos[None, :] >= ctx_lens[:, None])[:, None, None, :], float("-inf"))
    rows = None if all_rows else torch.tensor([s.q_start for s in seqs], dtype=torch.long,
                                              device=device)
    return _DecodeGroup(rows, k_rows.to(device), (k_rows + page_size * kv_heads).to(device),
                        key_bias.to(device), length, {})


def _write_rows(slots: torch.Tensor, page_size: int, kv_heads: int) -> torch.Tensor:
    pages = torch.div(slots, page_size, rounding_mode="floor")
    token_rows = pages * (2 * page_size) + slots % page_size  # K of (page, offset), head 0
    kv_rows = token_rows[:, None] + torch.tensor([0, page_size], device=slots.device)
    return (kv_rows[:, :, None] * kv_heads
            + torch.arange(kv_heads, device=slots.device)).reshape(-1)


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


def _decode_attention(queries: torch.Tensor, cache: torch.Tensor,
                      group: _DecodeGroup) -> torch.Tensor:
    """Single-token queries `[B, H, D]` over their pages in `cache`, as two batched matmuls.

    Written out rather than via scaled_dot_product_attention: for one query row the CPU SDPA
    kernels are 2-4x slower in bf16 (and no faster in fp32). K and V are gathered once, in the
    KV dtype, into `[B * kv_heads, L, D]`; the H query heads are grouped by their KV head
    (`[B * kv_heads, group, D]`), so GQA needs no repeated K/V. Scores and softmax are float32
    (K is upcast, not V); the probabilities meet V in the KV dtype, as SDPA does in bf16.
    """
    batch, heads, dim = queries.shape
    flat = cache.view(-1, dim)
    kv_heads = cache.shape[-2]
    size = heads // kv_heads
    keys = flat.index_select(0, group.k_rows).view(batch * kv_heads, group.length, dim)
    values = flat.index_select(0, group.v_rows).view(batch * kv_heads, group.length, dim)
    bias = group.biases.get(size)
    if bias is None:
        bias = group.key_bias.expand(batch, kv_heads, size, group.length).reshape(
            batch * kv_heads, size, group.length)
        group.biases[size] = bias
    grouped = queries.reshape(batch * kv_heads, size, dim).float()
    scores = torch.baddbmm(bias, grouped, keys.float().transpose(1, 2),
                           alpha=dim ** -0.5)  # [B * KvH, G, L]
    attended = torch.bmm(scores.softmax(-1).to(values.dtype), values)  # [B * KvH, G, D]
    return attended.view(batch, heads, dim).to(queries.dtype)


class TorchPagedBackend(AttentionBackend):
    name = "torch"

    def plan(self, ctx: ForwardContext) -> None:
        device = ctx.slot_mapping.device
        page_size = ctx.batch.page_size
        decodes = [s for s in ctx.batch.seqs if s.q_len == 1]
        prefills = [_plan_prefill(s, page_size, device) for s in ctx.batch.seqs if s.q_len > 1]
        # All queries are decodes, in row order: no row gather or scatter per layer.
        all_rows = not prefills and all(s.q_start == i for i, s in enumerate(decodes))
        ctx.plan = TorchPlan(
            write_rows=_write_rows(ctx.slot_mapping, page_size, ctx.kv.num_kv_heads),
            decode=(_plan_decodes(decodes, page_size, ctx.kv.num_kv_heads, device, all_rows)
                    if decodes else None),
            prefills=prefills,
        )

    def run(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            ctx: ForwardContext) -> torch.Tensor:
        plan = ctx.plan
        assert isinstance(plan, TorchPlan), "plan(ctx) must run before run()"
        cache = ctx.kv.layer(layer)
        new_kv = torch.stack((k, v), dim=1).to(cache.dtype)  # [T, 2, KvH, D]
        cache.view(-1, q.shape[-1]).index_copy_(0, plan.write_rows,
                                                new_kv.view(-1, q.shape[-1]))
        group = plan.decode
        if group is not None and group.rows is None:
            return _decode_attention(q, cache, group)
        out = torch.empty_like(q)
        if group is not None:
            assert group.rows is not None
            out[group.rows] = _decode_attention(q[group.rows], cache, group)
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
