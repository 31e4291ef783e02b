"""EngineStats: the engine's load snapshot, field for field the proto's StatsResponse; LoadKey: the
part of it that routing reads, whose change makes the engine push its Stats to the routers
(engine/server/load_push.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


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
    kv_event_seq: int = 0
    # Step-time model (engine/core/latency_model.py): term -> ms per unit; {} = none yet.
    latency_model: dict[str, float] = field(default_factory=dict)
    latency_model_version: str = ""
    latency_model_source: str = "none"
    latency_model_samples: int = 0
    latency_model_fit_error: float = 0.0
    prefill_chunk_size: int = 0
    decode_requests: int = 0
    decode_context_tokens: int = 0
    kv_pages_evictable: int = 0
    kv_pages_reserved: int = 0  # pages PrepRecv reservations hold (leases)
    # Page-ownership audits run and those that found a problem (0, 0 unless check_pages).
    kv_page_audits: int = 0
    kv_page_audit_failures: int = 0
    # Of queued_prefill_tokens, the most one request has left to prefill.
    longest_queued_prefill_tokens: int = 0


class LoadKey(NamedTuple):
    """What a router routes by, cheap to take (no step-model fit): the engine pushes its Stats when
    this changes. Timings (recent_step_ms, decode_step_ms) are left out — noise, not load: they
    change only with steps, which change the load too. The step model's coefficients are
    represented by its source and sample count. Every name is an EngineStats field."""
    queued_requests: int
    queued_prefill_tokens: int
    running_requests: int
    unfinished_tokens: int
    kv_pages_used: int
    kv_pages_total: int
    cached_blocks: int
    leases: int
    latency_model_source: str
    latency_model_samples: int
    prefill_chunk_size: int
    decode_requests: int
    decode_context_tokens: int
    kv_pages_evictable: int
    kv_pages_reserved: int
    longest_queued_prefill_tokens: int

    @classmethod
    def of(cls, stats: EngineStats) -> LoadKey:
        return cls(*(getattr(stats, name) for name in cls._fields))
