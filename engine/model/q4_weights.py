"""Q4_1 weights kept in their 4-bit form, for the CPU int4 matmul kernel.

A GGUF Q4_1 block holds 32 weights as `w = d * code + m` (fp16 d and m, 4-bit codes). The same
numbers are exactly `(code - 8) * scale + zero` with scale = d, zero = m + 8d, which is what
torch's `_weight_int4pack_mm_for_cpu` computes (group size 32). Reading a quarter of the bytes
of bf16 per decode step is the main lever for batch-1 decode speed on CPU.

In a state dict the raw form travels next to the dense weight as `<name>.q4_codes` (uint8
[N, K]), `<name>.q4_scale` and `<name>.q4_min` (float32 [N, K / 32]).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.model.quant_weights import q4_1_blocks

GROUP = 32
SUFFIXES = (".q4_codes", ".q4_scale", ".q4_min")


def is_q4_part(name: str) -> bool:
    return name.endswith(SUFFIXES)


def q4_1_parts(data: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes uint8 [rows, K], d float32 [rows, K/32], m float32 [rows, K/32]) of raw Q4_1 bytes."""
    raw = q4_1_blocks(data, rows)
    assert raw.m is not None
    return raw.codes, raw.d.astype(np.float32), raw.m.astype(np.float32)


@dataclass(slots=True)
class Int4Weight:
    """A [N, K] weight packed for `_weight_int4pack_mm_for_cpu` (bf16 activations)."""

    packed: torch.Tensor
    scales_zeros: torch.Tensor  # [K / 32, N, 2]: scale, zero

    @classmethod
    def from_state(cls, weights: dict[str, torch.Tensor], names: list[str]) -> Int4Weight | None:
        """Pack (and concatenate along N) the named weights, or None if any lacks a Q4 form."""
        if not all(name + SUFFIXES[0] in weights for name in names):
            return None
        codes = torch.cat([weights[n + ".q4_codes"] for n in names]).to(torch.int32)
        scale = torch.cat([weights[n + ".q4_scale"] for n in names]).float()
        minimum = torch.cat([weights[n + ".q4_min"] for n in names]).float()
        if codes.shape[1] % GROUP != 0:
            return None
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), 1)
        zero = minimum + 8 * scale
        scales_zeros = torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()
        return cls(packed, scales_zeros)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int4pack_mm_for_cpu(x, self.packed, GROUP, self.scales_zeros)


def int4_supported(dtype: torch.dtype, device: torch.device) -> bool:
    return (dtype == torch.bfloat16 and device.type == "cpu"
            and hasattr(torch, "_weight_int4pack_mm_for_cpu")
            and hasattr(torch.ops.aten, "_convert_weight_to_int4pack_for_cpu"))
