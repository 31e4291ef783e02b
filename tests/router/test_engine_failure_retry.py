"""Issue 24, on real router processes over mock engines: an engine SIGKILLed while requests wait
for their first token is invisible to them (they are retried on another engine, whatever gRPC
status the dead peer leaves), under every built-in; engine-side ids are the router's own, so
clients sharing an X-Request-Id never touch each other, on the fast path and the Python path.
"""
from __future__ import annotations

import random
import socket
import threading
import time
from dataclasses import dataclass

import pytest
import requests
from router_procs import free_port, start_mock, start_router, wait_ready

from pyrouter.runtime.policy_registry import get_policy
from switchyard_bench.soak.outcome import Outcome, judge_stream

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(180)]
BUILTINS = ("round_robin", "least_load", "cache_aware", "pd", "balanced_pd", "tandem",
            "slo_mux", "adaptive")
STEP_MS = 300  # a mock engine's first token comes one step after the request


@dataclass
class Sent:
    outcome: Outcome | None = None
    first_data_at: float | None = None  # when the first token's event arrived


def _stream(base: str, body: dict[str, object], sent: Sent,
            headers: dict[str, str] | None = None) -> None:
    try:
        with requests.post(f"{base}/v1/completions", json={**body, "stream": True},
                           headers=headers, stream=True, timeout=60) as r:
            text = ""
            for line in r.iter_lines(decode_unicode=True):
                if line.startswith("data: {") and '"choices"' in line and sent.first_data_at is None:
                    sent.first_data_at = time.monotonic()
                text += line + "\n\n"
            sent.outcome = judge_stream(r.status_code, text)
    except requests.RequestException as exc:
        sent.outcome = Outcome("lost", f"client saw {type(exc).__name__}")


@pytest.mark.parametrize("policy", BUILTINS)
def test_sigkill_before_the_first_token_is_retried(policy: str) -> None:
    """SIGKILL one engine at a random moment while a burst waits for its first tokens: >= 95% of
    the requests that had not started succeed (before: every one on the dead engine got 502
    `UNKNOWN: transport error`), and none is lost."""
    rng = random.Random(f"issue24-{policy}")
    roles = get_policy(policy).engine_roles(3 if policy == "slo_mux" else 2)
    ports = [free_port() for _ in roles]
    engines = [start_mock(p, "--role", role, "--chunk-delay-ms", str(STEP_MS),
                          "--tokens-per-chunk", "1") for p, role in zip(ports, roles, strict=True)]
    rp = free_port()
    router = start_router(rp, ports, "--policy", policy)
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router, want_engines=len(ports))
        sent = [Sent() for _ in range(24)]
        workers = [threading.Thread(target=_stream, args=(
            base, {"prompt": [5 + i % 7] * (40 + i), "max_tokens": 4, "ignore_eos": True}, s))
            for i, s in enumerate(sent)]
        for w in workers:
            w.start()
        time.sleep(rng.uniform(0.05, 0.2))
        # The busiest engine that generates (a prefill engine's death is a failed transfer,
        # which the disaggregating policies already survive by prefilling locally).
        listed = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
        busy = {int(e["id"][1:]): e["active_requests"] for e in listed}
        victim = max((i for i, role in enumerate(roles) if role != "prefill"),
                     key=lambda i: (busy.get(i, 0), rng.random()))
        engines[victim].kill9()
        killed_at = time.monotonic()
        for w in workers:
            w.join(timeout=90)
        outcomes = [s.outcome for s in sent]
        assert all(o is not None and not o.lost for o in outcomes), outcomes
        waiting = [s for s in sent if s.first_data_at is None or s.first_data_at > killed_at]
        ok = [s for s in waiting if s.outcome is not None and s.outcome.kind == "ok"]
        assert len(waiting) >= 12, "the kill came too late to test anything"
        assert len(ok) >= 0.95 * len(waiting), (
            f"{policy}: {len(ok)}/{len(waiting)} requests that had not started succeeded "
            f"(engine {victim} killed): {[s.outcome for s in waiting]}\n{router.output()[-3000:]}")
    finally:
        router.stop()
        for e in engines:
            e.stop()


def _client_gone_during_admission(port: int, body: bytes, request_id: str) -> None:
    """A client that sends its request and hangs up before the first token."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nX-Request-Id: " + request_id.encode() + b"\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(STEP_MS / 3000)


@pytest.mark.parametrize("path", ["fast", "python"])
def test_clients_sharing_an_x_request_id_never_touch_each_other(path: str) -> None:
    """Eight clients send X-Request-Id `dup`, overlapping, to a router whose first engine fails
    every generation (so about half are retried; it is back in rotation at the next health
    poll), while others with the same id hang up during admission: every one that stayed gets
    its answer, under its own id. Before: the fast path's retry id was `dup-r1`, so overlapping
    retries collided on the good engine (ALREADY_EXISTS), and on the Python path a hang-up
    cancelled the admission of another client with its id (500)."""
    bad, good, rp = free_port(), free_port(), free_port()
    engines = [start_mock(bad, "--fail-rate", "1.0"),
               start_mock(good, "--chunk-delay-ms", str(STEP_MS))]
    extra = ["--max-inflight-per-caller", "1000"] if path == "python" else []  # Python path
    router = start_router(rp, [bad, good], "--policy", "round_robin", *extra)
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router, want_engines=2)
        for _round in range(3):
            sent = [Sent() for _ in range(8)]
            workers = [threading.Thread(target=_stream, args=(
                base, {"prompt": [3, 4, i], "max_tokens": 3}, s, {"X-Request-Id": "dup"}))
                for i, s in enumerate(sent)]
            quitters = [threading.Thread(target=_client_gone_during_admission, args=(
                rp, b'{"prompt": [9, 9], "max_tokens": 3, "stream": true}', "dup"))
                for _ in workers]
            for worker, quitter in zip(workers, quitters, strict=True):
                quitter.start()  # admitted just before the worker, gone while it is admitted
                time.sleep(0.03)
                worker.start()
                time.sleep(0.25)  # each runs ~3 steps: several overlap on the good engine
            for w in workers + quitters:
                w.join(timeout=60)
            assert [s.outcome.kind if s.outcome else None for s in sent] == ["ok"] * 8, (
                [s.outcome for s in sent], router.output()[-3000:])
        r = requests.post(f"{base}/v1/completions", json={"prompt": [1], "max_tokens": 1},
                          headers={"X-Request-Id": "dup"})
        assert r.status_code == 200 and r.headers["X-Request-Id"] == "dup"
        assert r.json()["id"] == "dup"
        assert "ALREADY_EXISTS" not in router.output() and "dup-r" not in router.output()
    finally:
        router.stop()
        for e in engines:
            e.stop()


def test_engine_add_needs_an_engine_and_small_points() -> None:
    """POST /admin/engines refuses an address that does not answer as an engine at once and
    keeps nothing; HEAD /health is 200; a bad chunk size is a 400 (not 413); a JSON response format or a required tool call is a
    400 naming the field; a non-text content part is a 400 naming the part."""
    p, rp = free_port(), free_port()
    engine = start_mock(p)
    router = start_router(rp, [p])
    base = f"http://127.0.0.1:{rp}"
    listener = socket.socket()  # something on loopback that is not an engine (as ssh is)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def talk_garbage() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            conn.close()

    talker = threading.Thread(target=talk_garbage, daemon=True)
    talker.start()
    try:
        wait_ready(base, router)
        for address in (f"127.0.0.1:{listener.getsockname()[1]}", f"127.0.0.1:{free_port()}"):
            started = time.monotonic()
            r = requests.post(f"{base}/admin/engines", json={"address": address}, timeout=30)
            assert r.status_code == 400 and r.json()["error"]["code"] == "engine_unreachable", (
                r.text)
            assert time.monotonic() - started < 10
        listed = requests.get(f"{base}/admin/engines").json()["engines"]
        assert [e["address"] for e in listed] == [f"127.0.0.1:{p}"]
        assert requests.head(f"{base}/health").status_code == 200
        with socket.create_connection(("127.0.0.1", rp), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
            head = s.recv(65536).decode(errors="replace")
        assert head.startswith("HTTP/1.1 400") and "invalid_body" in head, head
        chat = f"{base}/v1/chat/completions"
        user = {"role": "user", "content": "hi"}
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        for body, param in [
            ({"messages": [user], "response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "strict": True}}}, "response_format"),
            ({"messages": [user], "response_format": {"type": "yaml"}}, "response_format"),
            ({"messages": [user], "tools": tools, "tool_choice": "required"}, "tool_choice"),
            ({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
             "messages[0].content[0]"),
            ({"messages": [{"role": "user", "content": [1, 2]}]}, "messages[0].content[0]"),
        ]:
            r = requests.post(chat, json={**body, "max_tokens": 2})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    finally:
        stop.set()
        talker.join()
        listener.close()
        router.stop()
        engine.stop()
