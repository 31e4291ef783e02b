"""The router's side in a simulation: its Stats poll is the real router's default period and
feeds router_core as EngineMembership does (work dispatched since the last Stats counts as
router_tokens until a Stats that covers it), and the router's own time per verb
(`router_ms`) delays every verb it sends."""
from __future__ import annotations

import argparse
import asyncio
from typing import cast

import pytest

from pyrouter.cli import build_parser
from pyrouter.engines.membership import EngineMembership
from pyrouter.request import RouterRequest
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.runtime.policy_registry import ActivePolicy, get_policy
from switchyard_engine_api.sampling_params import SamplingParams
from switchyard_sim.clock import run_virtual
from switchyard_sim.cluster import POLL_S, SimCluster
from switchyard_sim.fake.front_run import FrontHarness
from tests.sim.sim_helpers import assert_clean, run_requests, tiny_profile

PROMPT = list(range(1000, 1100))


def test_the_stats_poll_is_the_real_routers_default() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert commands.choices["router"].get_default("poll_s") == POLL_S


def test_dispatched_work_counts_as_router_tokens_until_a_stats_covers_it() -> None:
    async def main() -> list[tuple[int, int]]:
        cluster = SimCluster(tiny_profile(), ["any", "any"])
        await cluster.start()  # polled at 0, next at 0.5 s
        spec = get_policy("round_robin")
        dispatcher = Dispatcher(cluster, PolicySlot(ActivePolicy(spec, spec.check_params({}))))
        await asyncio.sleep(0.1)
        req = RouterRequest("r", PROMPT, SamplingParams(max_tokens=40, ignore_eos=True))
        harness = FrontHarness(cast(EngineMembership, cluster), dispatcher)
        task = asyncio.create_task(harness.run(req))
        seen = []
        for at in (0.2, 0.45, 0.55):  # before the next poll, just before it, just after it
            await asyncio.sleep(at - asyncio.get_running_loop().time())
            load = cluster.core.table.get(cluster.engines["e0"].num)
            seen.append((load.router_tokens, load.unfinished_tokens))
        await task
        await cluster.stop()
        return seen

    seen = run_virtual(main)
    # 100 prompt + 40 decode tokens dispatched at 0.1 s: in router_tokens until the 0.5 s
    # Stats, which counts them (the engine has decoded some by then) and drops them.
    assert seen[0] == (140, 0) and seen[1] == (140, 0)
    assert seen[2][0] == 0 and 0 < seen[2][1] <= 140


def test_the_routers_own_time_delays_every_verb() -> None:
    # pd's three verbs (prep_recv, remote_send, start_generate) each 1 ms later than in
    # test_sim_transfer's pd case ([82.24, 94.25] ms).
    out = run_requests(tiny_profile(router_ms=1.0), "pd", [PROMPT], max_tokens=2)
    assert out.token_times_ms[0] == pytest.approx([85.24, 97.25])
    assert_clean(out)


def test_the_router_takes_the_simulated_models_context() -> None:
    # A profile's model with a long context (the H100 70B one's is 128k): the simulated router
    # accepts a prompt past the router's SmolLM2-sized default (8192), as `switchyard router
    # --max-context` set for that model does, and still refuses one past the model's context.
    profile = tiny_profile(kv_pages=2048, model={
        "model_id": "sim-test", "num_layers": 4, "num_kv_heads": 2, "head_dim": 8,
        "kv_dtype_bytes": 2, "max_context": 16384})
    long_prompt = [1000 + i % 5000 for i in range(9000)]
    past_it = [1000 + i % 5000 for i in range(16384)]
    out = run_requests(profile, "round_robin", [long_prompt, past_it], max_tokens=2)
    assert out.runs[0].error is None and len(out.runs[0].tokens) == 2
    assert out.runs[1].error is not None and "16384" in str(out.runs[1].error)
    assert_clean(out)
