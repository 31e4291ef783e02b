"""Units of the tracing and metrics path: the batched histogram against prometheus-client's own,
inter-token gaps from chunk arrivals, the engines' JSONL exporter through the SDK, when Python
traces a request, and the decision and verb spans it makes under the front's segment (through
router_core's tracer) with the metadata its verbs send."""
from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from trace_front import CLIENT, FrontSpans, spans_by_id

from pyrouter.batched_histogram import BatchedHistogram
from pyrouter.metrics import TOKEN_LATENCY_BUCKETS, RouterMetrics
from pyrouter.request import RouterRequest
from pyrouter.request_timeline import RequestTimeline
from pyrouter.request_trace import start_request_trace
from router_core import RouterTracer
from switchyard_proto.sampling_params import SamplingParams
from switchyard_telemetry.jsonl import JsonlSpanExporter, read_spans
from switchyard_telemetry.propagation import KV_PARENT, TRACEPARENT, sampled_parent
from switchyard_telemetry.provider import tracer_from_env


def _lines(registry: CollectorRegistry) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines()
                  if line.startswith("m_") and "_created" not in line)


def test_batched_histogram_matches_prometheus_client():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batched = BatchedHistogram("m", "doc", ["engine"], TOKEN_LATENCY_BUCKETS)
    ours.register(batched)
    plain = Histogram("m", "doc", ["engine"], buckets=TOKEN_LATENCY_BUCKETS, registry=theirs)
    for value, n in ((0.0004, 1), (0.005, 3), (0.0051, 2), (0.3, 1), (99.0, 4)):
        batched.observe_many(("e0",), value, n)
        for _ in range(n):
            plain.labels("e0").observe(value)
    assert _lines(ours) == _lines(theirs)


def test_inter_token_gaps_per_segment():
    tl = RequestTimeline()
    engines = [SimpleNamespace(id="e0", role="prefill"), SimpleNamespace(id="e1", role="decode")]
    first = tl.begin_segment("policy")
    tl.decided(first, engines[0], None)  # type: ignore[arg-type]
    for at, n in ((1.0, 1), (1.2, 1), (1.5, 3)):
        tl.arrived(n, at)
    tl.end_segment(5, "handoff")
    second = tl.begin_segment("policy")
    tl.decided(second, engines[1], None)  # type: ignore[arg-type]
    for at, n in ((2.0, 2), (2.1, 0), (2.4, 1)):
        tl.arrived(n, at)
    gaps = [(s.engine, round(g, 6), n) for s, g, n in tl.inter_token_gaps()]
    # 0.3 s for 3 tokens -> 3 gaps of 0.1; the hand-off gap (0.5 s for 2 tokens) is the new
    # segment's; a finish-only chunk (0 tokens) adds no gap.
    assert gaps == [("e0", 0.2, 1), ("e0", 0.1, 3), ("e1", 0.25, 2), ("e1", 0.3, 1)]
    assert tl.first_segment is first and tl.last_segment is second


def test_jsonl_exporter_writes_what_the_sdk_ends(tmp_path):
    path = str(tmp_path / "spans.jsonl")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonlSpanExporter(path)))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("parent") as parent:
        child = tracer.start_span("child", attributes={"switchyard.engine": "e0", "n": 3})
        child.end()
    provider.shutdown()
    with open(path, "a", encoding="utf-8") as f:
        f.write("not json\n{\"name\": 1}\n")
    spans = {s["name"]: s for s in read_spans([path])}
    assert set(spans) == {"parent", "child"}  # malformed lines skipped
    assert spans["child"]["parent_id"] == format(parent.get_span_context().span_id, "016x")
    assert spans["child"]["trace_id"] == spans["parent"]["trace_id"]
    assert spans["child"]["attrs"] == {"switchyard.engine": "e0", "n": 3}
    assert spans["parent"]["start_ms"] <= spans["child"]["start_ms"] <= spans["child"]["end_ms"]
    json.dumps(spans)


def test_tracing_is_off_without_an_exporter(monkeypatch, tmp_path):
    for name in ("SWITCHYARD_TRACE_FILE", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    assert tracer_from_env("x") is None
    monkeypatch.setenv("SWITCHYARD_TRACE_FILE", str(tmp_path / "s.jsonl"))
    assert tracer_from_env("x") is not None
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracer_from_env("x") is None


def _request() -> RouterRequest:
    req = RouterRequest("cmpl-1", [1, 2, 3], SamplingParams(max_tokens=4), kind="chat",
                        model="m")
    req.timeline = RequestTimeline()
    return req


def test_python_traces_only_what_the_front_traces(tmp_path):
    tracer = RouterTracer.to_file(str(tmp_path / "spans.jsonl"))
    req = _request()
    assert start_request_trace(None, req) is None
    assert start_request_trace(tracer, req) is None  # the front opened no segment for it
    tracer.set_segment(req.engine_request_id, CLIENT)
    assert start_request_trace(tracer, req) is not None
    tracer.forget_request(req.engine_request_id)
    assert start_request_trace(tracer, req) is None
    # A parent the sampler dropped (flags 00) has no children; a bad one is the caller's bug.
    assert tracer.start_span("x", CLIENT[:-2] + "00", time.time_ns()) is None
    with pytest.raises(ValueError, match="traceparent"):
        tracer.start_span("x", "garbage", time.time_ns())
    assert sampled_parent(CLIENT[:-2] + "00") is None and sampled_parent("garbage") is None


def test_decision_and_verb_spans_under_the_fronts_segment(tmp_path):
    path = str(tmp_path / "spans.jsonl")
    tracer = RouterTracer.to_file(path)
    req = _request()
    front = FrontSpans(tracer, req.engine_request_id)
    trace = start_request_trace(tracer, req)
    assert trace is not None
    req.timeline.trace = trace
    engine = SimpleNamespace(id="e1", role="decode")
    segment = req.timeline.begin_segment("policy")
    prep = ["prep_recv", "e1", time.perf_counter(), 0.0]
    metadata = dict(req.timeline.verb_metadata(prep) or ())
    prep[3] = time.perf_counter()
    req.note_route("pd", prefill="e0", decode="e1")
    req.matched_by_engine = {"e0": 16, "e1": 0}
    gen = ["start_generate", "e1", time.perf_counter(), 0.0]
    req.timeline.decided(segment, engine, req)
    gen_metadata = dict(req.timeline.verb_metadata(gen) or ())
    gen[3] = time.perf_counter()
    req.timeline.end_segment(4, "stop")
    req.timeline.ended = time.perf_counter()
    trace.finish(req)
    front.close()
    spans = {s["name"]: s for s in spans_by_id(tracer, path).values()}
    assert set(spans) == {"router.request", "router.segment", "router.decision",
                          "verb.prep_recv", "verb.start_generate"}
    root = spans["router.request"]
    assert root["trace_id"] == CLIENT.split("-")[1] and root["parent_id"] == CLIENT.split("-")[2]
    assert {s["service"] for s in spans.values()} == {"switchyard-router"}
    assert {s["instance"] for s in spans.values()} == {"router"}

    def parent_of(name: str) -> str:
        return next(n for n, s in spans.items() if s["span_id"] == spans[name]["parent_id"])

    assert parent_of("router.segment") == "router.request"
    assert parent_of("router.decision") == "router.segment"
    assert parent_of("verb.prep_recv") == "router.decision"
    assert parent_of("verb.start_generate") == "router.segment"
    # The verb's own context travels; a PrepRecv also names the decision for the receive.
    assert metadata[TRACEPARENT].split("-")[2] == spans["verb.prep_recv"]["span_id"]
    assert metadata[KV_PARENT].split("-")[2] == spans["router.decision"]["span_id"]
    assert KV_PARENT not in gen_metadata
    decision = spans["router.decision"]["attrs"]
    assert decision["switchyard.matched_tokens.e0"] == 16
    assert decision["switchyard.explanation"].startswith("pd prefill=e0 decode=e1; matched e0=16")
    assert decision["switchyard.engine"] == "e1" and decision["switchyard.engine.role"] == "decode"
    assert spans["verb.prep_recv"]["attrs"] == {"switchyard.engine": "e1",
                                                 "rpc.method": "PrepRecv"}
    for span in spans.values():
        if span is not root:
            assert root["start_ms"] <= span["start_ms"] <= span["end_ms"] <= root["end_ms"]


@pytest.mark.parametrize("detail,labels", [
    ("pd->tandem (decode_heavy)", ("adaptive_switch", "pd->tandem", "decode_heavy")),
    ("e1:mux->prefill (prefill_waiting)", ("role_switch", "e1:mux->prefill", "prefill_waiting"))])
def test_policy_switches_are_labelled_by_switch_and_reason(detail, labels):
    metrics = RouterMetrics()
    metrics.count_event(labels[0], detail)
    assert metrics.registry.get_sample_value(
        "switchyard:policy_switches_total",
        {"kind": labels[0], "switch": labels[1], "reason": labels[2]}) == 1.0
