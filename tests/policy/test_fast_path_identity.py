"""The Rust front's fast path picks what the Python built-ins pick.

router_core/src/front/fast_path.rs runs round_robin, least_load and cache_aware without Python;
pyrouter/policies/*.py are the same policies in Python. On random engine tables (health,
unfinished tokens with ties, queued prefill, KV use, cached prefixes) and requests, the Rust
choice is asked first (it dispatches nothing), then the Python policy runs through the router's
dispatcher on a FakeCluster whose router core the front shares: the route headers must be equal
request after request (round_robin's turn carried on both sides), and both must refuse when no
engine is healthy. Then pyrouter/fast_path.py's rule for when the fast path applies.
"""
from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest

from pyrouter.cluster import ClusterView
from pyrouter.engines.handle import GenerationStream
from pyrouter.fast_path import fast_policy_for
from pyrouter.policy_registry import ActivePolicy, PolicySpec, get_policy
from pyrouter.request import RouterRequest
from pyrouter.tokenizer import load_router_tokenizer
from router_core import RouterFront
from switchyard_sim.fake import FakeCluster, FakeEngine

BLOCK = 16
WEIGHT_SETS = [None, (1.0, 1.0, 1.0, 1.0), (1.0, 0.0, 2.0, 0.5), (0.0, 1.0, 0.0, 3.0)]
WEIGHT_NAMES = ("prefill_weight", "queue_weight", "decode_weight", "kv_weight")


@pytest.fixture
async def front() -> AsyncIterator[RouterFront]:
    served = RouterFront(object(), "127.0.0.1", 0, **load_router_tokenizer(None).to_state(),
                         served_model="m", max_context=8192, max_inflight=16)
    try:
        yield served
    finally:
        served.shutdown(0.1)


def _random_engines(rng: random.Random, prompt: list[int]) -> list[FakeEngine]:
    engines = []
    for _ in range(rng.randint(1, 4)):
        cached_blocks = rng.randint(0, len(prompt) // BLOCK)
        engines.append(FakeEngine(
            healthy=rng.random() < 0.85,
            unfinished_tokens=rng.choice([0, 0, 50, 300, 300, 2000]),
            queued_prefill_tokens=rng.choice([0, 0, 64, 512]),
            running_decodes=rng.choice([0, 1, 8]),
            kv_pages_used=rng.choice([0, 100, 3000]),
            cached=[prompt[:cached_blocks * BLOCK]] if cached_blocks else []))
    return engines


@pytest.mark.parametrize("policy", ["round_robin", "least_load", "cache_aware"])
async def test_fast_path_routes_as_the_python_policy(front: RouterFront, policy: str) -> None:
    rng = random.Random(f"fast-path-{policy}")
    compared = refused = 0
    for _table in range(40):
        base = [rng.randrange(1000, 2000) for _ in range(rng.choice([16, 48, 80]))]
        cluster = FakeCluster(_random_engines(rng, base), block_size=BLOCK)
        weights = rng.choice(WEIGHT_SETS) if policy == "cache_aware" else None
        params = dict(zip(WEIGHT_NAMES, weights, strict=True)) if weights else {}
        front.set_core(cluster.core)
        front.set_fast_policy(policy, weights)
        for _request in range(4):
            # Requests share the table's prefix more or less (cache_aware's matches differ).
            prompt = base[:rng.choice([16, len(base)])] + [rng.randrange(3000, 4000)]
            try:
                _, rust_route = front.choose_fast(prompt)
            except RuntimeError as exc:
                rust_route = f"refused: {exc}"
            run = await cluster.run(policy, prompt, params=params, max_tokens=2)
            if run.error is not None:
                assert rust_route.startswith("refused"), (rust_route, run.error)
                refused += 1
                continue
            assert rust_route == run.route, cluster.core.table
            compared += 1
            cluster.assert_clean()
    assert compared > 100 and refused > 0  # the tables exercised both answers


def test_fast_path_only_for_unchanged_builtins_without_tracing() -> None:
    rr = get_policy("round_robin")
    assert fast_policy_for(ActivePolicy(rr, {}), in_python=False) == ("round_robin", None)
    assert fast_policy_for(ActivePolicy(rr, {}), in_python=True) is None  # per-caller limits
    ca = get_policy("cache_aware")
    active = ActivePolicy(ca, ca.check_params({"kv_weight": 2.0}))
    assert fast_policy_for(active, in_python=False) == ("cache_aware", (1.0, 1.0, 1.0, 2.0))
    assert fast_policy_for(ActivePolicy(get_policy("pd"), {}), in_python=False) is None
    # A policy file's own least_load is Python code the fast path does not know.
    assert fast_policy_for(ActivePolicy(PolicySpec("least_load", _own_least_load), {}),
                           in_python=False) is None


async def _own_least_load(req: RouterRequest, cluster: ClusterView) -> GenerationStream:
    return cluster.engines("any")[0].start_generate(req)
