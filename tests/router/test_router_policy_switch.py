"""Switching policy under concurrent load loses no request; new requests show the new route."""
from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
import requests

pytestmark = [pytest.mark.procs, pytest.mark.timeout(120)]


async def _one(session: aiohttp.ClientSession, base: str, i: int) -> tuple[int, str, str]:
    body = {"prompt": f"request number {i} " * 3, "max_tokens": 8, "stream": i % 2 == 0}
    async with session.post(f"{base}/v1/completions", json=body) as r:
        text = await r.text()
        return r.status, r.headers.get("X-Switchyard-Route", ""), text


async def _load_while_switching(base: str) -> list[tuple[int, str, str]]:
    async with aiohttp.ClientSession() as session:
        tasks = []
        for i, name in enumerate(["least_load", "pd", "balanced_pd", "cache_aware",
                                  "round_robin"]):
            tasks += [asyncio.create_task(_one(session, base, 40 * i + j)) for j in range(40)]
            await asyncio.sleep(0)  # let the batch get admitted under the current policy
            async with session.put(f"{base}/admin/policy", json={"policy": name}) as r:
                assert r.status == 200, await r.text()
        return await asyncio.gather(*tasks)


def test_switch_under_load_loses_nothing(mock_cluster):
    results = asyncio.run(_load_while_switching(mock_cluster.base))
    assert len(results) == 200
    failed = [(s, t) for s, _, t in results if s != 200]
    assert not failed, failed[:3]
    streamed = [t for i, (_, _, t) in enumerate(results) if i % 2 == 0]
    assert all(t.rstrip().endswith("data: [DONE]") for t in streamed)
    patterns = {route.split()[0] for _, route, _ in results}
    assert len(patterns) >= 2  # requests ran under more than one policy


def test_new_requests_show_the_new_route(mock_cluster):
    base = mock_cluster.base
    prompt = {"prompt": "a prompt that is long enough to span more than one KV page " * 2,
              "max_tokens": 2}
    for name, pattern in [("pd", "pd"), ("balanced_pd", "balanced_pd"),
                          ("round_robin", "dp"), ("cache_aware", "cache_aware")]:
        r = requests.put(f"{base}/admin/policy", json={"policy": name})
        assert r.status_code == 200 and r.json()["policy"] == name
        route = requests.post(f"{base}/v1/completions", json=prompt).headers["X-Switchyard-Route"]
        assert route.split()[0] == pattern, route
    assert requests.get(f"{base}/admin/policy").json()["policy"] == "cache_aware"


def test_pd_really_disaggregates_then_skips_cached(mock_cluster):
    base = mock_cluster.base
    requests.put(f"{base}/admin/policy", json={"policy": "pd"})
    # 33 token ids: the decode engine reserves 32 = two full pages, so a repeat is fully cached.
    body = {"prompt": list(range(500, 533)), "max_tokens": 3, "return_token_ids": True}
    first = requests.post(f"{base}/v1/completions", json=body)
    route = dict(kv.split("=") for kv in first.headers["X-Switchyard-Route"].split()[1:])
    assert route["prefill"].startswith("e") and route["decode"].startswith("e")
    assert route["prefill"] != route["decode"] and route["matched"] == "0"
    again = requests.post(f"{base}/v1/completions", json=body)
    assert "skipped=remote_send" in again.headers["X-Switchyard-Route"]
    assert again.json()["choices"][0]["token_ids"] == first.json()["choices"][0]["token_ids"]
    # the engines' Stats reach GET /admin/engines: the decode engine now holds the two pages
    deadline = time.monotonic() + 5
    while max(e["cached_blocks"] for e in
              requests.get(f"{base}/admin/engines").json()["engines"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_bad_policy_switch_is_400_and_keeps_current(mock_cluster):
    base = mock_cluster.base
    before = requests.get(f"{base}/admin/policy").json()["policy"]
    r = requests.put(f"{base}/admin/policy", json={"policy": "no_such_policy"})
    assert r.status_code == 400 and "unknown policy" in r.json()["error"]["message"]
    r = requests.put(f"{base}/admin/policy", json={"policy": "pd", "params": {"bogus": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "params"
    r = requests.put(f"{base}/admin/policy",
                     json={"policy": "balanced_pd", "params": {"ratio": 0.5}})
    assert r.status_code == 200 and r.json()["params"]["ratio"] == 0.5
    r = requests.put(f"{base}/admin/policy", json={"policy": before})
    assert r.status_code == 200
