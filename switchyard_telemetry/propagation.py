"""W3C trace context in gRPC metadata, as the engines read it.

The router (router_core/src/otel/traceparent.rs) sends `traceparent` with every verb it traces;
a PrepRecv also carries `switchyard-kv-parent`, the router span the KV transfer into that
reservation happens under (the policy's decision), so the receiving engine's span nests there
rather than under the short PrepRecv call. Engines record spans only under a sampled parent
that came with the call.
"""
from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
KV_PARENT = "switchyard-kv-parent"
_PROPAGATOR = TraceContextTextMapPropagator()


def sampled_parent(value: str | None) -> Context | None:
    """The context a `traceparent` value names, if valid and sampled; else None."""
    if not value:
        return None
    ctx = _PROPAGATOR.extract({TRACEPARENT: value})
    span_context = trace.get_current_span(ctx).get_span_context()
    return ctx if span_context.is_valid and span_context.trace_flags.sampled else None


def metadata_value(metadata: Iterable[tuple[str, str | bytes]] | None, key: str) -> str | None:
    for k, v in metadata or ():
        if k == key:
            return v.decode() if isinstance(v, bytes) else v
    return None
