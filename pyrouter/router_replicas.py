"""`switchyard serve --routers N`: router replicas 1..N-1 as `switchyard router` processes.

Replica 0 is the router serve runs in-process, on --port; replica i listens on --port + i (and
--admin-port + i when the admin plane has a port of its own; /metrics is on each replica's own
port). Every replica gets the same engines and flags, and the others' addresses as --peer. Each
is a separate process so that one dying (even SIGKILLed) fails only its own streams: the others
share nothing with it but the engines. One that dies is started again on its port after a
backoff (1 s, doubling up to 30 s; at most serve's --max-restarts times in a row) and rejoins:
it reads the current policy and settings from a peer before it serves
(pyrouter/admin_propagation.py) and what the engines cache from their snapshots. A replica
dies with serve (PR_SET_PDEATHSIG, arranged by the router itself:
switchyard_proto/parent_death.py) and is stopped with SIGTERM, so it drains.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from engine.server.launcher import REPO
from pyrouter.router_command import DRAIN_ENV
from switchyard_proto.parent_death import PARENT_PID_ENV

_STOP_GRACE_S = 15.0  # beyond the drain, before SIGKILL
_WATCH_S = 0.5
_BACKOFF_START_S, _BACKOFF_MAX_S = 1.0, 30.0
_STABLE_S = 60.0  # a replica that ran this long starts its restart count afresh
_ANY_ADDRESS = ("0.0.0.0", "::", "")


def router_argv(args: argparse.Namespace) -> list[str]:
    """`switchyard router` flags that parse back to `args` (every attribute a router flag:
    lists repeat it, True is a bare switch, None and False leave it out)."""
    argv: list[str] = []
    for name, value in sorted(vars(args).items()):
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def replica_args(args: argparse.Namespace, index: int, count: int) -> argparse.Namespace:
    """Replica `index` of `count`: its own ports, and every other replica as a peer."""
    host = "127.0.0.1" if args.host in _ANY_ADDRESS else args.host
    mine = argparse.Namespace(**vars(args))
    mine.port = args.port + index
    if getattr(args, "admin_port", None) is not None:
        mine.admin_port = args.admin_port + index
    mine.peer = [*(getattr(args, "peer", None) or []),
                 *(f"{host}:{args.port + i}" for i in range(count) if i != index)]
    return mine


@dataclass
class RouterReplica:
    index: int
    port: int
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] = field(init=False)
    started: float = 0.0
    restarts: int = 0  # in a row (since it last ran for _STABLE_S)
    restarts_total: int = 0  # since serve started it
    restart_due: float | None = None  # when the backoff of a dead replica ends

    def __post_init__(self) -> None:
        self.launch()

    def launch(self) -> None:
        # Appended: a log that says why an earlier run died is kept.
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=log,
                                         stderr=subprocess.STDOUT,
                                         env={**os.environ, PARENT_PID_ENV: str(os.getpid())})
        self.started = time.monotonic()


class RouterReplicas(Collector):  # type: ignore[misc]
    """Replicas 1..count-1 of the router whose flags are `args` (replica 0 is the caller's);
    their restarts are a metric of replica 0's /metrics."""

    def __init__(self, args: argparse.Namespace, count: int, log_dir: Path,
                 policy_file: str | None = None, max_restarts: int = 5) -> None:
        """`policy_file`: the --policy-file that serve loaded itself (replica 0's `args` name
        only the policy it registered); each child loads it again."""
        self.count = count
        self.first = replica_args(args, 0, count)
        self.max_restarts = max_restarts
        self.restarts_total = 0  # every restart of every replica
        self.replicas: list[RouterReplica] = []
        self._given_up: set[int] = set()  # replicas past --max-restarts (told once)
        for index in range(1, count):
            mine = replica_args(args, index, count)
            mine.policy_file = policy_file
            argv = [sys.executable, "-m", "pyrouter.cli", "router", *router_argv(mine)]
            self.replicas.append(RouterReplica(index, mine.port, argv,
                                               log_dir / f"router-{index}.log"))

    async def stop_when(self, stop: asyncio.Event) -> None:
        """Once `stop` is set: SIGTERM every replica (each drains as replica 0 does), then
        SIGKILL those still running after the drain and a grace period."""
        while not stop.is_set():
            self._restart_exited()
            try:
                await asyncio.wait_for(stop.wait(), _WATCH_S)
            except TimeoutError:
                pass
        await asyncio.to_thread(self.stop)

    def _restart_exited(self) -> None:
        """A replica that exited before serve asked it to is started again once its backoff
        has passed (the others keep serving meanwhile; its log says why it died)."""
        now = time.monotonic()
        for replica in self.replicas:
            if replica.restart_due is not None:
                if now >= replica.restart_due:
                    replica.restart_due = None
                    replica.launch()
                    replica.restarts_total += 1
                    self.restarts_total += 1
                    print(f"router replica {replica.index} restarted on port {replica.port} "
                          f"(restart {self.restarts_total} of all replicas)", flush=True)
                continue
            code = replica.proc.poll()  # also reaps an exited child: no zombie
            if code is None or replica.index in self._given_up:
                continue
            if now - replica.started > _STABLE_S:
                replica.restarts = 0
            if replica.restarts >= self.max_restarts:
                self._given_up.add(replica.index)
                print(f"router replica {replica.index} on port {replica.port} exited with code "
                      f"{code} after {replica.restarts} restart(s) in a row; left down (see "
                      f"{replica.log_path})", flush=True)
                continue
            delay = min(_BACKOFF_MAX_S, _BACKOFF_START_S * 2 ** replica.restarts)
            replica.restarts += 1
            replica.restart_due = now + delay
            print(f"router replica {replica.index} on port {replica.port} exited with code "
                  f"{code}; restarting in {delay:.0f} s ({replica.restarts}/{self.max_restarts}; "
                  f"see {replica.log_path})", flush=True)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("switchyard:router_replica_restarts", "Times switchyard "
                                     "serve restarted a router replica that died",
                                     labels=["replica"])
        for replica in self.replicas:
            family.add_metric([str(replica.index)], replica.restarts_total)
        yield family

    def stop(self) -> None:
        drain_s = getattr(self.first, "drain_s", None) or float(
            os.environ.get(DRAIN_ENV, "") or 30.0)
        for replica in self.replicas:
            if replica.proc.poll() is None:
                replica.proc.terminate()
        for replica in self.replicas:
            try:
                replica.proc.wait(drain_s + _STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                replica.proc.kill()
                replica.proc.wait()

