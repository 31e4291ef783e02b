"""Start real mock-engine / router processes for router tests, and always stop them."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWITCHYARD = [sys.executable, "-m", "pyrouter.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
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
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log.close()


def start_mock(port: int, *extra: str) -> Proc:
    return Proc([sys.executable, "-m", "engine.mock", "--port", str(port), *extra],
                log_name=f"mock{port}")


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
