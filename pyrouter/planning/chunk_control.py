"""Per-engine prefill chunk size at the latency-constrained utilisation (LCU) point (DynaServe).

The LCU chunk is the largest prefill chunk whose predicted step — the chunk plus the engine's
running decodes — still fits the inter-token latency SLO: bigger chunks prefill faster (fewer
re-reads of earlier chunks' KV) until the decodes riding along would miss their ITL. The router
sets it on each engine at run time (Configure), at most once per interval per engine, and only
when it moves by more than a tenth.

`backlog_chunk` (adaptive's rule) asks first whether the LCU chunk is needed at all. While an
engine has queued prefill, every step carries a full chunk, so a decode's TPOT is the mean step
over its life: the full-chunk step while the backlog lasts, the plain decode step after. Where
decodes live long and the backlog is short (a burst on a GPU), that mean stays within the SLO at
the largest chunk, and a smaller one would only slow the prefills (a step's fixed cost is paid
per chunk); where decodes live few steps or the backlog lasts, the mean is the full-chunk step
and only the LCU chunk keeps it within the SLO — for the batch the engine will run once the
requests waiting for it join.

`lcu_option` is that LCU chunk as an alternative for one placement: where a prompt at the
engine's current chunk would push its running decodes over their TPOT SLO, the same engine at
the LCU chunk keeps every step within it, at a prefill cost per token it says. adaptive weighs
both (pyrouter/planning/placement.py `at_chunk`) and, when it takes the second, holds that chunk
on the engine while its prefill queue lasts (`ChunkController.hold`).
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from pyrouter.engines.handle import EngineHandle
from router_core import EngineTable

log = logging.getLogger("switchyard.router")


def lcu_chunk(table: EngineTable, engine_num: int, itl_ms: float, context_tokens: int,
              lo: int = 32, hi: int = 2048, idle_full: bool = False, joining_decodes: int = 0,
              joining_context_tokens: int = 0) -> int | None:
    """Largest chunk in [lo, hi] (binary search on the predicted step) whose step with the
    engine's running decodes — and `joining_decodes` more, holding `joining_context_tokens` —
    fits `itl_ms`; `lo` when even that misses; None without a model.
    `idle_full`: `hi` while the engine runs no decode — no step's ITL to keep, and a small chunk
    would only make the prefills it does run take more steps."""
    load = table.get(engine_num)
    if idle_full and not load.running_decodes:
        return hi
    decodes = load.running_decodes + joining_decodes
    decode_context = load.decode_context_tokens + joining_context_tokens

    def step(chunk: int) -> float:
        return table.predict_step_ms(engine_num, [(context_tokens, chunk)], decodes,
                                     decode_context)

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


def backlog_chunk(table: EngineTable, engine_num: int, itl_ms: float, prompt_tokens: int,
                  life_steps: float, lo: int = 32, hi: int = 2048,
                  ttft_ms: float = math.inf) -> int | None:
    """adaptive's chunk for an engine about to take a `prompt_tokens` prefill (module
    docstring): `hi` when a decode living `life_steps` more steps meets `itl_ms` on average
    through the engine's backlog (its queued prefill and this prompt) cut into `hi`-token
    chunks; otherwise the LCU chunk for the running decodes plus the waiting requests and this
    one (each with a prompt's context) — unless the engine is idle and that chunk alone would
    take its prefill (this prompt's included) past `ttft_ms` where `hi` would not. None without
    a model."""
    load = table.get(engine_num)
    context = prompt_tokens // 2
    full = table.predict_step_ms(engine_num, [(context, hi)], load.running_decodes,
                                 load.decode_context_tokens)
    plain = table.predict_step_ms(engine_num, [], load.running_decodes,
                                  load.decode_context_tokens)
    if math.isnan(full) or math.isnan(plain):
        return None
    life = max(1.0, life_steps)
    in_backlog = min(life, (load.pending_prefill_tokens + prompt_tokens) / hi)
    if (in_backlog * full + (life - in_backlog) * plain) / life <= itl_ms:
        return hi
    chunk = _lcu_once_joined(table, engine_num, itl_ms, prompt_tokens, lo, hi)
    idle = not (load.running_decodes or load.router_seqs or load.queued_requests)
    if chunk is not None and chunk < hi and idle:
        # An idle engine: the LCU chunk would keep only this request's own decode from later
        # prefills' full chunks, paid for with its own prefill in more steps. Where that alone
        # costs it the TTFT SLO, the SLO it would certainly miss outweighs one it might.
        tokens = int(load.pending_prefill_tokens) + prompt_tokens
        if _prefill_ms(table, engine_num, tokens, chunk) > ttft_ms \
                >= _prefill_ms(table, engine_num, tokens, hi):
            return hi
    return chunk


@dataclass(frozen=True, slots=True)
class LcuOption:
    """An engine's LCU chunk as an alternative to the chunk it runs now (`lcu_option`)."""

    chunk: int
    step_ms: float     # a step carrying that chunk beside the engine's running decodes
    cost_ratio: float  # prefill time per token at `chunk` / at the engine's current chunk


def lcu_option(table: EngineTable, engine_num: int, itl_ms: float, prompt_tokens: int,
               lo: int = 32, hi: int = 2048) -> LcuOption | None:
    """The engine's LCU chunk for the batch it runs once its waiting requests and this one join,
    as an alternative to its current chunk; None where it is not smaller by more than a tenth
    (what `ChunkController.apply` would not send), its step misses `itl_ms` anyway, or there is
    no model. On a GPU a step's fixed cost is small, so the LCU chunk prefills nearly as fast as
    the largest (H100 profile: ~13% more time per token at ~900 tokens than at 2048) while keeping
    every step within the SLO."""
    load = table.get(engine_num)
    current = int(load.prefill_chunk_size) or hi
    context = prompt_tokens // 2
    chunk = _lcu_once_joined(table, engine_num, itl_ms, prompt_tokens, lo, hi)
    if chunk is None or chunk >= current * 0.9:
        return None

    def step(size: int) -> float:
        return table.predict_step_ms(engine_num, [(context, size)], load.running_decodes,
                                     load.decode_context_tokens)

    at, now = step(chunk), step(current)
    if not (at > 0 and now > 0) or at > itl_ms:
        return None
    return LcuOption(chunk, at, (at / chunk) / (now / current))


def _lcu_once_joined(table: EngineTable, engine_num: int, itl_ms: float, prompt_tokens: int,
                     lo: int, hi: int) -> int | None:
    """The LCU chunk for the batch the engine runs once its waiting requests and this one join
    its decodes (each with a prompt's context)."""
    joining = int(table.get(engine_num).queued_requests) + 1
    return lcu_chunk(table, engine_num, itl_ms, prompt_tokens // 2, lo, hi,
                     joining_decodes=joining, joining_context_tokens=joining * prompt_tokens)


def _prefill_ms(table: EngineTable, engine_num: int, tokens: int, chunk: int) -> float:
    """A `tokens` prefill alone on the engine in `chunk`-token steps (each step at the mean
    context its chunks start from)."""
    chunk = max(1, min(chunk, tokens))
    steps = math.ceil(tokens / chunk)
    return steps * table.predict_step_ms(engine_num, [((tokens - chunk) // 2, chunk)], 0, 0)


class ChunkController:
    """Applies prefill chunk sizes to engines, rate-limited; lives in a policy's private state.
    Each engine's own chunk (what the first change replaced) is given back when the policy is
    replaced (`retire`): the next policy starts from the engines' configured chunk, not from
    the last one this policy chose for its own load."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.applied: dict[str, int] = {}  # engine id -> chunk size last set (tests, headers)
        self.own: dict[str, int] = {}  # engine id -> its chunk before this controller's first
        self._engines: dict[str, EngineHandle] = {}
        self._held: set[str] = set()  # engine ids whose chunk a placement holds (`hold`)

    def update(self, engine: EngineHandle, table: EngineTable, itl_ms: float,
               context_tokens: int, lo: int, hi: int, idle_full: bool = False) -> None:
        """Sends `engine` its LCU chunk (in the background) when due and different."""
        if not self.due(engine.id):
            return
        chunk = lcu_chunk(table, engine.num, itl_ms, context_tokens, lo, hi, idle_full)
        if chunk is not None:
            self.apply(engine, table, chunk)

    def due(self, engine_id: str) -> bool:
        """Whether `engine_id` may take a new chunk now (at most one per interval): callers
        skip working out a chunk per request that `apply` would not send."""
        return time.monotonic() - self._last.get(engine_id, -math.inf) >= self.interval_s

    def apply(self, engine: EngineHandle, table: EngineTable, chunk: int) -> None:
        """Sends `chunk` to `engine` (in the background) when due and different."""
        current = table.get(engine.num).prefill_chunk_size or self.applied.get(engine.id, 0)
        if self.due(engine.id) and (not current or abs(chunk - current) > current / 10):
            self._last[engine.id] = time.monotonic()
            self.applied[engine.id] = chunk
            self._engines[engine.id] = engine
            self._spawn(self._send(engine, chunk))

    def hold(self, engine: EngineHandle, table: EngineTable, chunk: int) -> None:
        """Sends `chunk` now, interval or not, and keeps it while the engine has prefill queued
        (`held`): a placement was chosen on the promise that this chunk runs its prefill, and a
        rule that would raise it meanwhile (`backlog_chunk`) would break that promise to the
        decodes beside it."""
        self._last.pop(engine.id, None)
        self.apply(engine, table, chunk)
        self._last[engine.id] = time.monotonic()
        self._held.add(engine.id)

    def held(self, engine: EngineHandle, table: EngineTable) -> bool:
        """Whether `engine`'s chunk is still held: some prefill is still queued there since
        `hold`."""
        if engine.id in self._held and table.get(engine.num).pending_prefill_tokens > 0:
            return True
        self._held.discard(engine.id)
        return False

    def retire(self) -> None:
        """The policy is being replaced: every engine this controller changed gets its own
        chunk back (in the background; an engine that cannot take it says so in the log)."""
        for engine_id, chunk in self.own.items():
            engine = self._engines[engine_id]
            if chunk > 0 and self.applied.get(engine_id) != chunk:
                self.applied[engine_id] = chunk
                self._spawn(self._send(engine, chunk))

    def _spawn(self, send: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(send)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, engine: EngineHandle, chunk: int) -> None:
        try:
            answer = await engine.client.configure(prefill_chunk_size=chunk, timeout_s=5.0)
        except Exception as exc:  # an engine that cannot take it keeps its chunk; say so
            log.warning("could not set %s's prefill chunk to %d: %s", engine.id, chunk, exc)
            return
        # The first answer holds the engine's own chunk (a restore's engine has one already).
        self.own.setdefault(engine.id, int(answer.previous_prefill_chunk_size))
