"""The fast CPU mode: batch-invariant (bit-identical results whatever the batch, chunking or
page layout), the vector kernels (AVX2, AVX-512: each this CPU has) equal to the portable ones,
and within a stated tolerance of the float32 reference.

Tolerance (teacher-forced on the five chat prompts, 25 positions each, the exact model's greedy
tokens fed to both): greedy agreement >= 90% (measured 121/125), max |logit error| <= 2.5 and
mean |logit error| <= 0.3 on logits whose magnitude reaches ~30 (measured 1.72 and 0.20).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.batch import ScheduledChunk
from engine.kernels import ISA_ENV, isa_name, ops, pin_isa_from_env
from engine.kvcache.kv_storage import KVStorage
from engine.model.loader import LoadedModel
from engine.model.quant_weights import Q4_1, RawBlocks, dequantize, pack, quantize_q8_0
from engine.model.runner import ModelRunner

pytestmark = pytest.mark.model

FORCED_STEPS = 24


PORTABLE, AVX2, AVX512 = 1, 2, 3  # the kernels' instruction-set levels (csrc/common.h)


def _vector_levels() -> list[int]:
    """Every vector level this CPU can run (none on a machine without AVX2)."""
    return [level for level in (AVX2, AVX512) if level <= ops().isa_best()]


def _at_level(level: int, fn):  # type: ignore[no-untyped-def]
    kernels = ops()
    kernels.set_isa(level)
    try:
        assert kernels.isa() == level
        return fn()
    finally:
        kernels.set_isa(0)  # the best again


def _each_level_and_portable(fn):  # type: ignore[no-untyped-def]
    """[(level, its result)] for each vector level, and the portable result."""
    return [(level, _at_level(level, fn)) for level in _vector_levels()], _at_level(PORTABLE, fn)


def test_levels_are_capped_at_what_the_cpu_has() -> None:
    kernels = ops()
    best = kernels.isa_best()
    assert best in (PORTABLE, AVX2, AVX512)
    assert _at_level(PORTABLE, kernels.isa) == PORTABLE
    kernels.set_isa(AVX512)
    try:
        assert kernels.isa() == min(AVX512, best)
    finally:
        kernels.set_isa(0)
    assert kernels.isa() == best


def _random_q4(n: int, k: int, rng: np.random.Generator) -> RawBlocks:
    return RawBlocks(Q4_1, rng.integers(0, 16, (n, k)).astype(np.uint8),
                     (rng.random((n, k // 32)) * 0.1).astype(np.float16),
                     (rng.standard_normal((n, k // 32)) * 0.1).astype(np.float16))


@pytest.mark.parametrize("fmt", ["q4_1", "q8_0"])
def test_qmatmul_exact_blocks_batch_invariant_and_portable(fmt: str) -> None:
    rng = np.random.default_rng(0)
    n, k, rows = 200, 576, 37  # n not a multiple of 16: the padded last tile is cut off
    raw = (_random_q4(n, k, rng) if fmt == "q4_1"
           else quantize_q8_0(rng.standard_normal((n, k)).astype(np.float32)))
    weight = pack(raw)
    x = ops().quantize_rows(torch.randn(rows, k, generator=torch.Generator().manual_seed(1)))
    vector, out = _each_level_and_portable(lambda: weight.matmul(x))
    for level, out_vector in vector:
        assert torch.equal(out_vector, out), level
    one_by_one = torch.cat([weight.matmul(tuple(t[i:i + 1].contiguous() for t in x))
                            for i in range(rows)])
    assert torch.equal(out, one_by_one)  # a row's result does not depend on the batch
    x_float = (x[0].float().view(rows, -1, 32) * x[1][..., None]).view(rows, k).double()
    reference = x_float @ torch.from_numpy(dequantize(raw)).double().T
    assert torch.allclose(out.double(), reference, rtol=0, atol=1e-3 * reference.abs().max())
    residual = torch.randn(rows, n)
    assert torch.equal(weight.matmul(x, residual), out + residual)


def test_activation_kernels_match_portable_and_reference() -> None:
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(9, 1536, generator=gen) * 3, torch.randn(1536, generator=gen)
    kernels = ops()
    for fn in (lambda: kernels.quantize_rows(x), lambda: kernels.rmsnorm_quantize(x, w, 1e-5),
               lambda: kernels.silu_mul_quantize(x)):
        vector, slow = _each_level_and_portable(fn)
        for level, fast in vector:
            assert all(torch.equal(a, b) for a, b in zip(fast, slow, strict=True)), level
    q, d, _ = kernels.rmsnorm_quantize(x, w, 1e-5)
    normed = torch.nn.functional.rms_norm(x, (1536,), w, 1e-5)
    assert (q.float().view(9, -1, 32) * d[..., None]).view(9, -1).sub(normed).abs().max() < (
        normed.abs().max() / 100)


def test_bad_kernel_input_is_a_clear_error() -> None:
    kernels = ops()
    with pytest.raises(RuntimeError, match="multiple of 32"):
        kernels.quantize_rows(torch.randn(2, 33))
    weight = pack(quantize_q8_0(np.ones((16, 64), np.float32)))
    with pytest.raises(RuntimeError, match="packed weight"):
        kernels.qmatmul(*kernels.quantize_rows(torch.randn(2, 32)), weight.packed, 1, 16, None)


def _logits_per_step(runs: list) -> dict[str, list[torch.Tensor]]:  # type: ignore[type-arg]
    return {seq.key: seq.logits for seq in runs}


@pytest.mark.slow
def test_fast_mode_is_batch_and_chunk_invariant(loaded_model_fast: LoadedModel,
                                                chat_prompt_ids: list[list[int]],
                                                run_staggered) -> None:  # type: ignore[no-untyped-def]
    """Bit-identical logits at every step whatever shares the step, how the prompt is chunked
    and where its pages are; every vector level's attention agrees with the portable one."""
    reference = _logits_per_step(run_staggered(loaded_model_fast, chat_prompt_ids, 1000, 0))
    for chunk, seed in ((7, 1), (16, 2), (33, 3)):
        other = _logits_per_step(run_staggered(loaded_model_fast, chat_prompt_ids, chunk, seed))
        for key, steps in reference.items():
            assert len(steps) == len(other[key])
            for a, b in zip(steps, other[key], strict=True):
                assert torch.equal(a, b), (key, chunk)
    for i, prompt in enumerate(chat_prompt_ids):
        alone = run_staggered(loaded_model_fast, [prompt], 64, 4)[0].logits
        assert all(torch.equal(a, b) for a, b in zip(alone, reference[f"s{i}"], strict=True))
    for level in [PORTABLE, *_vector_levels()]:
        other = _at_level(level, lambda: _logits_per_step(
            run_staggered(loaded_model_fast, chat_prompt_ids[:2], 16, 5)))
        for key, steps in other.items():
            assert all(torch.equal(a, b) for a, b in zip(steps, reference[key], strict=True)), (
                level, key)


def _forced_logits(loaded: LoadedModel, prompt: list[int],
                   forced: list[int] | None) -> tuple[list[torch.Tensor], list[int]]:
    """Logits after the prompt and after each of FORCED_STEPS fed tokens (`forced`, or the
    model's own greedy choice when None)."""
    kv = KVStorage.for_model(loaded.config, 64, 16,
                             dtype=torch.bfloat16 if loaded.is_fast else torch.float32)
    runner = ModelRunner(loaded, kv, "cpu" if loaded.is_fast else "torch")
    pages = list(range(64))
    logits = [runner.run([ScheduledChunk("a", prompt, 0, pages, True)])[0]]
    fed: list[int] = []
    for step in range(FORCED_STEPS):
        token = forced[step] if forced is not None else int(logits[-1].argmax())
        fed.append(token)
        logits.append(runner.run([ScheduledChunk("a", [token], len(prompt) + step, pages,
                                                 True)])[0])
    return logits, fed


@pytest.mark.slow
def test_fast_mode_within_tolerance_of_fp32(loaded_model_fast: LoadedModel,
                                            loaded_model_fp32: LoadedModel,
                                            chat_prompt_ids: list[list[int]]) -> None:
    agree = total = 0
    max_err, errors = 0.0, []
    for prompt in chat_prompt_ids:
        exact, greedy = _forced_logits(loaded_model_fp32, prompt, None)
        fast, _ = _forced_logits(loaded_model_fast, prompt, greedy)
        for a, b in zip(exact, fast, strict=True):
            total += 1
            agree += int(a.argmax() == b.argmax())
            diff = (a - b).abs()
            max_err = max(max_err, float(diff.max()))
            errors.append(float(diff.mean()))
    assert agree >= 0.9 * total, f"greedy agreement {agree}/{total}"
    assert max_err <= 2.5, max_err
    assert sum(errors) / len(errors) <= 0.3, sum(errors) / len(errors)


def test_the_level_can_be_pinned_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = ops()
    monkeypatch.setenv(ISA_ENV, "portable")
    try:
        pin_isa_from_env(kernels)
        assert isa_name() == "portable"
    finally:
        kernels.set_isa(0)
    monkeypatch.setenv(ISA_ENV, "sse9")
    with pytest.raises(ValueError, match="SWITCHYARD_KERNEL_ISA='sse9': expected one of"):
        pin_isa_from_env(kernels)
