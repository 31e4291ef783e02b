"""What a new supervisor does with the children an earlier serve left on its address (its state
file): it adopts them when it was started with the same arguments, and otherwise stops them —
routers first, then engines, as a SIGTERM to serve would — before it starts anything of its own.
Either way no two engines share a port and no two routers race for one.

Adopted children keep serving through the change of supervisor: nothing is restarted, no KV
cache is lost. A recorded child that has died meanwhile is started again on its recorded port
(the adopted routers' --engine flags name those ports)."""
from __future__ import annotations

from dataclasses import dataclass, field

from pyrouter.supervisor.process import Adopted
from pyrouter.supervisor.state import ROUTER, ChildRecord, ServeState
from pyrouter.supervisor.stopping import ENGINE_GRACE_S, ROUTER_GRACE_S, stop_processes


@dataclass
class Inherited:
    """What this supervisor takes from the earlier one, by child name."""

    records: dict[str, ChildRecord] = field(default_factory=dict)  # ports, restarts: kept
    running: dict[str, Adopted] = field(default_factory=dict)      # adopted, not started


def _running(state: ServeState) -> dict[str, Adopted]:
    found = {r.name: Adopted.find(r.pid, r.started_at) for r in state.children}
    return {name: process for name, process in found.items() if process is not None}


async def take_over(state: ServeState | None, fingerprint: str, can_adopt: bool,
                    drain_s: float) -> Inherited:
    """`can_adopt`: false when this serve could not talk to the earlier engines (their token is
    gone); they are then stopped like those of a serve with other arguments."""
    if state is None:
        return Inherited()
    running = _running(state)
    if state.fingerprint == fingerprint and can_adopt:
        return Inherited({r.name: r for r in state.children}, running)
    if running:
        print(f"stopping {len(running)} process(es) that an earlier serve (pid "
              f"{state.supervisor_pid}) started with other arguments ...", flush=True)
        kinds = {r.name: r.kind for r in state.children}
        routers = [p for name, p in running.items() if kinds[name] == ROUTER]
        engines = [p for name, p in running.items() if kinds[name] != ROUTER]
        await stop_processes(routers, drain_s + ROUTER_GRACE_S)
        await stop_processes(engines, ENGINE_GRACE_S)
    return Inherited()
