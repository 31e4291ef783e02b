"""Plays the Rust front's part of a traced request for tests that run the dispatcher in-process:
the `router.request` span and segment 0, then a new `router.segment` span each time the
dispatcher begins a later segment, registered with the tracer (the front opens a segment as it
asks the policy for it) — made with router_core's own tracer, written to a JSONL file."""
from __future__ import annotations

import time
from typing import Any

from pyrouter.request_timeline import RequestTimeline, SegmentTimes
from router_core import RouterSpan, RouterTracer
from switchyard_telemetry.jsonl import read_spans

CLIENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class FrontSpans:
    def __init__(self, tracer: RouterTracer, engine_request_id: str,
                 parent: str = CLIENT) -> None:
        self.tracer = tracer
        self.engine_request_id = engine_request_id
        root = tracer.start_span("router.request", parent, time.time_ns())
        assert root is not None
        self.root: RouterSpan = root
        self.segments: list[RouterSpan] = []
        self.open_segment()

    def open_segment(self) -> None:
        segment = self.tracer.start_span("router.segment", self.root.traceparent,
                                         time.time_ns(),
                                         {"switchyard.segment.index": len(self.segments)})
        assert segment is not None
        # Registering the next segment ends the last one's generation span, then the last one.
        self.tracer.set_segment(self.engine_request_id, segment.traceparent)
        if self.segments:
            self.segments[-1].end()
        self.segments.append(segment)

    def close(self) -> None:
        self.tracer.forget_request(self.engine_request_id)  # ends the generation's span
        for span in (*self.segments, self.root):
            span.end()


class FrontTimeline(RequestTimeline):
    """A timeline whose later segments the front opens first, as in the router."""

    def __init__(self, front: FrontSpans) -> None:
        super().__init__()
        self.front = front

    def begin_segment(self, decided_by: str) -> SegmentTimes:
        if self.segments:
            self.front.open_segment()
        return super().begin_segment(decided_by)


def spans_by_id(tracer: RouterTracer, path: str) -> dict[str, dict[str, Any]]:
    tracer.flush()
    return {s["span_id"]: s for s in read_spans([path])}
