"""A request on the Rust front's fast path (round_robin: no Python runs for it) with tracing on,
into a real engine (SmolLM2): the front's own spans — router.request, router.segment,
verb.start_generate — and the engine's spans beneath them, in one trace that continues the
client's traceparent, all in one JSONL file that `switchyard trace show` reads."""
from __future__ import annotations

import os
import subprocess

import pytest
import requests
from router_procs import (
    EVERY_REQUEST,
    LOG_DIR,
    ROOT,
    SWITCHYARD,
    free_port,
    start_router,
    wait_ready,
)

from engine.server.launcher import EngineSpec, start_engines, stop_engines
from switchyard_telemetry.jsonl import read_spans

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(600)]

CLIENT_TRACE = "5bf92f3577b34da6a3ce929d0e0e4737"
CLIENT_SPAN = "10f067aa0ba902b8"


def test_fast_path_request_traced_from_router_into_engine(tmp_path):
    trace_file = str(tmp_path / "spans.jsonl")
    env = {"SWITCHYARD_TRACE_FILE": trace_file, "OTEL_BSP_SCHEDULE_DELAY": "50", **EVERY_REQUEST}
    engines = start_engines([EngineSpec(f"trace-engine-{free_port()}", threads=1, env=env)],
                            LOG_DIR)
    port = free_port()
    router = start_router(port, [e.port for e in engines], "--policy", "round_robin", env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, router, want_engines=1, timeout_s=300)
        # Deliberately the same traced POST as test_trace_pd_real.py's, under this test's own
        # ids: each test finds its trace by them.
        r = requests.post(f"{base}/v1/completions", timeout=120, headers={
            "X-Request-Id": "fast-traced-1",
            "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"},
            json={"prompt": list(range(300, 332)), "max_tokens": 3, "temperature": 0})
        assert r.status_code == 200, r.text
    finally:
        router.stop()  # flushes the router's spans on the way out
        stop_engines(engines)

    spans = read_spans([trace_file])
    trace = {s["span_id"]: s for s in spans if s["trace_id"] == CLIENT_TRACE}
    by_name: dict[str, list[dict]] = {}
    for s in trace.values():
        by_name.setdefault(s["name"], []).append(s)
    assert {"router.request", "router.segment", "verb.start_generate", "engine.generate",
            "engine.decode"} <= set(by_name), sorted(by_name)
    assert "router.decision" not in by_name  # the fast path: no policy ran
    (root,) = by_name["router.request"]
    assert root["parent_id"] == CLIENT_SPAN and root["service"] == "switchyard-router"
    attrs = root["attrs"]
    assert attrs["switchyard.request_id"] == "fast-traced-1"
    assert attrs["switchyard.policy"] == "round_robin" and attrs["switchyard.status"] == "ok"
    assert attrs["switchyard.pattern"] == "dp" and attrs["switchyard.route"].startswith("dp ")
    assert attrs["gen_ai.usage.input_tokens"] == 32 and attrs["gen_ai.usage.output_tokens"] == 3
    assert attrs["switchyard.engines"] == "e0" and attrs["switchyard.ttft_ms"] > 0

    def parent(name: str) -> str:
        return trace[by_name[name][0]["parent_id"]]["name"]

    assert parent("router.segment") == "router.request"
    assert parent("verb.start_generate") == "router.segment"
    assert parent("engine.generate") == "verb.start_generate"
    (segment,) = by_name["router.segment"]
    assert segment["attrs"]["switchyard.engine"] == "e0"
    assert segment["attrs"]["switchyard.segment.tokens"] == 3
    assert segment["attrs"]["switchyard.segment.end_reason"] == "length"
    assert by_name["engine.generate"][0]["service"] == "switchyard-engine"
    for s in trace.values():  # every span nests in its parent (1 ms: two processes' clocks)
        if s is not root:
            p = trace[s["parent_id"]]
            assert p["start_ms"] - 1 <= s["start_ms"] <= s["end_ms"] <= p["end_ms"] + 1, s["name"]

    shown = subprocess.run([*SWITCHYARD, "trace", "show", "fast-traced-1"], cwd=ROOT,
                           env={**os.environ, "SWITCHYARD_TRACE_FILE": trace_file, **EVERY_REQUEST},
                           capture_output=True, text=True, timeout=60, check=True).stdout
    for name in ("router.request", "router.segment", "verb.start_generate", "engine.generate"):
        assert name in shown, shown
