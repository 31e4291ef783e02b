"""The engine's span tree nests exactly: every time of one tree is converted to the wall clock
with one offset read, so a child that ends at its parent's monotonic instant ends at its
parent's wall-clock one, however the wall clock moves between reads."""
from __future__ import annotations

import itertools
import time
from types import SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine.core.step_trace import StepRecord, StepTrace
from engine.server import spans as engine_spans
from switchyard_telemetry import clock


@pytest.fixture
def wall_clock_stepping_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read of the wall clock is 1 µs behind the last (jitter between two clock reads,
    or a slew, in the direction that once put a child's end past its parent's)."""
    base = time.time_ns()
    reads = itertools.count()
    monkeypatch.setattr(clock, "time", SimpleNamespace(
        time_ns=lambda: base - 1000 * next(reads), perf_counter_ns=time.perf_counter_ns))


def _nests(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.start_time is not None and child.end_time is not None
    assert parent.start_time is not None and parent.end_time is not None
    return parent.start_time <= child.start_time <= child.end_time <= parent.end_time


def test_a_remote_sends_spans_nest_when_its_kv_send_ends_with_it(wall_clock_stepping_back):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = engine_spans.EngineSpans(provider.get_tracer("t"), "e0", "prefill")
    with provider.get_tracer("t").start_as_current_span("verb.remote_send"):
        parent = trace.set_span_in_context(trace.get_current_span())
        t0 = time.perf_counter()
        steps = StepTrace(queued=t0, steps=[StepRecord(t0 + 0.001, t0 + 0.002, 0, 16, False,
                                                       1, 16, 0)])
        ended = t0 + 0.003
        spans.remote_send(parent, t0, ended, "r1", steps, {}, kv_started_s=t0 + 0.002,
                          kv_ended_s=ended, error="")
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    root = by_name["engine.remote_send"]
    for name in ("engine.queue", "engine.prefill_chunk", "engine.kv_send"):
        assert _nests(by_name[name], root), name
    assert by_name["engine.kv_send"].end_time == root.end_time
