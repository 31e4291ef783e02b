"""Per-engine prefill chunk size at the latency-constrained utilisation (LCU) point (DynaServe).

The LCU chunk is the largest prefill chunk whose predicted step — the chunk plus the engine's
running decodes — still fits the inter-token latency SLO: bigger chunks prefill faster (fewer
re-reads of earlier chunks' KV) until the decodes riding along would miss their ITL. The router
sets it on each engine at run time (Configure), at most once per interval per engine, and only
when it moves by more than a tenth.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from pyrouter.engines.handle import EngineHandle
from router_core import EngineTable

log = logging.getLogger("switchyard.router")


def lcu_chunk(table: EngineTable, engine_num: int, itl_ms: float, context_tokens: int,
              lo: int = 32, hi: int = 2048, idle_full: bool = False) -> int | None:
    """Largest chunk in [lo, hi] (binary search on the predicted step) whose step with the
    engine's running decodes fits `itl_ms`; `lo` when even that misses; None without a model.
    `idle_full`: `hi` while the engine runs no decode — no step's ITL to keep, and a small chunk
    would only make the prefills it does run take more steps."""
    load = table.get(engine_num)
    if idle_full and not load.running_decodes:
        return hi

    def step(chunk: int) -> float:
        return table.predict_step_ms(engine_num, [(context_tokens, chunk)],
                                     load.running_decodes, load.decode_context_tokens)

    if math.isnan(step(lo)):
        return None
    if step(hi) <= itl_ms:
        return hi
    if step(lo) > itl_ms:
        return lo
    good, bad = lo, hi
    while bad - good > max(1, good // 16):  # to within ~6%
        mid = (good + bad) // 2
        if step(mid) <= itl_ms:
            good = mid
        else:
            bad = mid
    return good


class ChunkController:
    """Applies LCU chunk sizes to engines, rate-limited; lives in a policy's private state."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.applied: dict[str, int] = {}  # engine id -> chunk size last set (tests, headers)

    def update(self, engine: EngineHandle, table: EngineTable, itl_ms: float,
               context_tokens: int, lo: int, hi: int, idle_full: bool = False) -> int | None:
        """The LCU chunk for `engine`; sends it (in the background) when due and different."""
        chunk = lcu_chunk(table, engine.num, itl_ms, context_tokens, lo, hi, idle_full)
        if chunk is None:
            return None
        now = time.monotonic()
        current = table.get(engine.num).prefill_chunk_size or self.applied.get(engine.id, 0)
        due = now - self._last.get(engine.id, -math.inf) >= self.interval_s
        if due and (not current or abs(chunk - current) > current / 10):
            self._last[engine.id] = now
            self.applied[engine.id] = chunk
            task = asyncio.get_running_loop().create_task(self._send(engine, chunk))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return chunk

    @staticmethod
    async def _send(engine: EngineHandle, chunk: int) -> None:
        try:
            await engine.client.configure(prefill_chunk_size=chunk, timeout_s=5.0)
        except Exception as exc:  # an engine that cannot take it keeps its chunk; say so
            log.warning("could not set %s's prefill chunk to %d: %s", engine.id, chunk, exc)
