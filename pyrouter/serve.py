"""`switchyard serve`: N engine processes and --routers router processes, started, watched and
stopped together by a supervisor that serves no requests itself (pyrouter/supervisor/).

This file turns serve's flags into that plan: engine roles from the policy (`pd` -> one prefill
+ one decode engine), each engine's model and cores, the flags every router replica shares.
Ctrl-C / SIGTERM stop the routers first (they drain: pyrouter/http/drain.py), then every engine.
An engine or replica that dies is restarted on its port with backoff, at most --max-restarts
times in a row; the policy meanwhile runs degraded on the engines left (pyrouter/degrade.py).
With --cpu-affinity (on by default when there are at least as many cores as engines) each engine
is pinned to its own cores (engine/server/cpu_affinity.py). The deployment's engine token and
every child's log are in serve's run directory (pyrouter/supervisor/run_dir.py).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from engine.server.cpu_affinity import format_cpus, split_cores, usable_cores
from engine.server.launcher import EngineSpec
from pyrouter.errors import BadRequest
from pyrouter.model_groups import ModelSpec, parse_model_args, split_engines
from pyrouter.replicas.command_lines import serve_router_args
from pyrouter.router_command import DRAIN_ENV, initial_policy
from pyrouter.runtime.policy_registry import ActivePolicy
from pyrouter.supervisor.run_dir import RunDir, RunDirError
from pyrouter.supervisor.state import StateError, args_fingerprint
from pyrouter.supervisor.supervise import ServePlan, Supervisor

_READY_TIMEOUT_S = float(os.environ.get("SWITCHYARD_ENGINE_READY_TIMEOUT_S", "900"))


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


def _plan(args: argparse.Namespace, run_dir: RunDir) -> ServePlan | None:
    """The engines and routers serve's flags ask for (None, said why, for flags that cannot
    work)."""
    try:
        active = initial_policy(args.policy, args.policy_file)
        roles, served = model_roles(args, active)
        cores = engine_cores(args, len(roles))
    except BadRequest as exc:  # an unknown --policy
        print(f"switchyard serve: {exc.message}", file=sys.stderr, flush=True)
        return None
    except ValueError as exc:
        print(f"switchyard serve: {exc}", file=sys.stderr, flush=True)
        return None
    models = "" if len(set(served)) < 2 else " serving " + ", ".join(
        f"engine-{i}={m.name}" for i, m in enumerate(served))
    print(f"starting {len(roles)} engine(s) {roles} for policy {active.name}{models}; logs in "
          f"{run_dir.path}", flush=True)
    print("engine cores: " + ("unpinned" if cores is None else "; ".join(
        f"engine-{i} on {format_cpus(c)}" for i, c in enumerate(cores))
        + " (the routers unpinned)"), flush=True)
    drain_s = getattr(args, "drain_s", None) or float(os.environ.get(DRAIN_ENV, "") or 30.0)
    return ServePlan(
        engine_specs(args, roles, cores, served),
        lambda engines: serve_router_args(args, engines, active.name),
        routers=int(getattr(args, "routers", 1)), host=args.host, port=args.port,
        max_restarts=int(getattr(args, "max_restarts", 5)), drain_s=drain_s,
        fingerprint=args_fingerprint(args), ready_timeout_s=_READY_TIMEOUT_S)


async def _serve(args: argparse.Namespace, run_dir: RunDir) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = [signal.SIGINT, signal.SIGTERM]
    # SIGHUP too: the children have sessions of their own, so a closed terminal reaches only
    # this process, which then stops them as Ctrl-C does — unless it was started to outlive
    # the terminal (`nohup`: SIGHUP ignored).
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    plan = _plan(args, run_dir)
    if plan is None:
        return 2
    return await Supervisor(plan, run_dir).run(stop)


def run(args: argparse.Namespace) -> int:
    if args.engines < 1:
        print("--engines must be >= 1", file=sys.stderr)
        return 2
    if getattr(args, "routers", 1) < 1:
        print("--routers must be >= 1", file=sys.stderr)
        return 2
    from pyrouter.router_command import setup_logging_and_loop

    setup_logging_and_loop()
    run_dir = RunDir.for_address(args.host, args.port)
    try:
        run_dir.open()
        return asyncio.run(_serve(args, run_dir))
    except (RunDirError, StateError) as exc:
        print(f"switchyard serve: {exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        run_dir.close()
