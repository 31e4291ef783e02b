"""One PD request through `switchyard serve` (real model, real processes) with tracing on, followed
end to end by the X-Request-Id its client saw: one trace whose spans come from the router and
both engine processes, with correct parents and times that nest; the same spans over OTLP; the
text and PNG timelines of `switchyard trace show`; and the Prometheus metrics of router and
engines, scraped under their `switchyard:` names and labels."""
from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
import requests
from otlp_collector import OtlpCollector
from prometheus_client.parser import text_string_to_metric_families
from router_procs import EVERY_REQUEST, ROOT, SWITCHYARD, start_serve, wait_ready

from switchyard_telemetry.jsonl import read_spans

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(600)]

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
# Cross-process edges compare wall clocks of two processes on one host.
CLOCK_SLACK_MS = 1.0


def _scrape(url: str) -> dict[str, list[dict[str, str]]]:
    """Sample name -> label sets, from a Prometheus text page."""
    text = requests.get(url, timeout=5).text
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def test_pd_request_traced_across_router_and_engines(tmp_path):
    trace_file = str(tmp_path / "spans.jsonl")
    collector = OtlpCollector()
    serve, base = start_serve("--policy", "pd", "--chunk-size", "16", env={
        "SWITCHYARD_TRACE_FILE": trace_file, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100", **EVERY_REQUEST})
    try:
        wait_ready(base, serve, want_engines=2, timeout_s=400)
        r = requests.post(f"{base}/v1/completions", timeout=120, headers={
            "X-Request-Id": "client-req-1",
            "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"},
            json={"prompt": list(range(300, 348)), "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200, r.text
        request_id = r.headers["X-Request-Id"]
        assert request_id == "client-req-1" == r.json()["id"]
        assert r.headers["X-Switchyard-Route"].startswith("pd ")
        router_metrics = _scrape(f"{base}/metrics")
        metric_ports = [int(p) for p in re.findall(r"metrics on http://127\.0\.0\.1:(\d+)/metrics",
                                                   serve.output())]
        assert len(metric_ports) == 2, serve.output()
        engine_metrics = [_scrape(f"http://127.0.0.1:{p}/metrics") for p in metric_ports]
    finally:
        serve.stop()  # the processes flush their spans on the way out
    try:
        deadline = time.monotonic() + 10
        while not collector.spans() and time.monotonic() < deadline:
            time.sleep(0.1)
        otlp = collector.spans()
    finally:
        collector.stop()

    spans = read_spans([trace_file])
    (root,) = [s for s in spans if s["name"] == "router.request"
               and s["attrs"]["switchyard.request_id"] == request_id]
    # The client's traceparent was honoured: the request is a child of its span.
    assert root["trace_id"] == CLIENT_TRACE and root["parent_id"] == CLIENT_SPAN
    trace = {s["span_id"]: s for s in spans if s["trace_id"] == CLIENT_TRACE}
    by_name: dict[str, list[dict]] = {}
    for s in trace.values():
        by_name.setdefault(s["name"], []).append(s)
    expected = {"router.request", "router.segment", "router.decision", "verb.prep_recv",
                "verb.remote_send", "verb.start_generate", "engine.prep_recv",
                "engine.kv_receive", "engine.remote_send", "engine.queue",
                "engine.prefill_chunk", "engine.kv_send", "engine.generate", "engine.decode"}
    assert expected <= set(by_name), sorted(by_name)
    # Three processes: the router and both engines.
    assert {s["service"] for s in trace.values()} == {"switchyard-router", "switchyard-engine"}
    prefill_engine = by_name["engine.remote_send"][0]["instance"]
    decode_engine = by_name["engine.generate"][0]["instance"]
    assert prefill_engine and decode_engine and prefill_engine != decode_engine
    assert by_name["engine.kv_receive"][0]["instance"] == decode_engine

    def parent(name: str) -> str:
        return trace[by_name[name][0]["parent_id"]]["name"]

    assert parent("router.segment") == "router.request"
    assert parent("router.decision") == "router.segment"
    assert parent("verb.prep_recv") == parent("verb.remote_send") == "router.decision"
    assert parent("verb.start_generate") == "router.segment"
    assert parent("engine.prep_recv") == "verb.prep_recv"
    assert parent("engine.remote_send") == "verb.remote_send"
    assert parent("engine.kv_receive") == "router.decision"
    assert parent("engine.generate") == "verb.start_generate"
    assert parent("engine.kv_send") == "engine.remote_send"
    assert parent("engine.decode") == "engine.generate"
    assert {trace[c["parent_id"]]["name"] for c in by_name["engine.prefill_chunk"]} == {
        "engine.remote_send", "engine.generate"}
    # Every span but the root hangs off a span of this trace, and nests in its parent's time.
    for s in trace.values():
        if s is root:
            continue
        p = trace[s["parent_id"]]
        slack = 0.0 if p.get("instance") == s.get("instance") else CLOCK_SLACK_MS
        assert p["start_ms"] - slack <= s["start_ms"] <= s["end_ms"] <= p["end_ms"] + slack, (
            s["name"], p["name"], s["start_ms"] - p["start_ms"], p["end_ms"] - s["end_ms"])
    # The prompt's 47 positions were computed on the prefill engine in 16-token chunks.
    sends = [c for c in by_name["engine.prefill_chunk"]
             if c["parent_id"] == by_name["engine.remote_send"][0]["span_id"]]
    assert sorted(c["attrs"]["switchyard.chunk.tokens"] for c in sends) == [15, 16, 16]
    kv = by_name["engine.kv_send"][0]["attrs"]
    assert kv["switchyard.kv.bytes"] > 0 and kv["switchyard.kv.transport"] in ("shm", "tcp")
    assert by_name["engine.kv_receive"][0]["attrs"]["switchyard.kv.bytes"] == \
        kv["switchyard.kv.bytes"]
    decision = by_name["router.decision"][0]["attrs"]
    assert decision["switchyard.pattern"] == "pd" and "pd prefill=" in decision[
        "switchyard.explanation"]
    assert root["attrs"]["gen_ai.usage.input_tokens"] == 48
    assert root["attrs"]["gen_ai.usage.output_tokens"] == 4
    assert root["attrs"]["gen_ai.request.model"]
    assert by_name["engine.decode"][0]["attrs"]["switchyard.decode.steps"] == 3

    # Over OTLP the request is found by the same X-Request-Id (a collector's tag search), and
    # its trace holds the same spans, parents, services, times and attributes as the file's.
    (otlp_root,) = [s for s in otlp if s["name"] == "router.request"
                    and s["attrs"].get("switchyard.request_id") == request_id]
    otlp_trace = {s["span_id"]: s for s in otlp if s["trace_id"] == otlp_root["trace_id"]}
    assert otlp_root["trace_id"] == CLIENT_TRACE
    assert {k: (v["name"], v["parent_id"], v["service"]) for k, v in otlp_trace.items()} == {
        k: (v["name"], v["parent_id"], v["service"]) for k, v in trace.items()}
    for span_id, s in otlp_trace.items():
        assert s["attrs"] == trace[span_id]["attrs"], s["name"]
        assert s["start_ns"] <= s["end_ns"]

    # `switchyard trace show <X-Request-Id>` prints every span; --png draws them.
    env_cli = {**os.environ, "SWITCHYARD_TRACE_FILE": trace_file, **EVERY_REQUEST}
    png = tmp_path / "trace.png"
    shown = subprocess.run([*SWITCHYARD, "trace", "show", request_id, "--png", str(png)],
                           cwd=ROOT, env=env_cli, capture_output=True, text=True, timeout=120,
                           check=True).stdout
    assert "pd prefill=" in shown  # the route explanation
    chart = [line for line in shown.splitlines() if "|" in line][1:]
    assert len(chart) == len(trace), shown
    for name, found in by_name.items():
        assert sum(f" {name} " in line or line.split()[1:2] == [name] for line in chart) >= \
            len(found), (name, shown)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    listing = subprocess.run([*SWITCHYARD, "trace", "list"], cwd=ROOT, env=env_cli,
                             capture_output=True, text=True, timeout=60, check=True).stdout
    assert request_id in listing and "pd" in listing

    # Metrics: the router's by pattern / engine / role, each engine's by engine / role.
    ttft = router_metrics["switchyard:time_to_first_token_seconds_count"]
    assert any(s["pattern"] == "pd" and s["role"] == "decode" and s["engine"] for s in ttft)
    for name in ("switchyard:e2e_request_latency_seconds_count",
                 "switchyard:time_per_output_token_seconds_count",
                 "switchyard:inter_token_latency_seconds_count",
                 "switchyard:requests_total", "switchyard:pattern_selections_total",
                 "switchyard:router_requests_in_flight", "switchyard:engine_healthy"):
        assert name in router_metrics, name
    roles = set()
    for scraped in engine_metrics:
        (running,) = scraped["switchyard:num_requests_running"]
        roles.add(running["role"])
        for name in ("switchyard:num_requests_waiting", "switchyard:kv_cache_usage_perc",
                     "switchyard:prefix_cache_queries_total", "switchyard:prefix_cache_hits_total",
                     "switchyard:kv_transfer_bytes_total", "switchyard:kv_transfer_seconds_count"):
            assert name in scraped, name
            assert all(s["engine"] == running["engine"] for s in scraped[name])
    assert roles == {"prefill", "decode"}
    directions = {s["direction"] for scraped in engine_metrics
                  for s in scraped["switchyard:kv_transfer_bytes_total"]}
    assert directions == {"sent", "received"}
