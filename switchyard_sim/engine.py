"""A simulated engine: the real EngineCore's verbs, scheduler, KV page pool, prefix cache and
reservations, with a stand-in for the model, stepped in virtual time.

`SimEngineCore` is an EngineCore without a model: its verbs (add_request, prep_recv, add_send,
abort, stats, set_chunk_size) and its StepRunner's bookkeeping (continuous batching, chunked
prefill under the token budget, preemption, finishing, caching) are the engine's own code. Only
two things differ: a step takes the time the profile's latency model predicts for its shape,
and a token is `switchyard_sim.fake.next_token(context)` (a hash of every token before it, kept
incrementally), so any correct pattern yields exactly one engine's tokens. The simulation
counts a model as one layer for the step runner and the reservations (one K/V report per
step); the link model (switchyard_sim/transfer.py) spreads each step's bytes over the real
model's layers.
"""
from __future__ import annotations

import asyncio
import threading
import zlib
from array import array
from collections.abc import Callable
from typing import Any

from engine.batch import LayerHook, ScheduledChunk
from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.outputs import StepOutput
from engine.core.request import Request
from engine.core.reservations import ReservationTable
from engine.core.scheduler import Scheduler
from engine.core.step_runner import StepRunner
from engine.kvcache.page_pool import PagePool
from engine.kvcache.radix_cache import RadixPrefixCache
from engine.model.config import ModelConfig
from switchyard_sim.cores import SharedCores
from switchyard_sim.fake.fake_engine import FAKE_VOCAB
from switchyard_sim.profile import HardwareProfile
from switchyard_sim.send_cost import send_overhead_s

_LEASE_CHECK_S = 0.1  # as the real step loop (engine/server/step_loop.py)
# Token ids the simulated engines accept: any tokenizer's (they never look a token up).
_SIM_VOCAB = 1 << 31


class _NoModel:
    """The forward pass's stand-in: reports each send's K/V once per step (as one layer) and
    returns a non-empty placeholder for the logits, so the step runner samples."""

    def run(self, chunks: list[ScheduledChunk], layer_hook: LayerHook | None = None) -> Any:
        if layer_hook is not None:
            layer_hook(0)
        return chunks


class _SimStepRunner(StepRunner):
    """The engine's StepRunner with the sampler replaced by the context hash."""

    def __init__(self, engine: EngineCore) -> None:
        super().__init__(engine, _NoModel())
        self._crc: dict[str, tuple[int, int]] = {}  # request id -> (tokens hashed, crc32)

    def _pick(self, to_sample: list[tuple[Request, int]], logits: Any
              ) -> tuple[list[int], list[float]]:
        tokens: list[int] = []
        for request, _ in to_sample:
            hashed, crc = self._crc.get(request.request_id, (0, 0))
            context = request.tokens
            if hashed > len(context):  # cannot happen (tokens only grow); restart to be safe
                hashed, crc = 0, 0
            crc = zlib.crc32(array("I", context[hashed:]).tobytes(), crc)
            self._crc[request.request_id] = (len(context), crc)
            tokens.append(1 + crc % (FAKE_VOCAB - 1))  # = next_token(context)
        return tokens, [0.0] * len(tokens)

    def _end(self, request: Request, reason: str, step_ms: float,
             new_ids: list[int] | None = None, text: str = "",
             logprobs: list[float] | None = None) -> StepOutput:
        self._crc.pop(request.request_id, None)
        return super()._end(request, reason, step_ms, new_ids, text, logprobs)


class SimEngineCore(EngineCore):
    """EngineCore without a model (see the module docstring). Built directly, not through
    EngineCore.__init__, which loads weights and allocates the KV tensors."""

    def __init__(self, engine_id: str, role: str, profile: HardwareProfile, seed: int) -> None:
        shape = profile.model
        self.config = EngineConfig(
            engine_id=engine_id, role=role, page_size=profile.page_size,
            num_pages=profile.kv_pages, chunk_size=profile.chunk_size,
            max_running=profile.max_running, max_context=shape.max_context)
        self.model_config = ModelConfig(
            model_id=shape.model_id or profile.name, vocab_size=_SIM_VOCAB, hidden_size=1,
            intermediate_size=1, num_layers=1, num_heads=1, num_kv_heads=1, head_dim=2,
            rms_norm_eps=1e-5, rope_theta=1e4, rope_scaling=None,
            max_position_embeddings=shape.max_context, tie_word_embeddings=False,
            bos_token_id=None, eos_token_ids=[])
        self.max_context = shape.max_context
        self.pool = PagePool(profile.kv_pages)
        self.block_hash_seed = seed
        self.cache = RadixPrefixCache(self.pool, profile.page_size, seed,
                                      self.config.max_kv_events)
        self.scheduler = Scheduler(self.cache, profile.chunk_size, profile.max_running)
        self.reservations = ReservationTable(self.cache, self.model_config.num_layers)
        self.latency = profile.latency(self.config.latency_window)
        self.detokenizer_vocab = None
        self._lock = threading.RLock()
        self._requests: dict[str, Request] = {}
        self._steps = _SimStepRunner(self)

    def _copy_page(self, old: int, new: int) -> None:
        """No KV tensors: copy-on-write is page accounting only."""

    def now(self) -> float:
        """Virtual time: a call's first-token deadline is a time on the simulation's clock (its
        verbs run on the event loop, so there is one)."""
        return asyncio.get_running_loop().time()

    @property
    def steps(self) -> StepRunner:
        return self._steps


OnOutput = Callable[[StepOutput, float], None]


class SimEngine:
    """One simulated engine: its core and the step loop in virtual time. Outputs go to
    `on_output(output, now)` (the engine client routes them to the request's stream)."""

    def __init__(self, engine_id: str, role: str, profile: HardwareProfile, seed: int,
                 on_output: OnOutput, cores: SharedCores | None = None) -> None:
        self.id = engine_id
        self.profile = profile
        self.core = SimEngineCore(engine_id, role, profile, seed)
        self._on_output = on_output
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._cores = cores  # shared with the engines it contends with (None: its own hardware)
        # The step now running: when it started and how long it took (the link model reads it
        # when the step reports its sends' K/V, after its time has passed).
        self.step_started = 0.0
        self.step_s = 0.0
        self.stepping = False
        self.steps_run = 0
        self.busy_s = 0.0
        # Step time owed to KV landing here while it stepped (the receiver's share of the
        # link's work, switchyard_sim/transfer.py): added to its next step.
        self.owed_s = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"sim-{self.id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def wake(self) -> None:
        """A verb changed the engine's work: the step loop looks again."""
        self._wake.set()

    async def _idle(self) -> None:
        """Wait for a verb; wake every lease check while reservations are held, so they expire
        in (virtual) time as on a real engine."""
        self._wake.clear()
        if len(self.core.reservations):
            try:
                async with asyncio.timeout(_LEASE_CHECK_S):
                    await self._wake.wait()
            except TimeoutError:
                pass
        else:
            await self._wake.wait()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        core, steps = self.core, self.core.steps
        next_lease_check = 0.0
        while True:
            now = loop.time()
            if now >= next_lease_check:
                core.expire_leases(now)
                next_lease_check = now + _LEASE_CHECK_S
            if not core.has_work():
                await self._idle()
                continue
            plan = steps.plan()
            step_s = core.latency.predict(plan.shape) / 1e3 if plan.sched.work else 0.0
            step_s += send_overhead_s(self.profile, plan.sched)
            if step_s > 0:
                step_s, self.owed_s = step_s + self.owed_s, 0.0
                self.step_started, self.stepping = now, True
                try:
                    if self._cores is not None:
                        await self._cores.step(step_s, self.profile.contention
                                               if plan.shape.prefill_tokens
                                               else self.profile.decode_contention)
                    else:
                        await asyncio.sleep(step_s)
                finally:
                    self.stepping = False
                self.step_s = loop.time() - now
                self.steps_run += 1
                self.busy_s += self.step_s
            else:
                self.step_started, self.step_s = now, 0.0
            logits, failure = steps.run_model(plan)
            outputs = steps.finish(plan, logits, failure)
            done_at = loop.time()
            for out in outputs:
                self._on_output(out, done_at)
            if not outputs and not plan.sched.work and not plan.sched.no_compute:
                await self._idle()  # queued work that cannot run yet (pages held): wait
