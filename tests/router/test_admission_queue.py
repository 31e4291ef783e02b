"""The router's admission queue (pyrouter/admission.py, router_core/src/front/admission.rs) on
one mock engine (router behaviour only: the mock's synthetic tokens are enough) that one request
saturates (--admit-max-inflight-per-engine 1). A long streaming "blocker" holds the engine while
requests queue; closing it lets them through one at a time, so the order they finish in is the
order the queue let them go. Every wait is for a state the router reports (its queue length in
/metrics), never a sleep; nothing asserts on time.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import requests
from router_procs import free_port, start_mock, start_router, wait_ready, wait_until

pytestmark = [pytest.mark.procs, pytest.mark.timeout(120)]

KEYS = ("key-a", "key-b", "key-c", "key-d")
ADMIN_KEY = "admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def _queued(base: str) -> int:
    text = requests.get(f"{base}/metrics", timeout=5).text
    return sum(int(float(n)) for n in
               re.findall(r"^switchyard:admission_queue_length\{[^}]*\} (\S+)$", text, re.M))


@contextmanager
def _blocker(base: str) -> Iterator[None]:
    """A streaming request that holds the only engine until the block ends (its client goes
    away: the router aborts it and the engine is free)."""
    resp = requests.post(f"{base}/v1/completions", stream=True, timeout=60,
                         headers={"Authorization": f"Bearer {KEYS[0]}"},
                         json={"prompt": "hold", "max_tokens": 3000, "stream": True})
    assert resp.status_code == 200
    lines = resp.iter_lines()  # kept: a dropped iterator closes the connection
    next(lines)  # on the engine now
    try:
        yield
    finally:
        resp.close()


class _Clients:
    """Requests sent one by one (each queued before the next goes), finishing in a recorded
    order."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.finished: list[str] = []
        self.statuses: dict[str, int] = {}
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def send(self, name: str, key: str, priority: int) -> None:
        def run() -> None:
            r = requests.post(f"{self.base}/v1/completions", timeout=60,
                              headers={"Authorization": f"Bearer {key}"},
                              json={"prompt": name, "max_tokens": 3, "priority": priority})
            with self._lock:
                self.finished.append(name)
                self.statuses[name] = r.status_code

        queued = _queued(self.base)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)
        wait_until(lambda: _queued(self.base) == queued + 1, 30, f"{name} queued")

    def join(self) -> None:
        for thread in self.threads:
            thread.join(60)


@pytest.fixture(scope="module")
def router() -> Iterator[str]:
    engine_port, port = free_port(), free_port()
    engine = start_mock(engine_port, "--chunk-delay-ms", "20")
    proc = start_router(port, [engine_port], "--admit-max-inflight-per-engine", "1",
                        "--admit-queue-size", "4",
                        env={"SWITCHYARD_API_KEYS": ",".join(KEYS),
                             "SWITCHYARD_ADMIN_KEYS": ADMIN_KEY})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc)
        yield base
    finally:
        proc.stop()
        engine.stop()


def test_priority_then_fair_shares_order_the_queue(router: str) -> None:
    clients = _Clients(router)
    with _blocker(router):
        clients.send("a-10-first", KEYS[0], 10)
        clients.send("a-10-second", KEYS[0], 10)
        clients.send("a-0", KEYS[0], 0)
    clients.join()
    assert clients.finished == ["a-0", "a-10-first", "a-10-second"]

    # One key queues three before another key's one: they take turns.
    clients = _Clients(router)
    with _blocker(router):
        for i in range(3):
            clients.send(f"c{i}", KEYS[2], 5)
        clients.send("d0", KEYS[3], 5)
    clients.join()
    assert clients.finished == ["c0", "d0", "c1", "c2"]
    assert set(clients.statuses.values()) == {200}


def test_shed_with_retry_after_and_the_metrics(router: str) -> None:
    clients = _Clients(router)
    with _blocker(router):
        # Its TTFT objective passes while it waits: 503 with Retry-After.
        r = requests.post(f"{router}/v1/completions", timeout=30,
                          headers={"Authorization": f"Bearer {KEYS[1]}"},
                          json={"prompt": "x", "max_tokens": 3, "priority": 3,
                                "slo": {"ttft_ms": 200}})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "queue_timeout"
        assert int(r.headers["Retry-After"]) >= 1
        for i in range(4):
            clients.send(f"b{i}", KEYS[1], 7)
        r = requests.post(f"{router}/v1/completions", timeout=30,
                          headers={"Authorization": f"Bearer {KEYS[1]}"},
                          json={"prompt": "x", "max_tokens": 3})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "queue_full"
        assert int(r.headers["Retry-After"]) >= 1
        metrics = requests.get(f"{router}/metrics", timeout=5).text
        assert 'switchyard:admission_queue_length{priority="7"} 4.0' in metrics
    clients.join()
    assert clients.statuses == {f"b{i}": 200 for i in range(4)}
    metrics = requests.get(f"{router}/metrics", timeout=5).text
    assert 'switchyard:admission_shed_total{priority="3",reason="timeout"} 1.0' in metrics
    assert 'switchyard:admission_shed_total{priority="0",reason="queue_full"} 1.0' in metrics
    admitted = re.search(r'^switchyard:admission_wait_seconds_count\{outcome="admitted",'
                         r'priority="7"\} (\S+)$', metrics, re.M)
    assert admitted is not None and float(admitted.group(1)) == 4.0


def test_bad_priorities_are_400s(router: str) -> None:
    for bad in (101, -101, 1.5, "high", True):
        r = requests.post(f"{router}/v1/completions", timeout=30,
                          headers={"Authorization": f"Bearer {KEYS[0]}"},
                          json={"prompt": "x", "max_tokens": 2, "priority": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "priority"


def test_admin_route_reads_and_changes_the_settings(router: str) -> None:
    settings = requests.get(f"{router}/admin/admission", headers=ADMIN, timeout=5).json()
    assert settings == {"max_inflight_per_engine": 1, "max_queued_prefill_tokens": 0,
                        "queue_size": 4, "queue_timeout_s": 30.0, "weighted_keys": 0,
                        "enabled": True, "predicted": True, "margin": 0.1, "slo_ttft_ms": None,
                        "slo_tpot_ms": None}
    for bad in ({"queue_size": 0}, {"queue_timeout_s": -1}, {"weights": {KEYS[0]: 0}},
                {"max_inflight_per_engine": 1.5}, {"colour": "red"}, {"predicted": "maybe"},
                {"margin": -1}, {"margin": "wide"}, {"slo_ttft_ms": 0}, {"slo_tpot_ms": "x"}):
        r = requests.put(f"{router}/admin/admission", json=bad, headers=ADMIN, timeout=5)
        assert r.status_code == 400, (bad, r.text)
    r = requests.put(f"{router}/admin/admission", json={"weights": {KEYS[0]: 3}}, headers=ADMIN,
                     timeout=5)
    assert r.status_code == 200 and r.json()["weighted_keys"] == 1
    assert requests.get(f"{router}/admin/admission", headers=ADMIN, timeout=5).json() == {
        **settings, "weighted_keys": 1}
    r = requests.put(f"{router}/admin/admission", json={"weights": {}}, headers=ADMIN, timeout=5)
    assert r.json() == settings
    # Admission by predicted outcome: turned off and on, its margin and the default objectives.
    changed = {"predicted": "off", "margin": 0.25, "slo_ttft_ms": 800, "slo_tpot_ms": 60}
    r = requests.put(f"{router}/admin/admission", json=changed, headers=ADMIN, timeout=5)
    assert r.status_code == 200 and r.json() == {**settings, **changed, "predicted": False}
    r = requests.put(f"{router}/admin/admission", json={"predicted": True, "margin": 0.1,
                                                        "slo_ttft_ms": None, "slo_tpot_ms": None},
                     headers=ADMIN, timeout=5)
    assert r.json() == settings
