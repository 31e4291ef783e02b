"""The OpenTelemetry export: a request span (child of the client's traceparent) + verb spans."""
from __future__ import annotations

import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine.core.sampling_params import SamplingParams
from pyrouter.otel import OtelExporter
from pyrouter.request import RouterRequest


def test_request_and_verb_spans_with_client_parent():
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = OtelExporter(provider.get_tracer("test"))
    req = RouterRequest("cmpl-1", [1, 2, 3], SamplingParams(max_tokens=4))
    req.note_route("pd", prefill="e0", decode="e1")
    req.completion_tokens = 4
    t0 = time.perf_counter()
    req.scope.verb_times = [["prep_recv", "e1", t0, t0 + 0.001], ["remote_send", "e0", t0, t0 + 0.002],
                      ["start_generate", "e1", t0 + 0.002, t0 + 0.01]]
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    exporter.export_request(req, "pd", {"traceparent": parent}, t0, t0 + 0.003, t0 + 0.01, "ok")
    spans = {s.name: s for s in memory.get_finished_spans()}
    assert set(spans) == {"router.request", "verb.prep_recv", "verb.remote_send",
                          "verb.start_generate"}
    root = spans["router.request"]
    assert format(root.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert root.attributes["switchyard.route"] == "pd prefill=e0 decode=e1"
    assert root.attributes["switchyard.completion_tokens"] == 4
    assert spans["verb.remote_send"].parent.span_id == root.context.span_id
    assert spans["verb.remote_send"].attributes["switchyard.engine"] == "e0"
    assert abs((root.end_time - root.start_time) - 10_000_000) < 100_000  # the real 10 ms
