"""StepTrace: what the steps did for one traced request — filled on the step thread, read once
when the request ends (engine/server/spans.py turns it into spans). Plain data, no OpenTelemetry:
the core records; the server exports. Only requests that came with a sampled trace context have
one, so an untraced request costs one `is None` check per step."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class StepRecord:
    started: float          # perf_counter s: the step began (scheduling)
    ended: float            # its outputs were ready
    start_pos: int          # first position this request's chunk computed
    tokens: int             # positions it computed in this step
    decode: bool            # a decode step for this request (else a prefill chunk)
    batch_seqs: int         # sequences in the step
    batch_prefill_tokens: int
    batch_decode_seqs: int


@dataclass(slots=True)
class StepTrace:
    queued: float = field(default_factory=time.perf_counter)  # entered the scheduler's queue
    steps: list[StepRecord] = field(default_factory=list)
    preempted_at: list[float] = field(default_factory=list)


@dataclass(slots=True)
class ReceiveStats:
    """KV written into one reservation by transfers (always kept: the metrics use it too)."""

    first_at: float = 0.0   # perf_counter s of the first and last write
    last_at: float = 0.0
    bytes: int = 0
    writes: int = 0
    layers: set[int] = field(default_factory=set)
