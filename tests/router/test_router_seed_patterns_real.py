"""The seeds' patterns on `switchyard serve --engines 3` with the real model and real latency
profiles: tandem (split inside the prompt; after k = 1 and 5 tokens), both slo_mux paths and
adaptive give exactly the text round_robin (one engine per request) gives, with a route header
naming the pattern; /admin/migrate copies a context and moves a live request mid-stream;
adaptive under 100 concurrent requests loses none."""
from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from router_procs import start_serve, wait_ready

from switchyard_bench.policies import round_robin_py

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(1800)]
STORY = ("In the harbour town the fishermen rose before dawn, mended their nets by lantern "
         "light and argued about the weather. That morning the oldest of them looked at the sky "
         "and said that a storm was coming, and the young ones laughed, because")


# round_robin's picks written as a user's policy file: the same picks, always made in Python.
ROUND_ROBIN_PY = Path(round_robin_py.__file__).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[str]:
    policies = tmp_path_factory.mktemp("policies")
    (policies / "round_robin_py.py").write_text(ROUND_ROBIN_PY)
    # Real latency profiles (cached after the first run on a machine): the policies predict.
    proc, base = start_serve("--engines", "3", "--policy-dir",
                             str(policies), env={"SWITCHYARD_LATENCY_PROFILE": "auto"})
    try:
        wait_ready(base, proc, want_engines=3, timeout_s=900)
        yield base
    finally:
        proc.popen.send_signal(signal.SIGINT)
        proc.stop()


def _switch(base: str, policy: str, **params: Any) -> None:
    r = requests.put(f"{base}/admin/policy", json={"policy": policy, "params": params})
    assert r.status_code == 200, r.text


def _complete(base: str, prompt: str, stream: bool = False, max_tokens: int = 10
              ) -> tuple[str, str]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": stream}
    r = requests.post(f"{base}/v1/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    if not stream:
        return r.json()["choices"][0]["text"], r.headers["X-Switchyard-Route"]
    events = [json.loads(x[6:]) for x in r.text.split("\n")
              if x.startswith("data: ") and x != "data: [DONE]"]
    return "".join(e["choices"][0]["text"] for e in events if e["choices"]), \
        r.headers["X-Switchyard-Route"]


def _reference(base: str, prompts: list[str], max_tokens: int = 10) -> list[str]:
    _switch(base, "round_robin")
    return [_complete(base, p, max_tokens=max_tokens)[0] for p in prompts]


CASES = [("tandem", {"split_ratio": 0.5}, "tandem"), ("tandem", {"lead_tokens": 1}, "tandem"),
         ("tandem", {"lead_tokens": 5}, "tandem"), ("tandem", {}, "tandem"),
         ("slo_mux", {"ttft_ms": 1e9, "tpot_ms": 1e9}, "slo_mux path=mux"),
         ("slo_mux", {"tpot_ms": 0.001}, "slo_mux path=pd"),
         # which placement it takes depends on the engines' state (FakeCluster tests pin that)
         ("adaptive", {}, "adaptive chose="),
         ("adaptive", {"patterns": "pd"}, "adaptive chose=pd")]


def test_seed_patterns_match_one_engine(serve: str) -> None:
    results = []
    for i, (policy, params, expect) in enumerate(CASES):
        _switch(serve, policy, **params)
        for stream in (False, True):
            prompt = f"[{i} {policy} {stream}] {STORY}"
            text, route = _complete(serve, prompt, stream)
            assert route.startswith(expect), (params, route)
            results.append((prompt, text, route))
    reference = _reference(serve, [p for p, _, _ in results])
    for (prompt, text, route), ref in zip(results, reference, strict=True):
        assert text == ref, (prompt, route)


def test_migrate_a_context_then_a_live_request(serve: str) -> None:
    context = f"[migrate] You are the harbour master. {STORY}"
    r = requests.post(f"{serve}/admin/migrate", json={"prefix": context, "from": "e0",
                                                      "to": "e1"})
    assert r.status_code == 200, r.text
    copied = r.json()
    assert copied["copied"] > 0 and copied["bytes_sent"] > 0, copied
    # e1's KV events reach the router's index shortly after the copy.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        engines = {e["id"]: e for e in requests.get(f"{serve}/admin/engines").json()["engines"]}
        if engines["e1"]["cached_blocks"] > 0:
            break
        time.sleep(0.1)
    assert engines["e1"]["cached_blocks"] > 0
    # the copy is in e1's prefix cache: a repeat copy finds it there
    again = requests.post(f"{serve}/admin/migrate",
                          json={"prefix": context, "from": "e0", "to": "e1"}).json()
    assert again["matched"] >= copied["copied"] - 16, again

    # A live request moves under a policy that runs in Python: round_robin itself is picked in
    # Rust on the Rust front (no policy session to move a request with), so its copy from the
    # policy directory runs here.
    _switch(serve, "round_robin")
    r = requests.post(f"{serve}/admin/migrate", json={"request_id": "cmpl-none", "to": "e1"})
    assert r.status_code == 404, r.text
    _switch(serve, "round_robin_py")
    prompt = f"[live] {STORY}"
    got: dict[str, Any] = {}

    def stream() -> None:
        body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True,
                "stream": True}
        with requests.post(f"{serve}/v1/completions", json=body, stream=True, timeout=600) as r:
            got["id"], got["route"] = r.headers["X-Request-Id"], r.headers["X-Switchyard-Route"]
            got["text"] = "".join(
                json.loads(line[6:])["choices"][0]["text"] for line in r.iter_lines(
                    decode_unicode=True) if line.startswith("data: ") and line != "data: [DONE]"
                and json.loads(line[6:])["choices"])

    thread = threading.Thread(target=stream)
    thread.start()
    deadline = time.monotonic() + 120
    while "id" not in got and time.monotonic() < deadline:
        time.sleep(0.05)
    source = dict(kv.split("=") for kv in got["route"].split()[1:])["engine"]
    target = next(e for e in ("e0", "e1", "e2") if e != source)
    moved = requests.post(f"{serve}/admin/migrate",
                          json={"request_id": got["id"], "to": target}, timeout=300).json()
    thread.join(600)
    assert moved["outcome"] == "migrated" and moved["from"] == source, moved
    assert moved["moved_tokens"] > 0
    assert got["text"] == _reference(serve, [prompt], max_tokens=40)[0]


def test_adaptive_under_100_concurrent_requests_loses_none(serve: str) -> None:
    _switch(serve, "adaptive", tpot_ms=20.0)  # tight: some requests are placed disaggregated
    routes: list[str] = []
    errors: list[str] = []

    def one(i: int) -> None:
        try:
            body = {"prompt": f"[{i}] Count the boats:" + " one" * (i % 7 * 20),
                    "max_tokens": 2 + i % 12, "temperature": 0, "ignore_eos": True}
            r = requests.post(f"{serve}/v1/completions", json=body, timeout=900)
            if r.status_code != 200:
                errors.append(f"{r.status_code} {r.text[:200]}")
            else:
                routes.append(r.headers["X-Switchyard-Route"])
        except requests.RequestException as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    assert not errors and len(routes) == 100, errors[:3]
    assert all(r.startswith("adaptive chose=") for r in routes)
    chosen = Counter(r.split()[1] for r in routes)
    print("adaptive chose:", dict(chosen))
