"""Block-quantised weights for the fast CPU mode: GGUF Q4_1 / Q8_0 blocks (llama.cpp's, 32
weights each) repacked into the tile layout the kernels read (engine/kernels/csrc/qmatmul.cpp).

Q4_1 and Q8_0 tensors keep their exact bits; any other tensor (F32/F16 norms excepted, and
every other GGUF type or an HF checkpoint's dense weights) is quantised to Q8_0 the way
llama.cpp does it (d = max|w| / 127, code = round(w / d)).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.kernels import ops

BLOCK = 32
LANES = 16
Q4_1, Q8_0 = 0, 1
_Q8_BLOCK_BYTES = 34  # fp16 d, 32 int8 codes


@dataclass(slots=True)
class BlockWeight:
    """A [n, k] weight as packed tiles; `fmt` is Q4_1 or Q8_0."""

    packed: torch.Tensor  # uint8, tiles * blocks * tile-block bytes
    fmt: int
    n: int
    k: int

    def matmul(self, x: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
               residual: torch.Tensor | None = None) -> torch.Tensor:
        """x = (int8 codes, scales, scale * code sums) from one of the quantize ops."""
        return ops().qmatmul(x[0], x[1], x[2], self.packed, self.fmt, self.n, residual)

    def to_state(self, name: str) -> dict[str, torch.Tensor]:
        return {name + ".packed": self.packed,
                name + ".meta": torch.tensor([self.fmt, self.n, self.k], dtype=torch.int64)}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], name: str) -> BlockWeight:
        fmt, n, k = (int(v) for v in state[name + ".meta"].tolist())
        return cls(state[name + ".packed"], fmt, n, k)


@dataclass(slots=True)
class RawBlocks:
    """One tensor's blocks, unpacked: codes [n, k] (uint8 Q4_1 / int8 Q8_0), d and m float16
    [n, k / 32] (m unused for Q8_0)."""

    fmt: int
    codes: np.ndarray
    d: np.ndarray
    m: np.ndarray | None

    def permute_rows(self, perm: np.ndarray) -> RawBlocks:
        return RawBlocks(self.fmt, self.codes[perm], self.d[perm],
                         None if self.m is None else self.m[perm])


def q8_0_blocks(data: np.ndarray, rows: int) -> RawBlocks:
    blocks = np.asarray(data, dtype=np.uint8).reshape(rows, -1, _Q8_BLOCK_BYTES)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]
    codes = blocks[..., 2:].copy().view(np.int8).reshape(rows, -1)
    return RawBlocks(Q8_0, codes, d, None)


def q4_1_blocks(data: np.ndarray, rows: int) -> RawBlocks:
    blocks = np.asarray(data, dtype=np.uint8).reshape(rows, -1, 20)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0]
    packed = blocks[..., 4:]
    # Low nibbles are elements 0..15 of the block, high nibbles 16..31.
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).reshape(rows, -1)
    return RawBlocks(Q4_1, codes, d, m)


def quantize_q8_0(weight: np.ndarray) -> RawBlocks:
    """llama.cpp's Q8_0 quantisation of a dense [n, k] weight (k a multiple of 32)."""
    w = np.asarray(weight, dtype=np.float32)
    rows, k = w.shape
    blocks = w.reshape(rows, k // BLOCK, BLOCK)
    d = (np.abs(blocks).max(axis=-1) / 127.0).astype(np.float16)
    d32 = d.astype(np.float32)
    inv = np.divide(1.0, d32, out=np.zeros_like(d32), where=d32 != 0)
    codes = np.clip(np.rint(blocks * inv[..., None]), -127, 127).astype(np.int8)
    return RawBlocks(Q8_0, codes.reshape(rows, k), d, None)


def concat(parts: list[RawBlocks]) -> RawBlocks:
    """Stack along the output dim (fused projections). Mixed formats fall back to Q8_0."""
    if len({p.fmt for p in parts}) > 1:
        parts = [quantize_q8_0(dequantize(p)) for p in parts]
    m = None if parts[0].m is None else np.concatenate([p.m for p in parts if p.m is not None])
    return RawBlocks(parts[0].fmt, np.concatenate([p.codes for p in parts]),
                     np.concatenate([p.d for p in parts]), m)


def dequantize(raw: RawBlocks) -> np.ndarray:
    rows, k = raw.codes.shape
    d = np.repeat(raw.d.astype(np.float32), BLOCK, axis=1)
    w = raw.codes.astype(np.float32) * d
    if raw.m is not None:
        w += np.repeat(raw.m.astype(np.float32), BLOCK, axis=1)
    return w.reshape(rows, k)


def pack(raw: RawBlocks) -> BlockWeight:
    """Tile layout: [tiles][blocks][codes planes | 16 fp16 d | 16 fp16 m or int16 sums]."""
    n, k = raw.codes.shape
    if k % BLOCK:
        raise ValueError(f"input size {k} is not a multiple of {BLOCK}")
    tiles = -(-n // LANES)
    pad = tiles * LANES - n
    codes = np.pad(raw.codes, ((0, pad), (0, 0)))
    d = np.pad(raw.d, ((0, pad), (0, 0)))
    blocks = k // BLOCK
    # [tiles, lanes, blocks, 32] -> per tile-block arrays
    c = codes.reshape(tiles, LANES, blocks, BLOCK).transpose(0, 2, 1, 3)  # [t, b, j, 32]
    d_tb = np.ascontiguousarray(d.reshape(tiles, LANES, blocks).transpose(0, 2, 1),
                                dtype=np.float16)
    if raw.fmt == Q4_1:
        assert raw.m is not None
        m_tb = np.ascontiguousarray(
            np.pad(raw.m, ((0, pad), (0, 0))).reshape(tiles, LANES, blocks).transpose(0, 2, 1),
            dtype=np.float16)
        u = c.astype(np.uint8).reshape(tiles, blocks, LANES, 4, 2, 4)  # [t,b,j,p,half,i]
        planes = (u[..., 0, :] | (u[..., 1, :] << 4)).transpose(0, 1, 3, 2, 4)  # [t,b,p,j,i]
        body = planes.reshape(tiles, blocks, 256)
        tail = np.concatenate([d_tb.view(np.uint8).reshape(tiles, blocks, 32),
                               m_tb.view(np.uint8).reshape(tiles, blocks, 32)],
                              axis=-1)
    else:
        s8 = c.astype(np.int8)
        planes = s8.reshape(tiles, blocks, LANES, 8, 4).transpose(0, 1, 3, 2, 4)  # [t,b,g,j,i]
        body = np.ascontiguousarray(planes).reshape(tiles, blocks, 512).view(np.uint8)
        sums = np.ascontiguousarray(s8.astype(np.int16).sum(axis=-1), dtype=np.int16)  # [t, b, j]
        tail = np.concatenate([d_tb.view(np.uint8).reshape(tiles, blocks, 32),
                               sums.view(np.uint8).reshape(tiles, blocks, 32)], axis=-1)
    packed = np.ascontiguousarray(np.concatenate([body, tail], axis=-1)).reshape(-1)
    return BlockWeight(torch.from_numpy(packed), raw.fmt, n, k)
