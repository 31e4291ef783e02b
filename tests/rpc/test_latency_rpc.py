"""The latency model and the prefill chunk size over real gRPC: an engine process finds its cached
profile at start (same key as computed here), reports the model in Stats, and takes a new
prefill chunk size from Configure (bad values: INVALID_ARGUMENT, nothing changed)."""
from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import torch

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.latency_cache import profile_identity, profile_key, store_profile
from engine.core.latency_model import VERSION, StepShape
from engine.core.latency_profile import grid_for
from engine.model.loader import load_model
from engine.server.launcher import EngineProcess, EngineSpec, start_engines, stop_engines
from switchyard_engine_api.client import sampling
from switchyard_tokenizer.default_model import default_model_path

pytestmark = [pytest.mark.procs, pytest.mark.model, pytest.mark.timeout(300)]
NUM_PAGES = 512  # as the launcher starts engines
KNOWN = {"const": 5.0, "prefill_tokens": 0.5, "prefill_seqs": 1.0, "prefill_attention": 1e-4,
         "prefill_context": 0.002, "decode_seqs": 0.7, "decode_context": 0.001,
         "decode_context_over": 0.01}


def _write_profile(cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """A profile entry under the key the engine process (one torch thread) will compute, with
    rows made from known coefficients; returns them as the engine will name them."""
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(cache))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loaded = load_model(default_model_path(), torch.float32, torch.device("cpu"))
        core = EngineCore(EngineConfig(num_pages=NUM_PAGES, mode="exact", dtype="float32"), loaded)
        grid = grid_for(core)
        identity = profile_identity(core, grid)
    finally:
        torch.set_num_threads(threads)
    model, rng = core.latency, random.Random(0)
    for _ in range(60):
        chunks = tuple((rng.choice([0, 512]), rng.randint(1, 300)) for _ in range(rng.randint(0, 2)))
        decodes = rng.randint(0 if chunks else 1, 40)
        shape = StepShape(chunks, decodes, decodes * rng.randint(1, 2000))
        feats = shape.features(float(model.knee or 0))
        with model.recording_profile():
            model.record(sum(KNOWN[t] * feats[t] for t in model.terms), shape)
    store_profile(profile_key(identity), identity, model.terms, model.profile_rows(), 1.0)
    return model.coefficients()


@pytest.fixture(scope="module")
def engine(engine_logs: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[EngineProcess, dict[str, float]]]:
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as monkeypatch:
        expected = _write_profile(cache, monkeypatch)
    (proc,) = start_engines([EngineSpec(
        "latency", mode="exact", dtype="float32", num_pages=NUM_PAGES, threads=1,
        env={"SWITCHYARD_CACHE_DIR": str(cache), "SWITCHYARD_LATENCY_PROFILE": "auto"})],
        engine_logs)
    try:
        yield proc, expected
    finally:
        stop_engines([proc])


async def test_stats_carry_the_cached_profile(engine: tuple[EngineProcess, dict[str, float]]
                                              ) -> None:
    proc, expected = engine
    async with proc.client() as client:
        stats = await client.stats()
    model = stats.latency_model
    assert (model.source, model.version, model.samples) == ("cache", VERSION, 60)
    assert dict(model.coeffs_ms) == pytest.approx(expected)
    assert model.fit_error == pytest.approx(0.0, abs=1e-6)
    assert stats.prefill_chunk_size == EngineConfig().chunk_size
    assert (stats.decode_requests, stats.decode_context_tokens) == (0, 0)


async def test_configure_sets_the_prefill_chunk_size(
        engine: tuple[EngineProcess, dict[str, float]]) -> None:
    proc, _ = engine
    async with proc.client() as client:
        default = EngineConfig().chunk_size
        resp = await client.configure(prefill_chunk_size=32)
        assert (resp.prefill_chunk_size, resp.previous_prefill_chunk_size) == (32, default)
        assert (await client.stats()).prefill_chunk_size == 32
        same = await client.configure()
        assert (same.prefill_chunk_size, same.previous_prefill_chunk_size) == (32, 32)
        info = await client.model_info()
        for bad in (0, -5, info.max_context + 1):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.configure(prefill_chunk_size=bad)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "prefill chunk size" in (err.value.details() or "")
        assert (await client.stats()).prefill_chunk_size == 32
        # A 100-token prompt now prefills in 32-token steps and still generates.
        out = await client.generate("chunked", list(range(1000, 1100)), params=sampling(3))
        assert out.finish_reason == "length" and len(out.token_ids) == 3
        await client.configure(prefill_chunk_size=default)
