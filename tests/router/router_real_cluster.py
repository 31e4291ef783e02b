"""Real `switchyard engine` processes (real SmolLM2 model) behind routers, for identity tests."""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from router_procs import SWITCHYARD, Proc, free_port, start_router, wait_ready

# fp32 so different batch shapes cannot flip a greedy token; one torch thread per engine keeps
# several engines fair on a 2-core machine.
ENGINE_ENV = {"SWITCHYARD_TORCH_THREADS": "1"}


def start_engine(port: int, role: str = "any", mode: str = "exact") -> Proc:
    """mode "exact": float32 reference numerics; "fast": the default fast CPU mode."""
    numerics = ["--dtype", "float32"] if mode == "exact" else ["--mode", mode]
    return Proc([*SWITCHYARD, "engine", "--port", str(port), "--role", role, *numerics],
                env=ENGINE_ENV, log_name=f"engine{port}")


def wait_engine(port: int, proc: Proc, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"engine exited early:\n{proc.output()}")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"engine on {port} not ready:\n{proc.output()}")


@contextmanager
def real_engines(roles: Sequence[str], mode: str = "exact") -> Iterator[list[int]]:
    ports = [free_port() for _ in roles]
    procs = [start_engine(p, r, mode) for p, r in zip(ports, roles, strict=True)]
    try:
        for port, proc in zip(ports, procs, strict=True):
            wait_engine(port, proc)
        yield ports
    finally:
        for proc in procs:
            proc.stop()


@contextmanager
def router_over(ports: Sequence[int], *extra: str) -> Iterator[str]:
    port = free_port()
    proc = start_router(port, ports, *extra)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc, want_engines=len(ports))
        yield base
    finally:
        proc.stop()
