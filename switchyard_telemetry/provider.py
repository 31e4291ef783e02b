"""One OpenTelemetry SDK set-up for every Switchyard Python process (the engines), from the
environment. The router reads the same variables in Rust (router_core/src/otel/router_tracer.rs).

Tracing is on when any exporter is configured: SWITCHYARD_TRACE_FILE (the JSONL span file),
OTLP (OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_TRACES_EXPORTER
naming `otlp`), or `console` in OTEL_TRACES_EXPORTER; several at once are fine. Off otherwise,
or with OTEL_SDK_DISABLED=true: then no SDK object exists and tracing costs nothing. The SDK
reads the rest of the standard variables itself: OTEL_TRACES_SAMPLER / _ARG (sampling; the
default `parentbased_always_on` keeps a caller's decision), OTEL_BSP_* (batching),
OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
"""
from __future__ import annotations

import os

from opentelemetry.trace import Tracer


def _exporter_names() -> set[str]:
    return {n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()}


def tracer_from_env(default_service: str, attributes: dict[str, str] | None = None
                    ) -> Tracer | None:
    """A tracer exporting to what the environment configures, or None when nothing is."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    names = _exporter_names()
    trace_file = os.environ.get("SWITCHYARD_TRACE_FILE", "")
    otlp = "otlp" in names or bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                                   or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    if "none" in names:
        otlp = False
    if not (trace_file or otlp or "console" in names):
        return None
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource_attrs: dict[str, str] = dict(attributes or {})
    if not os.environ.get("OTEL_SERVICE_NAME"):
        resource_attrs[SERVICE_NAME] = default_service
    provider = TracerProvider(resource=Resource.create(resource_attrs))
    if trace_file:
        from switchyard_telemetry.jsonl import JsonlSpanExporter

        provider.add_span_processor(BatchSpanProcessor(JsonlSpanExporter(trace_file)))
    if otlp:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if "console" in names:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return provider.get_tracer("switchyard")
