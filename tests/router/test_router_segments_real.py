"""Segments on `switchyard serve --engines 2` with the real model: docs/policies.md's example
(lead engine emits k tokens, follow engine gets their KV and continues), loaded with
PUT /admin/policy, gives exactly the text one engine gives (round_robin runs each request on
one engine) for k = 0, 1, 5, streaming and not; seeded sampling continues across the seam."""
from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from router_procs import start_serve, wait_ready

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy"))
from docs_example import write_docs_example  # noqa: E402

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(900)]
STORY = ("The old lighthouse stood at the end of the pier, and every night its keeper climbed "
         "the stairs to light the lamp. One evening a stranger knocked on the door and said")


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Policy files load only from --policy-dir (docs/reliability.md): the example is written there.
    policy_dir = str(tmp_path_factory.mktemp("policies"))
    proc, base = start_serve("--engines", "2", "--policy-dir", policy_dir)
    try:
        wait_ready(base, proc, want_engines=2, timeout_s=300)
        path = write_docs_example(policy_dir)
        r = requests.put(f"{base}/admin/policy", json={"policy": "lead_follow", "file": path})
        assert r.status_code == 200, r.text
        yield base
    finally:
        proc.popen.send_signal(signal.SIGINT)
        proc.stop()


def _complete(base: str, prompt: str, stream: bool, **extra: Any) -> tuple[str, list[int], str]:
    body = {"prompt": prompt, "max_tokens": 10, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, "stream": stream, **extra}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = requests.post(f"{base}/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    route = r.headers["X-Switchyard-Route"]
    if not stream:
        choice = r.json()["choices"][0]
        assert r.json()["usage"]["completion_tokens"] == 10 and choice["finish_reason"] == "length"
        return choice["text"], choice["token_ids"], route
    events = [json.loads(line[6:]) for line in r.text.split("\n")
              if line.startswith("data: ") and line != "data: [DONE]"]
    assert r.text.rstrip().endswith("data: [DONE]")
    assert events[-1]["usage"]["completion_tokens"] == 10
    reasons = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
    assert reasons[-1] == "length" and "handoff" not in reasons
    assert len({e["id"] for e in events}) == 1 and events[0]["id"] == r.headers["X-Request-Id"]
    return "".join(e["choices"][0]["text"] for e in events if e["choices"]), [], route


def _switch(base: str, policy: str, **params: Any) -> None:
    r = requests.put(f"{base}/admin/policy", json={"policy": policy, "params": params})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("k", [0, 1, 5])
def test_lead_follow_matches_one_engine(serve: str, k: int) -> None:
    results = {}
    _switch(serve, "lead_follow", k=k)
    for stream in (False, True):
        prompt = f"[k={k} {'stream' if stream else 'plain'}] {STORY}"
        results[stream] = (prompt, *_complete(serve, prompt, stream))
        route = results[stream][3]
        assert route.startswith("lead_follow ") and f"k={k}" in route, route
        params = dict(kv.split("=") for kv in route.split()[1:])
        assert params["lead"] != params["follow"], route
    _switch(serve, "round_robin")  # one engine alone: the reference, after (cache can't help)
    for _stream, (prompt, text, ids, route) in results.items():
        ref_text, ref_ids, _ = _complete(serve, prompt, False)
        assert text == ref_text, route
        if ids:
            assert ids == ref_ids, route


def test_seeded_sampling_continues_across_the_seam(serve: str) -> None:
    prompt = f"[seeded] {STORY}"
    _switch(serve, "lead_follow", k=3)
    split, _, route = _complete(serve, prompt, False, temperature=1.0, seed=1234)
    assert route.startswith("lead_follow")
    _switch(serve, "round_robin")
    whole, _, _ = _complete(serve, prompt, False, temperature=1.0, seed=1234)
    assert split == whole
