"""The plan arithmetic of a paged-attention step in FlashInfer's CSR form, in plain torch.

FlashInfer describes a batch of sequences over a paged KV cache with four int32 arrays:
`qo_indptr` (prefix sums of query rows), `kv_indptr` (prefix sums of pages), `kv_indices` (the
pages, sequence after sequence) and `kv_last_page_len` (tokens used in each sequence's last page,
1..page_size). This module derives them from a `BatchLayout`, split into the single-token queries
(the decode wrapper) and the multi-token chunks (the prefill wrapper, causal), with no CUDA and no
flashinfer, so CPU tests check it against the torch backend and the CUDA backend only feeds it in.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.attention.context import BatchLayout, SeqLayout


class BadLayout(ValueError):
    """A sequence's page table cannot hold its context, or a query range is empty."""


@dataclass(slots=True)
class PagedIndex:
    """One wrapper's share of the step (all tensors int32 on the CPU, as FlashInfer plans them)."""

    qo_indptr: torch.Tensor  # [n + 1]
    kv_indptr: torch.Tensor  # [n + 1]
    kv_indices: torch.Tensor  # [kv_indptr[-1]]
    kv_last_page_len: torch.Tensor  # [n]
    # Rows of the step's flattened token dimension these queries occupy, in qo_indptr order.
    rows: torch.Tensor  # [qo_indptr[-1]] int64
    # rows == [rows_start, rows_start + len(rows)): the queries (and outputs) are one slice.
    rows_start: int | None

    @property
    def num_seqs(self) -> int:
        return int(self.kv_last_page_len.shape[0])

    @property
    def num_rows(self) -> int:
        return int(self.rows.shape[0])


def pages_in_use(seq: SeqLayout, page_size: int) -> int:
    if seq.q_len <= 0 or seq.ctx_len < seq.q_len:
        raise BadLayout(f"sequence with q_len={seq.q_len}, ctx_len={seq.ctx_len}")
    needed = -(-seq.ctx_len // page_size)
    if needed > len(seq.page_table):
        raise BadLayout(f"sequence needs {needed} pages for {seq.ctx_len} tokens, page table has "
                        f"{len(seq.page_table)}")
    return needed


def paged_index(seqs: list[SeqLayout], page_size: int) -> PagedIndex:
    """CSR description of `seqs` (in the given order) over pages of `page_size` tokens."""
    qo = [0]
    kv = [0]
    indices: list[int] = []
    last: list[int] = []
    rows: list[int] = []
    for seq in seqs:
        pages = pages_in_use(seq, page_size)
        indices.extend(seq.page_table[:pages])
        qo.append(qo[-1] + seq.q_len)
        kv.append(kv[-1] + pages)
        last.append(seq.ctx_len - (pages - 1) * page_size)
        rows.extend(range(seq.q_start, seq.q_start + seq.q_len))
    contiguous = all(r == rows[0] + i for i, r in enumerate(rows)) if rows else True
    return PagedIndex(
        qo_indptr=torch.tensor(qo, dtype=torch.int32),
        kv_indptr=torch.tensor(kv, dtype=torch.int32),
        kv_indices=torch.tensor(indices, dtype=torch.int32),
        kv_last_page_len=torch.tensor(last, dtype=torch.int32),
        rows=torch.tensor(rows, dtype=torch.long),
        rows_start=(rows[0] if rows else 0) if contiguous else None,
    )


def split_step(batch: BatchLayout) -> tuple[PagedIndex, PagedIndex]:
    """(decodes, prefills): single-token queries for the decode kernel, the rest for the causal
    prefill kernel. Each keeps the step's sequence order."""
    decodes = [s for s in batch.seqs if s.is_decode]
    prefills = [s for s in batch.seqs if not s.is_decode]
    return paged_index(decodes, batch.page_size), paged_index(prefills, batch.page_size)


def key_slots(index: PagedIndex, page_size: int) -> list[torch.Tensor]:
    """Per sequence, the flat KV slots (page * page_size + offset) of positions 0..ctx_len that
    the CSR arrays describe: what a kernel given `index` attends over. Tests compare it with the
    pages the torch backend gathers."""
    slots = []
    for i in range(index.num_seqs):
        pages = index.kv_indices[index.kv_indptr[i]:index.kv_indptr[i + 1]].long()
        length = (len(pages) - 1) * page_size + int(index.kv_last_page_len[i])
        positions = torch.arange(length)
        slots.append(pages[positions // page_size] * page_size + positions % page_size)
    return slots
