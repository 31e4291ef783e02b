"""`switchyard serve`: N engine processes plus the router, started, watched and stopped together.

Engine roles come from the policy (`pd` -> one prefill + one decode engine). Each engine is a
child process that dies with this one (PR_SET_PDEATHSIG), and Ctrl-C / SIGTERM stop the router
first (it drains: pyrouter/http/drain.py), then every engine (SIGTERM, then SIGKILL after a grace
period), so nothing is orphaned.

The deployment gets a fresh engine token (switchyard_proto/auth.py) in a 0600 file that the engines
and the router read, unless SWITCHYARD_ENGINE_TOKEN[_FILE] is already set. An engine that dies
is reaped and restarted on its port (the router's health watcher takes it back into rotation)
with exponential backoff, at most --max-restarts times in a row (an engine that then runs for two
minutes starts over); the policy meanwhile runs degraded on the engines left
(pyrouter/degrade.py). With --cpu-affinity (on by default when there are at least as many cores
as engines) each engine is pinned to its own cores (engine/server/cpu_affinity.py).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from engine.server.cpu_affinity import format_cpus, split_cores, usable_cores
from engine.server.launcher import EngineProcess, EngineSpec, launch, stop_engines, wait_healthy
from pyrouter.admission import ADMISSION_FLAGS
from pyrouter.model_groups import ModelSpec, parse_model_args, split_engines
from pyrouter.policy_registry import ActivePolicy
from pyrouter.router_command import initial_policy, serve_router
from pyrouter.router_replicas import RouterReplicas
from pyrouter.session_affinity import SESSION_FLAGS
from switchyard_proto.auth import TOKEN_ENV, TOKEN_FILE_ENV

log = logging.getLogger("switchyard.serve")
_READY_TIMEOUT_S = float(os.environ.get("SWITCHYARD_ENGINE_READY_TIMEOUT_S", "900"))
_BACKOFF_START_S = 1.0
_BACKOFF_MAX_S = 60.0
_WATCH_S = 0.5
# An engine that ran this long before it died was not crash-looping: its backoff starts over.
_STABLE_S = 120.0
# Router flags `serve` passes through as they are (pyrouter/cli.py: add_router_guard_arguments).
_ROUTER_GUARD_FLAGS = ("admin_port", "admin_host", "engine_allow", "max_body_bytes",
                       "body_timeout_s", "idle_timeout_s", "drain_s", "rate_limit_rps",
                       "rate_limit_burst", "max_inflight_per_caller")


def engine_cores(args: argparse.Namespace, engines: int) -> list[list[int]] | None:
    """Each engine's cores under --cpu-affinity (None: unpinned). ValueError for `on` with
    fewer usable cores than engines."""
    mode = getattr(args, "cpu_affinity", "auto")
    if mode == "off":
        return None
    cores = usable_cores()
    groups = split_cores(cores, engines)
    if groups is None and mode == "on":
        raise ValueError(f"--cpu-affinity on: {len(cores)} usable core(s) for {engines} "
                         "engines; each engine needs at least one of its own")
    return groups


def engine_specs(args: argparse.Namespace, roles: list[str],
                 cores: list[list[int]] | None = None,
                 models: list[ModelSpec] | None = None) -> list[EngineSpec]:
    """One spec per role; the runtime flags (model, dtype, pool, chunk) go to every engine.
    With `cores`, engine i is pinned to cores[i] and runs that many torch threads. With
    several `models`, engine i serves models[i] under its name (--served-model-name)."""
    threads = max(1, (os.cpu_count() or 1) // len(roles))
    fixed_threads = os.environ.get("SWITCHYARD_TORCH_THREADS")
    specs = []
    for i, role in enumerate(roles):
        cpus = cores[i] if cores is not None else None
        engine_threads = int(fixed_threads) if fixed_threads else (
            len(cpus) if cpus is not None else threads)
        model = models[i] if models is not None and len(set(models)) > 1 else None
        specs.append(EngineSpec(
            f"engine-{i}", role=role, mock=bool(getattr(args, "mock_engines", False)),
            model=model.path if model is not None else _single_model_path(args),
            served_model=model.name if model is not None else None, device=args.device,
            mode=args.mode, dtype=args.dtype,
            kv_memory=args.kv_memory, num_pages=args.num_pages, page_size=args.page_size,
            chunk_size=args.chunk_size, latency_profile=args.latency_profile,
            threads=engine_threads, cpus=cpus, metrics_port=0))
    return specs


def _single_model_path(args: argparse.Namespace) -> str | None:
    """--model's path when it names one model (given once, or not at all)."""
    return parse_model_args(getattr(args, "model", None))[0].path


def model_roles(args: argparse.Namespace, active: ActivePolicy
                ) -> tuple[list[str], list[ModelSpec]]:
    """Every engine's role and served model: --engines divided among the --model values, each
    model's share given the roles its policy wants. ValueError for bad --model values or fewer
    engines than models."""
    models = parse_model_args(getattr(args, "model", None))
    roles: list[str] = []
    served: list[ModelSpec] = []
    for model, count in zip(models, split_engines(args.engines, len(models)), strict=True):
        share = active.spec.engine_roles(count)
        roles += share
        served += [model] * len(share)
    return roles, served


def deployment_token(log_dir: Path) -> None:
    """A fresh engine token for this deployment, in a file only this user can read; every child
    (engines) and the router in this process read it through SWITCHYARD_ENGINE_TOKEN_FILE."""
    if os.environ.get(TOKEN_ENV) or os.environ.get(TOKEN_FILE_ENV):
        return  # the operator's own
    path = log_dir / "engine-token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32))
    os.environ[TOKEN_FILE_ENV] = str(path)


class EngineKeeper:
    """Watches the engine processes: reaps one that exits and starts it again on its port, with
    exponential backoff, at most `max_restarts` times per engine."""

    def __init__(self, engines: list[EngineProcess], specs: list[EngineSpec], log_dir: Path,
                 max_restarts: int) -> None:
        self.engines = engines
        self.specs = {s.name: s for s in specs}
        self.log_dir = log_dir
        self.max_restarts = max_restarts
        self.restarts: dict[str, int] = {}  # restarts since the engine last ran stably
        self._started = {e.name: time.monotonic() for e in engines}
        self._stopping = False

    async def run(self) -> None:
        # Engine index -> when its restart is due. Each engine waits out its own backoff while
        # the others are still watched (one engine's 60 s backoff must not delay another's).
        due: dict[int, float] = {}
        while not self._stopping:
            for i, engine in enumerate(self.engines):
                if i in due:
                    if time.monotonic() >= due[i]:
                        del due[i]
                        # Its ports as before: the router's and Prometheus' targets stay valid.
                        spec = replace(self.specs[engine.name], port=engine.port,
                                       metrics_port=getattr(engine, "metrics_port", None)
                                       or self.specs[engine.name].metrics_port)
                        self.engines[i] = launch(spec, self.log_dir, die_with_parent=True)
                        self._started[engine.name] = time.monotonic()
                        print(f"engine {engine.name} restarted on port {engine.port}"
                              + (f", metrics on port {spec.metrics_port}"
                                 if spec.metrics_port else ""), flush=True)
                    continue
                if engine.alive():
                    continue  # poll() in alive() also reaps an exited child: no zombie
                if time.monotonic() - self._started.get(engine.name, 0.0) > _STABLE_S:
                    self.restarts[engine.name] = 0
                done = self.restarts.get(engine.name, 0)
                if done >= self.max_restarts:
                    continue
                delay = min(_BACKOFF_MAX_S, _BACKOFF_START_S * 2 ** done)
                print(f"engine {engine.name} exited with code {engine.proc.returncode}; "
                      f"restarting in {delay:.0f} s ({done + 1}/{self.max_restarts})",
                      flush=True)
                self.restarts[engine.name] = done + 1
                self._started[engine.name] = float("inf")  # not stable until it runs again
                due[i] = time.monotonic() + delay
            await asyncio.sleep(_WATCH_S)

    def stop(self) -> None:
        self._stopping = True


def _router_args(args: argparse.Namespace, engines: list[EngineProcess],
                 policy: str) -> argparse.Namespace:
    router_args = argparse.Namespace(
        engine=[f"{e.address}@{e.role}" for e in engines], policy=policy,
        policy_file=None, policy_dir=getattr(args, "policy_dir", None), model=args.model,
        host=args.host, port=args.port, max_inflight=None, max_context=None, poll_s=None,
        default_temperature=None, default_top_p=None)
    for name in (*_ROUTER_GUARD_FLAGS, *SESSION_FLAGS):
        setattr(router_args, name, getattr(args, name, None))
    for name in ADMISSION_FLAGS:  # the admission queue's (pyrouter/admission.py)
        setattr(router_args, name, getattr(args, name, None))
    return router_args


async def _serve(args: argparse.Namespace, log_dir: Path) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    deployment_token(log_dir)
    active = initial_policy(args.policy, args.policy_file)
    try:
        roles, served = model_roles(args, active)
    except ValueError as exc:
        print(f"switchyard serve: {exc}", file=sys.stderr, flush=True)
        return 2
    models = "" if len(set(served)) < 2 else " serving " + ", ".join(
        f"engine-{i}={m.name}" for i, m in enumerate(served))
    print(f"starting {len(roles)} engine(s) {roles} for policy {active.name}{models}; logs in "
          f"{log_dir}", flush=True)
    engines: list[EngineProcess] = []
    keeper: EngineKeeper | None = None
    keeper_task: asyncio.Task[None] | None = None
    try:
        try:
            cores = engine_cores(args, len(roles))
        except ValueError as exc:
            print(f"switchyard serve: {exc}", file=sys.stderr, flush=True)
            return 2
        print("engine cores: " + ("unpinned" if cores is None else "; ".join(
            f"engine-{i} on {format_cpus(c)}" for i, c in enumerate(cores))
            + " (the router unpinned)"), flush=True)
        specs = engine_specs(args, roles, cores, served)
        for spec in specs:
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
        keeper = EngineKeeper(engines, specs, log_dir, int(getattr(args, "max_restarts", 5)))
        keeper_task = asyncio.create_task(keeper.run())
        router_args = _router_args(args, engines, active.name)
        replicas = RouterReplicas(router_args, int(getattr(args, "routers", 1)), log_dir,
                                  policy_file=args.policy_file,
                                  max_restarts=int(getattr(args, "max_restarts", 5)))
        for r in replicas.replicas:
            print(f"router replica {r.index} starting on http://{args.host}:{r.port}/v1 "
                  f"(log {r.log_path})", flush=True)
        replicas_stop = asyncio.create_task(replicas.stop_when(stop))
        try:
            await serve_router(replicas.first, stop,
                               banner=f"switchyard serving on http://{args.host}:{args.port}/v1 "
                               "(Ctrl-C stops everything)", collectors=[replicas])
        finally:
            stop.set()  # the replicas stop with replica 0, however it ended
            await replicas_stop
        return 0
    finally:
        if keeper is not None:
            keeper.stop()
        if keeper_task is not None:
            keeper_task.cancel()
        print("stopping engines ...", flush=True)
        stop_engines(engines)
        print("all engines stopped", flush=True)


def run(args: argparse.Namespace) -> int:
    if args.engines < 1:
        print("--engines must be >= 1", file=sys.stderr)
        return 2
    if getattr(args, "routers", 1) < 1:
        print("--routers must be >= 1", file=sys.stderr)
        return 2
    from pyrouter.router_command import setup_logging_and_loop

    setup_logging_and_loop()
    log_dir = Path(tempfile.mkdtemp(prefix="switchyard-serve-"))
    return asyncio.run(_serve(args, log_dir))
