"""A pure-Python stand-in for the parts of router_core.RouterCore the router uses.

Only used while the Rust extension lacks RouterCore (it lands progressively); it has no prefix
index, so every match is 0 and scoring is by load alone. Same method names as the .pyi contract.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class FallbackLoad:
    engine_id: int
    role: str
    healthy: bool = True
    queued_prefill_tokens: int = 0
    running_decodes: int = 0
    unfinished_tokens: int = 0
    kv_pages_used: int = 0
    kv_pages_total: int = 0
    decode_step_ms: float = 0.0
    latency_coeffs: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    inflight: int = 0
    router_tokens: int = 0  # router-side unfinished tokens since dispatch


class FallbackTable:
    def __init__(self) -> None:
        self.loads: dict[int, FallbackLoad] = {}

    def upsert(self, engine_id: int, role: str) -> None:
        self.loads.setdefault(engine_id, FallbackLoad(engine_id, role)).role = role

    def remove(self, engine_id: int) -> None:
        self.loads.pop(engine_id, None)

    def set_health(self, engine_id: int, healthy: bool) -> None:
        self.loads[engine_id].healthy = healthy

    def update_stats(self, engine_id: int, queued_prefill_tokens: int, running_decodes: int,
                     unfinished_tokens: int, kv_pages_used: int, kv_pages_total: int,
                     decode_step_ms: float, latency_coeffs: Sequence[float]) -> None:
        load = self.loads[engine_id]
        load.queued_prefill_tokens = queued_prefill_tokens
        load.running_decodes = running_decodes
        load.unfinished_tokens = unfinished_tokens
        load.kv_pages_used, load.kv_pages_total = kv_pages_used, kv_pages_total
        load.decode_step_ms = decode_step_ms
        load.latency_coeffs = list(latency_coeffs)

    def on_dispatch(self, engine_id: int, prefill_tokens: int, decode_tokens: int) -> None:
        if (load := self.loads.get(engine_id)) is not None:
            load.inflight += 1
            load.router_tokens += prefill_tokens + decode_tokens

    def on_complete(self, engine_id: int, prefill_tokens: int, decode_tokens: int) -> None:
        if (load := self.loads.get(engine_id)) is not None:
            load.inflight = max(0, load.inflight - 1)
            load.router_tokens = max(0, load.router_tokens - prefill_tokens - decode_tokens)

    def get(self, engine_id: int) -> FallbackLoad:
        return self.loads[engine_id]

    def all(self) -> list[FallbackLoad]:
        return list(self.loads.values())


class FallbackIndex:
    def add_engine(self, engine_id: int, approximate: bool = False) -> None: ...
    def remove_engine(self, engine_id: int) -> None: ...

    def apply_events(self, engine_id: int, first_seq: int, last_seq: int,
                     stored: Sequence[int], evicted: Sequence[int]) -> bool:
        return True

    def apply_snapshot(self, engine_id: int, last_seq: int, stored: Sequence[int]) -> None: ...

    def num_blocks(self) -> int:
        return 0


@dataclass(slots=True)
class FallbackCandidate:
    engine_id: int
    matched_tokens: int
    cost: float


@dataclass(slots=True)
class FallbackScore:
    best: int | None
    candidates: list[FallbackCandidate]

    def matched(self, engine_id: int) -> int:
        return 0


class FallbackRouterCore:
    def __init__(self, block_size: int, seed: int) -> None:
        self.table = FallbackTable()
        self.index = FallbackIndex()

    def score(self, tokens: Sequence[int], role: str | None = None) -> FallbackScore:
        cands = [FallbackCandidate(load.engine_id, 0, float(load.router_tokens))
                 for load in self.table.loads.values()
                 if load.healthy and (role in (None, "any") or load.role in (role, "any"))]
        cands.sort(key=lambda c: c.cost)
        return FallbackScore(cands[0].engine_id if cands else None, cands)
