"""Every built-in policy runs unchanged in the simulator — the router's own dispatcher, cluster
view, router_core and policy code against simulated engines — and every request gets exactly
the tokens one engine alone produces, with nothing left held anywhere afterwards."""
from __future__ import annotations

import random

import pytest

from pyrouter.sim.profile import HardwareProfile
from pyrouter.testing import FakeCluster
from tests.sim.sim_helpers import assert_clean, run_requests

BUILTINS = ["round_robin", "least_load", "cache_aware", "pd", "balanced_pd", "tandem",
            "slo_mux", "adaptive"]


def _workload() -> tuple[list[list[int]], list[int], list[float]]:
    rng = random.Random(3)
    shared = [rng.randrange(1, 40000) for _ in range(64)]
    prompts, limits, arrivals = [], [], []
    for i in range(10):
        own = [rng.randrange(1, 40000) for _ in range(rng.randrange(20, 180))]
        prompts.append(shared + own if i % 2 else own)
        limits.append(rng.randrange(4, 24))
        arrivals.append(i * 35.0)
    return prompts, limits, arrivals


@pytest.mark.parametrize("policy", BUILTINS)
def test_builtin_policy_yields_single_engine_tokens(tiny: HardwareProfile, policy: str) -> None:
    prompts, limits, arrivals = _workload()
    out = run_requests(tiny, policy, prompts, limits, arrivals, coalesce=4)
    for run, prompt, limit in zip(out.runs, prompts, limits, strict=True):
        assert run.error is None, (policy, run.error)
        assert run.finish_reason == "length"
        assert run.tokens == FakeCluster.reference(prompt, limit), (policy, run.route)
        assert run.route.split(" ", 1)[0] in (policy, "dp", "adaptive")
    verbs = {v for run in out.runs for v, _ in run.verbs}
    if policy in ("pd", "balanced_pd"):
        assert "remote_send" in verbs  # KV really moved between the simulated engines
    assert_clean(out)


def test_tandem_hands_a_request_across_segments(tiny: HardwareProfile) -> None:
    prompts, limits, arrivals = _workload()
    out = run_requests(tiny, "tandem", prompts, limits, arrivals,
                       params={"lead_tokens": 3})
    assert all(run.segments == 2 for run in out.runs)  # lead's 3 tokens, then the follow's
    for run, prompt, limit in zip(out.runs, prompts, limits, strict=True):
        assert run.tokens == FakeCluster.reference(prompt, limit)
    assert_clean(out)


def test_adaptive_switches_on_its_virtual_time_evaluations(tiny: HardwareProfile) -> None:
    # Prefill-heavy traffic (600-token prompts, 2 tokens out, one every 0.5 s): adaptive starts
    # on cache_aware and, after `hysteresis` (2) evaluations `eval_s` (1 s) apart — virtual
    # seconds, read through time.monotonic — moves to slo_mux, which then routes every request
    # itself (its multiplexing path: the idle engines' cached pages count as free KV).
    rng = random.Random(1)
    prompts = [[rng.randrange(1, 40000) for _ in range(600)] for _ in range(16)]
    out = run_requests(tiny, "adaptive", prompts, 2, [i * 500.0 for i in range(16)],
                       coalesce=4)
    chosen = [run.route.split()[1] for run in out.runs]
    first_switch = chosen.index("chose=slo_mux")
    assert chosen[:first_switch] == ["chose=cache_aware"] * first_switch
    assert 2 <= first_switch <= 6  # after 1-3 virtual seconds, not at once, not never
    assert all(" path=" in run.route for run in out.runs[first_switch:])
    for run, prompt in zip(out.runs, prompts, strict=True):
        assert run.tokens == FakeCluster.reference(prompt, 2)
    assert_clean(out)
