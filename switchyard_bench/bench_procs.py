"""Processes a benchmark starts, and always stops: the list they go in as they start (a context
manager stops them on every exit path), a spawn that keeps their chatter down, free ports, and N
`switchyard router` replicas over running engines, peered or not (`switchyard bench router
--replicas` and loadtest/experiments/router_herding.py start them alike)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import requests

from engine.server.launcher import free_port, port_bindable
from pyrouter.cli import DEFAULT_PEER_PORT_OFFSET

Procs = list[subprocess.Popen[bytes]]
SWITCHYARD = [sys.executable, "-m", "pyrouter.cli"]


@contextlib.contextmanager
def started_procs() -> Iterator[Procs]:
    """A list to append started processes to; all are stopped (SIGTERM, then SIGKILL after 10 s)
    when the block ends, however it ends."""
    started: Procs = []
    try:
        yield started
    finally:
        for p in started:
            p.terminate()
        for p in started:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def spawn(started: Procs, argv: list[str], env: dict[str, str] | None = None,
          log_path: Path | None = None) -> subprocess.Popen[bytes]:
    """`argv` started with warnings-only logging, its output in `log_path` (None: dropped), and
    appended to `started`."""
    with open(log_path or os.devnull, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "SWITCHYARD_LOG_LEVEL": "WARNING",
                                     **(env or {})})
    started.append(proc)
    return proc


def replica_ports(count: int) -> list[int]:
    """`count` free ports whose peer ports (each + the default --peer-port offset, which every
    replica assumes of its peers) are free too and clash with none of the others."""
    taken: set[int] = set()
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        peer = port + DEFAULT_PEER_PORT_OFFSET
        if {port, peer} & taken or not port_bindable("127.0.0.1", peer):
            continue
        taken |= {port, peer}
        ports.append(port)
    return ports


def start_router_replicas(started: Procs, count: int, engines: Sequence[str], peered: bool,
                          extra: Sequence[str] = (), log_dir: Path | None = None
                          ) -> tuple[list[int], Procs]:
    """`count` `switchyard router` processes over the engines at `engines` (HOST:PORT), each
    with `extra` flags and, when `peered`, every other one as --peer; appended to `started` as
    they start, and ready (every engine healthy) when this returns their ports and processes. A
    replica's log is `log_dir`/router-PORT.log (None: no log)."""
    ports = replica_ports(count)
    procs: Procs = []
    for port in ports:
        argv = [*SWITCHYARD, "router", "--port", str(port), *extra]
        for address in engines:
            argv += ["--engine", address]
        if peered:
            for other in ports:
                if other != port:
                    argv += ["--peer", f"127.0.0.1:{other}"]
        procs.append(spawn(started, argv, log_path=log_dir / f"router-{port}.log"
                           if log_dir else None))
    for port, proc in zip(ports, procs, strict=True):
        wait_router_ready(port, proc, len(engines))
    return ports, procs


def wait_router_ready(port: int, proc: subprocess.Popen[bytes], engines: int,
                      timeout_s: float = 120) -> None:
    """Until the router on `port` reports `engines` healthy engines on /ready."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"router on {port} exited with {proc.returncode}")
        with contextlib.suppress(requests.RequestException, KeyError, ValueError):
            r = requests.get(f"http://127.0.0.1:{port}/ready", timeout=1)
            if r.status_code == 200 and r.json()["healthy_engines"] >= engines:
                return
        time.sleep(0.2)
    raise TimeoutError(f"router on {port} not ready in {timeout_s:.0f} s")
