"""A slow, obviously-correct Python statement of router_core's block hash (the spec the Rust
implementation must match byte for byte; see router_core/src/hashing.rs)."""
from __future__ import annotations

import struct
from collections.abc import Sequence

import xxhash

_MODEL_SEED_DOMAIN = b"switchyard-model-seed:"


def reference_block_hashes(tokens: Sequence[int], block_size: int, seed: int) -> list[int]:
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tokens[start : start + block_size]
        data = struct.pack("<Q", parent) + struct.pack(f"<{block_size}I", *block)
        parent = xxhash.xxh3_64_intdigest(data, seed=seed)
        hashes.append(parent)
    return hashes


def reference_model_seed(model_id: str) -> int:
    return xxhash.xxh3_64_intdigest(_MODEL_SEED_DOMAIN + model_id.encode("utf-8"))
