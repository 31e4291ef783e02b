"""grpc.aio server hosting the mock Engine service plus grpc.health.v1, with clean shutdown."""
from __future__ import annotations

import asyncio
import logging
import os
import signal

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from engine.mock.config import MockConfig
from engine.mock.servicer import MockEngineServicer
from engine.server.auth import add_listening_port, server_interceptors
from switchyard_rpc import engine_pb2_grpc as pb_grpc

log = logging.getLogger("switchyard.mock")


async def _watch_health(config: MockConfig, health_servicer: health.aio.HealthServicer) -> None:
    """Reflect `unhealthy_file` into the health status (fault injection for router tests)."""
    last: bool | None = None
    while True:
        serving = not (config.unhealthy_file and os.path.exists(config.unhealthy_file))
        if serving != last:
            status = (health_pb2.HealthCheckResponse.SERVING if serving
                      else health_pb2.HealthCheckResponse.NOT_SERVING)
            await health_servicer.set("", status)
            await health_servicer.set("switchyard.v1.Engine", status)
            last = serving
        await asyncio.sleep(0.1)


async def serve_async(config: MockConfig, ready: asyncio.Event | None = None) -> None:
    server = grpc.aio.server(interceptors=server_interceptors())
    pb_grpc.add_EngineServicer_to_server(MockEngineServicer(config), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = add_listening_port(server, f"{config.host}:{config.port}")
    if bound == 0:
        raise OSError(f"mock engine: cannot bind {config.host}:{config.port}")
    await server.start()
    watcher = asyncio.create_task(_watch_health(config, health_servicer))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass
    print(f"mock engine (synthetic tokens, no model) listening on {config.host}:{config.port}",
          flush=True)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        watcher.cancel()
        await server.stop(grace=1.0)
