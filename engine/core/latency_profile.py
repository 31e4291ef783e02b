"""Start-up latency profile: drive the engine's own step path over a grid of step shapes, so the
latency model is fitted on what the scheduler's steps really cost (schedule, forward, sample).

The profile is a run of ordinary requests through EngineCore — decodes of a few batch sizes and
context lengths, prefills of a few lengths on top of a few cached prefix lengths, and a few of
each together — and every step they take is a sample, with the exact shape the scheduler ran.
The linear model needs each feature to vary, not the full cross product of the grid, which
keeps the first start short; later starts load the samples from the cache (latency_cache.py).
Afterwards the profile's requests are gone and its blocks are evicted from the prefix cache.
"""
from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from switchyard_engine_api.errors import UnknownRequest
from switchyard_engine_api.sampling_params import SamplingParams

if TYPE_CHECKING:
    from engine.core.engine_core import EngineCore

log = logging.getLogger(__name__)
_ID = "__latency-profile"


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    """Shapes to run. Contexts and batch sizes are clipped to what the engine can hold."""

    decode_batches: tuple[int, ...] = (1, 8, 32)
    # Prompt lengths of the decodes: one past a page, so a batch's followers recompute 1 token.
    decode_contexts: tuple[int, ...] = (65, 1025)
    decode_steps: int = 2  # steps measured per decode shape and round
    prefill_tokens: tuple[int, ...] = (16, 128, 512)
    prefill_cached: tuple[int, ...] = (0, 1024)
    # (prefill tokens, cached before them, decodes, decode context): mixed steps
    mixed: tuple[tuple[int, int, int, int], ...] = ((128, 0, 16, 513), (256, 1024, 4, 513),
                                                    (32, 512, 32, 1025))
    # Rounds over the whole grid: a neighbour's burst on a shared machine then slows one sample
    # of a shape, not all of them, and the fit (an L1 fit) sees the typical time.
    repeats: int = 2

    def fitted(self, max_tokens_per_seq: int, pool_tokens: int, max_running: int,
               page_size: int = 16) -> ProfileGrid:
        """This grid within an engine's limits: no sequence longer than it can hold, no more
        decodes than it runs at once or than a quarter of its pages can give a page or two each,
        and one sequence's context within a quarter of the pool (the rest stays free for the
        shared prefixes and the cache)."""
        ctx_cap = max(16, min(max_tokens_per_seq, pool_tokens // 4))
        max_running = max(1, min(max_running, pool_tokens // page_size // 8))

        def clip(values: tuple[int, ...], cap: int, low: int = 1) -> tuple[int, ...]:
            return tuple(sorted({max(low, min(v, cap)) for v in values}))

        contexts = clip(self.decode_contexts, ctx_cap)
        batches = clip(self.decode_batches, max_running)
        # A mixed step needs a slot for its prefill next to the decodes.
        mixed = tuple(dict.fromkeys((min(p, ctx_cap // 2), min(c, ctx_cap // 2),
                                     min(b, max_running - 1), min(d, ctx_cap))
                                    for p, c, b, d in self.mixed))
        return replace(self, decode_contexts=contexts, decode_batches=batches,
                       prefill_tokens=clip(self.prefill_tokens, ctx_cap // 2),
                       prefill_cached=clip(self.prefill_cached, ctx_cap // 2, low=0), mixed=mixed)


def grid_for(core: EngineCore, grid: ProfileGrid | None = None) -> ProfileGrid:
    config = core.config
    return (grid or ProfileGrid()).fitted(
        max_tokens_per_seq=core.max_context - 64,
        pool_tokens=core.pool.num_pages * config.page_size,
        max_running=config.max_running, page_size=config.page_size)


class StepDriver:
    """Runs profile requests through the engine; every step it takes is recorded as a sample."""

    def __init__(self, core: EngineCore, seed: int = 0) -> None:
        self.core = core
        self.rng = random.Random(seed)
        vocab = core.model_config.vocab_size
        self._vocab = (min(1000, vocab // 2), vocab - 1)
        self._ids = itertools.count()
        self.document = self.tokens(core.max_context)  # shared prefixes come from here

    def tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(*self._vocab) for _ in range(n)]

    def add(self, prompt: list[int], max_tokens: int) -> str:
        rid = f"{_ID}-{next(self._ids)}"
        self.core.add_request(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        return rid

    def step_until(self, done: Callable[[], bool], limit: int = 10_000) -> None:
        for _ in range(limit):
            if done():
                return
            self.core.step()
        raise RuntimeError("latency profile: the engine made no progress")

    def finished(self, rid: str) -> bool:
        try:
            self.core.request(rid)
        except UnknownRequest:
            return True
        return False

    def decoding(self, rids: list[str]) -> bool:
        return all(self.core.request(r).is_decode for r in rids)

    def prefill(self, tokens: int, cached: int) -> None:
        """One request of `tokens` new tokens after `cached` tokens of the document, which a
        first request puts in the prefix cache (that one's steps are samples too)."""
        prefix = self.document[:cached]
        if cached and self.core.match_prefix(prefix) < cached - self.core.config.page_size:
            warm = self.add(prefix + self.tokens(1), max_tokens=1)
            self.step_until(lambda: self.finished(warm))
        rid = self.add(prefix + self.tokens(tokens), max_tokens=1)
        self.step_until(lambda: self.finished(rid))

    def start_decodes(self, batch: int, context: int) -> list[str]:
        """`batch` requests decoding after the same `context`-token prompt: the first prefills
        it, the others find it cached (only their last page is computed)."""
        if batch < 1:
            return []
        prompt = self.document[:context]
        first = [self.add(prompt, max_tokens=1 << 20)]
        self.step_until(lambda: self.decoding(first))
        rest = [self.add(prompt, max_tokens=1 << 20) for _ in range(batch - 1)]
        self.step_until(lambda: self.decoding(rest))
        return first + rest

    def stop(self, rids: list[str]) -> None:
        for rid in rids:
            self.core.abort(rid)
        self.step_until(lambda: not self.core.has_work())

    def stop_all(self) -> None:
        """Abort every profile request still known (after a failure part-way)."""
        self.stop([f"{_ID}-{n}" for n in range(next(self._ids))])


def _one_round(core: EngineCore, driver: StepDriver, grid: ProfileGrid) -> None:
    for context in grid.decode_contexts:
        for batch in grid.decode_batches:
            rids = driver.start_decodes(batch, context)
            for _ in range(grid.decode_steps):
                core.step()
            driver.stop(rids)
    for cached in grid.prefill_cached:
        for tokens in grid.prefill_tokens:
            driver.prefill(tokens, cached)
    for tokens, cached, batch, context in grid.mixed:
        rids = driver.start_decodes(batch, context)
        driver.prefill(tokens, cached)
        driver.stop(rids)


def run_profile(core: EngineCore, grid: ProfileGrid | None = None) -> float:
    """Profile `core` (idle, not serving yet) into core.latency; returns the seconds it took."""
    grid = grid_for(core, grid)
    started = time.perf_counter()
    driver = StepDriver(core)
    previous_chunk = core.set_chunk_size(core.max_context)  # each prefill is one step
    try:
        # Warm-up outside the profile: the first steps pay one-time allocations.
        driver.stop(driver.start_decodes(2, 32) + [driver.add(driver.tokens(64), 1)])
        with core.latency.recording_profile():
            for _ in range(grid.repeats):
                _one_round(core, driver, grid)
    finally:
        driver.stop_all()
        core.set_chunk_size(previous_chunk)
        core.latency.clear_live()
        core.cache.clear()
    seconds = time.perf_counter() - started
    log.info("latency profile: %d steps in %.1f s (grid %s)", len(core.latency), seconds, grid)
    return seconds
