"""Fault behaviour: an engine failing before any output is retried elsewhere; a client that
disconnects mid-stream gets its generation aborted on the engine."""
from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import pytest
import requests
from router_procs import free_port, mock_router, start_mock, start_router, wait_ready

pytestmark = [pytest.mark.procs, pytest.mark.timeout(90)]


def test_failed_engine_is_retried_elsewhere():
    bad, good, rp = free_port(), free_port(), free_port()
    engines = [start_mock(bad, "--fail-rate", "1.0"), start_mock(good)]
    router = start_router(rp, [bad, good])
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router, want_engines=2)
        for i in range(6):
            r = requests.post(f"{base}/v1/completions",
                              json={"prompt": [3, 4, i], "max_tokens": 2, "stream": i % 2 == 1})
            assert r.status_code == 200, r.text
            assert "engine=e1" in r.headers["X-Switchyard-Route"]
        assert "retrying on another engine" in router.output()
    finally:
        router.stop()
        for e in engines:
            e.stop()


def test_mid_stream_failure_ends_with_an_error_event():
    with mock_router("--fail-after-tokens", "3", engines=1) as base:
        r = requests.post(f"{base}/v1/completions",
                          json={"prompt": "x", "max_tokens": 10, "stream": True})
        assert r.status_code == 200
        assert '"error"' in r.text and r.text.rstrip().endswith("data: [DONE]")
        r = requests.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 10})
        assert r.status_code == 502 and r.json()["error"]["type"] == "engine_error"


def test_client_disconnect_aborts_engine_work():
    with mock_router("--chunk-delay-ms", "50", engines=1) as base:
        body = b'{"prompt": "x", "max_tokens": 400, "stream": true}'
        with socket.create_connection(("127.0.0.1", urlsplit(base).port)) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            assert b"200 OK" in sock.recv(4096)
            time.sleep(0.3)
        # 400 tokens x 50 ms = 20 s of work; the abort must end it well before that
        deadline = time.monotonic() + 10
        while True:
            engines = requests.get(f"{base}/admin/engines").json()["engines"]
            if engines[0]["load"]["running"] == 0 and engines[0]["active_requests"] == 0:
                break
            assert time.monotonic() < deadline, engines
            time.sleep(0.1)


def test_failed_kv_transfer_falls_back_to_local_prefill():
    ports, rp = [free_port(), free_port()], free_port()
    engines = [start_mock(p, "--fail-remote-send") for p in ports]
    router = start_router(rp, ports, "--policy", "pd")
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router, want_engines=2)
        body = {"prompt": list(range(900, 940)), "max_tokens": 4, "return_token_ids": True}
        r = requests.post(f"{base}/v1/completions", json=body)
        assert r.status_code == 200, r.text
        assert "fallback=transfer_failed" in r.headers["X-Switchyard-Route"]
        requests.put(f"{base}/admin/policy", json={"policy": "round_robin"})
        plain = requests.post(f"{base}/v1/completions", json=body).json()
        assert r.json()["choices"][0]["token_ids"] == plain["choices"][0]["token_ids"]
    finally:
        router.stop()
        for e in engines:
            e.stop()
