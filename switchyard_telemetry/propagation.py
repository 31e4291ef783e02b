"""W3C trace context across HTTP headers and gRPC metadata.

The router sends `traceparent` with every verb it traces; a PrepRecv also carries
`switchyard-kv-parent`, the router span the KV transfer into that reservation happens under (the
policy's decision), so the receiving engine's span nests there rather than under the short
PrepRecv call. Engines record spans only under a sampled parent that came with the call.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
KV_PARENT = "switchyard-kv-parent"
_PROPAGATOR = TraceContextTextMapPropagator()


def traceparent(span: trace.Span) -> str:
    """The W3C `traceparent` value naming `span` (version 00). Formatted here rather than by
    the propagator's inject, which builds a context per call: this runs once per verb."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def sampled_parent(value: str | None) -> Context | None:
    """The context a `traceparent` value names, if valid and sampled; else None."""
    if not value:
        return None
    ctx = _PROPAGATOR.extract({TRACEPARENT: value})
    span_context = trace.get_current_span(ctx).get_span_context()
    return ctx if span_context.is_valid and span_context.trace_flags.sampled else None


def from_headers(headers: Mapping[str, str]) -> Context | None:
    """An incoming HTTP request's trace context (sampled or not: the client's decision is kept
    by the parent-based sampler), or None without a valid `traceparent`."""
    value = headers.get(TRACEPARENT)
    if not value:
        return None
    ctx = _PROPAGATOR.extract({TRACEPARENT: value})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def metadata_value(metadata: Iterable[tuple[str, str | bytes]] | None, key: str) -> str | None:
    for k, v in metadata or ():
        if k == key:
            return v.decode() if isinstance(v, bytes) else v
    return None
