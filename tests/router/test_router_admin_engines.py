"""Engine membership: add, health in/out of rotation, drain-then-remove, auth, 429."""
from __future__ import annotations

import functools
import os
import threading
import time

import pytest
import requests
from router_procs import free_port, start_mock, start_router, wait_ready, wait_until

pytestmark = [pytest.mark.procs, pytest.mark.timeout(90)]


def _engines(base: str) -> dict[str, dict]:
    return {e["id"]: e for e in requests.get(f"{base}/admin/engines").json()["engines"]}


def _routes(base: str, n: int) -> set[str]:
    out = set()
    for i in range(n):
        r = requests.post(f"{base}/v1/completions", json={"prompt": [1, 2, i], "max_tokens": 1})
        assert r.status_code == 200, r.text
        out.add(r.headers["X-Switchyard-Route"].split("engine=")[1].split()[0])
    return out


def test_membership_health_and_drain(tmp_path):
    flag = str(tmp_path / "unhealthy")
    p0, p1, rp = free_port(), free_port(), free_port()
    e0 = start_mock(p0, "--unhealthy-file", flag)
    e1 = start_mock(p1, "--chunk-delay-ms", "50", "--role", "decode")
    router = start_router(rp, [p0])
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router)
        assert _routes(base, 4) == {"e0"}
        # add the second engine live
        r = requests.post(f"{base}/admin/engines", json={"address": f"127.0.0.1:{p1}"})
        assert r.status_code == 201 and r.json() == {
            "id": "e1", "address": f"127.0.0.1:{p1}", "role": "decode", "healthy": True}
        assert _routes(base, 4) == {"e0", "e1"}
        dup = requests.post(f"{base}/admin/engines", json={"address": f"127.0.0.1:{p1}"})
        assert dup.status_code == 400
        bad = requests.post(f"{base}/admin/engines", json={"address": "nohost"})
        assert bad.status_code == 400
        # e0 turns unhealthy -> out of rotation; back when healthy
        open(flag, "w").close()
        _wait(lambda: not _engines(base)["e0"]["healthy"])
        assert _routes(base, 4) == {"e1"}
        os.remove(flag)
        _wait(lambda: _engines(base)["e0"]["healthy"])
        assert _routes(base, 4) == {"e0", "e1"}
        # drain e1 while a slow request runs on it: the request finishes, then e1 is gone
        requests.put(f"{base}/admin/policy", json={"policy": "round_robin"})
        results: list[requests.Response] = []
        slow = threading.Thread(target=lambda: results.append(requests.post(
            f"{base}/v1/completions", json={"prompt": [7], "max_tokens": 20})))
        while True:  # aim the slow request at e1
            route = requests.post(f"{base}/v1/completions",
                                  json={"prompt": [8], "max_tokens": 1}).headers
            if "engine=e0" in route["X-Switchyard-Route"]:
                break
        slow.start()
        _wait(lambda: _engines(base)["e1"]["active_requests"] == 1)
        r = requests.delete(f"{base}/admin/engines/e1")
        assert r.status_code == 200 and r.json()["removed"]
        slow.join(timeout=30)
        assert results and results[0].status_code == 200
        assert results[0].json()["usage"]["completion_tokens"] == 20
        assert set(_engines(base)) == {"e0"}
        assert requests.delete(f"{base}/admin/engines/e9").status_code == 404
        # last engine unhealthy -> 503 no capacity, never a hang
        open(flag, "w").close()
        _wait(lambda: requests.get(f"{base}/ready").status_code == 503)
        r = requests.post(f"{base}/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable"
    finally:
        router.stop()
        e0.stop()
        e1.stop()


_wait = functools.partial(wait_until, timeout_s=10.0)


def test_api_keys_and_busy():
    p0, rp = free_port(), free_port()
    engine = start_mock(p0, "--chunk-delay-ms", "100")
    router = start_router(rp, [p0], "--max-inflight", "1",
                          env={"SWITCHYARD_API_KEYS": "k1,k2", "SWITCHYARD_ADMIN_KEYS": "adm"})
    base = f"http://127.0.0.1:{rp}"
    try:
        wait_ready(base, router)
        body = {"prompt": "x", "max_tokens": 5}
        r = requests.post(f"{base}/v1/completions", json=body)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = requests.post(f"{base}/v1/completions", json=body,
                          headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        assert requests.get(f"{base}/admin/engines").status_code == 401
        # An inference key never opens the admin plane; the admin key does (and only there).
        assert requests.get(f"{base}/admin/engines",
                            headers={"Authorization": "Bearer k1"}).status_code == 401
        adm = {"Authorization": "Bearer adm"}
        assert requests.get(f"{base}/admin/engines", headers=adm).status_code == 200
        assert requests.post(f"{base}/v1/completions", json=body, headers=adm).status_code == 401
        ok = {"Authorization": "Bearer k2"}
        assert requests.post(f"{base}/v1/completions", json=body, headers=ok).status_code == 200
        # one request in flight (slow engine) -> the next one gets 429, not a hang
        first: list[requests.Response] = []
        t = threading.Thread(target=lambda: first.append(requests.post(
            f"{base}/v1/completions", json=body, headers=ok)))
        t.start()
        time.sleep(0.2)
        r = requests.post(f"{base}/v1/completions", json=body, headers=ok)
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        assert int(r.headers["Retry-After"]) >= 1
        t.join(timeout=30)
        assert first[0].status_code == 200
    finally:
        router.stop()
        engine.stop()
