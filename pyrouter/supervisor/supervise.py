"""`switchyard serve`'s supervisor from start to end: take over what an earlier serve left on this
address (adopt or stop: previous_run.py), start or adopt the engines and wait until they serve,
then the router replicas, keep every child running (keeper.py) until serve is told to stop, and
stop the routers (they drain) before the engines. The state file names every child from the
moment it is started until serve has stopped them all."""
from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.server.launcher import EngineSpec, wait_healthy
from pyrouter.replicas.command_lines import replica_command
from pyrouter.supervisor.child import Child
from pyrouter.supervisor.engine_child import EngineChild
from pyrouter.supervisor.engine_token import deployment_token, operator_token
from pyrouter.supervisor.keeper import Keeper, say
from pyrouter.supervisor.previous_run import Inherited, take_over
from pyrouter.supervisor.router_child import RouterChild, wait_listening
from pyrouter.supervisor.run_dir import RunDir
from pyrouter.supervisor.state import ServeState, read_state, remove_state, write_state
from pyrouter.supervisor.stopping import ENGINE_GRACE_S, ROUTER_GRACE_S, stop_processes


@dataclass(frozen=True, slots=True)
class ServePlan:
    engines: list[EngineSpec]
    # The `switchyard router` flags every replica shares, given the engines (their ports are
    # known once they run).
    router_args: Callable[[Sequence[EngineChild]], argparse.Namespace]
    routers: int
    host: str
    port: int
    max_restarts: int
    drain_s: float
    fingerprint: str       # state.args_fingerprint of serve's arguments
    ready_timeout_s: float  # for the engines to load, and then for the routers to answer


class Supervisor:
    def __init__(self, plan: ServePlan, run_dir: RunDir) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.engines = [EngineChild.of(spec, run_dir.path) for spec in plan.engines]
        self.routers: list[RouterChild] = []
        self.inherited = Inherited()

    @property
    def children(self) -> list[Child]:
        return [*self.engines, *self.routers]

    async def run(self, stop: asyncio.Event) -> int:
        """0 once stopped; 1 when an engine or a replica could not start (serve says why)."""
        state = read_state(self.run_dir.state_path)
        can_adopt = operator_token() or self.run_dir.token_path.exists()
        self.inherited = await take_over(state, self.plan.fingerprint, can_adopt,
                                         self.plan.drain_s)
        deployment_token(self.run_dir.token_path, keep=bool(self.inherited.running))
        try:
            if not await self._start_engines(stop) or not await self._start_routers(stop):
                return 0
            say(f"switchyard serving on http://{self.plan.host}:{self.plan.port}/v1 (Ctrl-C "
                f"stops everything; supervisor pid {os.getpid()})")
            await Keeper(self.children, self.plan.max_restarts, self._record).run(stop)
            return 0
        except (RuntimeError, OSError) as exc:  # a child that never came up, and why
            say(f"switchyard serve: {exc}")
            return 1
        finally:
            await self._stop_all()

    async def _start_engines(self, stop: asyncio.Event) -> bool:
        for engine in self.engines:
            self._bring_up(engine)

        def ready(e: EngineChild) -> None:
            metrics = (f", metrics on http://127.0.0.1:{e.metrics_port}/metrics"
                       if e.metrics_port else "")
            say(f"engine {e.name} ({e.role}) ready on {e.address}{metrics}")

        return await wait_healthy(self.engines, self.plan.ready_timeout_s, stop, ready)

    async def _start_routers(self, stop: asyncio.Event) -> bool:
        shared = self.plan.router_args(self.engines)
        for index in range(self.plan.routers):
            port = self.plan.port + index
            router = RouterChild(f"router-{index}", port, self.run_dir.path / f"router-{index}.log",
                                 index=index, argv=replica_command(shared, index, self.plan.routers))
            self.routers.append(router)
            if router.name not in self.inherited.running:
                say(f"router replica {index} starting on http://{self.plan.host}:{port}/v1 "
                    f"(log {router.log_path})")
            self._bring_up(router)
        return await wait_listening(self.routers, self.plan.host, stop, self.plan.ready_timeout_s)

    def _bring_up(self, child: Child) -> None:
        """Adopt the child an earlier serve left running, or start it (on the port recorded for
        it, if one was)."""
        record = self.inherited.records.get(child.name)
        if record is not None:
            child.port, child.restarts_total = record.port, record.restarts
            if isinstance(child, EngineChild):
                child.metrics_port = record.metrics_port
        process = self.inherited.running.get(child.name)
        if process is not None:
            child.adopt(process)
            say(f"{child.label} adopted: pid {process.pid} on {child.ports_text()}, left running "
                "by an earlier serve")
        else:
            if record is not None:  # it died while no serve watched it
                child.restarts_total += 1
                say(f"{child.label}, recorded by an earlier serve, is gone: starting it again on "
                    f"{child.ports_text()}")
            child.start()
        self._record()

    def _record(self) -> None:
        records = tuple(r for r in (c.record() for c in self.children) if r is not None)
        write_state(self.run_dir.state_path, ServeState(self.plan.fingerprint, os.getpid(),
                                                        records))

    async def _stop_all(self) -> None:
        """Routers first (each drains), then engines; then nothing is left to adopt."""
        routers = [r.process for r in self.routers if r.process is not None]
        engines = [e.process for e in self.engines if e.process is not None]
        left = []
        if routers:
            say("stopping router replicas ...")
            left += await stop_processes(routers, self.plan.drain_s + ROUTER_GRACE_S)
        say("stopping engines ...")
        left += await stop_processes(engines, ENGINE_GRACE_S)
        if left:  # the state file keeps naming them, for the next serve to deal with
            say(f"still running after SIGKILL: pids {sorted(p.pid for p in left)}")
            return
        remove_state(self.run_dir.state_path)
        say("all engines stopped")
