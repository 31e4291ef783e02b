"""CUDA-graph decode bucketing and padding, checked without a GPU.

Which sizes are captured, which size a step replays, and that padding a step up to it changes
nothing for the real rows: the padded step, run through the torch backend on a KV cache with one
scratch page, gives the real rows the same attention and the same pages as the unpadded step,
and writes nowhere but the scratch page besides. The capture/replay itself runs on a GPU
(tests/gpu/).
"""
from __future__ import annotations

import pytest
import torch

import engine.attention.flashinfer_backend as fib
from engine.attention import get_backend
from engine.attention.context import BatchLayout, ForwardContext, SeqLayout
from engine.attention.graph_buckets import (
    BadGraphSizes,
    bucket,
    capture_sizes,
    check_sizes,
    is_decode_step,
    pad_inputs,
    pad_layout,
)
from engine.attention.paged_plan import paged_index
from engine.config import EngineConfig, EngineConfigError
from engine.kvcache.kv_storage import KVStorage
from tests.engine.flashinfer_fake import FAKE_FLASHINFER


def test_capture_sizes() -> None:
    assert capture_sizes(0) == []
    assert capture_sizes(1) == [1]
    assert capture_sizes(6) == [1, 2, 4, 6]
    sizes = capture_sizes(128)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 128 and len(sizes) == 19
    assert capture_sizes(100)[-2:] == [96, 100]
    assert check_sizes(sizes) == sizes
    for bad in ([0, 1], [2, 1], [1, 1]):
        with pytest.raises(BadGraphSizes):
            check_sizes(bad)


def test_bucket_is_the_smallest_captured_size_that_fits() -> None:
    sizes = capture_sizes(32)
    assert [bucket(n, sizes) for n in (1, 2, 3, 4, 5, 8, 9, 31, 32)] == [
        1, 2, 4, 4, 8, 8, 16, 32, 32]
    assert bucket(33, sizes) is None and bucket(0, sizes) is None
    assert bucket(1, []) is None


def test_only_pure_decode_steps_in_row_order_replay() -> None:
    decode = [SeqLayout(q_start=i, q_len=1, ctx_len=5 + i, page_table=[i]) for i in range(3)]
    assert is_decode_step(BatchLayout(seqs=decode, page_size=16))
    assert not is_decode_step(BatchLayout(seqs=[], page_size=16))
    mixed = [*decode, SeqLayout(q_start=3, q_len=4, ctx_len=4, page_table=[9])]
    assert not is_decode_step(BatchLayout(seqs=mixed, page_size=16))
    swapped = [SeqLayout(q_start=1, q_len=1, ctx_len=3, page_table=[0]),
               SeqLayout(q_start=0, q_len=1, ctx_len=3, page_table=[1])]
    assert not is_decode_step(BatchLayout(seqs=swapped, page_size=16))


def test_pad_inputs_and_layout() -> None:
    ids, pos, slots = torch.tensor([5, 6]), torch.tensor([10, 3]), torch.tensor([42, 7])
    rows = pad_inputs(ids, pos, slots, 4, scratch_page=9, page_size=16)
    assert rows.tolist() == [[5, 6, 0, 0], [10, 3, 0, 0], [42, 7, 144, 144]]
    with pytest.raises(ValueError):
        pad_inputs(ids, pos, slots, 1, 9, 16)
    seqs = [SeqLayout(q_start=i, q_len=1, ctx_len=4, page_table=[i]) for i in range(2)]
    padded = pad_layout(BatchLayout(seqs=seqs, page_size=16), 4, scratch_page=9)
    assert padded.seqs[:2] == seqs
    assert [(s.q_start, s.ctx_len, s.page_table) for s in padded.seqs[2:]] == [
        (2, 1, [9]), (3, 1, [9])]
    index = paged_index(padded.seqs, 16)
    assert index.kv_indices.tolist() == [0, 1, 9, 9] and index.rows_start == 0


def _decode_step(kv: KVStorage, lengths: list[int], heads: int) -> tuple[
        BatchLayout, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    page_size = kv.page_size
    seqs, slots, next_page = [], [], 0
    for i, length in enumerate(lengths):
        pages = -(-length // page_size)
        table = list(range(next_page, next_page + pages))
        next_page += pages
        kv.write(0, table, 0, torch.randn(length - 1, kv.num_kv_heads, kv.head_dim),
                 torch.randn(length - 1, kv.num_kv_heads, kv.head_dim))
        seqs.append(SeqLayout(q_start=i, q_len=1, ctx_len=length, page_table=table))
        slots.append(kv.slots(table, length - 1, length))
    n = len(lengths)
    q = torch.randn(n, heads, kv.head_dim)
    k = torch.randn(n, kv.num_kv_heads, kv.head_dim)
    v = torch.randn(n, kv.num_kv_heads, kv.head_dim)
    return BatchLayout(seqs=seqs, page_size=page_size), torch.cat(slots), q, k, v


def test_padding_leaves_real_rows_and_pages_untouched() -> None:
    torch.manual_seed(0)
    page_size, kv_heads, dim, heads = 4, 2, 16, 6
    lengths = [3, 9, 1, 14, 4]
    real_pages = sum(-(-n // page_size) for n in lengths)
    scratch = real_pages  # the one page past the pool
    kv = KVStorage(1, real_pages + 1, page_size, kv_heads, dim)
    batch, slots, q, k, v = _decode_step(kv, lengths, heads)
    before = kv.layer(0).clone()
    backend = get_backend("torch")

    plain_kv = KVStorage(1, real_pages + 1, page_size, kv_heads, dim)
    plain_kv.layer(0).copy_(before)
    plain = ForwardContext(batch=batch, slot_mapping=slots, sample_indices=torch.arange(0),
                           kv=plain_kv, backend=backend)
    backend.plan(plain)
    expected = backend.run(0, q, k, v, plain)

    size = 8
    rows = pad_inputs(torch.zeros(len(lengths), dtype=torch.long),
                      torch.zeros(len(lengths), dtype=torch.long), slots, size, scratch,
                      page_size)
    pad = size - len(lengths)
    padded = ForwardContext(batch=pad_layout(batch, size, scratch), slot_mapping=rows[2],
                            sample_indices=torch.arange(0), kv=kv, backend=backend)
    backend.plan(padded)
    got = backend.run(0, torch.cat([q, torch.randn(pad, heads, dim)]),
                      torch.cat([k, torch.randn(pad, kv_heads, dim)]),
                      torch.cat([v, torch.randn(pad, kv_heads, dim)]), padded)
    assert torch.allclose(got[: len(lengths)], expected, atol=1e-6)
    assert torch.equal(kv.layer(0)[:scratch], plain_kv.layer(0)[:scratch])
    assert not torch.equal(kv.layer(0)[scratch], before[scratch])  # the pads wrote there


def test_graph_attention_plans_a_fixed_size_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    """GraphDecodeAttention + a graph-mode wrapper planned on a padded step == the torch
    backend on the real rows (stand-in wrapper with flashinfer's signatures)."""
    monkeypatch.setattr(fib, "_import_flashinfer", lambda: FAKE_FLASHINFER)
    torch.manual_seed(1)
    page_size, kv_heads, dim, heads, size = 16, 1, 16, 4, 4
    lengths = [20, 2, 33]
    real_pages = sum(-(-n // page_size) for n in lengths)
    kv = KVStorage(1, real_pages + 1, page_size, kv_heads, dim, dtype=torch.bfloat16)
    batch, slots, q, k, v = _decode_step(kv, lengths, heads)
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    reference_kv = KVStorage(1, real_pages + 1, page_size, kv_heads, dim, dtype=torch.bfloat16)
    reference_kv.layer(0).copy_(kv.layer(0))
    torch_backend = get_backend("torch")
    ref_ctx = ForwardContext(batch=batch, slot_mapping=slots, sample_indices=torch.arange(0),
                             kv=reference_kv, backend=torch_backend)
    torch_backend.plan(ref_ctx)
    expected = torch_backend.run(0, q, k, v, ref_ctx).float()

    backend = fib.FlashInferBackend()
    wrapper = backend.graph_decode_wrapper(kv.device, size, size * 4)
    layout = pad_layout(batch, size, real_pages)
    backend.plan_decode(wrapper, paged_index(layout.seqs, page_size), heads, kv)
    rows = pad_inputs(slots, slots, slots, size, real_pages, page_size)
    attention = fib.GraphDecodeAttention(wrapper)
    ctx = ForwardContext(batch=layout, slot_mapping=rows[2], sample_indices=torch.arange(size),
                         kv=kv, backend=attention)
    pad = torch.zeros(size - len(lengths), heads, dim, dtype=torch.bfloat16)
    kv_pad = pad[:, :kv_heads]
    got = attention.run(0, torch.cat([q, pad]), torch.cat([k, kv_pad]), torch.cat([v, kv_pad]),
                        ctx).float()
    assert (got[: len(lengths)] - expected).abs().max().item() < 2e-2


def test_engine_config_validates_graph_batch() -> None:
    assert EngineConfig().cuda_graph_max_batch == 128
    assert EngineConfig(cuda_graph_max_batch=0).cuda_graph_max_batch == 0
    with pytest.raises(EngineConfigError):
        EngineConfig(cuda_graph_max_batch=-1)
