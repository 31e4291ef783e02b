"""The start-up latency profile on the real SmolLM2: it runs through the engine's own steps, leaves
the engine as it found it and is cached per configuration. How well it predicts step shapes it
never ran is a wall-time figure, so a benchmark: switchyard_bench/engine/latency_accuracy.py.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from test_core_support import make_engine

from engine.core.latency_cache import PROFILE_MODES, prepare_latency_model, profile_dir
from engine.core.latency_model import StepShape
from engine.core.latency_profile import ProfileGrid, StepDriver
from engine.model.loader import LoadedModel

pytestmark = pytest.mark.model

TINY = ProfileGrid(decode_batches=(1, 3), decode_contexts=(17,), decode_steps=1,
                   prefill_tokens=(8, 24), prefill_cached=(0, 32), mixed=((8, 16, 2, 17),),
                   repeats=1)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Step times on this shared 2-core machine are steadier on one torch thread (two threads
    spin-wait on each other whenever a neighbour takes a core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_grid_is_clipped_to_what_the_engine_holds() -> None:
    grid = ProfileGrid().fitted(max_tokens_per_seq=400, pool_tokens=1024, max_running=4)
    assert grid.decode_contexts == (65, 256) and grid.decode_batches == (1, 4)
    assert grid.prefill_cached == (0, 128) and max(grid.prefill_tokens) == 128
    assert all(b <= 3 for _, _, b, _ in grid.mixed), "a mixed step leaves a slot for the prefill"
    assert ProfileGrid().fitted(8000, 1 << 20, 64) == ProfileGrid()
    tiny_pool = ProfileGrid().fitted(8000, 8 * 16, 64)  # 8 pages of 16 tokens
    assert tiny_pool.decode_batches == (1,) and max(tiny_pool.decode_contexts) <= 32


@pytest.mark.slow
def test_profile_runs_real_steps_then_caches(loaded_model_fp32: LoadedModel, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            one_thread: None) -> None:
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path))
    core = make_engine(loaded_model_fp32, chunk_size=48)
    assert prepare_latency_model(core, "off", TINY) == "none"
    assert prepare_latency_model(core, "auto", TINY) == "profile"
    rows = core.latency.profile_rows()
    assert len(rows) >= 8 and all(r.wall_ms > 0 and r.cpu_ms > 0 for r in rows)
    coeffs = core.latency.coefficients()
    assert {t.split(":")[0] for t in coeffs} == set(core.latency.terms)
    assert all(c >= 0 for c in coeffs.values())
    # The engine is as it was: no requests, nothing cached or held, its own chunk size.
    assert not core.has_work() and core.pool.num_used == 0 and len(core.cache) == 0
    assert core.scheduler.chunk_size == 48 and core.latency.recent_step_ms() == []
    stats = core.stats()
    assert stats.latency_model_source == "profile" and stats.latency_model == coeffs
    assert stats.prefill_chunk_size == 48 and stats.latency_model_samples == len(rows)
    (entry,) = Path(profile_dir()).glob("*.json")

    again = make_engine(loaded_model_fp32, chunk_size=48)
    assert prepare_latency_model(again, "auto", TINY) == "cache"
    assert again.latency.profile_rows() == rows and again.latency.coefficients() == coeffs
    assert again.pool.num_used == 0 and again.latency.source == "cache"
    # Another configuration (here: the page size) is another profile.
    other = make_engine(loaded_model_fp32, chunk_size=48, page_size=8)
    assert prepare_latency_model(other, "auto", TINY) == "profile"
    # A damaged entry is a miss, and "force" profiles even when an entry exists.
    entry.write_text("{not json")
    assert prepare_latency_model(make_engine(loaded_model_fp32), "auto", TINY) == "profile"
    assert prepare_latency_model(make_engine(loaded_model_fp32), "force", TINY) == "profile"
    with pytest.raises(ValueError):
        prepare_latency_model(core, "sometimes", TINY)
    assert PROFILE_MODES == ("off", "auto", "force")


def test_chunk_size_is_set_at_run_time(loaded_model_fp32: LoadedModel, one_thread: None) -> None:
    core = make_engine(loaded_model_fp32, chunk_size=64)
    assert core.set_chunk_size(16) == 64 and core.stats().prefill_chunk_size == 16
    shapes: list[StepShape] = []
    record = core.latency.record
    core.latency.record = lambda ms, shape, cpu=None: (  # type: ignore[method-assign]
        shapes.append(shape), record(ms, shape, cpu))[1]
    driver = StepDriver(core)
    driver.prefill(40, 0)
    assert [s.prefill_tokens for s in shapes] == [16, 16, 8], "40 tokens in chunks of 16"
    from switchyard_engine_api.errors import InvalidRequest

    for bad in (0, -3, core.max_context + 1, 2.5, True):
        with pytest.raises(InvalidRequest):
            core.set_chunk_size(bad)  # type: ignore[arg-type]
    assert core.scheduler.chunk_size == 16


def test_the_accuracy_benchmarks_shapes_are_off_the_default_grid() -> None:
    """switchyard_bench/engine/latency_accuracy.py measures prediction on shapes the profile never
    ran; a grid change that made one of them a grid point would make its figure a fit error."""
    from switchyard_bench.engine.latency_accuracy import UNSEEN

    grid = ProfileGrid()
    for label, tokens, cached, decodes, context in UNSEEN:
        assert tokens not in grid.prefill_tokens or cached not in grid.prefill_cached, label
        assert decodes not in grid.decode_batches or context not in grid.decode_contexts, label
