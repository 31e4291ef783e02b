"""SWITCHYARD_TRACE_FILE with mock engines: the router's spans of each request (decision, verbs,
segments) under one trace, found by X-Request-Id; `switchyard trace list|show`; bad ids and
files give clear errors; a sampler that keeps nothing writes no span, on the fast path or the
policies'. (Mock engines record no spans: tests/router/test_trace_pd_real.py and
test_trace_rust_front_real.py follow a request into real engines.)"""
from __future__ import annotations

import os
import subprocess

import pytest
import requests
from router_procs import (
    EVERY_REQUEST,
    ROOT,
    SWITCHYARD,
    free_port,
    start_mock,
    start_router,
    wait_ready,
)

from switchyard_telemetry.jsonl import read_spans

pytestmark = [pytest.mark.procs, pytest.mark.timeout(120)]


def test_trace_file_and_cli(tmp_path):
    trace_file = str(tmp_path / "trace.jsonl")
    ports, rp = [free_port(), free_port()], free_port()
    engines = [start_mock(p) for p in ports]
    router = start_router(rp, ports, "--policy", "pd",
                          env={"SWITCHYARD_TRACE_FILE": trace_file,
                               "OTEL_BSP_SCHEDULE_DELAY": "50", **EVERY_REQUEST})
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router, want_engines=2)
        r = requests.post(f"{base}/v1/completions",
                          json={"prompt": list(range(300, 340)), "max_tokens": 3})
        assert r.status_code == 200
        request_id = r.headers["X-Request-Id"]
        assert request_id == r.json()["id"]
        bad = requests.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 0})
        assert bad.status_code == 400
    finally:
        router.stop()
        for e in engines:
            e.stop()

    spans = read_spans([trace_file])
    (root,) = [s for s in spans if s["name"] == "router.request"]  # the 400 was not admitted
    assert root["attrs"]["switchyard.request_id"] == request_id
    assert root["attrs"]["switchyard.pattern"] == "pd" and root["parent_id"] is None
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    names = sorted(s["name"] for s in spans)
    assert names == sorted(["router.request", "router.segment", "router.decision",
                            "verb.prep_recv", "verb.remote_send", "verb.start_generate"])

    env = {**os.environ, "SWITCHYARD_TRACE_FILE": trace_file, **EVERY_REQUEST}

    def trace(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([*SWITCHYARD, "trace", *args], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == code, out.stderr
        return out

    listing = trace("list").stdout
    assert request_id in listing and "pd prefill=e" in listing and " ok " in listing
    assert trace().stdout == listing  # `switchyard trace` alone lists
    shown = trace("show", request_id[:20]).stdout  # a unique prefix is enough
    for name in names:
        assert name in shown, shown
    assert "segment 0 (policy): pd prefill=e" in shown and "out=3" in shown
    missing = trace("show", "nope", "--file", trace_file, code=1)
    assert "no trace for request 'nope'" in missing.stderr
    no_file = trace("list", "--file", str(tmp_path / "absent.jsonl"), code=2)
    assert "not found" in no_file.stderr


CLIENT_TRACE = "6bf92f3577b34da6a3ce929d0e0e4738"


@pytest.mark.parametrize("policy", ["round_robin", "pd"])
def test_sampling_off_writes_no_spans(tmp_path, policy):
    """`always_off` keeps nothing, even a client's sampled trace; `parentbased_always_off` (the
    control) keeps only what the client sampled. round_robin runs on the fast path, pd in
    Python."""
    ports = [free_port(), free_port()]
    engines = [start_mock(p) for p in ports]
    routers = []
    files = {}
    try:
        for sampler in ("always_off", "parentbased_always_off"):
            files[sampler] = str(tmp_path / f"{sampler}.jsonl")
            rp = free_port()
            router = start_router(rp, ports, "--policy", policy, env={
                "SWITCHYARD_TRACE_FILE": files[sampler], "OTEL_TRACES_SAMPLER": sampler})
            routers.append(router)
            base = f"http://127.0.0.1:{rp}"
            wait_ready(base, router, want_engines=2)
            for headers in ({}, {"traceparent": f"00-{CLIENT_TRACE}-{free_port():016x}-01"},
                            {}, {"traceparent": f"00-{CLIENT_TRACE}-{free_port():016x}-00"}):
                r = requests.post(f"{base}/v1/completions", headers=headers,
                                  json={"prompt": list(range(300, 340)), "max_tokens": 3})
                assert r.status_code == 200, r.text
    finally:
        for router in routers:
            router.stop()
        for e in engines:
            e.stop()
    assert not os.path.exists(files["always_off"]) or read_spans([files["always_off"]]) == []
    kept = read_spans([files["parentbased_always_off"]])
    assert {s["trace_id"] for s in kept} == {CLIENT_TRACE}
    assert [s["name"] for s in kept].count("router.request") == 1


def test_handoff_through_the_front_gives_one_segment_each(tmp_path):
    """A tandem request (two segments) through the Rust front: the front's two router.segment
    spans in order (handoff, then the engine's finish), each with the policy's decision and
    its own verb.start_generate; the KV move under the second decision; every span nests in
    its parent."""
    trace_file = str(tmp_path / "trace.jsonl")
    ports, rp = [free_port(), free_port()], free_port()
    engines = [start_mock(p) for p in ports]
    router = start_router(rp, ports, "--policy", "tandem", env={
        "SWITCHYARD_TRACE_FILE": trace_file, "OTEL_BSP_SCHEDULE_DELAY": "50",
        **EVERY_REQUEST})
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router, want_engines=2)
        r = requests.post(f"{base}/v1/completions", json={
            "prompt": list(range(300, 600)), "max_tokens": 12, "stream": True})
        assert r.status_code == 200
        route = r.headers["X-Switchyard-Route"]
    finally:
        router.stop()
        for e in engines:
            e.stop()
    params = dict(kv.split("=", 1) for kv in route.split()[1:])
    spans = {s["span_id"]: s for s in read_spans([trace_file])}
    (root,) = [s for s in spans.values() if s["name"] == "router.request"]

    def children(parent: dict) -> list[dict]:
        return sorted((s for s in spans.values() if s["parent_id"] == parent["span_id"]),
                      key=lambda s: s["start_ms"])

    first, second = children(root)
    assert first["end_ms"] <= second["start_ms"]
    assert [(s["attrs"]["switchyard.engine"], s["attrs"]["switchyard.segment.end_reason"],
             s["attrs"]["switchyard.segment.tokens"]) for s in (first, second)] == [
        (params["lead"], "handoff", int(params["k"])),
        (params["follow"], "length", 12 - int(params["k"]))]
    for segment, engine in ((first, params["lead"]), (second, params["follow"])):
        names = [(s["name"], s["attrs"].get("switchyard.engine")) for s in children(segment)]
        assert sorted(names) == [("router.decision", engine), ("verb.start_generate", engine)]
    (decision,) = [s for s in children(second) if s["name"] == "router.decision"]
    assert [s["name"] for s in children(decision)] == ["verb.prep_recv", "verb.remote_send"]
    assert root["attrs"]["switchyard.engines"] == ",".join(sorted({params["lead"],
                                                                  params["follow"]}))
    for s in spans.values():
        if s is not root:
            p = spans[s["parent_id"]]
            assert p["start_ms"] <= s["start_ms"] <= s["end_ms"] <= p["end_ms"], (s["name"],
                                                                                  p["name"])
