"""SWITCHYARD_TRACE_FILE records each request's decision and verbs; `switchyard trace` shows it."""
from __future__ import annotations

import os
import subprocess

import pytest
import requests
from router_procs import ROOT, SWITCHYARD, free_port, start_mock, start_router, wait_ready

pytestmark = pytest.mark.timeout(60)


def test_trace_file_and_cli(tmp_path, front: str):
    trace_file = str(tmp_path / "trace.jsonl")
    ports, rp = [free_port(), free_port()], free_port()
    engines = [start_mock(p) for p in ports]
    router = start_router(rp, ports, "--policy", "pd", env={"SWITCHYARD_TRACE_FILE": trace_file},
                          front=front)
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router, want_engines=2)
        r = requests.post(f"{base}/v1/completions",
                          json={"prompt": list(range(300, 340)), "max_tokens": 3})
        assert r.status_code == 200
        request_id = r.json()["id"]
        bad = requests.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 0})
        assert bad.status_code == 400
    finally:
        router.stop()
        for e in engines:
            e.stop()

    env = {**os.environ, "SWITCHYARD_TRACE_FILE": trace_file}

    def trace(*args: str) -> str:
        return subprocess.run([*SWITCHYARD, "trace", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=30, check=True).stdout

    listing = trace()
    assert request_id in listing and "pd prefill=e" in listing and "ok" in listing
    timeline = trace(request_id)
    for name in ("router.request", "verb.prep_recv", "verb.remote_send", "verb.start_generate"):
        assert name in timeline, timeline
    assert "policy=pd" in timeline and "completion_tokens=3" in timeline
    missing = subprocess.run([*SWITCHYARD, "trace", "nope", "--file", trace_file], cwd=ROOT,
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and "no trace" in missing.stderr
