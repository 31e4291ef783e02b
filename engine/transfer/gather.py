"""Sender-side gather: one layer's K/V for positions [start, stop) from paged storage, in one copy.

The layer tensor is [num_pages, 2, page_size, kv_heads, head_dim]; seen as rows of
[kv_heads, head_dim] the K row of (page, offset) is (2*page)*page_size + offset and the V row is one
page_size further. A single index_select writes K then V straight into the destination (a shm
staging slice or a wire buffer), so the sender copies each byte exactly once.
"""
from __future__ import annotations

import torch


def gather_rows(page_table: list[int], start: int, stop: int, page_size: int) -> torch.Tensor:
    positions = torch.arange(start, stop)
    pages = torch.tensor(page_table, dtype=torch.long)[positions // page_size]
    k_rows = pages * (2 * page_size) + positions % page_size
    return torch.cat([k_rows, k_rows + page_size])


def gather_into(
    layer_kv: torch.Tensor, page_table: list[int], start: int, stop: int, out: torch.Tensor
) -> None:
    """`out` is [2, stop - start, kv_heads, head_dim]; it is filled with K then V."""
    num_pages, two, page_size, kv_heads, head_dim = layer_kv.shape
    if two != 2 or tuple(out.shape) != (2, stop - start, kv_heads, head_dim):
        raise ValueError(f"gather shape mismatch: layer {tuple(layer_kv.shape)}, out {tuple(out.shape)}")
    if stop > len(page_table) * page_size:
        raise ValueError(f"positions up to {stop} are not covered by {len(page_table)} pages")
    rows = layer_kv.view(num_pages * 2 * page_size, kv_heads, head_dim)
    index = gather_rows(page_table, start, stop, page_size).to(layer_kv.device)
    dst = out.view(2 * (stop - start), kv_heads, head_dim)
    if out.device == layer_kv.device and out.dtype == layer_kv.dtype:
        torch.index_select(rows, 0, index, out=dst)
    else:
        dst.copy_(rows.index_select(0, index))
