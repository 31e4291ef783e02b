"""Which engines the router uses: add, health-check, poll Stats, follow KV events, drain, remove.

Each engine gets one background task that keeps its health, load and prefix view fresh; an
unhealthy engine is out of rotation (router_core scores only healthy engines) until it recovers.
Every call to an engine, these and the requests' verbs, goes through its one Rust client
(pyrouter/engines/rust_client.py), which the HTTP front streams from too.
"""
from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from pyrouter.engines.handle import EngineHandle
from pyrouter.engines.rust_client import RustEngineClient, dial
from pyrouter.errors import BadRequest, EngineCallError, NotFound
from router_core import RouterCore, RouterFront, engine_name
from switchyard_rpc import engine_pb2 as pb

log = logging.getLogger("switchyard.router")

_VALID_ROLES = ("any", "prefill", "decode")

_VERB_TIMEOUT_S = 600.0

# The upkeep's whole rate: every engine's health check and Stats poll, together, at most this many
# times a second. Each poll costs the router an RPC answer on a tokio thread and a task step on
# the asyncio loop; at --poll-s 0.5 a 1,024-engine fleet polled 2,048 times a second and kept
# 70% of a core busy with no request in flight (docs/benchmarks.md, "One router, N engines").
# Past poll_s x this many engines each engine is polled less often instead; what the router sent
# an engine since its latest Stats is counted router-side (the table's router_tokens), so a
# longer interval leaves the load it scores by current, only the engine's own view (queue, KV
# pages, cached blocks) older.
UPKEEP_POLLS_PER_S = 256.0


def apply_stats(core: RouterCore, handle: EngineHandle, s: pb.StatsResponse) -> None:
    """An engine's Stats answer into router_core's table (and the handle's cached blocks): the
    one mapping, for real engines' polls and the simulator's."""
    handle.cached_blocks = int(s.cached_blocks)
    core.table.update_stats(
        handle.num, int(s.queued_prefill_tokens), int(s.decode_requests),
        int(s.unfinished_tokens), int(s.kv_pages_used), int(s.kv_pages_total),
        float(s.decode_step_ms), latency_model=dict(s.latency_model.coeffs_ms),
        prefill_chunk_size=int(s.prefill_chunk_size),
        decode_context_tokens=int(s.decode_context_tokens),
        kv_pages_evictable=int(s.kv_pages_evictable), queued_requests=int(s.queued_requests),
        longest_queued_prefill_tokens=int(s.longest_queued_prefill_tokens))


def _check_address(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"engine address must be HOST:PORT, got {address!r}", param="address")


class EngineMembership:
    """The engines this router routes to — added, drained, removed, health-watched — with their
    Stats and KV events fed into router_core (whose EngineSet is something else: a bitmap of
    engine slots)."""

    def __init__(self, poll_s: float = 0.5, block_size: int = 16, seed: int = 0,
                 polls_per_s: float = UPKEEP_POLLS_PER_S) -> None:
        if poll_s <= 0 or polls_per_s < 0:
            raise ValueError("poll_s must be > 0 and polls_per_s >= 0")
        self.poll_s = poll_s
        self.polls_per_s = polls_per_s  # 0: no bound
        self.engines: dict[str, EngineHandle] = {}
        self.core: RouterCore = RouterCore(block_size, seed)
        self._core_key: tuple[int, int] | None = None  # (block_size, seed) learned from engines
        # Told the new core when it is rebuilt (the peer exchange, pyrouter/replicas/peer_exchange.py).
        self.core_followers: list[Callable[[RouterCore], None]] = []
        self._next = 0
        self._tasks: dict[str, list[asyncio.Task[None]]] = {}
        self._clients: dict[str, RustEngineClient] = {}
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
        """Seconds between one engine's polls: poll_s, or longer where the fleet is larger than
        the upkeep's rate allows at poll_s."""
        if self.polls_per_s <= 0:
            return self.poll_s
        return max(self.poll_s, len(self.engines) / self.polls_per_s)

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
        self._clients[handle.id] = client
        self.core.table.upsert(num, handle.role)
        self.core.table.set_health(num, False)
        self.core.index.add_engine(num)
        self._join_front(handle)
        self._tasks[handle.id] = [
            asyncio.create_task(self._watch(handle, client, role is None)),
            asyncio.create_task(self._follow_kv_events(handle, client))]
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.active(handle) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for task in self._tasks.pop(engine_id, []):
            task.cancel()
        self.engines.pop(engine_id, None)
        self._clients.pop(engine_id, None)
        self.core.table.remove(handle.num)
        self.core.index.remove_engine(handle.num)
        if self.front is not None:
            self.front.remove_engine(handle.num)
        await handle.client.close()

    async def close(self) -> None:
        for tasks in self._tasks.values():
            for task in tasks:
                task.cancel()
        for handle in self.engines.values():
            await handle.client.close()

    def mark_unhealthy(self, engine_id: str) -> None:
        """Out of rotation now; the health watcher brings it back once it answers again."""
        handle = self.engines.get(engine_id)
        if handle is not None and handle.healthy:
            handle.healthy = False
            self.core.table.set_health(handle.num, False)
            self._forget_load(handle)
            log.warning("engine %s (%s) failed a request; out of rotation until healthy",
                        handle.id, handle.address)

    def _forget_load(self, handle: EngineHandle) -> None:
        """An unreachable engine's last Stats say nothing about now (a restarted process starts
        empty): its load reads zero until it answers again."""
        load = self.core.table.get(handle.num)
        if load.unfinished_tokens or load.kv_pages_used or load.running_decodes \
                or load.queued_prefill_tokens:
            self.core.table.update_stats(handle.num, 0, 0, 0, 0, int(load.kv_pages_total), 0.0)
        handle.cached_blocks = 0

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
        old, self.core = self.core, RouterCore(block_size, seed)
        if self.front is not None:
            self.front.set_core(self.core)
        for follow in self.core_followers:
            follow(self.core)
        for handle in self.engines.values():
            handle.core = self.core
            self.core.table.upsert(handle.num, handle.role)
            self.core.table.set_health(handle.num, handle.healthy and not handle.draining)
            self.core.index.add_engine(handle.num)
            # The new index is empty: restart the event follower so it asks for a snapshot.
            tasks = self._tasks.get(handle.id)
            if tasks:
                tasks[1].cancel()
                tasks[1] = asyncio.create_task(
                    self._follow_kv_events(handle, self._clients[handle.id]))
        del old

    def _place(self, handle: EngineHandle, served_model: str) -> None:
        """Into the group of the model it serves (the front sends it that model's requests)."""
        handle.model = self.group_of(served_model)
        if handle.model is None:
            log.warning("engine %s (%s) serves model %r, which this router does not: it takes "
                        "no requests", handle.id, handle.address, served_model)
        if self.front is not None:
            self.front.set_engine_model(handle.num, handle.model)

    async def _watch(self, handle: EngineHandle, client: RustEngineClient,
                     learn_role: bool) -> None:
        info_known = False
        while True:
            try:
                if not info_known:
                    info = await client.model_info(timeout_s=5.0)
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
                    info_known = True
                serving = await client.healthy()
                if serving:
                    self.core.table.stats_requested(handle.num)
                    s = await client.stats(timeout_s=2.0)
                    apply_stats(self.core, handle, s)
            except EngineCallError as exc:
                serving = False
                log.debug("engine %s (%s) unreachable: %s", handle.id, handle.address,
                          exc.code)
            except Exception:  # never let one odd answer end this engine's upkeep
                serving = False
                log.exception("engine %s (%s): unexpected error while polling", handle.id,
                              handle.address)
            if serving != handle.healthy:
                log.info("engine %s (%s) is now %s", handle.id, handle.address,
                         "healthy" if serving else "UNHEALTHY")
                handle.healthy = serving
            if not serving:
                self._forget_load(handle)
            self.core.table.set_health(handle.num, serving and not handle.draining)
            # Jittered, so that engines added together do not poll in step.
            await asyncio.sleep(self.poll_interval_s() * random.uniform(0.75, 1.25))

    async def _follow_kv_events(self, handle: EngineHandle, client: RustEngineClient) -> None:
        """Apply KV event batches to the prefix index; on a sequence gap, ask for a snapshot."""
        snapshot = True
        while True:
            try:
                async for batch in client.kv_events(snapshot):
                    index = self.core.index
                    if batch.snapshot:
                        index.apply_snapshot(handle.num, batch.last_seq, list(batch.stored))
                        snapshot = False
                    elif not index.apply_events(handle.num, batch.first_seq, batch.last_seq,
                                                list(batch.stored), list(batch.evicted)):
                        snapshot = True
                        break  # reconnect asking for the full set
            except EngineCallError:
                snapshot = True
            except Exception:
                snapshot = True
                log.exception("engine %s: bad KV event batch; asking for a snapshot", handle.id)
            await asyncio.sleep(self.poll_s)
