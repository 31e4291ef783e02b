"""OpenTelemetry export of the router's per-request spans (request + one child per verb).

Enabled when a standard OTEL_* exporter endpoint is configured (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Spans are emitted when the request ends, with their real
start/end times, so nothing runs on the streaming hot path; an incoming W3C `traceparent`
header makes the request span a child of the client's trace.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pyrouter.request import RouterRequest
from pyrouter.tracing import wall_ms


def _ns(perf_s: float) -> int:
    return int(wall_ms(perf_s) * 1_000_000)


class OtelExporter:
    def __init__(self, tracer: Any) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer
        self._propagator = TraceContextTextMapPropagator()

    def export_request(self, req: RouterRequest, policy: str, headers: Mapping[str, str],
                       started_s: float, first_token_s: float | None, ended_s: float,
                       status: str) -> None:
        from opentelemetry import trace

        parent = self._propagator.extract(carrier=dict(headers))
        span = self.tracer.start_span("router.request", context=parent,
                                      start_time=_ns(started_s))
        span.set_attributes({
            "switchyard.request_id": req.request_id, "switchyard.policy": policy,
            "switchyard.route": req.route.header(), "switchyard.kind": req.kind,
            "switchyard.prompt_tokens": req.prompt_len,
            "switchyard.completion_tokens": req.completion_tokens,
            "switchyard.status": status})
        if first_token_s is not None:
            span.set_attribute("switchyard.ttft_ms", (first_token_s - started_s) * 1000)
        ctx = trace.set_span_in_context(span)
        for verb, engine_id, t0, t1 in req.scope.verb_times:
            child = self.tracer.start_span(f"verb.{verb}", context=ctx, start_time=_ns(t0))
            child.set_attribute("switchyard.engine", engine_id)
            child.end(end_time=_ns(t1 or ended_s))
        if status != "ok":
            span.set_status(trace.Status(trace.StatusCode.ERROR, status))
        span.end(end_time=_ns(ended_s))


def otel_exporter_from_env() -> OtelExporter | None:
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME", "switchyard-router")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return OtelExporter(provider.get_tracer("switchyard.router"))
