"""KVStorage: the per-layer paged K/V tensors, in FlashInfer's NHD layout.

Each layer owns `[num_pages, 2, page_size, num_kv_heads, head_dim]` (index 0 = K, 1 = V). Which
pages belong to which sequence is the page pool's business; this class only stores bytes and
moves tokens in and out by (page_table, position).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from engine.model.config import ModelConfig


class KVStorageError(ValueError):
    """A read or write addressed tokens outside the pages it was given."""


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Zeroed storage. On CPU through numpy's calloc: the OS hands out zero pages as they are
    first touched, so an engine's resident memory grows with the KV it really uses, not with
    the pool's budget."""
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    element = torch.empty((), dtype=dtype).element_size()
    words = np.zeros(shape, dtype={1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[element])
    return torch.from_numpy(words).view(dtype)


class KVStorage:
    def __init__(self, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        for name, value in (("num_layers", num_layers), ("num_pages", num_pages),
                            ("page_size", page_size), ("num_kv_heads", num_kv_heads),
                            ("head_dim", head_dim)):
            if value <= 0:
                raise KVStorageError(f"{name} must be positive, got {value}")
        self.num_layers = num_layers
        self.num_pages = num_pages
        self.page_size = page_size
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        # One allocation for all layers; layer i is a contiguous view, which is what paged
        # kernels (and transfers that send a layer at a time) want.
        self._data = _zeros((num_layers, num_pages, 2, page_size, num_kv_heads, head_dim),
                            dtype, self.device)

    @classmethod
    def for_model(cls, config: ModelConfig, num_pages: int, page_size: int = 16,
                  dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu") -> KVStorage:
        return cls(config.num_layers, num_pages, page_size, config.num_kv_heads, config.head_dim,
                   dtype=dtype, device=device)

    def layer(self, layer: int) -> torch.Tensor:
        """The `[num_pages, 2, page_size, kv_heads, head_dim]` tensor of one layer (a view)."""
        return self._data[layer]

    @staticmethod
    def bytes_per_token_for(num_layers: int, num_kv_heads: int, head_dim: int,
                            dtype: torch.dtype) -> int:
        element = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * num_kv_heads * head_dim * element

    def bytes_per_token(self) -> int:
        return self.bytes_per_token_for(self.num_layers, self.num_kv_heads, self.head_dim,
                                        self.dtype)

    def bytes_per_page(self) -> int:
        return self.bytes_per_token() * self.page_size

    def slots(self, page_table: list[int], start: int, end: int) -> torch.Tensor:
        """Flat slot ids (page * page_size + offset) for token positions [start, end)."""
        self._check_range(page_table, start, end)
        positions = torch.arange(start, end)
        pages = torch.tensor(page_table, dtype=torch.long)[positions // self.page_size]
        return (pages * self.page_size + positions % self.page_size).to(self.device)

    def write_slots(self, layer: int, slots: torch.Tensor, k: torch.Tensor,
                    v: torch.Tensor) -> None:
        """Store k/v `[n, kv_heads, head_dim]` at flat slot ids `[n]`."""
        cache = self._data[layer]
        pages = torch.div(slots, self.page_size, rounding_mode="floor")
        offsets = slots % self.page_size
        cache[pages, 0, offsets] = k.to(self.dtype)
        cache[pages, 1, offsets] = v.to(self.dtype)

    def read_slots(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cache = self._data[layer]
        pages = torch.div(slots, self.page_size, rounding_mode="floor")
        offsets = slots % self.page_size
        return cache[pages, 0, offsets], cache[pages, 1, offsets]

    def read(self, layer: int, page_table: list[int], start: int,
             end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V `[end - start, kv_heads, head_dim]` (copies) for token positions [start, end)."""
        self._check_range(page_table, start, end)
        shape = (end - start, self.num_kv_heads, self.head_dim)
        k = torch.empty(shape, dtype=self.dtype, device=self.device)
        v = torch.empty(shape, dtype=self.dtype, device=self.device)
        read_pages_into(self._data[layer], page_table, start, end, k, v)
        return k, v

    def write(self, layer: int, page_table: list[int], start: int, k: torch.Tensor,
              v: torch.Tensor) -> None:
        """Store K/V `[n, kv_heads, head_dim]` for token positions [start, start + n)."""
        expected = (self.num_kv_heads, self.head_dim)
        if k.shape != v.shape or k.dim() != 3 or tuple(k.shape[1:]) != expected:
            raise KVStorageError(
                f"k/v must both be [n, {expected[0]}, {expected[1]}], got {tuple(k.shape)} and "
                f"{tuple(v.shape)}")
        end = start + k.shape[0]
        self._check_range(page_table, start, end)
        write_pages_from(self._data[layer], page_table, start, k, v)

    def _check_range(self, page_table: list[int], start: int, end: int) -> None:
        if not 0 <= start <= end:
            raise KVStorageError(f"bad token range [{start}, {end})")
        if end > len(page_table) * self.page_size:
            raise KVStorageError(
                f"positions up to {end} need {-(-end // self.page_size)} pages, "
                f"page table has {len(page_table)}")
        touched = page_table[start // self.page_size : -(-end // self.page_size)]
        if end > start and (min(touched) < 0 or max(touched) >= self.num_pages):
            raise KVStorageError(f"page id out of range [0, {self.num_pages})")


# Page-granular copies between a layer's pages and token-major K/V.
#
# A token range [start, end) splits into at most one partial page at each end and a middle of whole
# pages. Partial pages are one slice copy each. Whole pages are grouped into runs of consecutive
# page ids; each run is one strided copy per K and V (`page_size * kv_heads * head_dim` contiguous
# elements per page, so it runs at memcpy speed). Freshly allocated page tables are mostly one or
# a few runs. When runs are short (scattered pages) the per-copy Python overhead would dominate, so
# the whole pages go through one page-granular index_select / index_copy_ per K and V instead.
# Callers validate the range and page ids; these only move bytes.

_MIN_AVG_RUN = 4  # whole pages per run below which scattered pages use one indexed copy
_MAX_SHORT_RUNS = 8  # up to this many runs, slice copies regardless of their length


def _split(page_table: list[int], start: int, end: int, page_size: int
           ) -> tuple[list[tuple[int, int, int, int]], int, list[int]]:
    """(partial pieces as (token offset, page, in-page offset, length), token offset of the whole
    pages, the whole pages' ids)."""
    partial: list[tuple[int, int, int, int]] = []
    i0 = -(-start // page_size)  # first whole page's index in the page table
    i1 = end // page_size  # one past the last whole page
    head_end = min(end, i0 * page_size) if start % page_size else start
    if head_end > start:
        partial.append((0, page_table[start // page_size], start % page_size, head_end - start))
    tail_start = max(i1 * page_size, head_end)
    if end > tail_start:
        partial.append((tail_start - start, page_table[tail_start // page_size],
                        tail_start % page_size, end - tail_start))
    whole = page_table[i0:i1] if i1 > i0 else []
    return partial, i0 * page_size - start, whole


def _runs(pages: list[int]) -> list[tuple[int, int, int]]:
    """(index into pages, first page id, length) per run of consecutive page ids."""
    runs: list[tuple[int, int, int]] = []
    begin = 0
    for i in range(1, len(pages) + 1):
        if i == len(pages) or pages[i] != pages[i - 1] + 1:
            runs.append((begin, pages[begin], i - begin))
            begin = i
    return runs


def _use_runs(runs: list[tuple[int, int, int]], num_pages: int) -> bool:
    return len(runs) <= _MAX_SHORT_RUNS or num_pages >= _MIN_AVG_RUN * len(runs)


def _slice_copies(layer_kv: torch.Tensor, page_table: list[int], start: int, end: int,
                  k: torch.Tensor, v: torch.Tensor, into_pages: bool) -> tuple[int, list[int]]:
    """Partial pages, and whole pages in runs when runs pay; returns (token offset, page ids) of
    the whole pages left for one indexed copy (none when runs were used)."""
    page_size = layer_kv.shape[2]

    def move(pages: torch.Tensor, tokens: torch.Tensor) -> None:
        if into_pages:
            pages.copy_(tokens)
        else:
            tokens.copy_(pages)

    partial, offset, whole = _split(page_table, start, end, page_size)
    for a, page, o, n in partial:
        move(layer_kv[page, 0, o : o + n], k[a : a + n])
        move(layer_kv[page, 1, o : o + n], v[a : a + n])
    runs = _runs(whole)
    if not whole or not _use_runs(runs, len(whole)):
        return offset, whole
    tail = layer_kv.shape[3:]
    for i, page, m in runs:
        a = offset + i * page_size
        b = a + m * page_size
        move(layer_kv[page : page + m, 0], k[a:b].reshape(m, page_size, *tail))
        move(layer_kv[page : page + m, 1], v[a:b].reshape(m, page_size, *tail))
    return offset, []


def read_pages_into(layer_kv: torch.Tensor, page_table: list[int], start: int, end: int,
                    k_out: torch.Tensor, v_out: torch.Tensor) -> None:
    """Copy K/V of positions [start, end) from `layer_kv` `[num_pages, 2, page_size, kv_heads,
    head_dim]` into `k_out`/`v_out` `[end - start, kv_heads, head_dim]` (contiguous, same dtype and
    device as the layer)."""
    offset, whole = _slice_copies(layer_kv, page_table, start, end, k_out, v_out, False)
    if not whole:
        return
    page_size = layer_kv.shape[2]
    index = torch.tensor(whole, dtype=torch.long, device=layer_kv.device)
    b = offset + len(whole) * page_size
    shape = (len(whole), page_size, *layer_kv.shape[3:])
    torch.index_select(layer_kv[:, 0], 0, index, out=k_out[offset:b].view(shape))
    torch.index_select(layer_kv[:, 1], 0, index, out=v_out[offset:b].view(shape))


def write_pages_from(layer_kv: torch.Tensor, page_table: list[int], start: int, k: torch.Tensor,
                     v: torch.Tensor) -> None:
    """Store K/V `[n, kv_heads, head_dim]` at positions [start, start + n) of `layer_kv`
    (converted to the layer's dtype and device)."""
    if k.dtype != layer_kv.dtype or k.device != layer_kv.device:
        k = k.to(device=layer_kv.device, dtype=layer_kv.dtype)
    if v.dtype != layer_kv.dtype or v.device != layer_kv.device:
        v = v.to(device=layer_kv.device, dtype=layer_kv.dtype)
    offset, whole = _slice_copies(layer_kv, page_table, start, start + k.shape[0], k, v, True)
    if not whole:
        return
    page_size = layer_kv.shape[2]
    index = torch.tensor(whole, dtype=torch.long, device=layer_kv.device)
    b = offset + len(whole) * page_size
    rows_k, rows_v = k[offset:b].reshape(len(whole), -1), v[offset:b].reshape(len(whole), -1)
    dst = layer_kv.reshape(layer_kv.shape[0], 2, -1)  # a view: layer tensors are contiguous
    if (dst.data_ptr() == layer_kv.data_ptr() and rows_k.is_contiguous()
            and rows_v.is_contiguous() and (dst.shape[2] * dst.element_size()) % 8 == 0
            and all(t.data_ptr() % 8 == 0 for t in (dst, rows_k, rows_v))):
        # index_copy_ moves elements one by one; 8-byte words make it ~1.5x faster (bf16 more).
        dst, rows_k, rows_v = (dst.view(torch.int64), rows_k.view(torch.int64),
                               rows_v.view(torch.int64))
    dst[:, 0].index_copy_(0, index, rows_k)
    dst[:, 1].index_copy_(0, index, rows_v)
