"""The hardware floor a CPU engine is measured against, probed in the same run.

Decode is bound by the bytes of weights read per step (memcpy bandwidth); prefill by FLOPs
(dense matmul throughput). Both are measured here rather than taken from a data sheet.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(slots=True)
class Floor:
    memcpy_gb_s: float
    matmul_gflop_s: float
    weight_bytes: int
    params: int

    def decode_tok_s(self, batch: int) -> float:
        """Best case: every step reads all weights once and does 2·params FLOPs per sequence."""
        step_s = max(self.weight_bytes / (self.memcpy_gb_s * 1e9),
                     2 * self.params * batch / (self.matmul_gflop_s * 1e9))
        return batch / step_s

    def prefill_tok_s(self) -> float:
        return self.matmul_gflop_s * 1e9 / (2 * self.params)


def _best_of(fn: object, repeats: int) -> float:
    assert callable(fn)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure_memcpy_gb_s(num_bytes: int = 256 << 20, repeats: int = 5) -> float:
    """Bytes moved (read + write) per second by a large tensor copy."""
    src = torch.ones(num_bytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = _best_of(lambda: dst.copy_(src), repeats)
    return 2 * num_bytes / seconds / 1e9


def measure_matmul_gflop_s(n: int = 1024, dtype: torch.dtype = torch.float32,
                           repeats: int = 5) -> float:
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)  # warm up
    seconds = _best_of(lambda: torch.mm(a, b), repeats)
    return 2 * n**3 / seconds / 1e9


def weight_stats(model: torch.nn.Module) -> tuple[int, int]:
    """(bytes, parameter count) of distinct weight tensors (tied embeddings counted once).
    Packed block-quantised weights count their bytes; their parameters come from the model's
    own `param_count()` when it has one."""
    seen: set[int] = set()
    total_bytes = total_params = 0
    tensors = list(model.parameters()) + list(model.buffers())
    weight_tensors = getattr(model, "weight_tensors", None)
    if callable(weight_tensors):
        tensors = list(weight_tensors().values())
    for tensor in tensors:
        if tensor.data_ptr() in seen or tensor.dtype == torch.bool:
            continue
        seen.add(tensor.data_ptr())
        total_bytes += tensor.numel() * tensor.element_size()
        total_params += tensor.numel() if tensor.is_floating_point() else 0
    param_count = getattr(model, "param_count", None)
    return total_bytes, int(param_count()) if callable(param_count) else total_params
