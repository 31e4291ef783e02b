"""Attention computed from FlashInfer's CSR arrays alone, and stand-in wrappers with flashinfer
0.7's plan()/run() signatures (the parameters the backend uses, same names and order, no
**kwargs: a misspelt keyword fails here as it would there).

The stand-ins compute what FlashInfer's kernels compute, from the CSR arrays only, so a CPU test
checks the FlashInfer backend's plan arithmetic and row routing against the torch backend; the
kernels themselves are checked on a GPU (tests/gpu/).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch


def csr_attention(q: torch.Tensor, cache: torch.Tensor, qo_indptr: torch.Tensor,
                  kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                  kv_last_page_len: torch.Tensor, causal: bool) -> torch.Tensor:
    """Attention of q `[qo_indptr[-1], H, D]` over `cache` `[pages, 2, page_size, KvH, D]` as
    FlashInfer defines the CSR arrays: sequence i's queries are rows qo_indptr[i]..[i+1], its
    keys the pages kv_indices[kv_indptr[i]..[i+1]] with kv_last_page_len[i] tokens in the last;
    causal aligns the queries to the end of the keys. float64 math, output in q's dtype."""
    page_size, kv_heads, dim = cache.shape[2], cache.shape[3], cache.shape[4]
    heads = q.shape[1]
    out = torch.empty_like(q)
    for i in range(kv_last_page_len.shape[0]):
        pages = kv_indices[int(kv_indptr[i]):int(kv_indptr[i + 1])].long()
        length = (len(pages) - 1) * page_size + int(kv_last_page_len[i])
        keys = cache[pages, 0].reshape(-1, kv_heads, dim)[:length].double()
        values = cache[pages, 1].reshape(-1, kv_heads, dim)[:length].double()
        rows = slice(int(qo_indptr[i]), int(qo_indptr[i + 1]))
        queries = q[rows].double()  # [n, H, D]
        n = queries.shape[0]
        group = heads // kv_heads
        k = keys.repeat_interleave(group, dim=1).transpose(0, 1)  # [H, L, D]
        v = values.repeat_interleave(group, dim=1).transpose(0, 1)
        scores = queries.transpose(0, 1) @ k.transpose(1, 2) / dim ** 0.5  # [H, n, L]
        if causal:
            q_pos = torch.arange(n, device=q.device)[:, None] + (length - n)
            later = torch.arange(length, device=q.device)[None, :] > q_pos
            scores = scores.masked_fill(later, float("-inf"))
        out[rows] = (scores.softmax(-1) @ v).transpose(0, 1).to(q.dtype)
    return out


class _Checked:
    planned: dict[str, Any] | None = None
    causal = False  # the prefill wrapper is planned causal, decode queries see all their keys

    @staticmethod
    def check_index(indptr: torch.Tensor, indices: torch.Tensor, last: torch.Tensor,
                    page_size: int) -> None:
        for t in (indptr, indices, last):
            assert t.dtype == torch.int32, t.dtype
        assert indptr.shape[0] == last.shape[0] + 1 and int(indptr[0]) == 0
        assert indices.shape[0] == int(indptr[-1])
        assert bool(((last >= 1) & (last <= page_size)).all())

    def check_run(self, q: torch.Tensor, paged_kv_cache: torch.Tensor) -> dict[str, Any]:
        plan = self.planned
        assert plan is not None, "run() before plan()"
        assert paged_kv_cache.dim() == 5 and paged_kv_cache.shape[1] == 2
        assert q.dtype == plan["q_data_type"] == paged_kv_cache.dtype
        assert q.shape[1:] == (plan["num_qo_heads"], plan["head_dim"])
        assert q.shape[0] == int(plan["qo_indptr"][-1])
        return plan

    def run(self, q: torch.Tensor, paged_kv_cache: torch.Tensor, *args: Any,
            out: torch.Tensor | None = None) -> torch.Tensor:
        p = self.check_run(q, paged_kv_cache)
        result = csr_attention(q, paged_kv_cache, p["qo_indptr"], p["kv_indptr"],
                               p["kv_indices"], p["last"], causal=self.causal)
        if out is None:
            return result
        out.copy_(result)
        return out


class FakePrefillWrapper(_Checked):
    causal = True

    def __init__(self, float_workspace_buffer: torch.Tensor, kv_layout: str = "NHD",
                 use_cuda_graph: bool = False, qo_indptr_buf: Any = None,
                 paged_kv_indptr_buf: Any = None, paged_kv_indices_buf: Any = None,
                 paged_kv_last_page_len_buf: Any = None, custom_mask_buf: Any = None,
                 mask_indptr_buf: Any = None, backend: str = "auto") -> None:
        assert kv_layout == "NHD" and backend == "fa2"

    def plan(self, qo_indptr: torch.Tensor, paged_kv_indptr: torch.Tensor,
             paged_kv_indices: torch.Tensor, paged_kv_last_page_len: torch.Tensor,
             num_qo_heads: int, num_kv_heads: int, head_dim_qk: int, page_size: int,
             head_dim_vo: int | None = None, custom_mask: Any = None,
             packed_custom_mask: Any = None, causal: bool = False,
             pos_encoding_mode: str = "NONE", use_fp16_qk_reduction: bool = False,
             sm_scale: float | None = None, window_left: int = -1,
             logits_soft_cap: float | None = None, rope_scale: float | None = None,
             rope_theta: float | None = None, q_data_type: Any = "float16",
             kv_data_type: Any = None) -> None:
        self.check_index(paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, page_size)
        assert qo_indptr.dtype == torch.int32 and qo_indptr.shape == paged_kv_indptr.shape
        assert causal and pos_encoding_mode == "NONE" and num_qo_heads % num_kv_heads == 0
        self.planned = dict(qo_indptr=qo_indptr, kv_indptr=paged_kv_indptr,
                            kv_indices=paged_kv_indices, last=paged_kv_last_page_len,
                            num_qo_heads=num_qo_heads, head_dim=head_dim_qk,
                            q_data_type=q_data_type)


class FakeDecodeWrapper(_Checked):
    def __init__(self, float_workspace_buffer: torch.Tensor, kv_layout: str = "NHD",
                 use_cuda_graph: bool = False, use_tensor_cores: bool = False,
                 paged_kv_indptr_buffer: Any = None, paged_kv_indices_buffer: Any = None,
                 paged_kv_last_page_len_buffer: Any = None, backend: str = "auto") -> None:
        assert kv_layout == "NHD" and backend == "fa2"
        self.graph_batch = (paged_kv_last_page_len_buffer.shape[0] if use_cuda_graph else None)

    def plan(self, indptr: torch.Tensor, indices: torch.Tensor, last_page_len: torch.Tensor,
             num_qo_heads: int, num_kv_heads: int, head_dim: int, page_size: int, *,
             pos_encoding_mode: str = "NONE", window_left: int = -1,
             logits_soft_cap: float | None = None, q_data_type: Any = "float16",
             kv_data_type: Any = None) -> None:
        self.check_index(indptr, indices, last_page_len, page_size)
        assert pos_encoding_mode == "NONE" and num_qo_heads % num_kv_heads == 0
        batch = last_page_len.shape[0]
        assert self.graph_batch is None or batch == self.graph_batch, "graph batch size changed"
        self.planned = dict(qo_indptr=torch.arange(batch + 1, dtype=torch.int32),
                            kv_indptr=indptr, kv_indices=indices, last=last_page_len,
                            num_qo_heads=num_qo_heads, head_dim=head_dim,
                            q_data_type=q_data_type)


FAKE_FLASHINFER = SimpleNamespace(
    prefill=SimpleNamespace(BatchPrefillWithPagedKVCacheWrapper=FakePrefillWrapper),
    decode=SimpleNamespace(BatchDecodeWithPagedKVCacheWrapper=FakeDecodeWrapper),
)
