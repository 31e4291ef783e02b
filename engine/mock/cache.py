"""The mock engine's pretend prefix cache: which full blocks of which prompts it has "seen".

It only tracks block hashes (no KV), so PrepRecv/MatchPrefix answer like a real engine would and
KVEvents feed the router's prefix index with the same hashes the real engines use.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from router_core import block_hashes


@dataclass(slots=True)
class MockPrefixCache:
    block_size: int
    seed: int
    held: set[int] = field(default_factory=set)
    # (seq, stored hashes); never evicts, so no evicted list is needed.
    events: list[tuple[int, list[int]]] = field(default_factory=list)
    last_seq: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def matched_len(self, tokens: Sequence[int], end: int) -> int:
        matched = 0
        for h in block_hashes(tokens[:end], self.block_size, self.seed):
            if h not in self.held:
                break
            matched += self.block_size
        return matched

    def store(self, tokens: Sequence[int]) -> None:
        new = [h for h in block_hashes(tokens, self.block_size, self.seed) if h not in self.held]
        if not new:
            return
        self.held.update(new)
        self.last_seq += 1
        self.events.append((self.last_seq, new))
        del self.events[:-1024]  # a subscriber further behind than this takes a snapshot
        self.changed.set()
        self.changed = asyncio.Event()

    def events_after(self, seq: int) -> list[tuple[int, list[int]]] | None:
        """Events with sequence > seq, or None when they were dropped (caller sends a snapshot)."""
        if seq >= self.last_seq:
            return []
        if not self.events or self.events[0][0] > seq + 1:
            return None
        return [e for e in self.events if e[0] > seq]
