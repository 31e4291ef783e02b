"""KVStorage: the per-layer paged K/V tensors, in FlashInfer's NHD layout.

Each layer owns `[num_pages, 2, page_size, num_kv_heads, head_dim]` (index 0 = K, 1 = V). Which
pages belong to which sequence is the page pool's business; this class only stores bytes and
moves tokens in and out by (page_table, position).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.model.config import ModelConfig


class KVStorageError(ValueError):
    """A read or write addressed tokens outside the pages it was given."""


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
        self._data = torch.zeros(num_layers, num_pages, 2, page_size, num_kv_heads, head_dim,
                                 dtype=dtype, device=self.device)

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
        if not 0 <= start <= end:
            raise KVStorageError(f"bad token range [{start}, {end})")
        if end > len(page_table) * self.page_size:
            raise KVStorageError(
                f"positions up to {end} need {-(-end // self.page_size)} pages, "
                f"page table has {len(page_table)}")
        positions = torch.arange(start, end)
        pages = torch.tensor(page_table, dtype=torch.long)[positions // self.page_size]
        if pages.numel() and (int(pages.min()) < 0 or int(pages.max()) >= self.num_pages):
            raise KVStorageError(f"page id out of range [0, {self.num_pages})")
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
        return self.read_slots(layer, self.slots(page_table, start, end))

    def write(self, layer: int, page_table: list[int], start: int, k: torch.Tensor,
              v: torch.Tensor) -> None:
        """Store K/V `[n, kv_heads, head_dim]` for token positions [start, start + n)."""
        expected = (self.num_kv_heads, self.head_dim)
        if k.shape != v.shape or k.dim() != 3 or tuple(k.shape[1:]) != expected:
            raise KVStorageError(
                f"k/v must both be [n, {expected[0]}, {expected[1]}], got {tuple(k.shape)} and "
                f"{tuple(v.shape)}")
        slots = self.slots(page_table, start, start + k.shape[0])
        self.write_slots(layer, slots, k.to(self.device), v.to(self.device))
