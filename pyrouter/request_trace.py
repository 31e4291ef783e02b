"""The policy's part of a traced request's spans: its decisions, and the verbs Python calls.

The Rust front makes the request's spans (router_core/src/otel/request_spans.rs) and registers
the segment it has open under the request's engine-side id; the decision and the verbs hang
under that segment:

    router.request                         Rust: the request (child of the client's traceparent)
      router.segment  [k]                  Rust: segment k, from asking for it to its end
        router.decision                    here: the policy's choice and its explanation
          verb.prep_recv / verb.remote_send   -> the engines' spans (traceparent in metadata)
          (engine.kv_receive on the receiving engine: switchyard-kv-parent)
        verb.start_generate                -> engine.generate and its steps

Every span is made by router_core's tracer (the front's exporters: the JSONL file, OTLP), so the
router process runs no Python OpenTelemetry SDK. Verb spans open when their call starts (the
engines need their ids); a segment's verb.start_generate is then kept and ended by the front,
which reads the stream to its end. A decision's span opens with its first verb, or when the
request ends (a decision that only found the policy had nothing more leaves none); the
decisions and the other verbs end when the request ends, with the times its timeline recorded.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from switchyard_telemetry import attributes as A
from switchyard_telemetry.clock import perf_to_wall_ns, wall_offset_ns
from switchyard_telemetry.propagation import KV_PARENT, TRACEPARENT

if TYPE_CHECKING:
    from pyrouter.request import RouterRequest
    from pyrouter.request_timeline import SegmentTimes
    from router_core import RouterSpan

_RPC_METHODS = {"prep_recv": "PrepRecv", "remote_send": "RemoteSend",
                "start_generate": "StartGenerate"}
_PREDICTED = ("ttft_ms", "queue_ms", "prefill_ms", "decode_step_ms")


class SpanTracer(Protocol):
    """What this module needs of router_core.RouterTracer."""

    def segment_parent(self, engine_request_id: str) -> str | None: ...

    def start_generate_span(self, engine_request_id: str, engine: str, start_ns: int
                            ) -> list[tuple[str, str]]: ...

    def start_span(self, name: str, parent: str, start_ns: int,
                   attributes: dict[str, Any] | None = None) -> RouterSpan | None: ...


def start_request_trace(tracer: SpanTracer | None, req: RouterRequest) -> RequestTrace | None:
    """The request's trace when tracing is on and the front traces this request, else None."""
    if tracer is None or tracer.segment_parent(req.engine_request_id) is None:
        return None
    return RequestTrace(tracer, req.engine_request_id)


class _Decision:
    __slots__ = ("times", "segment", "span", "explanation", "verbs")

    def __init__(self, times: SegmentTimes, segment: str) -> None:
        self.times = times
        self.segment = segment  # traceparent of the front's segment it decides
        self.span: RouterSpan | None = None
        self.explanation: dict[str, Any] | None = None
        self.verbs = 0  # verb spans opened under this decision's segment


class RequestTrace:
    def __init__(self, tracer: SpanTracer, engine_request_id: str) -> None:
        self.tracer = tracer
        self.engine_request_id = engine_request_id
        self._decisions: list[_Decision] = []
        self._verbs: list[tuple[list[Any], RouterSpan]] = []

    def _segment(self) -> str | None:
        """The segment the front has open for the request (the last known, once it closed)."""
        parent = self.tracer.segment_parent(self.engine_request_id)
        if parent is None and self._decisions:
            return self._decisions[-1].segment
        return parent

    def begin_segment(self, times: SegmentTimes) -> None:
        segment = self._segment()
        if segment is not None:
            self._decisions.append(_Decision(times, segment))

    def decided(self, times: SegmentTimes, req: RouterRequest) -> None:
        if self._decisions and self._decisions[-1].times is times:
            self._decisions[-1].explanation = explanation(req)

    def drop_segment(self, times: SegmentTimes) -> None:
        """The policy had nothing more: the decision that found that out is not a segment's
        and gets no span, unless a verb already hangs off it."""
        if self._decisions and self._decisions[-1].times is times and not \
                self._decisions[-1].verbs:
            self._decisions.pop()

    def _decision_span(self, d: _Decision) -> RouterSpan | None:
        if d.span is None:
            d.span = self.tracer.start_span("router.decision", d.segment,
                                            perf_to_wall_ns(d.times.started))
        return d.span

    def verb(self, timing: list[Any]) -> tuple[tuple[str, str], ...]:
        """Open the verb's span (under the decision, or the segment for start_generate) and
        return the metadata that carries it to the engine."""
        verb, engine_id = timing[0], timing[1]
        current = self._decisions[-1] if self._decisions else None
        if verb == "start_generate":
            # Under the segment, and ended by the front, which reads the stream to its end.
            if current is not None:
                current.verbs += 1
            return tuple(self.tracer.start_generate_span(
                self.engine_request_id, engine_id, perf_to_wall_ns(timing[2])))
        parent = current.segment if current is not None else self._segment()
        if current is not None:
            current.verbs += 1
            if not current.times.decided:
                decision = self._decision_span(current)
                parent = decision.traceparent if decision is not None else None
        if parent is None:
            return ()
        span = self.tracer.start_span(
            f"verb.{verb}", parent, perf_to_wall_ns(timing[2]),
            {A.ENGINE: engine_id, A.RPC_METHOD: _RPC_METHODS.get(verb, verb)})
        if span is None:
            return ()
        self._verbs.append((timing, span))
        if verb == "prep_recv":
            # The KV lands while the decision runs the send: the receiver's span goes there.
            return ((TRACEPARENT, span.traceparent), (KV_PARENT, parent))
        return ((TRACEPARENT, span.traceparent),)

    def finish(self, req: RouterRequest) -> None:
        """End every span with the recorded times (the front ends its own)."""
        offset_ns = wall_offset_ns()  # one read for every end: equal instants stay equal
        ended = perf_to_wall_ns(req.timeline.ended, offset_ns)
        for timing, span in self._verbs:
            span.end(perf_to_wall_ns(timing[3], offset_ns) if timing[3] else ended)
        for d in self._decisions:
            times = d.times
            decision = self._decision_span(d)
            if decision is None:
                continue
            attrs = d.explanation
            if not attrs or not attrs.get(A.PATTERN):
                attrs = explanation(req)  # the dispatcher fills a default route afterwards
            decision.set_attributes({**attrs, A.DECIDED_BY: times.decided_by,
                                 A.SEGMENT_INDEX: times.index, A.ENGINE: times.engine,
                                 A.ENGINE_ROLE: times.role})
            if not times.decided:
                decision.set_error("no stream")
            seg_end = perf_to_wall_ns(times.ended, offset_ns) if times.ended else ended
            decision.end(perf_to_wall_ns(times.decided, offset_ns) if times.decided else seg_end)


def explanation(req: RouterRequest) -> dict[str, Any]:
    """Why the request went where it did: the route, the prefix each engine holds, and what
    router_core predicted for each engine (when the policy asked) — as span attributes, plus
    one line for `switchyard trace show`."""
    route = req.route.header()
    attrs: dict[str, Any] = {A.PATTERN: req.route.pattern}
    parts = [route]
    if req.matched_by_engine:
        for engine, n in sorted(req.matched_by_engine.items()):
            attrs[A.MATCHED_PREFIX + engine] = n
        parts.append("matched " + " ".join(f"{e}={n}" for e, n in
                                           sorted(req.matched_by_engine.items())))
    for engine, prediction in sorted((req.predictions or {}).items()):
        shown = []
        for quantity in _PREDICTED:
            value = float(getattr(prediction, quantity))
            if math.isfinite(value):
                attrs[f"{A.PREDICTED}{engine}.{quantity}"] = round(value, 3)
                shown.append(f"{quantity}={value:.1f}")
        if shown:
            parts.append(f"predicted {engine}: " + " ".join(shown))
    attrs[A.EXPLANATION] = "; ".join(parts)
    return attrs
