"""The latency profile cache's key: a profile measured by one kind of engine is never loaded by
another that runs the same steps at another speed (fast vs exact numerics, another kernel level
or build). A profile from the portable kernels, 10x slower than the AVX2 ones, was loaded by
AVX2 engines for hours when the key named only the CPU model and the dtype."""
from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from engine import kernels
from engine.config import EngineConfig
from engine.core.latency_cache import compute_identity, profile_identity, profile_key
from engine.core.latency_model import LatencyModel
from engine.core.latency_profile import ProfileGrid


def _core(**config: object) -> SimpleNamespace:
    return SimpleNamespace(config=EngineConfig(**config),  # type: ignore[arg-type]
                           model_config=SimpleNamespace(model_id="m"),
                           latency=LatencyModel(knee=4096))


def _key(**config: object) -> str:
    return profile_key(profile_identity(_core(**config), ProfileGrid()))  # type: ignore[arg-type]


@pytest.fixture
def restore_isa() -> Iterator[None]:
    levels = {name: level for level, name in kernels.ISA_NAMES.items()}
    before = levels[kernels.isa_name()]
    yield
    kernels.ops().set_isa(before)


def test_fast_and_exact_engines_have_their_own_profiles() -> None:
    if not kernels.available():
        pytest.fail("the fast-mode kernels are not built (make install)")
    assert _key(mode="fast") != _key(mode="exact")
    assert _key(mode="exact", dtype="bfloat16") != _key(mode="exact")
    assert _key(mode="exact", kv_dtype="bfloat16") != _key(mode="exact")
    assert _key(mode="fast") == _key(mode="fast"), "the key is stable for one configuration"
    exact = compute_identity("cpu", "exact")
    assert set(exact) == {"torch_cpu"} and exact["torch_cpu"]


def test_another_kernel_level_is_another_profile(restore_isa: None) -> None:
    best = compute_identity("cpu", "fast")
    assert best["kernels"] == kernels.isa_name() and len(best["kernels_build"]) == 16
    kernels.ops().set_isa(1)  # the portable loops
    portable = compute_identity("cpu", "fast")
    assert portable["kernels"] == "portable"
    assert (portable == best) == (best["kernels"] == "portable")
