"""Engine mode and KV budget settings: CLI defaults, clear errors, the pool sized from memory."""
from __future__ import annotations

import pytest

from engine.config import DEFAULT_KV_MEMORY, EngineConfig, EngineConfigError, parse_memory
from engine.kernels import available
from engine.server.main import engine_config_from_args
from pyrouter.cli import build_parser

pytestmark = pytest.mark.model


def _config(*flags: str) -> EngineConfig:
    args = build_parser().parse_args(["engine", "--port", "1", *flags])
    config = engine_config_from_args(args)
    assert isinstance(config, EngineConfig)
    return config


def test_cli_defaults_to_fast_on_cpu_and_exact_with_a_dtype() -> None:
    assert _config().mode == ("fast" if available() else "exact")
    assert _config("--dtype", "float32").mode == "exact"
    assert _config("--mode", "exact").mode == "exact"
    assert _config("--kv-memory", "1GiB").kv_memory == 1 << 30
    assert _config().kv_memory == DEFAULT_KV_MEMORY and _config().num_pages is None


@pytest.mark.parametrize("flags", [("--mode", "fast", "--dtype", "float32"),
                                   ("--kv-memory", "lots"), ("--kv-memory", "0")])
def test_bad_mode_or_budget_is_a_clear_error(flags: tuple[str, ...]) -> None:
    with pytest.raises(EngineConfigError):
        _config(*flags)


def test_memory_sizes_and_fast_mode_constraints() -> None:
    assert parse_memory("512MiB") == 512 << 20 and parse_memory("2G") == 2 << 30
    assert parse_memory("300mb") == 300_000_000 and parse_memory("4096") == 4096
    with pytest.raises(EngineConfigError):
        EngineConfig(mode="fast", device="cuda:0")
    with pytest.raises(EngineConfigError):
        EngineConfig(kv_memory=0)
    fast = EngineConfig(mode="fast")
    assert (fast.resolved_kv_dtype, fast.resolved_backend) == ("bfloat16", "cpu")
    exact = EngineConfig()
    assert (exact.resolved_kv_dtype, exact.resolved_backend) == ("float32", "torch")


def test_pool_is_sized_from_the_budget_in_the_kv_dtype(loaded_model_fast) -> None:  # type: ignore[no-untyped-def]
    from engine.core.engine_core import EngineCore

    core = EngineCore(EngineConfig(mode="fast", kv_memory=64 << 20), loaded=loaded_model_fast)
    per_page = core.kv.bytes_per_page()
    assert core.pool.num_pages == (64 << 20) // per_page and core.kv.dtype.itemsize == 2
    with pytest.raises(EngineConfigError):  # a fast config over an exact model is refused
        EngineCore(EngineConfig(mode="exact"), loaded=loaded_model_fast)
