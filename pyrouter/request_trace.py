"""The router's spans of one sampled request, through the OpenTelemetry SDK.

    router.request                         (child of the client's traceparent, if it sent one)
      router.segment  [k]                  the decision + the generation that followed
        router.decision                    the policy's choice and its explanation
          verb.prep_recv / verb.remote_send   -> the engines' spans (traceparent in metadata)
          (engine.kv_receive on the receiving engine: switchyard-kv-parent)
        verb.start_generate                -> engine.generate and its steps

Spans are opened at request and segment boundaries (the engines need their ids while the
request runs) and all ended when the request ends, with the times its timeline recorded.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from switchyard_telemetry import attributes as A
from switchyard_telemetry.clock import perf_to_wall_ns
from switchyard_telemetry.propagation import KV_PARENT, TRACEPARENT, from_headers, traceparent

if TYPE_CHECKING:
    from pyrouter.request import RouterRequest
    from pyrouter.timeline import SegmentTimes

_RPC_METHODS = {"prep_recv": "PrepRecv", "remote_send": "RemoteSend",
                "start_generate": "StartGenerate"}
_PREDICTED = ("ttft_ms", "queue_ms", "prefill_ms", "decode_step_ms")


def start_request_trace(tracer: Tracer | None, req: RouterRequest,
                        headers: Mapping[str, str]) -> RequestTrace | None:
    """The request's trace when tracing is on and the sampler keeps it, else None."""
    if tracer is None:
        return None
    parent = from_headers(headers) if TRACEPARENT in headers else None
    span = tracer.start_span("router.request", context=parent,
                             start_time=perf_to_wall_ns(req.timeline.started))
    if not span.is_recording():
        return None
    return RequestTrace(tracer, span)


class _SegmentSpans:
    __slots__ = ("times", "segment", "decision", "explanation", "segment_ctx", "decision_ctx",
                 "verbs")

    def __init__(self, times: SegmentTimes, segment: Span, segment_ctx: Context, decision: Span,
                 decision_ctx: Context) -> None:
        self.times, self.segment, self.decision = times, segment, decision
        self.segment_ctx, self.decision_ctx = segment_ctx, decision_ctx
        self.explanation: dict[str, Any] | None = None
        self.verbs = 0  # verb spans opened under this segment


class RequestTrace:
    def __init__(self, tracer: Tracer, span: Span) -> None:
        self.tracer = tracer
        self.span = span
        self._context = trace.set_span_in_context(span)
        self._segments: list[_SegmentSpans] = []
        self._verbs: list[tuple[list[Any], Span]] = []

    def begin_segment(self, times: SegmentTimes) -> None:
        at = perf_to_wall_ns(times.started)
        segment = self.tracer.start_span("router.segment", context=self._context, start_time=at)
        segment_ctx = trace.set_span_in_context(segment)
        decision = self.tracer.start_span("router.decision", context=segment_ctx, start_time=at)
        self._segments.append(_SegmentSpans(times, segment, segment_ctx, decision,
                                            trace.set_span_in_context(decision)))

    def decided(self, times: SegmentTimes, req: RouterRequest) -> None:
        if self._segments and self._segments[-1].times is times:
            self._segments[-1].explanation = explanation(req)

    def drop_segment(self, times: SegmentTimes) -> None:
        """The policy had nothing more: the decision that found that out is not a segment. Its
        spans are never ended (so never exported), unless a verb already hangs off them."""
        if self._segments and self._segments[-1].times is times and not self._segments[-1].verbs:
            self._segments.pop()

    def verb(self, timing: list[Any]) -> tuple[tuple[str, str], ...]:
        """Open the verb's span (under the decision, or the segment for start_generate) and
        return the metadata that carries it to the engine."""
        verb, engine_id = timing[0], timing[1]
        current = self._segments[-1] if self._segments else None
        if current is None:
            parent, parent_ctx = self.span, self._context
        elif verb == "start_generate" or current.times.decided:
            parent, parent_ctx = current.segment, current.segment_ctx
        else:
            parent, parent_ctx = current.decision, current.decision_ctx
        if current is not None:
            current.verbs += 1
        span = self.tracer.start_span(
            f"verb.{verb}", context=parent_ctx, start_time=perf_to_wall_ns(timing[2]),
            attributes={A.ENGINE: engine_id, A.RPC_METHOD: _RPC_METHODS.get(verb, verb)})
        self._verbs.append((timing, span))
        if verb == "prep_recv":
            # The KV lands while the decision runs the send: the receiver's span goes there.
            return ((TRACEPARENT, traceparent(span)), (KV_PARENT, traceparent(parent)))
        return ((TRACEPARENT, traceparent(span)),)

    def finish(self, req: RouterRequest, policy: str, status: str, error_type: str) -> None:
        """End every span with the recorded times; the request's own attributes go on the root."""
        tl = req.timeline
        ended = perf_to_wall_ns(tl.ended)
        for timing, span in self._verbs:
            span.end(end_time=perf_to_wall_ns(timing[3]) if timing[3] else ended)
        for s in self._segments:
            times = s.times
            seg_end = perf_to_wall_ns(times.ended) if times.ended else ended
            attrs = s.explanation
            if not attrs or not attrs.get(A.PATTERN):
                attrs = explanation(req)  # the dispatcher fills a default route afterwards
            s.decision.set_attributes({**attrs, A.DECIDED_BY: times.decided_by,
                                       A.SEGMENT_INDEX: times.index})
            if not times.decided:
                s.decision.set_status(Status(StatusCode.ERROR, "no stream"))
            s.decision.end(end_time=perf_to_wall_ns(times.decided) if times.decided else seg_end)
            s.segment.set_attributes({A.SEGMENT_INDEX: times.index, A.ENGINE: times.engine,
                                      A.ENGINE_ROLE: times.role, A.SEGMENT_TOKENS: times.tokens,
                                      A.SEGMENT_END: times.end_reason or status})
            s.segment.end(end_time=seg_end)
        span = self.span
        root: dict[str, Any] = {
            A.GENAI_OPERATION: "chat" if req.kind == "chat" else "text_completion",
            A.GENAI_REQUEST_MODEL: req.model, A.GENAI_REQUEST_MAX_TOKENS: req.sampling.max_tokens,
            A.GENAI_REQUEST_TEMPERATURE: req.sampling.temperature,
            A.GENAI_INPUT_TOKENS: req.prompt_len, A.GENAI_OUTPUT_TOKENS: req.completion_tokens,
            A.REQUEST_ID: req.request_id, A.ENGINE_REQUEST_ID: req.engine_request_id,
            A.POLICY: policy, A.STATUS: status, A.PATTERN: req.route.label(),
            A.ROUTE: req.route.header(),
            A.ENGINES: ",".join(sorted({s.times.engine for s in self._segments
                                        if s.times.engine}))}
        if tl.first_token is not None:
            root[A.TTFT_MS] = round((tl.first_token - tl.started) * 1e3, 3)
        if status != "ok":
            root[A.ERROR_TYPE] = error_type or status
            span.set_status(Status(StatusCode.ERROR, error_type or status))
        span.set_attributes(root)
        span.end(end_time=ended)


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
