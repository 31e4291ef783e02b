"""The KV layout two engines must share before K/V can move between them.

A transfer chunk on the wire (and in the shm staging area) is one layer's K and V for a contiguous
range of token positions, shaped [2, n_tokens, num_kv_heads, head_dim] (K first): exactly what
`KVStorage.read` returns stacked, so neither side needs to know the other's page size.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


class LayoutMismatch(ValueError):
    """Sender and receiver hold KV in incompatible shapes or dtypes."""


def dtype_name(dtype: torch.dtype) -> str:
    for name, value in _DTYPES.items():
        if value == dtype:
            return name
    raise LayoutMismatch(f"unsupported KV dtype {dtype}")


@dataclass(slots=True, frozen=True)
class KVLayout:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str

    def __post_init__(self) -> None:
        if min(self.num_layers, self.num_kv_heads, self.head_dim) <= 0:
            raise LayoutMismatch(f"non-positive KV dimension in {self}")
        if self.dtype not in _DTYPES:
            raise LayoutMismatch(f"unsupported KV dtype {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def bytes_per_token_layer(self) -> int:
        """K and V of one token in one layer."""
        elem = torch.empty((), dtype=self.torch_dtype).element_size()
        return 2 * self.num_kv_heads * self.head_dim * elem

    def chunk_bytes(self, n_tokens: int) -> int:
        return n_tokens * self.bytes_per_token_layer

    def range_bytes(self, n_tokens: int) -> int:
        """All layers' K/V for n_tokens positions: what a RemoteSend of that range must move."""
        return self.num_layers * self.chunk_bytes(n_tokens)

    def chunk_shape(self, n_tokens: int) -> tuple[int, int, int, int]:
        return (2, n_tokens, self.num_kv_heads, self.head_dim)

    def check_compatible(self, other: KVLayout) -> None:
        if self != other:
            raise LayoutMismatch(f"KV layouts differ: sender {self}, receiver {other}")
