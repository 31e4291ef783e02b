"""Which decode batch sizes get a CUDA graph, and how a step is padded up to one (pure torch).

A graph replays fixed shapes, so a step of n decodes runs the graph of the smallest captured
size >= n; the extra rows are padding: token 0 at position 0, its K/V written into a scratch page
no sequence owns, attending over that page alone. Their logits are dropped. Steps with more
decodes than the largest size, or with any prefill chunk, run eagerly.
"""
from __future__ import annotations

import bisect

import torch

from engine.attention.context import BatchLayout, SeqLayout

DEFAULT_MAX_BATCH = 128


class BadGraphSizes(ValueError):
    """Capture sizes must be positive, distinct and sorted."""


def capture_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, then every multiple of 8 up to max_batch (and max_batch itself): at most 7 rows
    of padding above 8, a graph count that captures in seconds."""
    if max_batch <= 0:
        return []
    sizes = {s for s in (1, 2, 4) if s <= max_batch}
    sizes.update(range(8, max_batch + 1, 8))
    sizes.add(max_batch)
    return sorted(sizes)


def check_sizes(sizes: list[int]) -> list[int]:
    if any(not isinstance(s, int) or s <= 0 for s in sizes) or sorted(set(sizes)) != sizes:
        raise BadGraphSizes(f"CUDA graph batch sizes must be positive, distinct and sorted: "
                            f"{sizes}")
    return sizes


def bucket(num_decodes: int, sizes: list[int]) -> int | None:
    """The captured size a step of `num_decodes` decodes replays; None = run it eagerly."""
    if num_decodes <= 0:
        return None
    i = bisect.bisect_left(sizes, num_decodes)
    return sizes[i] if i < len(sizes) else None


def is_decode_step(batch: BatchLayout) -> bool:
    """Every sequence brings one query, in row order: the shape a decode graph was captured for."""
    return bool(batch.seqs) and all(s.q_len == 1 and s.q_start == i
                                    for i, s in enumerate(batch.seqs))


def pad_layout(batch: BatchLayout, size: int, scratch_page: int) -> BatchLayout:
    """The step's sequences followed by `size - n` one-token sequences on the scratch page."""
    n = len(batch.seqs)
    if size < n:
        raise ValueError(f"cannot pad {n} decodes down to {size}")
    pads = [SeqLayout(q_start=i, q_len=1, ctx_len=1, page_table=[scratch_page])
            for i in range(n, size)]
    return BatchLayout(seqs=[*batch.seqs, *pads], page_size=batch.page_size)


def pad_inputs(input_ids: torch.Tensor, positions: torch.Tensor, slot_mapping: torch.Tensor,
               size: int, scratch_page: int, page_size: int) -> torch.Tensor:
    """`[3, size]` int64 rows (token ids, positions, KV slots) on the inputs' device, padded as
    the module says: one tensor, so a replay fills its static inputs with one copy."""
    n = input_ids.shape[0]
    if not positions.shape[0] == slot_mapping.shape[0] == n or size < n:
        raise ValueError(f"cannot pad {n} decode rows to {size}")
    rows = torch.empty(3, size, dtype=torch.long, device=input_ids.device)
    rows[0, :n] = input_ids
    rows[1, :n] = positions
    rows[2, :n] = slot_mapping
    rows[0, n:] = 0
    rows[1, n:] = 0
    rows[2, n:] = scratch_page * page_size
    return rows
