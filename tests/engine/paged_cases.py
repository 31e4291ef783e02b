"""Random paged attention steps for backend tests (torch backend, FlashInfer backend).

Decodes, fresh prefills and prefix-extending chunks over shuffled pages of a 2-layer KV (layer 1
used), the cached prefixes already written; queries and new K/V random.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from engine.attention.context import BatchLayout, ForwardContext, SeqLayout
from engine.kvcache.kv_storage import KVStorage


@dataclass
class RandomStep:
    kv: KVStorage
    batch: BatchLayout
    slots: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    heads: int
    # per sequence, all of its K/V (cached prefix + new), float32 as drawn
    full_k: list[torch.Tensor]
    full_v: list[torch.Tensor]

    def context(self, backend: Any) -> ForwardContext:
        return ForwardContext(batch=self.batch, slot_mapping=self.slots,
                              sample_indices=torch.arange(0), kv=self.kv, backend=backend)


def random_step(seed: int, dtype: torch.dtype, decodes_first: bool = False,
                extra_pages: int = 3) -> RandomStep:
    """Decodes, fresh prefills and prefix-extending chunks over shuffled pages of a 2-layer KV
    (layer 1 used), cached prefixes already written; queries and new K/V random."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    page_size = rng.choice([1, 4, 16])
    kv_heads = rng.choice([1, 2, 3])
    heads = kv_heads * rng.choice([1, 3, 4])
    dim = rng.choice([16, 64])
    shapes = [(rng.randint(0, 40), 1) for _ in range(rng.randint(0, 4))]
    multi = [(0, rng.randint(2, 30)) for _ in range(rng.randint(0, 2))]
    multi += [(rng.randint(1, 40), rng.randint(2, 20)) for _ in range(rng.randint(0, 2))]
    if decodes_first:
        shapes += multi
    else:
        shapes += multi
        rng.shuffle(shapes)
    if not shapes:
        shapes = [(5, 1)]
    needed = [-(-(p + n) // page_size) for p, n in shapes]
    num_pages = sum(needed) + extra_pages
    free = list(range(num_pages))
    rng.shuffle(free)
    kv = KVStorage(num_layers=2, num_pages=num_pages, page_size=page_size, num_kv_heads=kv_heads,
                   head_dim=dim, dtype=dtype)
    seqs, slots, new_k, new_v, full_k, full_v = [], [], [], [], [], []
    q_start = 0
    for (prefix, new), need in zip(shapes, needed, strict=True):
        table, free = free[:need], free[need:]
        k_all = torch.randn(prefix + new, kv_heads, dim)
        v_all = torch.randn(prefix + new, kv_heads, dim)
        kv.write(1, table, 0, k_all[:prefix], v_all[:prefix])
        seqs.append(SeqLayout(q_start=q_start, q_len=new, ctx_len=prefix + new, page_table=table))
        slots.append(kv.slots(table, prefix, prefix + new))
        full_k.append(k_all)
        full_v.append(v_all)
        new_k.append(k_all[prefix:])
        new_v.append(v_all[prefix:])
        q_start += new
    return RandomStep(kv, BatchLayout(seqs=seqs, page_size=page_size), torch.cat(slots),
                      torch.randn(q_start, heads, dim).to(dtype), torch.cat(new_k).to(dtype),
                      torch.cat(new_v).to(dtype), heads, full_k, full_v)
