"""`switchyard serve --routers N`: router replicas 1..N-1 as `switchyard router` processes.

Replica 0 is the router serve runs in-process, on --port; replica i listens on --port + i (and
--admin-port + i when the admin plane has a port of its own; /metrics is on each replica's own
port). Every replica gets the same engines and flags, and the others' addresses as --peer. Each
is a separate process so that one dying (even SIGKILLed) fails only its own streams: the others
share nothing with it but the engines. A replica dies with serve (PR_SET_PDEATHSIG, arranged by
the router itself: switchyard_proto/parent_death.py) and is stopped with SIGTERM, so it drains.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from engine.server.launcher import REPO
from pyrouter.router_command import DRAIN_ENV
from switchyard_proto.parent_death import PARENT_PID_ENV

_STOP_GRACE_S = 15.0  # beyond the drain, before SIGKILL
_WATCH_S = 0.5
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
    proc: subprocess.Popen[bytes]
    log_path: Path


class RouterReplicas:
    """Replicas 1..count-1 of the router whose flags are `args` (replica 0 is the caller's)."""

    def __init__(self, args: argparse.Namespace, count: int, log_dir: Path,
                 policy_file: str | None = None) -> None:
        """`policy_file`: the --policy-file that serve loaded itself (replica 0's `args` name
        only the policy it registered); each child loads it again."""
        self.count = count
        self.first = replica_args(args, 0, count)
        self.replicas: list[RouterReplica] = []
        self._reported: set[int] = set()  # replicas whose exit has been told
        for index in range(1, count):
            mine = replica_args(args, index, count)
            mine.policy_file = policy_file
            log_path = log_dir / f"router-{index}.log"
            argv = [sys.executable, "-m", "pyrouter.cli", "router", *router_argv(mine)]
            # Appended: a log that says why an earlier run died is kept.
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, PARENT_PID_ENV: str(os.getpid())})
            self.replicas.append(RouterReplica(index, mine.port, proc, log_path))

    async def stop_when(self, stop: asyncio.Event) -> None:
        """Once `stop` is set: SIGTERM every replica (each drains as replica 0 does), then
        SIGKILL those still running after the drain and a grace period."""
        while not stop.is_set():
            self._report_exits()
            try:
                await asyncio.wait_for(stop.wait(), _WATCH_S)
            except TimeoutError:
                pass
        await asyncio.to_thread(self.stop)

    def _report_exits(self) -> None:
        """Say once that a replica exited before serve asked it to (it is not restarted: the
        others keep serving; its log says why)."""
        for replica in self.replicas:
            code = replica.proc.poll()
            if code is not None and replica.index not in self._reported:
                self._reported.add(replica.index)
                print(f"router replica {replica.index} on port {replica.port} exited with code "
                      f"{code}; see {replica.log_path}", flush=True)

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

