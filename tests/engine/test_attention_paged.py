"""The pure-PyTorch paged backend == dense causal attention, on random shapes.

Random page tables (shuffled, non-contiguous), mixed batches (decodes + prefills with and without
a cached prefix), GQA ratios 1/3/4. Tolerance: max abs diff < 1e-5 in float32 (inputs ~N(0,1)),
< 2e-2 with bfloat16 KV pages.
"""
from __future__ import annotations

import pytest
import torch

from engine.attention import UnknownBackend, get_backend
from tests.engine.paged_cases import random_step


def _dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [n, H, D] at the last n positions of k/v [L, KvH, D]; plain softmax attention."""
    n, heads, dim = q.shape
    length, kv_heads, _ = k.shape
    group = heads // kv_heads
    keys = k.repeat_interleave(group, dim=1).transpose(0, 1).double()  # [H, L, D]
    values = v.repeat_interleave(group, dim=1).transpose(0, 1).double()
    scores = q.transpose(0, 1).double() @ keys.transpose(1, 2) / dim ** 0.5  # [H, n, L]
    q_pos = torch.arange(n)[:, None] + (length - n)
    scores = scores.masked_fill(torch.arange(length)[None, :] > q_pos, float("-inf"))
    return (scores.softmax(-1) @ values).transpose(0, 1).float()


def _random_case(seed: int, kv_dtype: torch.dtype) -> None:
    step = random_step(seed, kv_dtype)  # in bf16 mode the model hands the backend bf16 queries
    kv, layer, q = step.kv, 1, step.q
    seqs, full_k, full_v = step.batch.seqs, step.full_k, step.full_v
    backend = get_backend("torch")
    ctx = step.context(backend)
    backend.plan(ctx)
    out = backend.run(layer, q, step.k, step.v, ctx).float()
    tol = 1e-5 if kv_dtype == torch.float32 else 2e-2
    for seq, k_all, v_all in zip(seqs, full_k, full_v, strict=True):
        rows = slice(seq.q_start, seq.q_start + seq.q_len)
        k_ref = k_all.to(kv_dtype).float()
        v_ref = v_all.to(kv_dtype).float()
        expected = _dense_reference(q[rows].float(), k_ref, v_ref)
        assert (out[rows] - expected).abs().max().item() < tol, (seed, seq)
        # the new K/V landed in the pages
        k_read, v_read = kv.read(layer, seq.page_table, 0, seq.ctx_len)
        assert torch.equal(k_read.float(), k_ref) and torch.equal(v_read.float(), v_ref)


@pytest.mark.parametrize("seed", range(40))
def test_paged_equals_dense_fp32(seed: int) -> None:
    _random_case(seed, torch.float32)


@pytest.mark.parametrize("seed", range(8))
def test_paged_equals_dense_bf16_kv(seed: int) -> None:
    _random_case(1000 + seed, torch.bfloat16)


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(UnknownBackend):
        get_backend("nope")


def test_flashinfer_backend_imports_without_cuda() -> None:
    # The registry entry exists; importing its module must not import flashinfer itself.
    import sys

    import engine.attention.flashinfer_backend  # noqa: F401

    assert "flashinfer" not in sys.modules or torch.cuda.is_available()


def test_flashinfer_backend_refuses_cleanly_without_cuda() -> None:
    from engine.attention.flashinfer_backend import FlashInferUnavailable

    if torch.cuda.is_available():
        return  # on a CUDA machine the backend may construct
    with pytest.raises(FlashInferUnavailable):
        get_backend("flashinfer")
