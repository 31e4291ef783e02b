"""`switchyard serve`: N engine processes plus the router, started, watched and stopped together.

Engine roles come from the policy (`pd` -> one prefill + one decode engine). Each engine is a
child process that dies with this one (PR_SET_PDEATHSIG), and Ctrl-C / SIGTERM stop the router
first, then every engine (SIGTERM, then SIGKILL after a grace period), so nothing is orphaned.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from engine.server.client import EngineClient
from pyrouter.server import initial_policy, serve_router

_STOP_GRACE_S = 10.0
_READY_TIMEOUT_S = float(os.environ.get("SWITCHYARD_ENGINE_READY_TIMEOUT_S", "900"))


def _die_with_parent() -> None:
    """In the child: get SIGTERM if `switchyard serve` itself dies (even by SIGKILL)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class EngineProcess:
    role: str
    port: int
    popen: subprocess.Popen[bytes]
    log_path: str

    def tail(self, n: int = 30) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])


def start_engines(args: argparse.Namespace, roles: list[str], log_dir: str) -> list[EngineProcess]:
    threads = max(1, (os.cpu_count() or 1) // len(roles))
    env = {**os.environ}
    env.setdefault("SWITCHYARD_TORCH_THREADS", str(threads))
    out = []
    for i, role in enumerate(roles):
        port = _free_port("127.0.0.1")
        argv = [sys.executable, "-m", "pyrouter.cli", "engine", "--port", str(port),
                "--role", role, "--device", args.device, "--engine-id", f"engine-{i}"]
        if args.model:
            argv += ["--model", args.model]
        for flag in ("mode", "dtype", "kv_memory"):
            if getattr(args, flag, None):
                argv += ["--" + flag.replace("_", "-"), getattr(args, flag)]
        if getattr(args, "mock_engines", False):
            argv.append("--mock")
        log_path = os.path.join(log_dir, f"engine-{i}.log")
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=_die_with_parent)  # noqa: PLW1509
        out.append(EngineProcess(role, port, popen, log_path))
    return out


async def wait_engines(engines: list[EngineProcess], stop: asyncio.Event) -> bool:
    clients = [EngineClient(f"127.0.0.1:{e.port}") for e in engines]
    deadline = time.monotonic() + _READY_TIMEOUT_S
    try:
        pending = set(range(len(engines)))
        while pending and not stop.is_set():
            for i in list(pending):
                if engines[i].popen.poll() is not None:
                    print(f"engine {i} exited with code {engines[i].popen.returncode}:\n"
                          f"{engines[i].tail()}", file=sys.stderr, flush=True)
                    return False
                if await clients[i].healthy(timeout_s=0.5):
                    print(f"engine {i} ({engines[i].role}) ready on 127.0.0.1:{engines[i].port}",
                          flush=True)
                    pending.discard(i)
            if time.monotonic() > deadline:
                print(f"engines not ready after {_READY_TIMEOUT_S:.0f}s", file=sys.stderr)
                return False
            await asyncio.sleep(0.2)
        return not pending
    finally:
        for c in clients:
            await c.close()


def stop_engines(engines: list[EngineProcess]) -> None:
    for e in engines:
        if e.popen.poll() is None:
            e.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    for e in engines:
        try:
            e.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            e.popen.kill()
            e.popen.wait()


async def _serve(args: argparse.Namespace, log_dir: str) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    active = initial_policy(args.policy, args.policy_file)
    roles = active.spec.engine_roles(args.engines)
    print(f"starting {len(roles)} engine(s) {roles} for policy {active.name}; logs in {log_dir}",
          flush=True)
    engines = start_engines(args, roles, log_dir)
    try:
        if not await wait_engines(engines, stop):
            return 0 if stop.is_set() else 1
        router_args = argparse.Namespace(
            engine=[f"127.0.0.1:{e.port}@{e.role}" for e in engines], policy=active.name,
            policy_file=None, model=args.model, host=args.host, port=args.port,
            max_inflight=None, max_context=None, poll_s=None, default_temperature=None,
            default_top_p=None)
        await serve_router(router_args, stop, banner=f"switchyard serving on "
                           f"http://{args.host}:{args.port}/v1 (Ctrl-C stops everything)")
        return 0
    finally:
        print("stopping engines ...", flush=True)
        stop_engines(engines)
        print("all engines stopped", flush=True)


def run(args: argparse.Namespace) -> int:
    if args.engines < 1:
        print("--engines must be >= 1", file=sys.stderr)
        return 2
    from pyrouter.server import setup_logging_and_loop

    setup_logging_and_loop()
    log_dir = tempfile.mkdtemp(prefix="switchyard-serve-")
    return asyncio.run(_serve(args, log_dir))
