"""ModelRunner: turns the scheduler's ScheduledChunks into one forward pass over the paged KV.

It owns the step's bookkeeping (flattened token ids, positions, KV slots, which rows need
logits) so neither the scheduler nor the model deals with the other's representation.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine.attention import get_backend
from engine.attention.context import BatchLayout, ForwardContext, SeqLayout
from engine.batch import LayerHook, ScheduledChunk
from engine.kvcache.kv_storage import KVStorage
from engine.model.loader import LoadedModel

if TYPE_CHECKING:
    from engine.model.decode_graphs import DecodeGraphs


class BadBatch(ValueError):
    """A chunk cannot run: empty, out-of-vocabulary ids, beyond the context, too few pages."""


class ModelRunner:
    def __init__(self, loaded: LoadedModel, kv: KVStorage, backend_name: str = "torch") -> None:
        config = loaded.config
        if (kv.num_layers, kv.num_kv_heads, kv.head_dim) != (
                config.num_layers, config.num_kv_heads, config.head_dim):
            raise ValueError("KVStorage shape does not match the model")
        self.loaded = loaded
        self.model = loaded.model
        self.config = config
        self.kv = kv
        self.backend = get_backend(backend_name)
        self.device = loaded.model.device
        self.graphs: DecodeGraphs | None = None

    def capture_decode_graphs(self, sizes: list[int], scratch_page: int,
                              max_context: int) -> None:
        """Replay decode steps of up to max(sizes) sequences from CUDA graphs (FlashInfer only);
        `scratch_page` is a KV page no sequence owns, for the padding rows."""
        from engine.attention.flashinfer_backend import FlashInferBackend
        from engine.model.decode_graphs import DecodeGraphs
        from engine.model.llama import LlamaModel

        if not isinstance(self.backend, FlashInferBackend):
            raise ValueError("CUDA graphs need the flashinfer attention backend")
        if not isinstance(self.model, LlamaModel):  # the fast mode's model runs on CPU only
            raise ValueError("CUDA graphs need the exact mode's model")
        graphs = DecodeGraphs(self.model, self.kv, self.backend, sizes, scratch_page, max_context)
        with torch.inference_mode():
            graphs.capture()
        self.graphs = graphs

    def _validate(self, chunk: ScheduledChunk) -> None:
        if not chunk.token_ids:
            raise BadBatch(f"{chunk.seq_key}: chunk has no tokens")
        if chunk.start_pos < 0:
            raise BadBatch(f"{chunk.seq_key}: negative start_pos {chunk.start_pos}")
        end = chunk.start_pos + len(chunk.token_ids)
        if end > self.config.max_position_embeddings:
            raise BadBatch(f"{chunk.seq_key}: position {end - 1} is beyond the model's context "
                           f"of {self.config.max_position_embeddings}")
        if len(chunk.page_table) * self.kv.page_size < end:
            raise BadBatch(f"{chunk.seq_key}: {len(chunk.page_table)} pages cannot hold {end} "
                           f"tokens at page size {self.kv.page_size}")
        low, high = min(chunk.token_ids), max(chunk.token_ids)
        if low < 0 or high >= self.config.vocab_size:
            raise BadBatch(f"{chunk.seq_key}: token id out of range [0, {self.config.vocab_size})")
        if min(chunk.page_table) < 0 or max(chunk.page_table) >= self.kv.num_pages:
            raise BadBatch(f"{chunk.seq_key}: page id out of range [0, {self.kv.num_pages})")

    def build_context(self, chunks: list[ScheduledChunk],
                      layer_hook: LayerHook | None = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                    ForwardContext]:
        page_size = self.kv.page_size
        token_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seqs: list[SeqLayout] = []
        sample_rows: list[int] = []
        for chunk in chunks:
            self._validate(chunk)
            q_start = len(token_ids)
            n = len(chunk.token_ids)
            end = chunk.start_pos + n
            token_ids.extend(chunk.token_ids)
            chunk_positions = range(chunk.start_pos, end)
            positions.extend(chunk_positions)
            table = chunk.page_table
            slots.extend(table[p // page_size] * page_size + p % page_size
                         for p in chunk_positions)
            seqs.append(SeqLayout(q_start=q_start, q_len=n, ctx_len=end, page_table=table))
            if chunk.need_logits:
                sample_rows.append(q_start + n - 1)

        def as_tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=self.device)

        ctx = ForwardContext(
            batch=BatchLayout(seqs=seqs, page_size=page_size),
            slot_mapping=as_tensor(slots),
            sample_indices=as_tensor(sample_rows),
            kv=self.kv,
            backend=self.backend,
            layer_hook=layer_hook,
        )
        return as_tensor(token_ids), as_tensor(positions), ctx

    def run(self, chunks: list[ScheduledChunk],
            layer_hook: LayerHook | None = None) -> torch.Tensor:
        """Logits `[chunks with need_logits, vocab]` (float32), in chunk order."""
        if not chunks:
            return torch.empty(0, self.config.vocab_size, dtype=torch.float32)
        keys = [c.seq_key for c in chunks]
        if len(set(keys)) != len(keys):
            raise BadBatch("a sequence appears twice in one step")
        input_ids, positions, ctx = self.build_context(chunks, layer_hook)
        with torch.inference_mode():
            if self.graphs is not None:
                logits = self.graphs.run(input_ids, positions, ctx)
                if logits is not None:
                    return logits
            return self.model(input_ids, positions, ctx)
