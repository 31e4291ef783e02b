"""A simulated engine schedules exactly what the real engine schedules: the same chunked
prefill under the token budget, the same batches, the same preemptions, step by step, for one
request mix that fills a small KV pool (the real engine runs SmolLM2; the simulated one the
same Scheduler over a model-less core, switchyard_sim/engine.py)."""
from __future__ import annotations

import random

import pytest

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.scheduler import SchedulerOutput
from engine.model.loader import load_model
from switchyard_engine_api.sampling_params import SamplingParams
from switchyard_sim.engine import SimEngineCore
from tests.sim.sim_helpers import tiny_profile

pytestmark = [pytest.mark.model, pytest.mark.slow]

PAGE, PAGES, CHUNK, RUNNING = 16, 40, 64, 6  # 640 token slots: the mix below preempts
# (arrival step, prompt length, max tokens): long prompts cross several chunks, short ones
# join while others decode.
MIX = [(0, 150, 20), (0, 40, 30), (1, 200, 12), (3, 20, 40), (5, 90, 25), (8, 130, 10),
       (8, 12, 35), (20, 70, 20)]

Step = tuple[tuple[tuple[str, int, int], ...], tuple[str, ...]]


def _record(core: EngineCore) -> list[Step]:
    """Run the mix on `core`, one step at a time: each step's chunks (request, first position,
    tokens) and the requests it preempted."""
    rng = random.Random(7)
    prompts = [[rng.randrange(100, 40000) for _ in range(n)] for _, n, _ in MIX]
    steps: list[Step] = []
    schedule = core.scheduler.schedule

    def recording() -> SchedulerOutput:
        out = schedule()
        steps.append((tuple((w.request.request_id, w.chunk.start_pos, len(w.chunk.token_ids))
                            for w in out.work),
                       tuple(r.request_id for r in out.preempted)))
        return out

    core.scheduler.schedule = recording  # type: ignore[method-assign]
    step = 0
    while step < 2000:
        for i, (at, _, max_tokens) in enumerate(MIX):
            if at == step:
                core.add_request(f"r{i}", prompts[i], SamplingParams(
                    temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
        if step > max(at for at, _, _ in MIX) and not core.has_work():
            return steps
        core.step()
        step += 1
    raise AssertionError("the mix did not finish")


def test_the_simulated_engine_schedules_the_real_engines_chunks() -> None:
    loaded = load_model(None, device="cpu", mode="fast")
    real = EngineCore(EngineConfig(mode="fast", page_size=PAGE, num_pages=PAGES,
                                   chunk_size=CHUNK, max_running=RUNNING), loaded=loaded)
    profile = tiny_profile(page_size=PAGE, kv_pages=PAGES, chunk_size=CHUNK,
                           max_running=RUNNING)
    sim = SimEngineCore("sim", "any", profile, real.block_hash_seed)
    expected = _record(real)
    got = _record(sim)
    assert got == expected
    # The mix exercises what it claims: chunked prefills, batches of several, preemption.
    chunks = [c for work, _ in expected for c in work]
    assert any(start > 0 and n == CHUNK for _, start, n in chunks)
    assert max(len(work) for work, _ in expected) >= 4
    assert any(preempted for _, preempted in expected)
