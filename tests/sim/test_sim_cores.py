"""Engines sharing CPU cores (switchyard_sim/cores.py): a step's work progresses at
1 / slowdown(n) while n engines step, re-timed whenever one starts or ends; the local profile's
`contention` reproduces the slowdown measured with two real engines on this machine
(tests/sim/measured_local.json, from switchyard_sim/profiles/measure_local.py)."""
from __future__ import annotations

import asyncio
import json
import os
import statistics

import pytest

from switchyard_sim.clock import run_virtual
from switchyard_sim.cores import SharedCores
from switchyard_sim.profile import load_profile
from tests.sim.sim_helpers import run_requests, tiny_profile

MEASURED = os.path.join(os.path.dirname(__file__), "measured_local.json")


def _finish_times(contention: float, steps: list[tuple[float, float]]) -> list[float]:
    """Each (start, solo work) step on one shared set of cores: when it ends."""
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        cores = SharedCores()

        async def one(start: float, work: float) -> float:
            await asyncio.sleep(start)
            await cores.step(work, contention)
            return loop.time()

        return list(await asyncio.gather(*(one(s, w) for s, w in steps)))

    return run_virtual(main)


def test_a_step_alone_takes_its_work() -> None:
    assert _finish_times(1.5, [(0.0, 2.0)]) == pytest.approx([2.0])


def test_two_steps_at_once_each_take_contention_times_longer() -> None:
    assert _finish_times(1.5, [(0.0, 2.0), (0.0, 2.0)]) == pytest.approx([3.0, 3.0])


def test_only_the_overlap_is_slowed() -> None:
    # A starts alone (1 s of its 2 s done), B joins at 1 s: both at 1/1.5 until A's last
    # second is done at 2.5 s; B has done 1 of its 2 s and finishes alone at 3.5 s.
    assert _finish_times(1.5, [(0.0, 2.0), (1.0, 2.0)]) == pytest.approx([2.5, 3.5])


def test_three_engines_are_slowed_by_each_other_engine() -> None:
    assert _finish_times(1.5, [(0.0, 1.0)] * 3) == pytest.approx([2.0] * 3)


@pytest.mark.parametrize("kind", ["prefill_512_ms", "decode_ms"])
def test_the_local_profile_reproduces_the_measured_slowdown(kind: str) -> None:
    with open(MEASURED, encoding="utf-8") as f:
        steps = json.load(f)["steps"][kind]
    ratio = statistics.median(steps["together"]) / statistics.median(steps["alone"])
    profile = load_profile("local-smollm2-cpu")  # its factors (contention is off there)
    contention = profile.contention if kind == "prefill_512_ms" else profile.decode_contention
    # Engine A's step (its median alone) while engine B prefills without pause, as measured.
    alone = statistics.median(steps["alone"]) / 1e3
    together = _finish_times(contention, [(0.0, 100.0), (1.0, alone)])[1] - 1.0
    assert together / alone == pytest.approx(ratio, rel=0.1)


def test_a_decode_only_step_has_its_own_factor() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        cores = SharedCores()

        async def one(work: float, contention: float) -> float:
            await cores.step(work, contention)
            return loop.time()

        return list(await asyncio.gather(one(2.0, 2.0), one(1.0, 1.0)))

    # Both at once: the prefill at 1/2, the decode unslowed (1 s); then the prefill alone.
    assert run_virtual(main) == pytest.approx([2.5, 1.0])


def test_engines_that_own_their_hardware_do_not_slow_each_other() -> None:
    assert not load_profile("h100-llama3.1-70b-fp8-tp4").shares_cores
    prompts = [list(range(100, 164)), list(range(200, 264))]
    alone = run_requests(tiny_profile(), "round_robin", prompts, max_tokens=2)
    shared = run_requests(tiny_profile(cores=2, contention=2.0), "round_robin", prompts,
                          max_tokens=2)
    # Both engines prefill their 64 tokens at once: 10 + 32 = 42 ms alone, twice that
    # together; then the decodes (10 + 1 + 0.01 x 65 = 11.65 ms) at once too
    # (decode_contention absent: contention's).
    assert alone.token_times_ms == [pytest.approx([42.0, 53.65])] * 2
    assert shared.token_times_ms == [pytest.approx([84.0, 107.3])] * 2
