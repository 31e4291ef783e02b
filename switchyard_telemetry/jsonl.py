"""The JSONL span file (SWITCHYARD_TRACE_FILE) as an OpenTelemetry SDK span exporter, and its
reader for `switchyard trace`.

One JSON object per finished span: trace/span/parent ids (hex), name, service, start/end in
Unix milliseconds, status and attributes (the router's exporter in Rust,
router_core/src/otel/jsonl.rs, writes the same lines). Every process of a deployment on one host
(router, engines) may append to the same file: each export is one write(2) on an O_APPEND
descriptor, so lines from different processes never interleave.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode


def span_record(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    resource = span.resource.attributes
    return {
        "trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "name": span.name, "service": str(resource.get(SERVICE_NAME, "?")),
        "instance": str(resource.get(SERVICE_INSTANCE_ID, "")),
        "start_ms": (span.start_time or 0) / 1e6, "end_ms": (span.end_time or 0) / 1e6,
        "status": "error" if span.status.status_code is StatusCode.ERROR else "ok",
        "attrs": dict(span.attributes or {}),
    }


_ENCODE = json.JSONEncoder(separators=(",", ":"), default=str).encode


class JsonlSpanExporter(SpanExporter):  # type: ignore[misc]
    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._fd is None:
            return SpanExportResult.FAILURE
        data = "".join(_ENCODE(span_record(s)) + "\n" for s in spans).encode()
        try:
            os.write(self._fd, data)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def read_spans(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Every span in the files; malformed lines are reported on stderr and skipped."""
    spans: list[dict[str, Any]] = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    span = json.loads(line)
                    if not isinstance(span, dict) or not all(
                            k in span for k in ("trace_id", "span_id", "name", "start_ms",
                                                "end_ms")):
                        raise ValueError("not a span")
                except (json.JSONDecodeError, ValueError):
                    print(f"{path}:{n}: skipping a malformed span", file=sys.stderr)
                    continue
                spans.append(span)
    return spans
