"""The pure-PyTorch paged backend == dense causal attention, on random shapes.

Random page tables (shuffled, non-contiguous), mixed batches (decodes + prefills with and without
a cached prefix), GQA ratios 1/3/4. Tolerance: max abs diff < 1e-5 in float32 (inputs ~N(0,1)),
< 2e-2 with bfloat16 KV pages.
"""
from __future__ import annotations

import random

import pytest
import torch

from engine.attention import UnknownBackend, get_backend
from engine.attention.context import BatchLayout, ForwardContext, SeqLayout
from engine.kvcache.kv_storage import KVStorage


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
    rng = random.Random(seed)
    torch.manual_seed(seed)
    page_size = rng.choice([1, 4, 16])
    kv_heads = rng.choice([1, 2, 3])
    heads = kv_heads * rng.choice([1, 3, 4])
    dim = rng.choice([16, 64])
    # (cached prefix, new tokens) per sequence: decodes, fresh prefills, prefix-extending chunks.
    shapes = [(rng.randint(0, 40), 1) for _ in range(rng.randint(0, 4))]
    shapes += [(0, rng.randint(2, 30)) for _ in range(rng.randint(0, 2))]
    shapes += [(rng.randint(1, 40), rng.randint(2, 20)) for _ in range(rng.randint(0, 2))]
    if not shapes:
        shapes = [(5, 1)]
    rng.shuffle(shapes)
    pages_needed = [-(-(p + n) // page_size) for p, n in shapes]
    num_pages = sum(pages_needed) + 3
    free = list(range(num_pages))
    rng.shuffle(free)
    kv = KVStorage(num_layers=2, num_pages=num_pages, page_size=page_size, num_kv_heads=kv_heads,
                   head_dim=dim, dtype=kv_dtype)
    layer = 1
    seqs, full_k, full_v, slots = [], [], [], []
    q_start = 0
    for (prefix, new), need in zip(shapes, pages_needed, strict=True):
        table, free = free[:need], free[need:]
        k_all = torch.randn(prefix + new, kv_heads, dim)
        v_all = torch.randn(prefix + new, kv_heads, dim)
        kv.write(layer, table, 0, k_all[:prefix], v_all[:prefix])  # the cached prefix
        full_k.append(k_all)
        full_v.append(v_all)
        seqs.append(SeqLayout(q_start=q_start, q_len=new, ctx_len=prefix + new, page_table=table))
        slots.append(kv.slots(table, prefix, prefix + new))
        q_start += new
    total = q_start
    # In bf16 mode the model hands the backend bf16 queries too.
    q = torch.randn(total, heads, dim).to(kv_dtype)
    k_new = torch.cat([k[-s.q_len:] for k, s in zip(full_k, seqs, strict=True)])
    v_new = torch.cat([v[-s.q_len:] for v, s in zip(full_v, seqs, strict=True)])
    backend = get_backend("torch")
    ctx = ForwardContext(batch=BatchLayout(seqs=seqs, page_size=page_size),
                         slot_mapping=torch.cat(slots), sample_indices=torch.arange(0),
                         kv=kv, backend=backend)
    backend.plan(ctx)
    out = backend.run(layer, q, k_new.to(kv_dtype), v_new.to(kv_dtype), ctx).float()
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
