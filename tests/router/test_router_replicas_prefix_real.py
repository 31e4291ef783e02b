"""One prefix view across router replicas (issue 25, deliver 2), on two real SmolLM2 engines.

Each replica follows every engine's KV events itself (pyrouter/engines/membership.py), asking
for the engine's snapshot when it connects; replicas do not talk to each other about prefixes.
So a prompt that replica A sent to one engine is known to replica B — whether B started after
the prompt (it learns it from the snapshot) or was running (from the event stream) — and B
under cache_aware sends the same prompt to the engine that holds it, with the matched tokens in
its route header. What B's index holds is read with a probe policy that answers 400 with
`cluster.matched` for every engine and generates nothing, so probing moves no KV.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from router_procs import wait_until
from router_real_cluster import real_engines, router_over

pytestmark = [pytest.mark.procs, pytest.mark.timeout(600)]

PREFIX_PROBE_PY = """from pyrouter.errors import BadRequest
from pyrouter.runtime.policy_registry import policy


@policy("prefix_probe")
async def route(req, cluster):
    seen = " ".join(f"{e.address}={cluster.matched(e, req)}" for e in cluster.engines("any"))
    raise BadRequest("probe " + seen)
"""


@pytest.fixture(scope="module")
def engines() -> Iterator[list[int]]:
    with real_engines(["any", "any"], mode="fast") as ports:
        yield ports


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policies")
    (path / "prefix_probe.py").write_text(PREFIX_PROBE_PY)
    return path


def _prompt(topic: str) -> str:
    # About 300 tokens, so the prefix spans many 16-token blocks; the topic makes it unique.
    return " ".join(f"Note {i} about {topic}: the ledger lists crates, ropes and lamps."
                    for i in range(20))


def _complete(base: str, prompt: str) -> requests.Response:
    r = requests.post(f"{base}/v1/completions", timeout=300,
                      json={"prompt": prompt, "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    return r


def _route(r: requests.Response) -> dict[str, str]:
    return dict(p.split("=", 1) for p in r.headers["X-Switchyard-Route"].split()[1:] if "=" in p)


def _address_of(base: str, engine_id: str) -> str:
    engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
    return next(e["address"] for e in engines if e["id"] == engine_id)


def _matched(base: str, prompt: str) -> dict[str, int]:
    """Replica `base`'s prefix index: matched tokens of `prompt` per engine address."""
    r = requests.post(f"{base}/v1/completions", timeout=60,
                      json={"prompt": prompt, "max_tokens": 1})
    assert r.status_code == 400, r.text
    text = r.json()["error"]["message"].split("probe ", 1)[1]
    return {address: int(n) for address, n in (p.rsplit("=", 1) for p in text.split())}


def _idle(base: str) -> bool:
    engines = requests.get(f"{base}/admin/engines", timeout=10).json()["engines"]
    return all(e["load"]["unfinished_tokens"] == 0 and e["load"]["queued_prefill_tokens"] == 0
               for e in engines)


def _set_policy(base: str, name: str) -> None:
    r = requests.put(f"{base}/admin/policy", json={"policy": name}, timeout=10)
    assert r.status_code == 200, r.text


def _b_routes_to_the_holder(b: str, prompt: str, holder: str) -> None:
    """B's index learns the prompt on `holder` (and only there); then cache_aware on B sends
    the prompt to `holder` with those tokens matched."""
    _set_policy(b, "prefix_probe")
    wait_until(lambda: _matched(b, prompt).get(holder, 0) > 0, 60,
               f"replica B's index to hold the prompt on {holder}")
    seen = _matched(b, prompt)
    assert all(n == 0 for address, n in seen.items() if address != holder), seen
    # cache_aware weighs load too: B's Stats must show A's request over (a Stats taken during
    # its prefill, still in force, would rightly send B elsewhere).
    wait_until(lambda: _idle(b), 60, "replica B's Stats to show the engines idle")
    _set_policy(b, "cache_aware")
    route = _route(_complete(b, prompt))
    assert _address_of(b, route["engine"]) == holder, route
    assert int(route["matched"]) >= seen[holder] > 0, (route, seen)


def test_a_replica_started_after_the_prompt_learns_it_from_the_engines_snapshot(
        engines: list[int], policy_dir: Path) -> None:
    prompt = _prompt("the harbour at Ostmark")
    with router_over(engines, "--policy", "cache_aware") as a:
        first = _route(_complete(a, prompt))
        assert first["matched"] == "0", first  # a fresh prompt: nobody held it
        holder = _address_of(a, first["engine"])
        with router_over(engines, "--policy", "cache_aware", "--policy-dir",
                         str(policy_dir)) as b:
            _b_routes_to_the_holder(b, prompt, holder)


def test_a_running_replica_follows_what_another_sends(
        engines: list[int], policy_dir: Path) -> None:
    with router_over(engines, "--policy", "cache_aware") as a, \
            router_over(engines, "--policy", "cache_aware", "--policy-dir",
                        str(policy_dir)) as b:
        for topic in ("the mill on the Varne", "the lighthouse keeper's logbook"):
            prompt = _prompt(topic)
            holder = _address_of(a, _route(_complete(a, prompt))["engine"])
            _b_routes_to_the_holder(b, prompt, holder)
