"""A router replica SIGKILLed under a request flood (issue 49, deliver 4), on real SmolLM2
engines: `switchyard serve --engines 2 --routers 2 --policy cache_aware`, every engine auditing
its pages (SWITCHYARD_CHECK_KV_PAGES=1: engine/kvcache/page_audit.py).

While clients flood replica 1 and a long stream runs on it, replica 0 is SIGKILLed with its own
requests in the engines. Replica 1 answers every request of the flood 200 (no 5xx, no broken
connection) and the stream ends whole; each of replica 0's requests ends (answered, or its
connection closed: none hangs); serve restarts replica 0 on its port, and it routes a prompt
sent through replica 1 while it was down to the engine holding it (its prefix view, from the
engines' KV events). Then both engines hold no lease, no reserved page and no leaked page,
failed no audit, and neither was restarted.
"""
from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from router_procs import ServeProc, start_serve, wait_ready, wait_until
from streams import Stream

from switchyard_bench.soak.audit import audit_engine, router_inflight
from switchyard_engine_api.auth import TOKEN_FILE_ENV

pytestmark = [pytest.mark.procs, pytest.mark.timeout(900)]
FLOOD_CLIENTS = 4
STREAM_TOKENS = 96
# About 300 tokens: its prefix spans many blocks, so a match is unmistakable.
PROMPT = " ".join(f"Entry {i}: the brig Osprey unloaded salt, timber and wool at the quay."
                  for i in range(20))


class Flood:
    """Clients sending short completions to one replica back to back until stopped; every
    answer's status (or the exception that replaced it) is kept."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.outcomes: list[int | str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                        for i in range(FLOOD_CLIENTS)]

    def _client(self, index: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                r = requests.post(f"{self.base}/v1/completions", timeout=300, json={
                    "prompt": f"Client {index}, request {n}: name a port.", "max_tokens": 4})
                self.outcomes.append(r.status_code)
            except requests.RequestException as exc:
                self.outcomes.append(repr(exc))

    def __enter__(self) -> Flood:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=300)


@pytest.fixture
def serve() -> Iterator[tuple[ServeProc, int]]:
    proc, base = start_serve("--engines", "2", "--routers", "2", "--policy", "cache_aware",
                             env={"SWITCHYARD_CHECK_KV_PAGES": "1"})
    port = int(base.rsplit(":", 1)[1])
    try:
        proc.wait_serving(timeout_s=600)
        for p in (port, port + 1):
            wait_ready(f"http://127.0.0.1:{p}", proc, want_engines=2, timeout_s=120)
        yield proc, port
    finally:
        proc.stop()


def _route(r: requests.Response) -> dict[str, str]:
    return dict(p.split("=", 1) for p in r.headers["X-Switchyard-Route"].split()[1:] if "=" in p)


def _address_of(base: str, engine_id: str) -> str:
    engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
    return next(e["address"] for e in engines if e["id"] == engine_id)


def _idle(base: str) -> bool:
    engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
    return all(e["load"]["unfinished_tokens"] == 0 and e["load"]["queued_prefill_tokens"] == 0
               for e in engines)


def _complete(base: str, prompt: str, max_tokens: int) -> requests.Response:
    r = requests.post(f"{base}/v1/completions", timeout=600,
                      json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert r.status_code == 200, r.text
    return r


def test_a_replica_killed_under_a_flood_costs_only_its_own_requests(
        serve: tuple[ServeProc, int], monkeypatch: pytest.MonkeyPatch) -> None:
    proc, port = serve
    doomed, survivor = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
    before = proc.pids()
    pool = ThreadPoolExecutor(2)
    with Flood(survivor) as flood:
        stream = Stream(survivor, STREAM_TOKENS).start()
        assert stream.started.wait(300)
        doomed_requests = [pool.submit(requests.post, f"{doomed}/v1/completions", timeout=600,
                                       json={"prompt": f"Doomed {i}: tell a long story.",
                                             "max_tokens": 64, "ignore_eos": True})
                           for i in range(2)]
        wait_until(lambda: asyncio.run(router_inflight(doomed)) > 0, 120,
                   "replica 0 to hold requests")
        assert not stream.ended.is_set()  # in flight on the survivor across the kill
        os.kill(before["router-0"], signal.SIGKILL)
        wait_until(lambda: f"router replica 0 on port {port} exited with code -9"
                   in proc.output(), 60, "serve to see replica 0 die")
        # Sent while replica 0 is down (or starting): it learns it from the engines.
        holder = _address_of(survivor, _route(_complete(survivor, PROMPT, 1))["engine"])
        wait_until(lambda: f"router replica 0 restarted on port {port}" in proc.output(), 60,
                   "serve to restart replica 0")
        wait_ready(doomed, proc, want_engines=2, timeout_s=120)
    assert stream.ended.wait(300) and stream.whole, (stream.tokens, stream.error)
    for future in doomed_requests:
        future.exception(timeout=300)  # answered or broken off: it ended
    pool.shutdown()
    assert flood.outcomes and set(flood.outcomes) == {200}, sorted(set(map(str, flood.outcomes)))

    # The restarted replica's prefix view: the prompt goes where it is cached.
    wait_until(lambda: _idle(doomed), 120, "replica 0 to see the engines idle")
    route = _route(_complete(doomed, PROMPT, 1))
    assert _address_of(doomed, route["engine"]) == holder and int(route["matched"]) > 0, route

    monkeypatch.setenv(TOKEN_FILE_ENV, str(proc.run_dir.token_path))  # the engines ask for it
    for name, pid in before.items():
        if name.startswith("engine-"):
            assert proc.pids()[name] == pid, f"{name} was restarted"
    engines = requests.get(f"{survivor}/admin/engines", timeout=10).json()["engines"]
    for engine in engines:
        # Up to 90 s: a lease the dead replica left behind lapses after the engine's 30 s.
        audit = asyncio.run(audit_engine(engine["address"], settle_s=90))
        assert audit.clean, audit  # no request, lease, reserved or leaked page, failed audit
        assert audit.page_audits > 0, audit  # the check really ran
