"""A CUDA engine picks the CPU path's greedy tokens (fp32, random SmolLM2-shaped weights).

Weights are drawn on the GPU from a seed and copied to the CPU, so both sides run one model.
- ModelRunner level, in lockstep: staggered joins, chunked prefill mixed with decodes; every
  argmax agrees except at near-ties of the CPU logits (within 1e-3), where logits agree instead.
- EngineCore level: continuous batching with a small prefill budget; the generated tokens of
  every request equal the CPU engine's.
"""
from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.kvcache.kv_storage import KVStorage
from engine.model.runner import ModelRunner
from switchyard_engine_api.sampling_params import SamplingParams
from tests.gpu.lockstep import greedy_lockstep, random_prompts
from tests.gpu.random_models import SMOLLM2_135M, loaded_model, random_weights
from tests.gpu.results import record

pytestmark = [pytest.mark.cuda, pytest.mark.model, pytest.mark.timeout(600)]

TIE_TOL = 1e-3
LENGTHS = [9, 150, 40, 333, 70]
NEW_TOKENS = 20


@pytest.fixture(scope="module")
def weights_by_device() -> dict[str, dict[str, torch.Tensor]]:
    on_gpu = random_weights(SMOLLM2_135M, seed=7, device="cuda", dtype=torch.float32)
    return {"cuda": on_gpu, "cpu": {k: v.cpu() for k, v in on_gpu.items()}}


def test_runner_in_lockstep_with_the_cpu_path(weights_by_device) -> None:  # type: ignore[no-untyped-def]
    runners = []
    for device in ("cpu", "cuda"):
        loaded = loaded_model(SMOLLM2_135M, weights_by_device[device], device, torch.float32)
        kv = KVStorage.for_model(loaded.config, 256, 16, torch.float32, device)
        runners.append(ModelRunner(loaded, kv, "torch"))
    prompts = random_prompts(LENGTHS, SMOLLM2_135M["vocab_size"], seed=5)
    report = greedy_lockstep(runners[0], runners[1], prompts, NEW_TOKENS, chunk=64,
                             tie_tol=TIE_TOL)
    record("identity", {"fp32_runner_cuda_vs_cpu": report.as_dict()})
    assert report.rows == len(prompts) * NEW_TOKENS
    assert not report.mismatches, report.mismatches


def _generate(core: EngineCore, prompts: list[list[int]]) -> dict[str, list[int]]:
    for i, prompt in enumerate(prompts):
        core.add_request(f"r{i}", prompt, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS,
                                                         ignore_eos=True))
    tokens: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    finished: set[str] = set()
    while len(finished) < len(prompts):
        for out in core.step():
            tokens[out.request_id] += out.new_token_ids
            if out.finish_reason is not None:
                assert out.finish_reason == "length", out
                finished.add(out.request_id)
    return tokens


def test_engine_generates_the_cpu_engines_tokens(weights_by_device) -> None:  # type: ignore[no-untyped-def]
    prompts = random_prompts(LENGTHS, SMOLLM2_135M["vocab_size"], seed=9)
    results = {}
    for device in ("cpu", "cuda"):
        loaded = loaded_model(SMOLLM2_135M, weights_by_device[device], device, torch.float32)
        config = EngineConfig(device=device, dtype="float32", num_pages=256, chunk_size=96,
                              max_context=4096)
        core = EngineCore(config, loaded)
        results[device] = _generate(core, prompts)
        assert core.pool.num_used == core.cache.num_pages  # nothing leaked
    same = sum(results["cpu"][k] == results["cuda"][k] for k in results["cpu"])
    record("identity", {"fp32_engine_cuda_vs_cpu": {"requests": len(prompts), "identical": same}})
    assert results["cuda"] == results["cpu"]
