"""The router's handle on router_core: prefix index + engine table + scorer, all in Rust."""
from __future__ import annotations

from router_core import RouterCore


def make_router_core(block_size: int, seed: int) -> RouterCore:
    return RouterCore(block_size, seed)
