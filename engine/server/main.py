"""`switchyard engine`: one engine process serving the Engine gRPC service on uvloop.

Loads the model into an EngineCore, starts the step-loop thread and the KV transfer listener,
serves the verbs plus grpc.health.v1, and shuts down cleanly on SIGTERM/SIGINT (health goes
NOT_SERVING, in-flight RPCs get a short grace period, threads and links are closed).

Environment knobs (not flags, so `switchyard serve` and tests can set them per process):
SWITCHYARD_TRANSFER_PORT (default: any free port), SWITCHYARD_ADVERTISE_HOST (address peers use
for this engine's transfer listener when bound to 0.0.0.0), SWITCHYARD_KV_TRANSPORT (force
shm|tcp for this engine's sends), SWITCHYARD_LEASE_S, SWITCHYARD_TORCH_THREADS,
SWITCHYARD_LATENCY_PROFILE (off|auto|force when --latency-profile is not given),
SWITCHYARD_ENGINE_CPUS (engine/server/cpu_affinity.py: the cores this engine is pinned to),
SWITCHYARD_DRAIN_S (engine/server/drain.py: how long a SIGTERM waits for the work in flight),
SWITCHYARD_METRICS_PORT (Prometheus /metrics when --metrics-port is not given), tracing's
SWITCHYARD_TRACE_FILE / OTEL_* (switchyard_telemetry/provider.py),
and SWITCHYARD_ENGINE_TOKEN[_FILE] and SWITCHYARD_ENGINE_TLS_* (switchyard_engine_api/auth.py: who may call).

Before serving, the engine profiles its step time or loads a cached profile
(engine/core/latency_cache.py); a failed profile is logged and the engine serves without one.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import time
from typing import Any

from engine.server.cpu_affinity import pin_if_asked
from engine.server.drain import drain_seconds, wait_idle

log = logging.getLogger("switchyard.engine")
_GRACE_S = 5.0


def engine_mode(args: argparse.Namespace) -> str:
    """--mode, else fast on CPU unless an exact-mode --dtype was asked for (or this install
    lacks the fast mode's compiled kernels: then exact, with a warning)."""
    mode = getattr(args, "mode", None)
    if mode:
        return str(mode)
    if args.dtype or not args.device.startswith("cpu"):
        return "exact"
    from engine.kernels import LIBRARY, available

    if not available():
        log.warning("fast-mode kernels missing (%s; `make install` builds them): starting in "
                    "the exact mode", LIBRARY)
        return "exact"
    return "fast"


def engine_config_from_args(args: argparse.Namespace) -> Any:
    from engine.config import EngineConfig, EngineConfigError, parse_memory

    fields: dict[str, Any] = {
        "model_path": args.model,
        "device": args.device,
        "role": args.role,
        "page_size": args.page_size,
        "engine_id": args.engine_id or f"engine-{args.port}",
        "served_model": getattr(args, "served_model_name", None) or "",
    }
    fields["mode"] = engine_mode(args)
    if args.dtype:
        if fields["mode"] == "fast":
            raise EngineConfigError("--dtype sets the exact mode's precision; the fast mode has "
                                    "its own (drop --dtype or use --mode exact)")
        fields["dtype"] = args.dtype
    if getattr(args, "kv_memory", None):
        fields["kv_memory"] = parse_memory(args.kv_memory)
    if args.num_pages:
        fields["num_pages"] = args.num_pages
    if args.chunk_size:
        fields["chunk_size"] = args.chunk_size
    if os.environ.get("SWITCHYARD_LEASE_S"):
        fields["lease_s"] = float(os.environ["SWITCHYARD_LEASE_S"])
    fields["check_pages"] = os.environ.get("SWITCHYARD_CHECK_KV_PAGES", "") == "1"
    profile = getattr(args, "latency_profile", None) or os.environ.get("SWITCHYARD_LATENCY_PROFILE")
    if profile:
        fields["latency_profile"] = profile
    return EngineConfig(**fields)


def _prepare_latency_model(core: Any) -> None:
    from engine.core.latency_cache import prepare_latency_model

    started = time.perf_counter()
    try:
        source = prepare_latency_model(core, core.config.latency_profile)
    except Exception:  # noqa: BLE001 - a failed profile costs predictions, never the engine
        log.exception("latency profile failed; serving without one")
        return
    log.info("latency model: %s in %.1f s", source, time.perf_counter() - started)


def _advertised_host(bind_host: str) -> str:
    if os.environ.get("SWITCHYARD_ADVERTISE_HOST"):
        return os.environ["SWITCHYARD_ADVERTISE_HOST"]
    if bind_host in ("0.0.0.0", "::", ""):
        return socket.gethostbyname(socket.gethostname())
    return bind_host


async def serve_async(args: argparse.Namespace) -> None:
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from engine.core.engine_core import EngineCore
    from engine.kernels import isa_name
    from engine.server.errors import status_code_name
    from engine.server.model_info import kv_layout, model_info
    from engine.server.servicer import EngineServicer
    from engine.server.step_loop import StepLoop
    from engine.server.telemetry import EngineTelemetry
    from engine.transfer import TransferListener
    from engine.transfer.cuda_ipc import receiving_sink
    from switchyard_engine_api.auth import add_listening_port, engine_token, server_interceptors
    from switchyard_rpc import engine_pb2_grpc as pb_grpc

    config = engine_config_from_args(args)
    drain_s = drain_seconds()  # read now: a bad value fails at start, not at shutdown
    loop = asyncio.get_running_loop()
    # Loading the model takes seconds: keep the loop free while it happens.
    core = await asyncio.to_thread(EngineCore, config)
    await asyncio.to_thread(_prepare_latency_model, core)
    layout = kv_layout(core)
    listener = TransferListener(receiving_sink(core, core.kv.device), layout, host=args.host,
                                port=int(os.environ.get("SWITCHYARD_TRANSFER_PORT", "0")),
                                classify=status_code_name, token=engine_token())
    listener.host = _advertised_host(args.host)
    steps = StepLoop(core, loop)
    steps.start()
    info = model_info(core, config, f"{listener.host}:{listener.port}")
    telemetry = EngineTelemetry.for_core(core, getattr(args, "metrics_port", None), args.host)
    servicer = EngineServicer(steps, listener, layout, info, telemetry)

    # Clients ping every 20 s (switchyard_engine_api/client.py) to notice a dead engine; accept those
    # pings during long silent RPCs (a RemoteSend whose prefill takes minutes) instead of
    # answering GOAWAY "too_many_pings" after the third one, which killed such calls.
    server = grpc.aio.server(interceptors=server_interceptors(), options=[("grpc.max_receive_message_length", 64 << 20),
                                      ("grpc.max_send_message_length", 64 << 20),
                                      ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                                      ("grpc.http2.max_ping_strikes", 0),
                                      ("grpc.keepalive_permit_without_calls", 1)])
    pb_grpc.add_EngineServicer_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if add_listening_port(server, f"{args.host}:{args.port}") == 0:
        raise SystemExit(f"cannot bind gRPC port {args.host}:{args.port}")
    await server.start()
    for name in ("", "switchyard.v1.Engine"):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("engine %s serving on %s:%d (KV transfers on %s:%d)", config.engine_id, args.host,
             args.port, listener.host, listener.port)
    isa = isa_name() if core.config.mode == "fast" else None
    kernels = f", kernels {isa}" if isa else ""
    if isa == "portable":
        log.warning("this CPU has no AVX2 (with FMA and F16C): the fast mode runs its portable "
                    "loops, 10-35x slower than on an AVX2 or AVX-512 machine")
    print(f"switchyard engine {config.engine_id} ready on {args.host}:{args.port} (mode "
          f"{core.config.mode}{kernels}, KV {core.kv.dtype} x {core.pool.num_pages} pages = "
          f"{core.kv.bytes_per_page() * core.pool.num_pages / 2**20:.0f} MiB)", flush=True)

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("engine %s shutting down", config.engine_id)
    for name in ("", "switchyard.v1.Engine"):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    # Routers that follow its load on the KV event streams poll it only for liveness: ending the
    # streams brings their next health poll within --poll-s.
    servicer.event_streams_ended.set()
    if drain_s > 0 and not await wait_idle(core, drain_s):
        log.warning("engine %s: work still in flight after %.0f s of draining; stopping anyway",
                    config.engine_id, drain_s)
    await server.stop(_GRACE_S)
    listener.close()
    servicer.sender.close()
    steps.stop()


def run(args: argparse.Namespace) -> int:
    pin_if_asked()  # before torch and gRPC start their threads
    if getattr(args, "mock", False):
        from engine.mock import serve

        return serve(args)
    logging.basicConfig(level=os.environ.get("SWITCHYARD_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    threads = os.environ.get("SWITCHYARD_TORCH_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    import uvloop

    from engine.config import EngineConfigError

    try:
        engine_config_from_args(args)  # bad flags end here, with a message, before any load
    except EngineConfigError as err:
        print(f"switchyard engine: {err}", flush=True)
        return 2
    uvloop.install()
    asyncio.run(serve_async(args))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m engine.server.main ...`: the same flags as `switchyard engine`."""
    from engine.server.args import engine_parser

    return run(engine_parser().parse_args(argv))


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
