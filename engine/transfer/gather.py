"""Sender-side gather: one layer's K/V for positions [start, stop) from paged storage, in one copy.

The layer tensor is [num_pages, 2, page_size, kv_heads, head_dim]. K and V go straight into the
destination (a shm staging slice or a wire buffer), so the sender copies each byte exactly once:
partial first/last pages are one slice copy each, whole pages one strided copy per run of
consecutive page ids (or, for scattered pages, one page-granular index_select per K and V) —
`engine.kvcache.kv_storage.read_pages_into`, the same routine `KVStorage.read` uses.
"""
from __future__ import annotations

import torch

from engine.kvcache.kv_storage import read_pages_into


def gather_into(
    layer_kv: torch.Tensor, page_table: list[int], start: int, stop: int, out: torch.Tensor
) -> None:
    """`out` is [2, stop - start, kv_heads, head_dim]; it is filled with K then V."""
    num_pages, two, page_size, kv_heads, head_dim = layer_kv.shape
    if two != 2 or tuple(out.shape) != (2, stop - start, kv_heads, head_dim):
        raise ValueError(f"gather shape mismatch: layer {tuple(layer_kv.shape)}, out {tuple(out.shape)}")
    if not 0 <= start <= stop or stop > len(page_table) * page_size:
        raise ValueError(f"positions [{start}, {stop}) are not covered by {len(page_table)} pages")
    touched = page_table[start // page_size : -(-stop // page_size)]
    if stop > start and (min(touched) < 0 or max(touched) >= num_pages):
        raise ValueError(f"page id out of range [0, {num_pages})")
    if out.device == layer_kv.device and out.dtype == layer_kv.dtype and out.is_contiguous():
        read_pages_into(layer_kv, page_table, start, stop, out[0], out[1])
        return
    tmp = torch.empty(out.shape, dtype=layer_kv.dtype, device=layer_kv.device)
    read_pages_into(layer_kv, page_table, start, stop, tmp[0], tmp[1])
    out.copy_(tmp)
