"""Engine child processes for tests and benchmarks: start on free ports, wait for health, reap.

Each engine is `python -m engine.server.main` (the same code path as `switchyard engine`), by
default with one torch thread and a small page pool so several fit on a small machine. Callers
must call `stop_engines` in a finally/teardown: no orphans.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from engine.server.client import EngineClient

REPO = Path(__file__).resolve().parents[2]  # run from the checkout the package lives in
START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EngineProcess:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> EngineClient:
        return EngineClient(self.address, timeout_s=120.0)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (graceful shutdown path), then SIGKILL if it lingers."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def start_engine(name: str, log_dir: Path, num_pages: int = 512, threads: int = 1,
                 env: dict[str, str] | None = None, mode: str = "exact") -> EngineProcess:
    """mode "exact" (float32, what the reference tests compare) or "fast"."""
    port = free_port()
    log_path = log_dir / f"{name}.log"
    numerics = ["--dtype", "float32"] if mode == "exact" else ["--mode", mode]
    cmd = [sys.executable, "-m", "engine.server.main", "--port", str(port), "--engine-id", name,
           "--num-pages", str(num_pages), *numerics]
    full_env = {**os.environ, "SWITCHYARD_TORCH_THREADS": str(threads), "SWITCHYARD_LOG_LEVEL": "WARNING",
                **(env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    return EngineProcess(name, port, proc, log_path)


async def _wait_healthy(engine: EngineProcess, deadline: float) -> None:
    async with engine.client() as client:
        while time.monotonic() < deadline:
            if not engine.alive():
                raise RuntimeError(f"engine {engine.name} exited:\n{engine.log_tail()}")
            if await client.healthy(timeout_s=1.0):
                return
            await asyncio.sleep(0.3)
    raise RuntimeError(f"engine {engine.name} not healthy in time:\n{engine.log_tail()}")


def start_engines(names: list[str], log_dir: Path, num_pages: int = 512,
                  threads: int = 1, mode: str = "exact") -> list[EngineProcess]:
    """Start all at once (their model loads overlap), wait until every one serves."""
    engines: list[EngineProcess] = []
    try:
        for name in names:
            engines.append(start_engine(name, log_dir, num_pages, threads, mode=mode))
        deadline = time.monotonic() + START_TIMEOUT_S

        async def wait_all() -> None:
            await asyncio.gather(*(_wait_healthy(e, deadline) for e in engines))

        asyncio.run(wait_all())
    except BaseException:
        stop_engines(engines)
        raise
    return engines


def stop_engines(engines: list[EngineProcess]) -> None:
    for engine in engines:
        try:
            engine.stop()
        finally:
            engine.kill9()
