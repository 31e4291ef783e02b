"""Start real mock-engine / router processes for router tests, and always stop them.

Engines start through engine/server/launcher.py (the one launcher); routers through Proc;
`switchyard serve` through ServeProc, whose stop() also ends the children a serve left running
(its supervisor may have been SIGKILLed on purpose: they outlive it).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil
import requests

from engine.server.launcher import EngineProcess, EngineSpec, free_port, launch
from pyrouter.supervisor.process import Adopted
from pyrouter.supervisor.run_dir import RUN_DIR_ENV, RunDir
from pyrouter.supervisor.state import ServeState, read_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The router samples one request in ten by default (router_core's default_sampler); tests that
# read every request's spans ask for all of them.
EVERY_REQUEST = {"OTEL_TRACES_SAMPLER": "parentbased_always_on"}
SWITCHYARD = [sys.executable, "-m", "pyrouter.cli"]


LOG_DIR = Path(tempfile.mkdtemp(prefix="switchyard-test-engines-"))
# serve's run directories (state file, token, logs) for this test session: none outside it.
RUNS_ROOT = Path(tempfile.mkdtemp(prefix="switchyard-test-runs-"))


class Proc:
    stop_timeout_s = 15.0  # after SIGTERM, before SIGKILL

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None,
                 log_name: str = "proc") -> None:
        self.log_path = f"/tmp/switchyard-test-{log_name}-{os.getpid()}-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(list(argv), cwd=ROOT, stdout=self.log,
                                      stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                      start_new_session=True)

    def output(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log.close()


def start_mock(port: int, *extra: str, env: dict[str, str] | None = None) -> EngineProcess:
    """A mock engine (synthetic tokens; router logic and fault tests only) on `port`."""
    role = extra[extra.index("--role") + 1] if "--role" in extra else "any"
    rest = [a for i, a in enumerate(extra)
            if a != "--role" and (i == 0 or extra[i - 1] != "--role")]
    return launch(EngineSpec(f"mock{port}", role=role, mock=True, port=port, extra_args=rest,
                             env=dict(env or {})), LOG_DIR)


def start_router(port: int, engines: Sequence[int], *extra: str,
                 env: dict[str, str] | None = None) -> Proc:
    argv = [*SWITCHYARD, "router", "--port", str(port), "--poll-s", "0.1"]
    for p in engines:
        argv += ["--engine", f"127.0.0.1:{p}"]
    return Proc(argv + list(extra), env=env, log_name=f"router{port}")


def wait_ready(base: str, proc: Proc, want_engines: int = 1, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"router exited early:\n{proc.output()}")
        try:
            r = requests.get(f"{base}/ready", timeout=1)
            if r.status_code == 200 and r.json()["healthy_engines"] >= want_engines:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"router not ready in {timeout_s}s:\n{proc.output()}")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class ServeProc(Proc):
    """A `switchyard serve` on 127.0.0.1:`port` with its run directory under RUNS_ROOT."""

    stop_timeout_s = 90.0  # its routers drain, then its engines stop

    def __init__(self, port: int, args: Sequence[str], env: dict[str, str]) -> None:
        self.run_dir = RunDir.for_address("127.0.0.1", port, RUNS_ROOT)
        super().__init__([*SWITCHYARD, "serve", "--port", str(port), *args],
                         env={RUN_DIR_ENV: str(RUNS_ROOT), **env}, log_name=f"serve{port}")

    def state(self) -> ServeState | None:
        return read_state(self.run_dir.state_path)

    def wait_serving(self, timeout_s: float = 120) -> None:
        """Until serve says it serves (every replica answered its supervisor): from then on a
        child that dies is the keeper's to restart."""
        deadline = time.monotonic() + timeout_s
        while "switchyard serving on" not in self.output():
            assert self.popen.poll() is None, f"serve exited:\n{self.output()}"
            assert time.monotonic() < deadline, f"serve not serving:\n{self.output()}"
            time.sleep(0.05)

    def pids(self) -> dict[str, int]:
        """Every child's pid by name (engine-0, router-1, ...), as serve recorded them."""
        state = self.state()
        return {child.name: child.pid for child in state.children} if state else {}

    def stop(self) -> None:
        super().stop()
        state = self.state()
        if state is None or _running(state.supervisor_pid):
            return  # stopped cleanly, or a live serve holds the address: its children are its own
        for child in state.children:
            process = Adopted.find(child.pid, child.started_at)
            if process is not None:
                process.send(signal.SIGKILL)


def start_serve(*args: str, env: dict[str, str] | None = None,
                port: int | None = None) -> tuple[ServeProc, str]:
    """`switchyard serve` as a user runs it (one torch thread per engine on this small box), on
    `port` (default: a free one)."""
    routers = int(args[args.index("--routers") + 1]) if "--routers" in args else 1
    port = port or free_port(count=routers)  # replica k listens on --port + k
    proc = ServeProc(port, args, {"SWITCHYARD_TORCH_THREADS": "1", **(env or {})})
    return proc, f"http://127.0.0.1:{port}"


def wait_until(cond: Callable[[], object], timeout_s: float, what: str = "") -> None:
    """Poll `cond` until it is true; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what or 'the condition'}"
        time.sleep(0.05)


@contextmanager
def mock_engines(count: int, *engine_args: str,
                 env: dict[str, str] | None = None) -> Iterator[list[EngineProcess]]:
    """`count` mock engines, each started with `engine_args` (and `env`); stopped on exit."""
    procs = [start_mock(free_port(), *engine_args, env=env) for _ in range(count)]
    try:
        yield procs
    finally:
        for e in procs:
            e.stop()


@contextmanager
def mock_router(*engine_args: str, engines: int = 2) -> Iterator[str]:
    """`engines` mock engines (each started with `engine_args`) behind one router; yields the
    router's base URL once every engine is ready, and stops them all."""
    with mock_engines(engines, *engine_args) as procs:
        port = free_port()
        router = start_router(port, [e.port for e in procs])
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base, router, want_engines=engines)
            yield base
        finally:
            router.stop()
