"""Issue 13's findings, each reproduced at the HTTP level against real `switchyard router`
processes in front of mock engines.

Finding numbers refer to issue 13: 2 admin plane, 3 engine auth and ids, 4 bounded work,
5 connection timeouts, 6 engine death under pd, 7 bad inputs, 8 drain, 9 smaller points.
"""
from __future__ import annotations

import asyncio
import functools
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import psutil
import pytest
import requests
from router_procs import Proc, free_port, start_mock, start_router, wait_ready, wait_until

from switchyard_engine_api.client import EngineClient

pytestmark = [pytest.mark.procs, pytest.mark.timeout(120)]
INF_KEY, ADMIN_KEY = "sk-inference-5b1e9f", "sk-admin-c07d42"


@contextmanager
def cluster(n: int = 1, mock_args: tuple[str, ...] = (), router_args: tuple[str, ...] = (),
            env: dict[str, str] | None = None, roles: tuple[str, ...] = ()) -> Iterator[tuple[str, Proc, list]]:
    ports = [free_port() for _ in range(n)]
    engines = [start_mock(p, *mock_args, *(("--role", roles[i]) if roles else ()), env=env)
               for i, p in enumerate(ports)]
    rp = free_port()
    router = start_router(rp, ports, *router_args, env=env)
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router, want_engines=n)
        yield base, router, engines
    finally:
        router.stop()
        for e in engines:
            e.stop()


def _sse(text: str) -> list[str]:
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


def _raw(port: int, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


# ---- finding 2: the admin plane ----

def test_admin_plane_needs_an_admin_key_and_can_live_apart():
    admin_port = free_port()
    env = {"SWITCHYARD_API_KEYS": INF_KEY, "SWITCHYARD_ADMIN_KEYS": ADMIN_KEY}
    with cluster(1, router_args=("--admin-port", str(admin_port)), env=env,
                 ) as (base, router, _):
        admin = f"http://127.0.0.1:{admin_port}"
        inf = {"Authorization": f"Bearer {INF_KEY}"}
        adm = {"Authorization": f"Bearer {ADMIN_KEY}"}
        # Not on the public port at all; on the admin port only with the admin key.
        assert requests.get(f"{base}/admin/engines", headers=adm).status_code == 404
        assert requests.get(f"{admin}/admin/engines").status_code == 401
        assert requests.get(f"{admin}/admin/engines", headers=inf).status_code == 401
        assert requests.get(f"{admin}/admin/engines", headers=adm).status_code == 200
        assert requests.post(f"{base}/v1/completions", headers=inf,
                             json={"prompt": "x", "max_tokens": 2}).status_code == 200
        assert requests.get(f"{admin}/ready").status_code == 200
        # Engines only from the allow-list: the router never connects to an arbitrary host.
        r = requests.post(f"{admin}/admin/engines", headers=adm,
                          json={"address": "10.9.8.7:50051"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "engine_not_allowed"
        # Finding 7: a bad field is a 400 and adds nothing (it used to add the engine anyway).
        other = free_port()
        r = requests.post(f"{admin}/admin/engines", headers=adm,
                          json={"address": f"127.0.0.1:{other}", "timeout_s": "abc"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "timeout_s"
        engines = requests.get(f"{admin}/admin/engines", headers=adm).json()["engines"]
        assert [e["address"] for e in engines] == [e["address"] for e in engines[:1]]
        assert len(engines) == 1
        # A policy file by path or module name is refused without --policy-dir.
        r = requests.put(f"{admin}/admin/policy", headers=adm,
                         json={"policy": "x", "file": "os"})
        assert r.status_code == 403
        time.sleep(0.2)
        log = router.output()
        assert INF_KEY not in log and ADMIN_KEY not in log


def test_inference_key_alone_never_opens_admin():
    with cluster(1, env={"SWITCHYARD_API_KEYS": INF_KEY}) as (base, _, _engines):
        r = requests.put(f"{base}/admin/policy", headers={"Authorization": f"Bearer {INF_KEY}"},
                         json={"policy": "round_robin"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled"
        r = requests.get(f"{base}/admin/engines")
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled"


# ---- finding 3: engine authentication, unguessable ids ----

async def _engine_checks(address: str, request_id: str) -> None:
    async with EngineClient(address, token="") as anonymous:
        assert await anonymous.healthy()  # probes stay open
        for call in (anonymous.stats(), anonymous.abort(request_id), anonymous.model_info()):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    async with EngineClient(address, token="wrong-token") as wrong:
        with pytest.raises(grpc.aio.AioRpcError):
            await wrong.stats()
    async with EngineClient(address, token="deployment-token") as insider:
        # Even with the token, the id a client sees is not the one the engine knows.
        assert not await insider.abort(request_id)
        assert (await insider.stats()).running_requests == 1


def test_engines_need_the_token_and_client_ids_reach_no_engine():
    env = {"SWITCHYARD_ENGINE_TOKEN": "deployment-token"}
    with cluster(1, mock_args=("--chunk-delay-ms", "100"), env=env,
                 ) as (base, _, engines):
        with requests.post(f"{base}/v1/completions", stream=True,
                           json={"prompt": "x", "max_tokens": 30, "stream": True}) as r:
            assert r.status_code == 200
            request_id = r.headers["X-Request-Id"]
            lines = r.iter_lines()
            assert next(line for line in lines if line)
            asyncio.run(_engine_checks(engines[0].address, request_id))
            body = b"\n".join(lines).decode()
        assert body.rstrip().endswith("data: [DONE]") and '"length"' in body
        ids = {requests.post(f"{base}/v1/completions",
                             json={"prompt": "x", "max_tokens": 1}).headers["X-Request-Id"]
               for _ in range(3)}
        assert len(ids) == 3 and all(len(i.split("-")[-1]) == 32 for i in ids)


# ---- finding 4: bounded work ----

def test_huge_and_long_prompts_are_refused_cheaply():
    with cluster(1, router_args=("--max-context", "2048")) as (base, router, _):
        proc = psutil.Process(router.popen.pid)
        rss_before = proc.memory_info().rss
        health: list[int] = []
        stop = threading.Event()

        def poll_health() -> None:
            while not stop.is_set():
                health.append(requests.get(f"{base}/health", timeout=30).status_code)
                time.sleep(0.05)

        poller = threading.Thread(target=poll_health)
        poller.start()
        try:
            r = requests.post(f"{base}/v1/completions", json={"prompt": "a" * (21 << 20)})
            assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
            for body in ({"prompt": "lorem ipsum " * 300_000},  # 3.6 MB of text
                         {"prompt": [17] * 300_000},
                         {"messages": [{"role": "user", "content": "hi " * 1_000_000}]}):
                path = "chat/completions" if "messages" in body else "completions"
                r = requests.post(f"{base}/v1/{path}", json=body)
                assert r.status_code == 400, r.text[:300]
                assert r.json()["error"]["code"] == "context_length_exceeded"
        finally:
            stop.set()
            poller.join()
        assert health and set(health) == {200}
        assert proc.memory_info().rss - rss_before < 300 << 20


def test_per_caller_rate_limit_answers_429_with_retry_after():
    with cluster(1, router_args=("--rate-limit-rps", "0.5", "--rate-limit-burst", "2"),
                 ) as (base, _, _engines):
        codes = [requests.post(f"{base}/v1/completions",
                               json={"prompt": "x", "max_tokens": 1}) for _ in range(3)]
        assert [r.status_code for r in codes] == [200, 200, 429]
        assert codes[2].json()["error"]["code"] == "rate_limit_exceeded"
        assert int(codes[2].headers["Retry-After"]) >= 1



# ---- finding 5: connection timeouts ----

def test_slow_headers_and_short_bodies_do_not_hold_connections():
    with cluster(1, router_args=("--idle-timeout-s", "1", "--body-timeout-s", "1"),
                 ) as (base, _, _engines):
        port = _port(base)
        # Slowloris: 30 connections trickling header bytes forever are all closed.
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]
        for s in socks:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        closed = set()
        deadline = time.monotonic() + 20
        while len(closed) < len(socks) and time.monotonic() < deadline:
            for i, s in enumerate(socks):
                if i in closed:
                    continue
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                    s.settimeout(0.01)
                    if s.recv(1) == b"":
                        closed.add(i)
                except (TimeoutError, BlockingIOError):
                    pass
                except OSError:
                    closed.add(i)
            time.sleep(0.3)
        for s in socks:
            s.close()
        assert len(closed) == len(socks)
        # A Content-Length the body never reaches: 408, then the connection closes.
        reply = _raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           b"application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), reply[:200]
        assert b"request_timeout" in body
        # A keep-alive connection left idle after its answer is closed too.
        with socket.create_connection(("127.0.0.1", port)) as idle:
            idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            idle.settimeout(10)
            answer = idle.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            started = time.monotonic()
            while idle.recv(4096):  # b"" once the router closes it
                pass
            assert time.monotonic() - started < 8
        # The router still serves.
        assert requests.post(f"{base}/v1/completions",
                             json={"prompt": "x", "max_tokens": 1}).status_code == 200


# ---- finding 7: bad inputs are 400s with a code ----

@pytest.mark.parametrize("path, raw", [
    ("completions", b'{"prompt": "a\\ud800", "max_tokens": 2}'),
    ("chat/completions", b'{"messages": [{"role": "user", "content": "a\\ud800"}]}'),
    ("completions", b'{"prompt": "x", "max_tokens": ' + b"7" * 5001 + b"}"),
    ("chat/completions", b'{"messages": [{"role": "user", "content": '
                         b'[{"type": "text", "text": 5}]}]}'),
    ("completions", b"[" * 100_000 + b"]" * 100_000),
    ("completions", b'{"prompt": "x", "top_k": 99999999999}'),
    ("completions", b'{"prompt": "x", "seed": -99999999999999999999}'),
    ("completions", b'{"prompt": [1, 2, 3], "min_tokens": 10000000000}'),
])
def test_bad_inputs_are_400_with_a_code(mock_cluster, path, raw):
    r = requests.post(f"{mock_cluster.base}/v1/{path}", data=raw,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text[:300]
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json()["error"]["code"]


# ---- finding 9: the smaller points ----

def test_405_says_allow_and_every_error_has_a_code(mock_cluster):
    r = requests.get(f"{mock_cluster.base}/v1/completions")
    assert r.status_code == 405 and "POST" in r.headers["Allow"]
    assert r.json()["error"]["code"] == "method_not_allowed"
    r = requests.get(f"{mock_cluster.base}/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_engine_abort_never_reaches_the_client_as_a_finish_reason():
    with cluster(1, mock_args=("--chunk-delay-ms", "20", "--abort-after-tokens", "3"),
                 ) as (base, _, _engines):
        r = requests.post(f"{base}/v1/completions",
                          json={"prompt": "x", "max_tokens": 10, "stream": True})
        events = _sse(r.text)
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == "engine_aborted"
        assert all(json.loads(e)["choices"][0]["finish_reason"] in (None, "stop", "length")
                   for e in events[:-2])
        r = requests.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 10})
        assert r.status_code == 502 and r.json()["error"]["code"] == "engine_aborted"


# ---- finding 6: engine death under pd ----

_wait = functools.partial(wait_until, timeout_s=20.0)


def test_pd_degrades_when_its_decode_engine_dies():
    with cluster(2, router_args=("--policy", "pd"), roles=("prefill", "decode")) as (
            base, _, engines):
        r = requests.post(f"{base}/v1/completions", json={"prompt": "x " * 40, "max_tokens": 3})
        assert r.status_code == 200 and "degraded" not in r.headers["X-Switchyard-Route"]
        engines[1].kill9()
        _wait(lambda: requests.get(f"{base}/ready").json()["missing_roles"] == ["decode"])
        ready = requests.get(f"{base}/ready")
        assert ready.status_code == 200 and ready.json()["degraded"]
        assert requests.get(f"{base}/ready?strict=1").status_code == 503
        for i in range(4):
            r = requests.post(f"{base}/v1/completions",
                              json={"prompt": f"{i} " * 40, "max_tokens": 3, "stream": i % 2 == 1})
            assert r.status_code == 200, r.text
            assert "degraded=decode->e0" in r.headers["X-Switchyard-Route"]
        view = {e["id"]: e for e in requests.get(f"{base}/admin/engines").json()["engines"]}
        assert view["e1"]["state"] == "unreachable" and not view["e1"]["healthy"]
        assert view["e1"]["load"]["unfinished_tokens"] == 0 and view["e1"]["kv_pages_used"] == 0
        assert view["e0"]["state"] == "healthy"


# ---- finding 8: graceful drain ----

def test_sigterm_drains_then_ends_open_streams_cleanly():
    with cluster(1, mock_args=("--chunk-delay-ms", "100"), router_args=("--drain-s", "2"),
                 ) as (base, router, _engines):
        short: list[requests.Response] = []
        with requests.post(f"{base}/v1/completions", stream=True,
                           json={"prompt": "x", "max_tokens": 200, "stream": True}) as long:
            lines = long.iter_lines()
            assert next(line for line in lines if line)
            worker = threading.Thread(target=lambda: short.append(requests.post(
                f"{base}/v1/completions", json={"prompt": "y", "max_tokens": 5})))
            worker.start()
            time.sleep(0.2)
            router.popen.send_signal(signal.SIGTERM)
            _wait(lambda: requests.get(f"{base}/ready").status_code == 503, timeout_s=5)
            assert requests.get(f"{base}/ready").json()["draining"]
            refused = requests.post(f"{base}/v1/completions", json={"prompt": "x"})
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "shutting_down"
            assert int(refused.headers["Retry-After"]) >= 1
            rest = b"\n".join(lines).decode()  # raises if the body is cut without its end
        worker.join(30)
        assert short and short[0].status_code == 200  # finished within the grace period
        events = _sse(rest)
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == "shutting_down"
        assert router.popen.wait(30) == 0
