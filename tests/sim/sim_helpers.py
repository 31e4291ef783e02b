"""Shared by the simulator's tests: a tiny hand-computable profile and a helper that runs
requests through the router's front (in-process: its request task and bridge over the real
dispatcher) against simulated engines in virtual time (a module,
not conftest.py, so `from tests.sim.sim_helpers import ...` works beside other test folders'
conftest modules)."""
from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from pyrouter.admission import AdmissionConfig
from pyrouter.engines.membership import EngineMembership
from pyrouter.request import RouterRequest, SloSpec
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.runtime.policy_registry import ActivePolicy, get_policy
from switchyard_engine_api.sampling_params import SamplingParams
from switchyard_sim.clock import run_virtual
from switchyard_sim.cluster import SimCluster
from switchyard_sim.fake.front_run import FakeRun, FrontHarness
from switchyard_sim.profile import HardwareProfile, profile_from_dict

TINY = os.path.join(os.path.dirname(__file__), "tiny_profile.json")

def tiny_profile(**changes: Any) -> HardwareProfile:
    """step_ms = 10 + 0.5 x prefill tokens + 1 x decodes + 0.01 x decode context; 64-token
    chunks, 16-token pages; 256 B of KV per token; a 1 MB/s link."""
    with open(TINY, encoding="utf-8") as f:
        body = json.load(f)
    body.update(changes)
    return profile_from_dict(body, "tiny")

@dataclass
class Outcome:
    runs: list[FakeRun]
    token_times_ms: list[list[float]]  # per request, from its arrival
    cluster: SimCluster
    harness: FrontHarness
    dispatcher: Dispatcher

def run_requests(profile: HardwareProfile, policy: str, prompts: Sequence[Sequence[int]],
                 max_tokens: int | Sequence[int] = 3, arrivals_ms: Sequence[float] | None = None,
                 roles: Sequence[str] | None = None, engines: int = 2,
                 params: dict[str, Any] | None = None, coalesce: int = 1,
                 policy_timeout_s: float = 300.0, slo: SloSpec | None = None,
                 admission: bool = False) -> Outcome:
    """Each prompt arrives at its time, is sent through the router's front; returns what
    every client got, when each token left its engine, and the cluster after everything ended.
    `slo`: every request's objectives; `admission`: the router admits them by their predicted
    outcome (off here unless asked, as in the simulator)."""
    spec = get_policy(policy)
    roles = list(roles) if roles is not None else spec.engine_roles(engines)
    limits = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
    arrivals = list(arrivals_ms) if arrivals_ms is not None else [0.0] * len(prompts)

    async def main() -> Outcome:
        loop = asyncio.get_running_loop()
        cluster = SimCluster(profile, roles, coalesce)
        await cluster.start()
        dispatcher = Dispatcher(cluster, PolicySlot(ActivePolicy(spec, spec.check_params(
            params or {}))), policy_timeout_s=policy_timeout_s)
        harness = FrontHarness(cast(EngineMembership, cluster), dispatcher)
        AdmissionConfig(predicted=admission).apply(harness.front)
        start = loop.time()

        async def one(i: int) -> tuple[FakeRun, list[float]]:
            await asyncio.sleep(arrivals[i] / 1e3)
            sent = loop.time()
            req = RouterRequest(f"r{i}", list(prompts[i]),
                                SamplingParams(max_tokens=limits[i], ignore_eos=True),
                                slo=slo or SloSpec())
            run = await harness.run(req)
            times = cluster.tokens.pop(run.engine_request_id)
            return run, [round((t - sent) * 1e3, 6) for t in times]

        done = await asyncio.gather(*(one(i) for i in range(len(prompts))))
        await asyncio.sleep(1.0)  # background aborts, the last polls
        await cluster.stop()
        assert loop.time() - start < 3600
        harness.settle()
        return Outcome([r for r, _ in done], [t for _, t in done], cluster, harness,
                       dispatcher)

    return run_virtual(main)

def assert_clean(out: Outcome) -> None:
    """Nothing left anywhere: no request, send or reservation on any engine, every page back in
    the pool or the prefix cache, router counts at zero."""
    assert out.harness.front.inflight == 0
    for engine_id, handle in out.cluster.engines.items():
        core = out.cluster.sim(engine_id).core
        assert not core._requests, (engine_id, list(core._requests))
        assert len(core.reservations) == 0, engine_id
        assert not core.scheduler.has_work(), engine_id
        assert core.pool.num_used == len(core.cache), engine_id  # only cached pages held
        assert not out.harness.front.engine_active(handle.num), engine_id
        assert out.cluster.core.table.get(handle.num).inflight == 0
