"""On real engines: a failure at each await point of each built-in policy leaves every engine's
pool at its baseline (pages held only by the prefix cache) and the router's accounting at zero.

Two real engine processes (SmolLM2, fp32); the router's front and dispatcher run in-process
(switchyard_sim/fake/front_run.py: the request task, executor and bridge a client's request runs
through) so their counts can be read, each engine reached through a grpc.aio client with faults
injected (switchyard_sim/fake/faulty_client.py). Each run uses a fresh prompt, so every pattern really moves KV; a stop-string
case first runs its prompt plainly (greedy) to learn the text its stop string ends on.
"""
from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engine.server.launcher import EngineProcess, EngineSpec, start_engines, stop_engines
from pyrouter.engines.membership import EngineMembership
from pyrouter.request import RouterRequest
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.runtime.policy_registry import ActivePolicy, get_policy
from switchyard_engine_api.client import EngineClient
from switchyard_engine_api.sampling_params import SamplingParams
from switchyard_sim.fake import Fault
from switchyard_sim.fake.faulty_client import FaultyClient
from switchyard_sim.fake.front_run import FrontHarness

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy"))
from docs_example import LEAD_FOLLOW  # noqa: E402  (docs/policies.md example, registered)

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(900)]
CASES: list[tuple[str, tuple[str, str], dict[str, Any]]] = [
    ("round_robin", ("any", "any"), {}),
    ("cache_aware", ("any", "any"), {}),
    ("pd", ("prefill", "decode"), {}),
    ("balanced_pd", ("prefill", "decode"), {"ratio": 0.5}),
    (LEAD_FOLLOW, ("any", "any"), {"k": 2}),
]
KINDS = [{"kind": "rpc", "code": grpc.StatusCode.UNAVAILABLE, "after": True},
         {"kind": "cancel", "after": False}, {"kind": "cancel", "after": True},
         {"kind": "raise", "after": True}]
_prompts = random.Random(7)


def _prompt() -> list[int]:
    return [_prompts.randrange(200, 40000) for _ in range(40)]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EngineProcess]]:
    logs = tmp_path_factory.mktemp("scope-engines")
    procs = start_engines([EngineSpec(f"scope-{i}", dtype="float32", threads=1, num_pages=256)
                           for i in range(2)], logs)
    yield procs
    stop_engines(procs)


async def _idle(es: EngineMembership, harness: FrontHarness) -> None:
    """Every engine idle with only its prefix cache holding pages; router counts at zero."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        stats = [await h.client.stats() for h in es.engines.values()]
        busy = [(s.engine_id, s.running_requests, s.queued_requests, s.leases, s.kv_pages_used,
                 s.cached_blocks) for s in stats
                if s.running_requests or s.queued_requests or s.leases
                or s.kv_pages_used != s.cached_blocks]
        # Dispatched tokens leave the router's load with the next Stats answer (poll_s), so a
        # dispatch cancelled before the engine saw it clears within one poll.
        counted = [(h.num, load.inflight, load.router_tokens, active)
                   for h in es.engines.values() for load in [es.core.table.get(h.num)]
                   for active in [harness.front.engine_active(h.num)]
                   if load.inflight or load.router_tokens or active]
        if not busy and not counted:
            break
        assert asyncio.get_running_loop().time() < deadline, \
            f"not back at baseline: engines {busy}, router counts {counted}"
        await asyncio.sleep(0.1)


async def _run_case(engines: list[EngineProcess], policy: str, roles: tuple[str, str],
                    params: dict[str, Any], faults: dict[int, list[Fault]],
                    cut: dict[str, int]) -> list[tuple[str, str]]:
    es = EngineMembership(poll_s=0.1)
    try:
        for engine, role in zip(engines, roles, strict=True):
            es.add(engine.address, role)
        assert await es.wait_ready(2, 60)
        for handle in es.engines.values():
            handle.client = FaultyClient(EngineClient(handle.address),  # type: ignore[assignment]
                                         faults.get(handle.num, []))
        spec = get_policy(policy)
        dispatcher = Dispatcher(es, PolicySlot(ActivePolicy(spec, spec.check_params(params))),
                                policy_timeout_s=30)
        harness = FrontHarness(es, dispatcher)
        prompt = _prompt()

        def request() -> RouterRequest:
            return RouterRequest(f"scope-{random.getrandbits(64):x}", list(prompt),
                                 SamplingParams(max_tokens=4, ignore_eos=True, temperature=0.0))
        reference = None
        if "stop_after" in cut:
            reference = (await harness.run(request())).tokens
        run = await harness.run(request(), reference=reference, **cut)
        assert harness.front.inflight == 0
        await _idle(es, harness)
        return run.verbs
    finally:
        await es.close()


def _points() -> list[Any]:
    # The calls each policy makes on a cold cache, as (engine number, verb, nth); pd and
    # balanced_pd: the decode engine is e1.
    calls = {"round_robin": [(0, "start_generate", 0)],
             "cache_aware": [(0, "start_generate", 0)],
             "pd": [(1, "prep_recv", 0), (0, "remote_send", 0), (1, "start_generate", 0)],
             "balanced_pd": [(1, "prep_recv", 0), (0, "remote_send", 0), (1, "start_generate", 0)],
             LEAD_FOLLOW: [(0, "start_generate", 0), (1, "prep_recv", 0), (0, "remote_send", 0),
                           (1, "start_generate", 0)]}
    out = []
    for policy, roles, params in CASES:
        for num, verb, nth in calls[policy]:
            for kind in KINDS:
                label = f"{policy}-e{num}.{verb}-{kind['kind']}-{'after' if kind['after'] else 'before'}"
                out.append(pytest.param(policy, roles, params, {num: [Fault(verb, nth, **kind)]},
                                        {}, id=label))
        for at in (1, 3):
            out.append(pytest.param(policy, roles, params, {}, {"disconnect_after": at},
                                    id=f"{policy}-client-gone-at-{at}"))
            out.append(pytest.param(policy, roles, params, {}, {"stop_after": at},
                                    id=f"{policy}-stop-string-at-{at}"))
    return out


@pytest.mark.parametrize("policy, roles, params, faults, cut", _points())
async def test_fault_leaves_engines_at_baseline(engines, policy, roles, params, faults, cut):
    await _run_case(engines, policy, roles, params, faults, cut)


async def test_the_enumerated_calls_are_what_the_policies_make(engines):
    """Guards _points(): on a cold cache each policy makes exactly those calls."""
    expect = {"pd": [("prep_recv", "e1"), ("remote_send", "e0"), ("start_generate", "e1")],
              LEAD_FOLLOW: [("start_generate", "e0"), ("prep_recv", "e1"), ("remote_send", "e0"),
                            ("start_generate", "e1")]}
    for policy, roles, params in CASES:
        if policy in expect:
            assert await _run_case(engines, policy, roles, params, {}, {}) == expect[policy]
