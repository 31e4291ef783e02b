"""`switchyard serve`: N engine processes plus the router, started, watched and stopped together.

Engine roles come from the policy (`pd` -> one prefill + one decode engine). Each engine is a
child process that dies with this one (PR_SET_PDEATHSIG), and Ctrl-C / SIGTERM stop the router
first, then every engine (SIGTERM, then SIGKILL after a grace period), so nothing is orphaned.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

from engine.server.launcher import EngineProcess, EngineSpec, launch, stop_engines, wait_healthy
from pyrouter.server import initial_policy, serve_router

_READY_TIMEOUT_S = float(os.environ.get("SWITCHYARD_ENGINE_READY_TIMEOUT_S", "900"))


def engine_specs(args: argparse.Namespace, roles: list[str]) -> list[EngineSpec]:
    """One spec per role; the runtime flags (model, dtype, pool, chunk) go to every engine."""
    threads = max(1, (os.cpu_count() or 1) // len(roles))
    if os.environ.get("SWITCHYARD_TORCH_THREADS"):
        threads = int(os.environ["SWITCHYARD_TORCH_THREADS"])
    return [EngineSpec(f"engine-{i}", role=role, mock=bool(getattr(args, "mock_engines", False)),
                       model=args.model, device=args.device, mode=args.mode, dtype=args.dtype,
                       kv_memory=args.kv_memory,
                       num_pages=args.num_pages, page_size=args.page_size,
                       chunk_size=args.chunk_size, latency_profile=args.latency_profile,
                       threads=threads, metrics_port=0)
            for i, role in enumerate(roles)]


async def _serve(args: argparse.Namespace, log_dir: Path) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    active = initial_policy(args.policy, args.policy_file)
    roles = active.spec.engine_roles(args.engines)
    print(f"starting {len(roles)} engine(s) {roles} for policy {active.name}; logs in {log_dir}",
          flush=True)
    engines: list[EngineProcess] = []
    try:
        for spec in engine_specs(args, roles):
            engines.append(launch(spec, log_dir, die_with_parent=True))

        def ready(e: EngineProcess) -> None:
            metrics = (f", metrics on http://127.0.0.1:{e.metrics_port}/metrics"
                       if e.metrics_port else "")
            print(f"engine {e.name} ({e.role}) ready on {e.address}{metrics}", flush=True)

        try:
            if not await wait_healthy(engines, _READY_TIMEOUT_S, stop, ready):
                return 0
        except RuntimeError as exc:
            print(exc, file=sys.stderr, flush=True)
            return 1
        router_args = argparse.Namespace(
            engine=[f"{e.address}@{e.role}" for e in engines], policy=active.name,
            policy_file=None, model=args.model, host=args.host, port=args.port,
            max_inflight=None, max_context=None, poll_s=None, default_temperature=None,
            default_top_p=None, front=args.front)
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
    log_dir = Path(tempfile.mkdtemp(prefix="switchyard-serve-"))
    return asyncio.run(_serve(args, log_dir))
