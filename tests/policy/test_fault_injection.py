"""A failure at any await point of any built-in policy leaves nothing behind.

For each policy the clean run's engine calls are enumerated; then each call in turn fails —
before or after the engine did its work, as an engine error, a caller mistake, a policy bug, a
hang past the policy timeout, or the client going away — and so does the client at each token
and a stop string at each token. Whatever the outcome, the router's accounting must be back at
zero and no fake engine may still hold a reservation or a generation; and a request that
succeeds despite the fault (retry, fallback) must still produce the single-engine tokens.
A hypothesis test then mixes faults, loads and cached prefixes at random.
"""
from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchyard_sim.fake import FakeCluster, FakeEngine, Fault

PROMPT = list(range(2000, 2040))
MAX_TOKENS = 6
CASES: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("round_robin", ("any", "any"), {}),
    ("least_load", ("any", "any"), {}),
    ("cache_aware", ("any", "any"), {}),
    ("pd", ("prefill", "decode"), {}),
    ("balanced_pd", ("prefill", "decode"), {"ratio": 0.5}),
    ("lead_follow", ("any", "any"), {"k": 2}),
    ("tandem", ("any", "any"), {}),
    ("slo_mux", ("prefill", "decode"), {}),
    ("adaptive", ("any", "any"), {}),
    ("adaptive", ("any", "any"), {"patterns": "pd"}),  # its disaggregated placements
]
KINDS: list[dict[str, Any]] = [
    {"kind": "rpc", "code": grpc.StatusCode.UNAVAILABLE},
    {"kind": "rpc", "code": grpc.StatusCode.INVALID_ARGUMENT},
    {"kind": "rpc", "code": grpc.StatusCode.INTERNAL},
    {"kind": "raise"}, {"kind": "hang"}, {"kind": "cancel"},
]


def _cluster(roles: tuple[str, ...], faults: dict[int, list[Fault]] | None = None,
             **loads: Any) -> FakeCluster:
    return FakeCluster([FakeEngine(role=r, faults=(faults or {}).get(i, []), **loads)
                        for i, r in enumerate(roles)], policy_timeout_s=0.05)


def _calls(policy: str, roles: tuple[str, ...], params: dict[str, Any]
           ) -> list[tuple[int, str, int]]:
    """(engine number, verb, nth call of that verb there) of a clean run."""
    cluster = _cluster(roles)
    run = asyncio.run(cluster.run(policy, PROMPT, params=params, max_tokens=MAX_TOKENS))
    assert run.error is None
    seen: dict[tuple[int, str], int] = {}
    out = []
    for verb, engine in run.verbs:
        num = int(engine[1:])
        nth = seen.get((num, verb), 0)
        seen[(num, verb)] = nth + 1
        out.append((num, verb, nth))
    return out


def _check(cluster: FakeCluster, run: Any) -> None:
    cluster.assert_clean()
    if run.error is None and run.finish_reason != "stop" and len(run.tokens) == MAX_TOKENS:
        assert run.tokens == cluster.reference(PROMPT, MAX_TOKENS)


def _fault_points() -> list[Any]:
    points = []
    for policy, roles, params in CASES:
        for num, verb, nth in _calls(policy, roles, params):
            for after in (False, True):
                for kind in KINDS:
                    label = f"{policy}-e{num}.{verb}#{nth}-{'after' if after else 'before'}-" \
                            f"{kind.get('code', kind['kind'])}"
                    points.append(pytest.param(policy, roles, params, num,
                                               Fault(verb, nth, after=after, **kind), id=label))
    return points


@pytest.mark.parametrize("policy, roles, params, num, fault", _fault_points())
async def test_a_failing_verb_leaves_nothing_behind(lead_follow: str, policy: str,
                                                   roles: tuple[str, ...],
                                                   params: dict[str, Any], num: int,
                                                   fault: Fault) -> None:
    cluster = _cluster(roles, {num: [fault]})
    run = await cluster.run(policy, PROMPT, params=params, max_tokens=MAX_TOKENS)
    _check(cluster, run)


@pytest.mark.parametrize("at", range(1, MAX_TOKENS + 1))
@pytest.mark.parametrize("policy, roles, params", CASES, ids=[c[0] for c in CASES])
async def test_client_gone_or_stop_string_at_any_token(lead_follow: str, policy: str,
                                                       roles: tuple[str, ...],
                                                       params: dict[str, Any], at: int) -> None:
    for how in ("disconnect_after", "stop_after"):
        cluster = _cluster(roles)
        run = await cluster.run(policy, PROMPT, params=params, max_tokens=MAX_TOKENS,
                                **{how: at})
        assert len(run.tokens) == at
        _check(cluster, run)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), data=st.data())
def test_random_faults_loads_and_caches(lead_follow: str, case: Any, data: Any) -> None:
    policy, roles, params = case
    faults: dict[int, list[Fault]] = {}
    for _ in range(data.draw(st.integers(0, 2), label="faults")):
        num = data.draw(st.integers(0, len(roles) - 1), label="engine")
        kind = data.draw(st.sampled_from(KINDS), label="kind")
        faults.setdefault(num, []).append(Fault(
            data.draw(st.sampled_from(["prep_recv", "remote_send", "start_generate"])),
            data.draw(st.integers(0, 1)), after=data.draw(st.booleans()), **kind))
    cluster = _cluster(roles, faults)
    for i, handle in enumerate(cluster.engines.values()):
        if data.draw(st.booleans(), label=f"e{i} cached"):
            cluster.client(handle.id).cache(PROMPT[:data.draw(st.sampled_from([16, 32, 40]))])
    cut = data.draw(st.sampled_from([None, "disconnect_after", "stop_after"]), label="cut")
    extra = {} if cut is None else {cut: data.draw(st.integers(1, MAX_TOKENS))}
    run = asyncio.run(cluster.run(policy, PROMPT, params=params, max_tokens=MAX_TOKENS, **extra))
    _check(cluster, run)
