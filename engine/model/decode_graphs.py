"""CUDA graphs for decode steps: one captured forward pass per batch size, replayed per step.

A decode step launches hundreds of small kernels; replaying a captured graph costs one launch,
so the GPU no longer waits on Python. Each captured size owns a FlashInfer decode wrapper in
CUDA-graph mode (its index buffers at fixed addresses), planned before every replay with the
step's pages (engine/attention/graph_buckets.py pads the step up to the captured size). The
token ids, positions and KV slots live in one static buffer the graphs read; the logits come back
in each graph's static output, valid until the next replay.

Only for the FlashInfer backend (fp16/bf16): the torch backend's shapes depend on context length.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from engine.attention.context import BatchLayout, ForwardContext
from engine.attention.flashinfer_backend import FlashInferBackend, GraphDecodeAttention
from engine.attention.graph_buckets import (
    bucket,
    check_sizes,
    is_decode_step,
    pad_inputs,
    pad_layout,
)
from engine.attention.paged_plan import paged_index

if TYPE_CHECKING:
    from engine.kvcache.kv_storage import KVStorage
    from engine.model.llama import LlamaModel

_WARMUP_RUNS = 2


@dataclass(slots=True)
class _Captured:
    graph: torch.cuda.CUDAGraph
    wrapper: Any  # flashinfer BatchDecodeWithPagedKVCacheWrapper(use_cuda_graph=True)
    logits: torch.Tensor  # [size, vocab] float32, the graph's static output


class DecodeGraphs:
    def __init__(self, model: LlamaModel, kv: KVStorage, backend: FlashInferBackend,
                 sizes: list[int], scratch_page: int, max_context: int) -> None:
        if kv.device.type != "cuda":
            raise ValueError("CUDA graphs need the KV cache on a CUDA device")
        if not 0 <= scratch_page < kv.num_pages:
            raise ValueError(f"scratch page {scratch_page} outside the KV pool")
        self.sizes = check_sizes(list(sizes))
        self.model = model
        self.kv = kv
        self.backend = backend
        self.scratch_page = scratch_page
        self.num_heads = model.config.num_heads
        self._pages_per_seq = -(-max_context // kv.page_size)
        self._inputs = torch.zeros(3, self.sizes[-1], dtype=torch.long, device=kv.device)
        self._rows = torch.arange(self.sizes[-1], device=kv.device)
        self._graphs: dict[int, _Captured] = {}
        self.replays = 0  # steps served by a graph (benchmarks and tests read it)

    def capture(self) -> None:
        """Capture every size, largest first so the smaller graphs reuse its memory pool."""
        # The RoPE table must not be reallocated once a graph has captured its address.
        self.model.rope.ensure(self.model.rope.max_positions)
        self.backend.num_qo_heads = self.num_heads
        pool = torch.cuda.graph_pool_handle()
        for size in reversed(self.sizes):
            self._graphs[size] = self._capture_one(size, pool)
        torch.cuda.synchronize(self.kv.device)

    def _context(self, size: int, layout: BatchLayout, wrapper: Any) -> ForwardContext:
        return ForwardContext(batch=layout, slot_mapping=self._inputs[2, :size],
                              sample_indices=self._rows[:size], kv=self.kv,
                              backend=GraphDecodeAttention(wrapper))

    def _capture_one(self, size: int, pool: Any) -> _Captured:
        device = self.kv.device
        wrapper = self.backend.graph_decode_wrapper(device, size, size * self._pages_per_seq)
        layout = pad_layout(BatchLayout(seqs=[], page_size=self.kv.page_size), size,
                            self.scratch_page)
        none = torch.empty(0, dtype=torch.long, device=device)
        self._inputs[:, :size].copy_(pad_inputs(none, none, none, size, self.scratch_page,
                                                self.kv.page_size))
        self.backend.plan_decode(wrapper, paged_index(layout.seqs, self.kv.page_size),
                                 self.num_heads, self.kv)
        ctx = self._context(size, layout, wrapper)
        ids, positions = self._inputs[0, :size], self._inputs[1, :size]
        # Warm up off the default stream (kernel loading, cuBLAS workspaces), as capture does.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(_WARMUP_RUNS):
                self.model(ids, positions, ctx)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            logits = self.model(ids, positions, ctx)
        return _Captured(graph, wrapper, logits)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor,
            ctx: ForwardContext) -> torch.Tensor | None:
        """Logits for `ctx.sample_indices` by graph replay, or None when this step is not one a
        graph was captured for (prefill chunks, a layer hook, more decodes than captured)."""
        if ctx.layer_hook is not None or not is_decode_step(ctx.batch):
            return None
        n = len(ctx.batch.seqs)
        size = bucket(n, self.sizes)
        if size is None:
            return None
        captured = self._graphs[size]
        self._inputs[:, :size].copy_(pad_inputs(input_ids, positions, ctx.slot_mapping, size,
                                                self.scratch_page, self.kv.page_size))
        layout = pad_layout(ctx.batch, size, self.scratch_page)
        self.backend.plan_decode(captured.wrapper, paged_index(layout.seqs, self.kv.page_size),
                                 self.num_heads, self.kv)
        captured.graph.replay()
        self.replays += 1
        return captured.logits.index_select(0, ctx.sample_indices)
