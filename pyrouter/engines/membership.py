"""Which engines the router uses: add, identify, drain, remove — and each engine's upkeep.

Once an engine's ModelInfo says what it serves, router_core keeps its health, load and prefix
view fresh (router_core.EngineUpkeep: KV events and the load the engine pushes with them
followed, health and Stats polled — only for liveness while the engine pushes — all applied in
Rust); Python hears only when it turns healthy or unhealthy. An unhealthy engine is out of
rotation (router_core scores only healthy engines) until it recovers. Every call to an engine,
these and the requests' verbs, goes through its one Rust client (pyrouter/engines/rust_client.py),
which the HTTP front streams from too.
"""
from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from pyrouter.engines.handle import EngineHandle
from pyrouter.engines.roster import roster_changed
from pyrouter.engines.rust_client import RustEngineClient, dial
from pyrouter.errors import BadRequest, EngineCallError, NotFound
from router_core import (
    UPKEEP_LIVENESS_S,
    EngineUpkeep,
    ModelInfo,
    RouterCore,
    RouterFront,
    UpkeepPace,
    engine_name,
)

log = logging.getLogger("switchyard.router")

_VALID_ROLES = ("any", "prefill", "decode")

_VERB_TIMEOUT_S = 600.0

# The upkeep's whole rate: every engine's health check and Stats poll, together, at most this many
# times a second. Each poll costs the router two small RPCs on tokio; at --poll-s 0.5 an
# unbounded 1,024-engine fleet polls 2,048 times a second (docs/benchmarks.md, "One router, N
# engines"). Engines that push their load on their KV event stream are polled only every
# --liveness-s (UPKEEP_LIVENESS_S, 10 s: 1,024 of them ~102 polls a second). Past this bound
# every engine is polled less often instead; what the router sent an engine since its latest
# Stats is counted router-side (the table's router_tokens), so a longer interval leaves the load
# it scores by current, only the engine's own view (queue, KV pages, cached blocks) older.
UPKEEP_POLLS_PER_S = 256.0
# The prefix index's bound, distinct blocks over every engine: 16M, about 0.5 GB of router memory
# when full (docs/benchmarks.md, "One router, N engines": ~30 bytes a block held by a few
# engines). --prefix-index-max-blocks changes it.
PREFIX_INDEX_MAX_BLOCKS = 16_777_216


def _check_address(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"engine address must be HOST:PORT, got {address!r}", param="address")


class EngineMembership:
    """The engines this router routes to — added, drained, removed, health-watched — with their
    Stats and KV events fed into router_core (whose EngineSet is something else: a bitmap of
    engine slots)."""

    def __init__(self, poll_s: float = 0.5, block_size: int = 16, seed: int = 0,
                 polls_per_s: float = UPKEEP_POLLS_PER_S,
                 liveness_s: float = UPKEEP_LIVENESS_S,
                 index_max_blocks: int = PREFIX_INDEX_MAX_BLOCKS) -> None:
        # Shared by every engine's upkeep; ValueError unless poll_s > 0, liveness_s > 0 and
        # polls_per_s >= 0 (0: no bound).
        self.pace = UpkeepPace(poll_s, polls_per_s, liveness_s)
        self.engines: dict[str, EngineHandle] = {}
        # Distinct blocks the prefix index holds at most (the router's memory bound for it).
        self.index_max_blocks = index_max_blocks
        self.core: RouterCore = RouterCore(block_size, seed, max_blocks=index_max_blocks)
        self._core_key: tuple[int, int] | None = None  # (block_size, seed) learned from engines
        # Told the new core when it is rebuilt (the peer exchange, pyrouter/replicas/peer_exchange.py).
        self.core_followers: list[Callable[[RouterCore], None]] = []
        self._next = 0
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._clients: dict[str, RustEngineClient] = {}
        self._upkeeps: dict[str, EngineUpkeep] = {}  # from the engine's ModelInfo on
        self.model_id = ""
        # An engine's served model from its ModelInfo's `served_model` (pyrouter/model_groups.py
        # engine_group); None: it serves none of this router's models.
        self.group_of: Callable[[str], str | None] = lambda _served: ""
        # Smallest context any member engine accepts (ModelInfo.max_context); 0 = unknown yet.
        self.max_context = 0
        self.front: RouterFront | None = None  # the HTTP front, once it serves

    def attach_front(self, front: RouterFront) -> None:
        """Every engine, present and future, is reached by `front`'s executor (over the client
        this membership dialled: one connection per engine)."""
        self.front = front
        front.set_core(self.core)
        for handle in self.engines.values():
            self._join_front(handle)

    def poll_interval_s(self) -> float:
        """Seconds between the polls of an engine that does not push its load: poll_s, or longer
        where the fleet is larger than the upkeep's rate allows."""
        return float(self.pace.interval_s)

    def upkeep_view(self, engine_id: str) -> dict[str, bool | int]:
        """How the engine's load reaches the table: pushed on its KV event stream (then polled
        only for liveness) or polled; the polls and the pushes so far."""
        upkeep = self._upkeeps.get(engine_id)
        if upkeep is None:  # not identified yet
            return {"pushing": False, "polls": 0, "pushes": 0}
        return {"pushing": upkeep.pushing, "polls": upkeep.polls, "pushes": upkeep.pushes}

    def active(self, handle: EngineHandle) -> int:
        """Requests with work on `handle` now (router_core's executor holds them)."""
        return self.front.engine_active(handle.num) if self.front is not None else 0

    def _join_front(self, handle: EngineHandle) -> None:
        if self.front is not None:
            self.front.set_engine(handle.num, self._clients[handle.id].rpc)
            self.front.set_engine_max_context(self.max_context)
            if handle.model is not None:
                self.front.set_engine_model(handle.num, handle.model)

    # ---- membership ----
    def add(self, address: str, role: str | None = None) -> EngineHandle:
        _check_address(address)
        if role is not None and role not in _VALID_ROLES:
            raise BadRequest(f"role must be one of {_VALID_ROLES}", param="role")
        if any(e.address == address for e in self.engines.values()):
            raise BadRequest(f"engine {address} is already a member", param="address")
        num = self._next
        self._next += 1
        # The verbs' deadline: a RemoteSend of a long prompt prefills for minutes on a CPU.
        client = dial(address, _VERB_TIMEOUT_S)
        handle = EngineHandle(engine_name(num), num, address, role or "any", client, self.core)
        self.engines[handle.id] = handle
        roster_changed()
        self._clients[handle.id] = client
        self.core.table.upsert(num, handle.role)
        self.core.table.set_health(num, False)
        self.core.index.add_engine(num)
        self._join_front(handle)
        self.pace.set_engines(len(self.engines))
        self._tasks[handle.id] = asyncio.create_task(self._keep(handle, client, role is None))
        return handle

    def get(self, engine_id: str) -> EngineHandle:
        try:
            return self.engines[engine_id]
        except KeyError:
            raise NotFound(f"no engine {engine_id!r}", param="id") from None

    async def drain_and_remove(self, engine_id: str, timeout_s: float = 600.0) -> None:
        """No new work for the engine; wait for its in-flight requests; then forget it."""
        handle = self.get(engine_id)
        handle.draining = True
        self.core.table.set_health(handle.num, False)
        if (upkeep := self._upkeeps.get(engine_id)) is not None:
            upkeep.set_draining(True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.active(handle) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if (task := self._tasks.pop(engine_id, None)) is not None:
            task.cancel()
        if (upkeep := self._upkeeps.pop(engine_id, None)) is not None:
            upkeep.stop()
        self.engines.pop(engine_id, None)
        roster_changed()
        self._clients.pop(engine_id, None)
        self.pace.set_engines(len(self.engines))
        self.core.table.remove(handle.num)
        self.core.index.remove_engine(handle.num)
        if self.front is not None:
            self.front.remove_engine(handle.num)
        await handle.client.close()

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for upkeep in self._upkeeps.values():
            upkeep.stop()
        for handle in self.engines.values():
            await handle.client.close()

    def mark_unhealthy(self, engine_id: str) -> None:
        """Out of rotation now; the health watcher brings it back once it answers again."""
        handle = self.engines.get(engine_id)
        if handle is not None and handle.healthy:
            handle.healthy = False
            self.core.table.set_health(handle.num, False)
            if (upkeep := self._upkeeps.get(engine_id)) is not None:
                upkeep.mark_unhealthy("a request failed on it")  # its load forgotten too
            log.warning("engine %s (%s) failed a request; out of rotation until healthy",
                        handle.id, handle.address)

    def healthy(self) -> list[EngineHandle]:
        return [e for e in self.engines.values() if e.healthy and not e.draining]

    async def wait_ready(self, n: int, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while len(self.healthy()) < n:
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def wait_ready_one(self, engine_id: str, timeout_s: float) -> bool:
        handle = self.get(engine_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not handle.healthy and loop.time() < deadline:
            await asyncio.sleep(0.05)
        return handle.healthy

    # ---- background upkeep ----
    def _adopt_layout(self, block_size: int, seed: int) -> None:
        """Engines decide the block size and hash seed; rebuild the core on the first answer."""
        key = (block_size, seed)
        if self._core_key == key:
            return
        if self._core_key is not None:
            log.warning("engine layout %s differs from %s; prefix matches may be off",
                        key, self._core_key)
            return
        self._core_key = key
        old, self.core = self.core, RouterCore(block_size, seed,
                                               max_blocks=self.index_max_blocks)
        if self.front is not None:
            self.front.set_core(self.core)
        for follow in self.core_followers:
            follow(self.core)
        for handle in self.engines.values():
            handle.core = self.core
            self.core.table.upsert(handle.num, handle.role)
            self.core.table.set_health(handle.num, handle.healthy and not handle.draining)
            self.core.index.add_engine(handle.num)
            # The new index is empty: the upkeep's event follower starts over with a snapshot.
            if (upkeep := self._upkeeps.get(handle.id)) is not None:
                upkeep.set_core(self.core)
        del old

    def _place(self, handle: EngineHandle, served_model: str) -> None:
        """Into the group of the model it serves (the front sends it that model's requests)."""
        handle.model = self.group_of(served_model)
        if handle.model is None:
            log.warning("engine %s (%s) serves model %r, which this router does not: it takes "
                        "no requests", handle.id, handle.address, served_model)
        if self.front is not None:
            self.front.set_engine_model(handle.num, handle.model)

    async def _keep(self, handle: EngineHandle, client: RustEngineClient,
                    learn_role: bool) -> None:
        """Learn what the engine serves, start its upkeep in router_core, then follow its health
        (the one thing of the upkeep Python hears)."""
        info = await self._identify(handle, client)
        self._learn(handle, info, learn_role)
        upkeep = EngineUpkeep(client.rpc, self.core, handle.num, self.pace)
        self._upkeeps[handle.id] = upkeep
        upkeep.set_draining(handle.draining)
        while True:
            serving, reason = await upkeep.next_change(handle.healthy)
            log.info("engine %s (%s) is now %s%s", handle.id, handle.address,
                     "healthy" if serving else "UNHEALTHY", "" if serving else f": {reason}")
            handle.healthy = serving

    async def _identify(self, handle: EngineHandle, client: RustEngineClient) -> ModelInfo:
        """Its ModelInfo, asked again every poll interval until it answers."""
        while True:
            try:
                return await client.model_info(timeout_s=5.0)
            except EngineCallError as exc:
                log.debug("engine %s (%s) unreachable: %s", handle.id, handle.address, exc.code)
            # Jittered, so that engines added together do not ask in step.
            await asyncio.sleep(self.poll_interval_s() * random.uniform(0.75, 1.25))

    def _learn(self, handle: EngineHandle, info: ModelInfo, learn_role: bool) -> None:
        """Its KV layout, model, context and (when it was added without one) role."""
        self._adopt_layout(info.page_size or 16, int(info.block_hash_seed))
        handle.model_id = info.model_id
        self._place(handle, info.served_model)
        if info.max_context > 0:
            self.max_context = (min(self.max_context, int(info.max_context))
                                if self.max_context else int(info.max_context))
            if self.front is not None:
                self.front.set_engine_max_context(self.max_context)
        self.model_id = self.model_id or info.model_id
        if learn_role and info.role in _VALID_ROLES:
            handle.role = info.role
            self.core.table.upsert(handle.num, handle.role)
