"""SimCluster: the engine directory the router's Dispatcher and ClusterView use
(pyrouter/cluster.py's EngineDirectory), over simulated engines.

Each engine gets a real EngineHandle whose client is a SimEngineVerbs, and the router's
router_core is fed as the real EngineMembership fed it before engines pushed their load
(pyrouter/engines/membership.py): Stats every `poll_s` (0.5 s, virtual) with the engine's load and
latency model, and KV events as the engine's KVEvents stream delivers them (every 50 ms), so
prefix matches and load lag the engines as they did in a real router. (A real engine now pushes
its Stats on that stream as they change, at most every 50 ms: engine/server/load_push.py; the
simulator still polls.)
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import router_core
from engine.core.outputs import StepOutput
from engine.server.convert import event_batches, stats_to_proto
from pyrouter.engines.handle import EngineHandle
from router_core import RouterCore, engine_name
from switchyard_sim.cores import SharedCores
from switchyard_sim.engine import SimEngine
from switchyard_sim.engine_verbs import SimEngineVerbs, TokenLog
from switchyard_sim.fake.local_engines import LocalEngines
from switchyard_sim.profile import HardwareProfile

POLL_S = 0.5  # the router's Stats poll (switchyard router --poll-s)
KV_EVENT_POLL_S = 0.05  # the engine's KVEvents stream (engine/server/load_push.py)


class SimCluster(LocalEngines):
    def __init__(self, profile: HardwareProfile, roles: Sequence[str], coalesce: int = 16,
                 poll_s: float = POLL_S, kv_event_poll_s: float = KV_EVENT_POLL_S) -> None:
        if not roles:
            raise ValueError("a simulated cluster needs at least one engine")
        self.profile = profile
        # The router in front of these engines is configured for their model's context (as
        # `switchyard router --max-context`), not the router's SmolLM2 default.
        self.max_context = profile.model.max_context
        seed = router_core.model_seed(profile.model.model_id or profile.name)
        super().__init__(RouterCore(profile.page_size, seed))
        self.tokens = TokenLog()
        self.poll_s = poll_s
        self.kv_event_poll_s = kv_event_poll_s
        self._sims: dict[str, SimEngine] = {}
        self._clients: dict[str, SimEngineVerbs] = {}
        self._kv_seq: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # Engines sharing CPU cores slow each other's steps (none on GPU profiles).
        cores = SharedCores() if profile.shares_cores else None
        for num, role in enumerate(roles):
            engine_id = engine_name(num)
            sim = SimEngine(engine_id, role, profile, seed, self._deliver_to(engine_id), cores)
            client = SimEngineVerbs(sim, self._sims, self.tokens, coalesce)
            handle = EngineHandle(engine_id, num, client.address, role, client,
                                  self.core, healthy=True, model_id=profile.model.model_id)
            self._sims[engine_id], self._clients[engine_id] = sim, client
            self._kv_seq[engine_id] = 0
            self.add(handle)

    def _deliver_to(self, engine_id: str) -> Callable[[StepOutput, float], None]:
        def deliver(out: StepOutput, now: float) -> None:
            self._clients[engine_id].deliver(out, now)
        return deliver

    # ---- inspection ----
    def sim(self, engine_id: str) -> SimEngine:
        return self._sims[engine_id]

    def client(self, engine_id: str) -> SimEngineVerbs:
        return self._clients[engine_id]

    # ---- life ----
    async def start(self) -> None:
        """Engines stepping, the router's view fed; one poll at once, as a router that has
        seen its engines come up."""
        for engine_id, sim in self._sims.items():
            sim.start()
            self.poll_stats(engine_id)
            self.poll_kv_events(engine_id)
            loop = asyncio.get_running_loop()
            self._tasks.append(loop.create_task(self._every(self.poll_s, self.poll_stats,
                                                            engine_id)))
            self._tasks.append(loop.create_task(self._every(self.kv_event_poll_s,
                                                            self.poll_kv_events, engine_id)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for sim in self._sims.values():
            await sim.stop()

    @staticmethod
    async def _every(period_s: float, poll: Callable[[str], None], engine_id: str) -> None:
        while True:
            await asyncio.sleep(period_s)
            poll(engine_id)

    def poll_stats(self, engine_id: str) -> None:
        """What the router's upkeep (router_core/src/engine_upkeep/) does with one Stats answer."""
        handle = self.engines[engine_id]
        table = self.core.table
        table.stats_requested(handle.num)
        # Through the Stats message, as a real engine answers: the upkeep's one mapping.
        table.apply_stats(handle.num, stats_to_proto(
            self._sims[engine_id].core.stats(), 0, 0).SerializeToString())
        table.set_health(handle.num, handle.healthy and not handle.draining)

    def poll_kv_events(self, engine_id: str) -> None:
        """What the router's upkeep does with the engine's event batches (a gap, when
        the engine's bounded log overflowed, is answered with a snapshot)."""
        core, num = self._sims[engine_id].core, self.engines[engine_id].num
        index = self.core.index
        for batch in event_batches(core.kv_events_since(self._kv_seq[engine_id])):
            if not index.apply_events(num, batch.first_seq, batch.last_seq, list(batch.stored),
                                      list(batch.evicted)):
                last_seq, hashes = core.kv_snapshot()
                index.apply_snapshot(num, last_seq, hashes)
                self._kv_seq[engine_id] = last_seq
                return
            self._kv_seq[engine_id] = batch.last_seq
