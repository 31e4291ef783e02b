"""EngineStats: the engine's load snapshot, field for field the proto's StatsResponse."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class EngineStats:
    engine_id: str
    role: str
    queued_requests: int
    queued_prefill_tokens: int
    running_requests: int
    unfinished_tokens: int
    kv_pages_used: int
    kv_pages_total: int
    cached_blocks: int
    recent_step_ms: list[float] = field(default_factory=list)
    decode_step_ms: float = 0.0
    page_size: int = 16
    leases: int = 0
    latency_coeffs: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    kv_event_seq: int = 0
