"""Rotary position embeddings: inverse frequencies (plain, linear-scaled, Llama-3-scaled) and a
cos/sin table indexed by position, so the forward pass does no trigonometry."""
from __future__ import annotations

import math

import torch

from engine.model.config import ModelConfig, rope_type_of


def inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64)
                                            .to(torch.float32) / dim))
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    rope_type = rope_type_of(scaling)
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"])
    if rope_type == "llama3":
        return _llama3_inverse_frequencies(inv_freq, scaling)
    return inv_freq


def _llama3_inverse_frequencies(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and the band in
    # between interpolated smoothly.
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_context = float(scaling.get("original_max_position_embeddings", 8192))
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RopeTable:
    """cos/sin rows per position, grown on demand (a 128k-context table would waste memory)."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        self.inv_freq = inverse_frequencies(config).to(device)
        self.max_positions = config.max_position_embeddings
        self.dtype = dtype
        self.device = device
        self.cos = torch.empty(0, config.head_dim, dtype=dtype, device=device)
        self.sin = torch.empty(0, config.head_dim, dtype=dtype, device=device)
        self.ensure(min(4096, self.max_positions))

    def ensure(self, length: int) -> None:
        if length <= self.cos.shape[0]:
            return
        length = min(max(length, 2 * self.cos.shape[0]), max(length, self.max_positions))
        positions = torch.arange(length, device=self.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(self.dtype)
        self.sin = emb.sin().to(self.dtype)

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x `[T, heads, D]`, cos/sin `[T, 1, D]` (rotate-half convention, HF layout)."""
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin
