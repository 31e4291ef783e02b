"""Every built-in pattern, through HTTP, yields exactly the tokens of one engine (greedy, fp32).

Two real engines sit behind the router under test; a third, behind its own router, is the
single-engine reference. Each (policy, stream) case uses its own prompt so its KV really moves (no cache left over from another case), and the
route header proves PD disaggregated.
"""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
from router_real_cluster import router_and_reference

pytestmark = [pytest.mark.procs, pytest.mark.timeout(600)]
POLICIES = ["round_robin", "least_load", "cache_aware", "pd", "balanced_pd"]
STORY = ("The lighthouse keeper had lived alone on the island for thirty years. Every evening he "
         "climbed the spiral stairs, trimmed the wick, and watched the ships pass in the dark. "
         "One stormy night, a small boat appeared near the rocks, and")


@pytest.fixture(scope="module")
def routers() -> Iterator[tuple[str, str]]:
    """(the router under test, the single-engine reference)."""
    with router_and_reference() as pair:
        yield pair


def _generate(base: str, prompt: str, stream: bool) -> tuple[list[int] | None, str, str]:
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, "stream": stream}
    r = requests.post(f"{base}/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    route = r.headers["X-Switchyard-Route"]
    if not stream:
        choice = r.json()["choices"][0]
        return choice["token_ids"], choice["text"], route
    events = [line[6:] for line in r.text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    return None, text, route


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("policy", POLICIES)
def test_pattern_matches_single_engine(routers, policy, stream):
    under_test, reference = routers
    r = requests.put(f"{under_test}/admin/policy", json={"policy": policy})
    assert r.status_code == 200, r.text
    prompt = f"[{policy} {'stream' if stream else 'plain'}] {STORY}"
    ids, text, route = _generate(under_test, prompt, stream)
    ref_ids, ref_text, _ = _generate(reference, prompt, False)
    if ids is not None:
        assert ids == ref_ids, route
    assert text == ref_text, route
    if policy in ("pd", "balanced_pd"):
        params = dict(kv.split("=") for kv in route.split()[1:])
        assert route.split()[0] == policy
        assert params["prefill"] != "-" and params["prefill"] != params["decode"], route
        assert int(params["decode_start"]) > 0, route


def test_pd_reuses_the_decode_engines_cache(routers):
    under_test, reference = routers
    requests.put(f"{under_test}/admin/policy", json={"policy": "pd"})
    prompt = f"[pd repeat] {STORY}"
    first_ids, _, first_route = _generate(under_test, prompt, False)
    again_ids, _, again_route = _generate(under_test, prompt, False)
    ref_ids, _, _ = _generate(reference, prompt, False)
    assert first_ids == again_ids == ref_ids
    assert "prefill=e" in first_route
    # the second time the decode engine holds (most of) the prefix: the transfer is skipped
    assert "skipped=" in again_route or "matched=0" not in again_route, again_route


def test_balanced_pd_fixed_ratio(routers):
    under_test, reference = routers
    r = requests.put(f"{under_test}/admin/policy",
                     json={"policy": "balanced_pd", "params": {"ratio": 0.75}})
    assert r.status_code == 200
    prompt = f"[balanced ratio] {STORY}"
    ids, _, route = _generate(under_test, prompt, False)
    ref_ids, _, _ = _generate(reference, prompt, False)
    assert ids == ref_ids, route
    params = dict(kv.split("=") for kv in route.split()[1:])
    assert params["prefill"] != "-" and int(params["decode_start"]) >= 16, route
