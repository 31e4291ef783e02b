"""FlashInfer paged attention (CUDA, fp16/bf16) behind the plan/run interface.

plan(ctx) splits the step once (engine/attention/paged_plan.py): single-token queries go to a
`BatchDecodeWithPagedKVCacheWrapper`, multi-token chunks to a `BatchPrefillWithPagedKVCacheWrapper`
planned `causal=True` (FlashInfer aligns a chunk's queries to the end of its KV, which is what a
chunk on top of a cached prefix needs). Both read the KVStorage layer tensor as it is:
`[pages, 2, page_size, kv_heads, head_dim]` is FlashInfer's 5-D NHD layout. RoPE is applied by
the model (`pos_encoding_mode="NONE"`). run() writes the new K/V at the step's slots and runs the
wrappers; when a wrapper's queries are one slice of the step (the usual case: decodes first), its
output is written in place with no gather or scatter.

flashinfer is imported inside functions only, and only when CUDA is present: importing this
module never imports it. FlashInfer has no float32 kernels; a float32 engine uses the torch
backend (on CUDA too).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.attention.base import AttentionBackend
from engine.attention.context import ForwardContext
from engine.attention.paged_plan import PagedIndex, split_step

# FlashInfer's recommended split-k scratch size; shared by the prefill and decode wrappers, which
# run one after the other on one stream.
WORKSPACE_BYTES = 128 << 20
# fa2 is built from source by FlashInfer's JIT on every architecture; "auto" may pick kernels that
# need downloaded cubins (unavailable offline) or extra packages.
KERNELS = "fa2"
_DTYPES = (torch.float16, torch.bfloat16)


class FlashInferUnavailable(RuntimeError):
    """FlashInfer needs CUDA, the flashinfer package and fp16/bf16 KV."""


def _import_flashinfer() -> Any:
    if not torch.cuda.is_available():
        raise FlashInferUnavailable("the flashinfer backend needs a CUDA device")
    try:
        import flashinfer.decode
        import flashinfer.prefill
    except ImportError as err:
        raise FlashInferUnavailable(
            "the flashinfer package is not installed (pip install 'switchyard[gpu]')") from err
    return flashinfer


@dataclass(slots=True)
class FlashInferPlan:
    decode: PagedIndex
    prefill: PagedIndex
    # rows on the device, for the (rare) steps whose queries are not one slice per wrapper
    decode_rows: torch.Tensor | None
    prefill_rows: torch.Tensor | None
    planned: bool = False  # the wrappers were planned for this step (needs the query head count)


class FlashInferBackend(AttentionBackend):
    name = "flashinfer"

    def __init__(self, workspace_bytes: int = WORKSPACE_BYTES, kernels: str = KERNELS,
                 decode_tensor_cores: bool = True) -> None:
        """`decode_tensor_cores`: decodes run FlashInfer's tensor-core path, the prefill kernels
        (faster for grouped-query heads, and one JIT module less to build per dtype/head size)."""
        self._fi = _import_flashinfer()
        self._workspace_bytes = workspace_bytes
        self._kernels = kernels
        self._decode_tensor_cores = decode_tensor_cores
        self._device: torch.device | None = None
        self._workspace: torch.Tensor | None = None
        self._prefill: Any = None
        self._decode: Any = None
        # Query heads: known once a model has run (or set by whoever captures CUDA graphs).
        self.num_qo_heads: int | None = None

    # ---- wrappers -------------------------------------------------------------------------

    def workspace(self, device: torch.device) -> torch.Tensor:
        if self._workspace is None or self._device != device:
            # Zeroed: FlashInfer's decode wrapper requires it for its first use.
            self._workspace = torch.zeros(self._workspace_bytes, dtype=torch.uint8, device=device)
            self._device = device
            self._prefill = self._decode = None
        return self._workspace

    def _wrappers(self, device: torch.device) -> tuple[Any, Any]:
        workspace = self.workspace(device)
        if self._prefill is None:
            self._prefill = self._fi.prefill.BatchPrefillWithPagedKVCacheWrapper(
                workspace, "NHD", backend=self._kernels)
            self._decode = self._fi.decode.BatchDecodeWithPagedKVCacheWrapper(
                workspace, "NHD", use_tensor_cores=self._decode_tensor_cores,
                backend=self._kernels)
        return self._prefill, self._decode

    def graph_decode_wrapper(self, device: torch.device, batch_size: int, max_pages: int) -> Any:
        """A decode wrapper for CUDA-graph capture at a fixed batch size: its index buffers live
        at fixed addresses (the graph reads them) and plan() refills them before each replay."""
        workspace = self.workspace(device)
        return self._fi.decode.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_cuda_graph=True, use_tensor_cores=self._decode_tensor_cores,
            paged_kv_indptr_buffer=torch.zeros(batch_size + 1, dtype=torch.int32, device=device),
            paged_kv_indices_buffer=torch.zeros(max_pages, dtype=torch.int32, device=device),
            paged_kv_last_page_len_buffer=torch.zeros(batch_size, dtype=torch.int32,
                                                      device=device),
            backend=self._kernels)

    @staticmethod
    def plan_decode(wrapper: Any, index: PagedIndex, num_qo_heads: int, kv: Any) -> None:
        wrapper.plan(index.kv_indptr, index.kv_indices, index.kv_last_page_len, num_qo_heads,
                     kv.num_kv_heads, kv.head_dim, kv.page_size, pos_encoding_mode="NONE",
                     q_data_type=kv.dtype, kv_data_type=kv.dtype)

    @staticmethod
    def plan_prefill(wrapper: Any, index: PagedIndex, num_qo_heads: int, kv: Any) -> None:
        wrapper.plan(index.qo_indptr, index.kv_indptr, index.kv_indices, index.kv_last_page_len,
                     num_qo_heads, kv.num_kv_heads, kv.head_dim, kv.page_size, causal=True,
                     pos_encoding_mode="NONE", q_data_type=kv.dtype, kv_data_type=kv.dtype)

    # ---- plan / run -----------------------------------------------------------------------

    def plan(self, ctx: ForwardContext) -> None:
        kv = ctx.kv
        if kv.dtype not in _DTYPES:
            raise FlashInferUnavailable(
                f"FlashInfer kernels take float16/bfloat16 KV, this engine holds {kv.dtype}; "
                "use the torch attention backend for float32")
        decode, prefill = split_step(ctx.batch)
        device = kv.device

        def rows_on_device(index: PagedIndex) -> torch.Tensor | None:
            if index.num_rows == 0 or index.rows_start is not None:
                return None
            return index.rows.to(device, non_blocking=True)

        plan = FlashInferPlan(decode, prefill, rows_on_device(decode), rows_on_device(prefill))
        ctx.plan = plan
        if self.num_qo_heads is not None:
            self._plan_wrappers(plan, self.num_qo_heads, ctx)

    def _plan_wrappers(self, plan: FlashInferPlan, num_qo_heads: int,
                       ctx: ForwardContext) -> None:
        prefill, decode = self._wrappers(ctx.kv.device)
        if plan.decode.num_seqs:
            self.plan_decode(decode, plan.decode, num_qo_heads, ctx.kv)
        if plan.prefill.num_seqs:
            self.plan_prefill(prefill, plan.prefill, num_qo_heads, ctx.kv)
        plan.planned = True

    def run(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            ctx: ForwardContext) -> torch.Tensor:
        plan = ctx.plan
        assert isinstance(plan, FlashInferPlan), "plan(ctx) must run before run()"
        if not plan.planned:
            # First layer of the first step: the query head count is known from here on.
            self.num_qo_heads = q.shape[1]
            self._plan_wrappers(plan, q.shape[1], ctx)
        ctx.kv.write_slots(layer, ctx.slot_mapping, k, v)
        cache = ctx.kv.layer(layer)
        q = q.contiguous()
        out = torch.empty_like(q)
        for index, rows, wrapper in ((plan.decode, plan.decode_rows, self._decode),
                                     (plan.prefill, plan.prefill_rows, self._prefill)):
            if index.num_rows == 0:
                continue
            if index.rows_start is not None:
                part = slice(index.rows_start, index.rows_start + index.num_rows)
                wrapper.run(q[part], cache, out=out[part])
            else:
                assert rows is not None
                out.index_copy_(0, rows, wrapper.run(q.index_select(0, rows), cache))
        return out


class GraphDecodeAttention(AttentionBackend):
    """The attention a captured decode graph runs: the K/V write and one graph-mode decode
    wrapper, planned outside the graph (DecodeGraphs plans it before every replay)."""

    name = "flashinfer-graph"

    def __init__(self, wrapper: Any) -> None:
        self.wrapper = wrapper

    def plan(self, ctx: ForwardContext) -> None:
        """Nothing to do inside the graph: the wrapper was planned before capture/replay."""

    def run(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            ctx: ForwardContext) -> torch.Tensor:
        ctx.kv.write_slots(layer, ctx.slot_mapping, k, v)
        out: torch.Tensor = self.wrapper.run(q.contiguous(), ctx.kv.layer(layer))
        return out
