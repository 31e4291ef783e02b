"""What the tracing tests share: a sampled client trace to run requests under, and the spans a
router_core tracer wrote to its JSONL file, by id."""
from __future__ import annotations

from typing import Any

from router_core import RouterTracer
from switchyard_telemetry.jsonl import read_spans

CLIENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def spans_by_id(tracer: RouterTracer, path: str) -> dict[str, dict[str, Any]]:
    tracer.flush()
    return {s["span_id"]: s for s in read_spans([path])}
