"""What EngineCore hands back: per-step outputs, send progress and their timings."""
from __future__ import annotations

from dataclasses import dataclass, field

# "stop" | "length" | "abort" | "handoff" | "error" | "sent"
FinishReason = str


@dataclass(slots=True)
class StepTimings:
    queue_ms: float = 0.0  # arrival -> first scheduled (first output of a request only)
    prefill_ms: float = 0.0  # first scheduled -> first token / send done (first output only)
    step_ms: float = 0.0  # the step that produced this output


@dataclass(slots=True)
class StepOutput:
    request_id: str
    new_token_ids: list[int]
    finish_reason: FinishReason | None
    timings: StepTimings = field(default_factory=StepTimings)
    text: str = ""  # detokenised delta (complete UTF-8 only)
    logprobs: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV was present before this request ran
    error: str | None = None
    first: bool = False  # the first output of this request (carries queue/prefill timings)


@dataclass(slots=True)
class SendChunk:
    """After `layer` ran: K/V of positions [start, stop) now sit in `page_table`'s pages."""

    layer: int
    start: int
    stop: int
    page_table: list[int]


@dataclass(slots=True)
class Reservation:
    """prep_recv's answer: tokens[:matched_len] are cached here; write [matched_len, end)."""

    request_id: str
    matched_len: int
    end: int
    page_table: list[int]
    expires_at: float
