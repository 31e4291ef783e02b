"""The router's finished requests, from router_core's records, into its metrics and each served
model's outcome window: every request ends in Rust (whichever policy decided it), and its record
is drained here a few times a second — and before /metrics answers — rather than once per
request."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from pyrouter.metrics.router_metrics import RouterMetrics
from pyrouter.request_end import Labels, record_request_metrics
from pyrouter.state import RouterState
from router_core import RequestRecord, engine_name

log = logging.getLogger("switchyard.router")
RECORD_INTERVAL_S = 0.25  # how stale the metrics and outcomes may be
RECORD_SLICE = 64  # records between two yields to the loop (about 1 ms of Python)


class RecordSource(Protocol):
    """RouterFront or InProcessFront."""

    def drain_records(self) -> tuple[list[RequestRecord], int]: ...


class RequestRecorder:
    def __init__(self, state: RouterState, front: RecordSource) -> None:
        self.state = state
        self.front = front
        self._dropped = 0

    def _labels(self, pattern: str, num: int) -> Labels:
        name = engine_name(num)
        handle = self.state.engines.engines.get(name)
        return pattern, name, handle.role if handle else "any"

    def record(self) -> int:
        """Record every finished request the front holds; returns how many."""
        records = self._drain()
        self._record(records)
        return len(records)

    def _drain(self) -> list[RequestRecord]:
        records, dropped = self.front.drain_records()
        if dropped > self._dropped:
            log.warning("%d finished request(s) were not recorded (the recorder fell behind)",
                        dropped - self._dropped)
            self._dropped = dropped
        return records

    def _record(self, records: list[RequestRecord]) -> None:
        state, m = self.state, self.state.metrics
        now = time.monotonic()
        for r in records:
            self._one(m, r, now)
            state.group(r.model).dispatcher.record_outcome(
                now - r.age_s, r.pattern, r.ok, r.ttft_s, r.tpot_s, r.slo_ttft_ms,
                r.slo_tpot_ms)

    def _one(self, m: RouterMetrics, r: Any, now: float) -> None:
        status = "ok" if r.ok else "error"
        segments = r.segments
        first = self._labels(r.pattern, segments[0].engine) if segments else None
        last = self._labels(r.pattern, segments[-1].engine) if segments else None
        if first is not None:
            m.count_selection(r.policy, r.pattern)
        m.child(m.model_requests, r.model, status).inc()
        record_request_metrics(m, r.policy, r.pattern, status, r.error_type, first, last,
                               r.ttft_s, r.e2e_s, r.tpot_s, r.prompt_tokens,
                               r.completion_tokens)
        for segment in segments:
            if segment.gap_s is not None:
                # One mean gap per segment: the front reads chunks, not each token's time.
                m.itl.observe_many(self._labels(r.pattern, segment.engine), segment.gap_s,
                                   segment.tokens - 1)

    async def run(self) -> None:
        """Record every RECORD_INTERVAL_S until cancelled (then once more), a slice at a time:
        at 10,000 requests a second one drain holds 2,500 records, some 40 ms of Python that
        would otherwise hold up every decision waiting on this loop (the Python-policy path's
        p99, docs/benchmarks.md)."""
        try:
            while True:
                await asyncio.sleep(RECORD_INTERVAL_S)
                records = self._drain()
                for start in range(0, len(records), RECORD_SLICE):
                    self._record(records[start:start + RECORD_SLICE])
                    await asyncio.sleep(0)
        finally:
            self.record()
