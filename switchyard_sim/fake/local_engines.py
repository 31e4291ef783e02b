"""LocalEngines: the engine directory a ClusterView and the Dispatcher read
(pyrouter/cluster.py's EngineDirectory) over engine handles that live in this process — the
half SimCluster and FakeCluster share, as the real EngineMembership (pyrouter/engines/
membership.py) provides it, without its health watcher or polls."""
from __future__ import annotations

from pyrouter.engines.handle import EngineHandle
from pyrouter.engines.roster import roster_changed
from router_core import RouterCore


class LocalEngines:
    def __init__(self, core: RouterCore) -> None:
        self.core = core
        self.engines: dict[str, EngineHandle] = {}

    def add(self, handle: EngineHandle) -> None:
        """`handle` in the directory, router_core's engine table and its prefix index."""
        self.engines[handle.id] = handle
        roster_changed()
        self.core.table.upsert(handle.num, handle.role)
        self.core.index.add_engine(handle.num)

    def healthy(self) -> list[EngineHandle]:
        return [e for e in self.engines.values() if e.healthy and not e.draining]

    def mark_unhealthy(self, engine_id: str) -> None:
        handle = self.engines[engine_id]
        handle.healthy = False
        self.core.table.set_health(handle.num, False)
