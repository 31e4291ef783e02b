"""The one way engine processes are started: `switchyard serve`, tests and benchmarks.

An EngineSpec says what to run (real or mock, role, model, numerics, pool, threads); `launch`
starts `python -m engine.server.main` with exactly the flags of engine/server/args.py on a free
port, logging to a file; `wait_healthy` waits for the gRPC health service; `stop_engines` ends
them (SIGTERM, then SIGKILL). Callers must stop what they start (finally/teardown): no orphans.
`switchyard serve` is the one caller whose engines outlive it on purpose (`new_session`:
pyrouter/supervisor/).
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from engine.server.cpu_affinity import CPUS_ENV, format_cpus
from switchyard_engine_api.client import EngineClient

REPO = Path(__file__).resolve().parents[2]  # run from the checkout the package lives in
START_TIMEOUT_S = 300.0
_STOP_GRACE_S = 15.0


_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000
# Kept clear below the ephemeral range: a router replica also listens on --port + 1000 for its
# peers (pyrouter/cli.py DEFAULT_PEER_PORT_OFFSET).
_HEADROOM = 1100


def _ephemeral_low() -> int:
    """The lowest port the kernel hands to sockets bound to port 0 and to outgoing connections."""
    try:
        return int(_PORT_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def port_bindable(host: str, port: int) -> bool:
    """Whether a socket could bind `port` on `host` now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", count: int = 1) -> int:
    """A port nobody listens on now, and the `count - 1` after it (`serve --routers N` takes
    --port and the N-1 after it). Chosen below the kernel's ephemeral range: a port in that range
    can go to any socket bound to port 0 or any outgoing connection between this call and the
    bind that wants it (a test's router once lost its port that way to a neighbour)."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    if low - count - _HEADROOM > _LOWEST_PORT:
        for _ in range(200):
            base = rng.randrange(_LOWEST_PORT, low - count - _HEADROOM)
            if all(port_bindable(host, base + i) for i in range(count)):
                return base
    for _ in range(200):  # no room below the range: what the kernel picks, checked
        with socket.socket() as s:
            s.bind((host, 0))
            base = int(s.getsockname()[1])
        if all(port_bindable(host, base + i) for i in range(1, count)):
            return base
    raise OSError(f"no {count} consecutive free ports on {host}")


@dataclass(slots=True)
class EngineSpec:
    name: str                       # engine id, and the log file's name
    role: str = "any"
    mock: bool = False              # synthetic tokens, no model: benchmarks and fault tests only
    mode: str | None = None         # exact | fast (None: the engine's default)
    model: str | None = None
    served_model: str | None = None  # --served-model-name (None: the engine names none)
    device: str = "cpu"
    dtype: str | None = None        # None: the engine's default
    num_pages: int | None = None
    kv_memory: str | None = None    # e.g. "512MiB" (None: the engine's default)
    page_size: int = 16
    chunk_size: int | None = None
    latency_profile: str | None = None  # off | auto | force (None: the engine's default)
    threads: int | None = None      # torch threads (SWITCHYARD_TORCH_THREADS); None: inherit
    cpus: list[int] | None = None   # cores the engine pins itself to (cpu_affinity.py); None: any
    port: int = 0                   # 0: a free port
    metrics_port: int | None = None  # Prometheus /metrics (None: none; 0: a free port)
    host: str = "127.0.0.1"
    extra_args: Sequence[str] = ()  # more engine flags (e.g. the mock's fault knobs)
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, port: int) -> list[str]:
        argv = [sys.executable, "-m", "engine.server.main", "--port", str(port),
                "--host", self.host, "--role", self.role, "--engine-id", self.name,
                "--device", self.device, "--page-size", str(self.page_size)]
        for flag, value in (("--model", self.model), ("--mode", self.mode), ("--dtype", self.dtype),
                            ("--num-pages", self.num_pages), ("--kv-memory", self.kv_memory),
                            ("--chunk-size", self.chunk_size),
                            ("--latency-profile", self.latency_profile),
                            ("--served-model-name", self.served_model)):
            if value is not None:
                argv += [flag, str(value)]
        if self.mock:
            argv.append("--mock")
        elif self.metrics_port is not None:
            argv += ["--metrics-port", str(self.metrics_port)]
        return argv + list(self.extra_args)


@dataclass
class EngineProcess:
    name: str
    role: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> EngineClient:
        return EngineClient(self.address, timeout_s=120.0)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_text(self) -> str:
        return f"exited with code {self.proc.returncode}"

    def kill9(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (graceful shutdown path), then SIGKILL if it lingers."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.kill9()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class WatchedEngine(Protocol):
    """What `wait_healthy` needs of an engine: EngineProcess, or a supervisor's own record of one
    (pyrouter/supervisor/engine_child.py)."""

    @property
    def name(self) -> str: ...

    def alive(self) -> bool: ...

    def exit_text(self) -> str: ...

    def client(self) -> EngineClient: ...

    def log_tail(self, n: int = 40) -> str: ...


Watched = TypeVar("Watched", bound=WatchedEngine)


def launch(spec: EngineSpec, log_dir: Path, new_session: bool = False) -> EngineProcess:
    """Start one engine process (does not wait for it to serve). `new_session`: the engine runs
    in a session of its own, so a terminal's Ctrl-C (SIGINT to the foreground process group)
    reaches only its supervisor, which stops it in turn (pyrouter/supervisor/)."""
    port = spec.port or free_port()
    if spec.metrics_port == 0 and not spec.mock:
        spec = dataclasses.replace(spec, metrics_port=free_port())
    log_path = Path(log_dir) / f"{spec.name}.log"
    env = {**os.environ, **spec.env}
    if spec.threads is not None:
        env["SWITCHYARD_TORCH_THREADS"] = str(spec.threads)
    if spec.cpus is not None:
        env[CPUS_ENV] = format_cpus(spec.cpus)
    # Appended, not truncated: an engine restarted on the same name (switchyard serve) keeps
    # the log of the run that died, which says why.
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(spec.argv(port), cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=new_session)
    return EngineProcess(spec.name, spec.role, port, proc, log_path, spec.metrics_port)


async def wait_healthy(engines: Sequence[Watched], timeout_s: float = START_TIMEOUT_S,
                       stop: asyncio.Event | None = None,
                       on_ready: Callable[[Watched], None] | None = None) -> bool:
    """True once every engine serves; False if `stop` is set first. RuntimeError (with the
    log's tail) when one exits or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    clients = {e.name: e.client() for e in engines}
    pending = list(engines)
    try:
        while pending:
            if stop is not None and stop.is_set():
                return False
            for engine in list(pending):
                if not engine.alive():
                    raise RuntimeError(f"engine {engine.name} {engine.exit_text()}:\n"
                                       f"{engine.log_tail()}")
                if await clients[engine.name].healthy(timeout_s=1.0):
                    pending.remove(engine)
                    if on_ready is not None:
                        on_ready(engine)
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"engine {pending[0].name} not healthy after {timeout_s:.0f} s:"
                                   f"\n{pending[0].log_tail()}")
            if pending:
                await asyncio.sleep(0.2)
        return True
    finally:
        for client in clients.values():
            await client.close()


def start_engines(names: Sequence[str | EngineSpec], log_dir: Path, num_pages: int = 512,
                  threads: int = 1, mode: str = "exact") -> list[EngineProcess]:
    """Tests and benches: start all at once (their model loads overlap), wait until every one
    serves. Plain names get real engines with a small pool and one torch thread each, in
    `mode` ("exact": float32, what the reference tests compare; or "fast")."""
    exact = mode == "exact"
    specs = [n if isinstance(n, EngineSpec) else EngineSpec(
        n, num_pages=num_pages, threads=threads, env={"SWITCHYARD_LOG_LEVEL": "WARNING"},
        dtype="float32" if exact else None, mode=None if exact else mode) for n in names]
    engines: list[EngineProcess] = []
    try:
        for spec in specs:
            engines.append(launch(spec, log_dir))
        asyncio.run(wait_healthy(engines))
    except BaseException:
        stop_engines(engines)
        raise
    return engines


def stop_engines(engines: Sequence[EngineProcess]) -> None:
    for engine in engines:
        if engine.alive():
            engine.proc.send_signal(signal.SIGTERM)
    for engine in engines:
        try:
            engine.stop()
        finally:
            engine.kill9()
