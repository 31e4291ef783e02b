"""Units of the tracing and metrics path: the batched histogram against prometheus-client's own,
the engines' JSONL exporter through the SDK, router_core's tracer's parents, and a decision's
span with the verbs its placement ran under it (FakeCluster: the front in-process) and the
metadata they carry to the engines."""
from __future__ import annotations

import json
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from trace_front import CLIENT, spans_by_id

from pyrouter.metrics.batched_histogram import BatchedHistogram
from pyrouter.metrics.router_metrics import TOKEN_LATENCY_BUCKETS, RouterMetrics
from router_core import RouterTracer
from switchyard_sim.fake import FakeCluster, FakeEngine
from switchyard_telemetry.jsonl import JsonlSpanExporter, read_spans
from switchyard_telemetry.propagation import sampled_parent
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


def test_a_dropped_parent_has_no_children(tmp_path):
    tracer = RouterTracer.to_file(str(tmp_path / "spans.jsonl"))
    # A parent the sampler dropped (flags 00) has no children; a bad one is the caller's bug.
    assert tracer.start_span("x", CLIENT[:-2] + "00", time.time_ns()) is None
    with pytest.raises(ValueError, match="traceparent"):
        tracer.start_span("x", "garbage", time.time_ns())
    assert sampled_parent(CLIENT[:-2] + "00") is None and sampled_parent("garbage") is None


async def test_a_decision_with_its_placements_verbs_under_the_segment(tmp_path):
    path = str(tmp_path / "spans.jsonl")
    tracer = RouterTracer.to_file(path)
    prompt = list(range(400, 440))
    cluster = FakeCluster([FakeEngine(role="prefill", cached=[prompt[:16]]),
                           FakeEngine(role="decode")])
    cluster.trace(tracer, CLIENT)
    run = await cluster.run("pd", prompt, max_tokens=4)
    assert run.error is None and run.tokens == cluster.reference(prompt, 4)
    spans = {s["name"]: s for s in spans_by_id(tracer, path).values()}
    assert set(spans) == {"router.request", "router.segment", "router.decision",
                          "verb.prep_recv", "verb.remote_send", "verb.start_generate"}
    root = spans["router.request"]
    assert root["trace_id"] == CLIENT.split("-")[1] and root["parent_id"] == CLIENT.split("-")[2]
    assert {s["service"] for s in spans.values()} == {"switchyard-router"}

    def parent_of(name: str) -> str:
        return next(n for n, s in spans.items() if s["span_id"] == spans[name]["parent_id"])

    assert parent_of("router.segment") == "router.request"
    assert parent_of("router.decision") == "router.segment"
    assert parent_of("verb.prep_recv") == "router.decision"
    assert parent_of("verb.remote_send") == "router.decision"
    assert parent_of("verb.start_generate") == "router.segment"
    decision = spans["router.decision"]["attrs"]
    assert decision["switchyard.matched_tokens.e0"] == 16
    # The route as carried out leads (the engines pd landed on), then what the policy saw.
    line = decision["switchyard.explanation"]
    assert line.startswith("pd prefill=e0 decode=e1 ") and line.endswith("; matched e0=16")
    assert (decision["switchyard.engine"], decision["switchyard.engine.role"],
            decision["switchyard.decided_by"]) == ("e1", "decode", "policy")
    assert spans["verb.prep_recv"]["attrs"] == {"switchyard.engine": "e1",
                                                 "rpc.method": "PrepRecv"}
    for span in spans.values():
        if span is not root:
            assert root["start_ms"] <= span["start_ms"] <= span["end_ms"] <= root["end_ms"]
    cluster.assert_clean()


@pytest.mark.parametrize("detail,labels", [
    ("pd->tandem (decode_heavy)", ("adaptive_switch", "pd->tandem", "decode_heavy")),
    ("e1:mux->prefill (prefill_waiting)", ("role_switch", "e1:mux->prefill", "prefill_waiting"))])
def test_policy_switches_are_labelled_by_switch_and_reason(detail, labels):
    metrics = RouterMetrics()
    metrics.count_event(labels[0], detail)
    assert metrics.registry.get_sample_value(
        "switchyard:policy_switches_total",
        {"kind": labels[0], "switch": labels[1], "reason": labels[2]}) == 1.0
