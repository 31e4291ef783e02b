"""Finding 6 at the deployment level: `switchyard serve` reaps an engine that dies and starts it
again on its port, and the deployment's engines require the token serve generated for it."""
from __future__ import annotations

import asyncio
import signal
import time

import grpc
import psutil
import pytest
import requests
from router_procs import start_serve, wait_ready

from switchyard_engine_api.client import EngineClient

pytestmark = [pytest.mark.procs, pytest.mark.timeout(180)]


def _engine_procs(serve_pid: int) -> dict[int, psutil.Process]:
    """Engine processes of a serve, by their gRPC port."""
    out = {}
    for child in psutil.Process(serve_pid).children(recursive=True):
        try:
            argv = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if "engine.server.main" in argv:
            out[int(argv[argv.index("--port") + 1])] = child
    return out


async def _anonymous_refused(address: str) -> grpc.StatusCode:
    async with EngineClient(address, token="") as client:
        try:
            await client.stats()
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_dead_engine_is_reaped_and_restarted_under_a_deployment_token():
    proc, base = start_serve("--mock-engines", "--engines", "2", "--policy", "pd")
    try:
        wait_ready(base, proc, want_engines=2, timeout_s=60)
        engines = _engine_procs(proc.popen.pid)
        assert len(engines) == 2
        port, victim = max(engines.items())
        # The engines serve no one without the deployment's token.
        assert asyncio.run(_anonymous_refused(f"127.0.0.1:{port}")) == \
            grpc.StatusCode.UNAUTHENTICATED
        victim.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, proc.output()
            fresh = _engine_procs(proc.popen.pid).get(port)
            if fresh is not None and fresh.pid != victim.pid:
                break
            time.sleep(0.2)
        assert "restarting" in proc.output()
        assert not psutil.pid_exists(victim.pid) or victim.status() != psutil.STATUS_ZOMBIE
        wait_ready(base, proc, want_engines=2, timeout_s=60)
        deadline = time.monotonic() + 30
        while requests.get(f"{base}/ready").json()["missing_roles"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        r = requests.post(f"{base}/v1/completions", json={"prompt": "x " * 30, "max_tokens": 3})
        assert r.status_code == 200 and "degraded" not in r.headers["X-Switchyard-Route"]
    finally:
        proc.stop()
