"""RequestTimeline: when each part of a request happened, collected on the request as it runs.

Only timestamps are taken while a request runs — at its start, at each segment's decision and
end, and one per engine chunk the client receives — and they are turned into metrics and spans
once, when the request ends (pyrouter/request_end.py). Inter-token latencies come from the
chunk arrival list, so a token loop outside Python can hand the same list over at the end. A
request the front traces also has a RequestTrace (pyrouter/request_trace.py) that opens the
policy's decision and verb spans at these boundaries (the engines need their ids while the
request runs); the request and segment spans are the front's.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyrouter.request import RouterRequest
    from pyrouter.request_trace import RequestTrace


@dataclass(slots=True)
class SegmentTimes:
    """One segment: the decision that placed it, then its generation on one engine."""

    index: int
    decided_by: str            # "policy" | "migration"
    started: float             # perf_counter s: the decision began
    decided: float = 0.0       # a stream came back (0: the decision failed)
    ended: float = 0.0         # its last chunk arrived (0: still running / never ran)
    engine: str = ""
    role: str = ""
    tokens: int = 0
    end_reason: str = ""       # the engine's finish reason, "handoff", "interrupted", ...
    first_arrival: int = 0     # index of its first chunk in the timeline's arrivals


@dataclass(slots=True)
class RequestTimeline:
    # Looked up at each call, not bound at import: the simulator points it at virtual time.
    started: float = field(default_factory=lambda: time.perf_counter())
    first_token: float | None = None
    ended: float = 0.0
    segments: list[SegmentTimes] = field(default_factory=list)
    # One entry per engine chunk the client got: arrival (perf_counter s) and its token count.
    arrival_times: list[float] = field(default_factory=list)
    arrival_tokens: list[int] = field(default_factory=list)
    trace: RequestTrace | None = None

    # ---- hooks (request and segment boundaries, one per chunk) ----
    def begin_segment(self, decided_by: str) -> SegmentTimes:
        segment = SegmentTimes(len(self.segments), decided_by, time.perf_counter(),
                               first_arrival=len(self.arrival_times))
        self.segments.append(segment)
        if self.trace is not None:
            self.trace.begin_segment(segment)
        return segment

    def decided(self, segment: SegmentTimes, engine: Any, req: RouterRequest) -> None:
        segment.decided = time.perf_counter()
        segment.engine, segment.role = engine.id, engine.role
        if self.trace is not None:
            self.trace.decided(segment, req)

    def drop_segment(self, segment: SegmentTimes) -> None:
        """The decision found the policy had nothing more: not a segment after all."""
        self.segments.remove(segment)
        if self.trace is not None:
            self.trace.drop_segment(segment)

    def arrived(self, tokens: int, at: float | None = None) -> None:
        self.arrival_times.append(time.perf_counter() if at is None else at)
        self.arrival_tokens.append(tokens)

    def end_segment(self, tokens: int, reason: str) -> None:
        if self.segments and not self.segments[-1].ended:
            segment = self.segments[-1]
            segment.ended, segment.tokens, segment.end_reason = (time.perf_counter(), tokens,
                                                                 reason)

    def verb_metadata(self, timing: list[Any]) -> tuple[tuple[str, str], ...] | None:
        """gRPC metadata for a verb call: its span's trace context (sampled requests only)."""
        return None if self.trace is None else self.trace.verb(timing)

    # ---- read when the request ends ----
    @property
    def first_segment(self) -> SegmentTimes | None:
        return next((s for s in self.segments if s.engine), None)

    @property
    def last_segment(self) -> SegmentTimes | None:
        return next((s for s in reversed(self.segments) if s.engine), None)

    def inter_token_gaps(self) -> Iterator[tuple[SegmentTimes, float, int]]:
        """(segment, seconds per token, tokens) for every chunk after the first: a chunk of k
        tokens that arrived g seconds after the previous one counts k gaps of g/k (its tokens
        were produced in that time; how evenly, the router cannot see)."""
        times, tokens = self.arrival_times, self.arrival_tokens
        segments = [s for s in self.segments if s.engine]
        seg_index = 0
        for i in range(1, len(times)):
            while seg_index + 1 < len(segments) and segments[seg_index + 1].first_arrival <= i:
                seg_index += 1
            if tokens[i] > 0 and segments:
                yield segments[seg_index], (times[i] - times[i - 1]) / tokens[i], tokens[i]
