"""FlashInfer paged attention (CUDA). A placeholder with the right shape: a later issue fills in
plan()/run() with BatchPrefillWithPagedKVCacheWrapper over the same NHD page layout.

flashinfer is imported inside functions only, so importing this module never needs CUDA.
"""
from __future__ import annotations

from typing import Any

import torch

from engine.attention.base import AttentionBackend
from engine.attention.context import ForwardContext


class FlashInferUnavailable(RuntimeError):
    """FlashInfer needs CUDA and the flashinfer package."""


def _import_flashinfer() -> Any:
    if not torch.cuda.is_available():
        raise FlashInferUnavailable("the flashinfer backend needs a CUDA device")
    try:
        import flashinfer  # type: ignore[import-not-found]
    except ImportError as err:
        raise FlashInferUnavailable("the flashinfer package is not installed") from err
    return flashinfer


class FlashInferBackend(AttentionBackend):
    name = "flashinfer"

    def __init__(self) -> None:
        self._flashinfer = _import_flashinfer()

    def plan(self, ctx: ForwardContext) -> None:
        raise FlashInferUnavailable("the flashinfer backend is not implemented yet")

    def run(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            ctx: ForwardContext) -> torch.Tensor:
        raise FlashInferUnavailable("the flashinfer backend is not implemented yet")
