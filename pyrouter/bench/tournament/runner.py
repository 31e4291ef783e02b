"""Runs the tournament's simulations: one capacity search per cell group, then every policy in
every cell, inline (--jobs 1) or in worker processes. A run is a fresh simulated cluster in
virtual time, a function of its inputs only, so where and in which order it runs does not
change its figures; results are keyed, never ordered by completion.

Every policy in a cell gets the same items: the group's workload at one salt, Poisson arrivals
from one seed at the cell's rate (offsets from one seed scale with 1 / rate, so the loads of a
group see the same arrival pattern, stretched).
"""
from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from engine.core.latency_model import StepShape
from pyrouter.bench.serve.request_body import Slo
from pyrouter.bench.tournament.capacity import find_capacity
from pyrouter.bench.tournament.cells import Cell, Group, ProfileSetting
from pyrouter.bench.tournament.workloads import build_tournament_workload
from pyrouter.bench.workloads import ArrivalProcess, RealVocabulary, WorkItem, Workload, schedule
from pyrouter.policy_registry import get_policy, load_policy_source
from pyrouter.sim.profile import HardwareProfile, load_profile
from pyrouter.sim.run import SimConfig, run_summary, simulate

LIGHT_UTILISATION = 0.1  # the light-load probe: each engine busy ~10% with one request at a time
# A run is a steady load, not one burst, when its arrivals last at least this many times its
# mean JCT (equivalently: it sends that many times the requests in flight, by Little's law).
STEADY_FACTOR = 5


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything a run depends on besides its cell, policy and rate (sent to each worker)."""

    settings: dict[str, ProfileSetting]
    num_prompts: int = 300
    seed: int = 0
    salt: int = 0
    roles: tuple[str, ...] = ("any",)  # ("own",): each policy's own; else cycled to N engines
    policy_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy_files: tuple[str, ...] = ()
    capacity_policy: str = "round_robin"
    target: float = 0.9
    tolerance: float = 0.05
    coalesce: int = 16
    policy_timeout_s: float = 300.0

    def slo(self, profile: str) -> Slo:
        slo = self.settings[profile].slo
        if slo is None:
            raise ValueError(f"no SLO for profile {profile!r}: give --slo {profile}=TTFT,TPOT")
        return slo

    def roles_for(self, engines: int, policy: str) -> list[str]:
        if self.roles == ("own",):
            return get_policy(policy).engine_roles(engines)
        return [self.roles[i % len(self.roles)] for i in range(engines)]


_vocab: RealVocabulary | None = None
_workloads: dict[tuple[Any, ...], Workload] = {}
_profiles: dict[str, HardwareProfile] = {}


def init_worker(policy_files: Iterable[str]) -> None:
    for source in policy_files:
        load_policy_source(source)


def profile(name: str) -> HardwareProfile:
    if name not in _profiles:
        _profiles[name] = load_profile(name)
    return _profiles[name]


def workload(plan: Plan, group: Group) -> Workload:
    global _vocab
    key = (group.workload, plan.settings[group.profile].sizing, plan.num_prompts, plan.seed)
    if key not in _workloads:
        if _vocab is None:
            from pyrouter.tokenizer import load_router_tokenizer

            _vocab = RealVocabulary(load_router_tokenizer(None))
        _workloads[key] = build_tournament_workload(group.workload, _vocab,
                                                    plan.settings[group.profile].sizing,
                                                    plan.num_prompts, plan.seed)
    return _workloads[key]


def items(plan: Plan, group: Group, rate: float) -> list[WorkItem]:
    return schedule(workload(plan, group), plan.num_prompts, plan.salt, ArrivalProcess(rate),
                    seed=plan.seed)


def run_policy(plan: Plan, group: Group, rate: float, policy: str) -> dict[str, Any]:
    """One simulated run: its summary row, as `bench simulate` writes it."""
    slo = plan.slo(group.profile)
    cfg = SimConfig(profile(group.profile), group.engines, plan.roles_for(group.engines, policy),
                    slo, plan.coalesce, plan.policy_timeout_s, progress=False)
    run = simulate(cfg, policy, items(plan, group, rate), plan.policy_params.get(policy),
                   f"{group.label} {policy}@{rate:.4g}")
    return run_summary(run, policy, rate, 1.0, 1.0, plan.salt, slo)


def service_s(prof: HardwareProfile, work: list[WorkItem]) -> float:
    """Mean seconds one request takes alone on an engine, from the profile's step model:
    its prompt in chunk-size steps, then one decode step per further output token."""
    step = prof.latency()
    total_ms = 0.0
    for item in work:
        n = len(item.prompt)
        done = 0
        while done < n:
            chunk = min(prof.chunk_size, n - done)
            total_ms += step.predict(StepShape(((done, chunk),), 0, 0))
            done += chunk
        for k in range(1, item.max_tokens):
            total_ms += step.predict(StepShape((), 1, n + k))
    return total_ms / 1e3 / max(1, len(work))


def run_capacity(plan: Plan, group: Group) -> dict[str, Any]:
    """The group's capacity (capacity.py) with `plan.capacity_policy`, and its probes."""
    alone = service_s(profile(group.profile), items(plan, group, 1.0))
    start = group.engines / alone  # engines never idle if requests did not batch
    runs: dict[float, dict[str, Any]] = {}

    def attainment(rate: float) -> float:
        runs[rate] = run_policy(plan, group, rate, plan.capacity_policy)
        return float(runs[rate]["slo_attainment"] or 0.0)

    found = find_capacity(attainment, start, LIGHT_UTILISATION * start, plan.target,
                          plan.tolerance)
    span_s = (plan.num_prompts - 1) / found.rate
    jct_s = (runs[found.rate]["mean_jct_ms"] or 0.0) / 1e3
    return {"rate": found.rate, "basis": found.basis, "bounded": found.bounded,
            "policy": plan.capacity_policy, "light_rate": found.light_rate,
            "light_attainment": found.light_attainment, "threshold": found.threshold,
            "service_s": alone, "arrival_span_s": span_s, "mean_jct_s": jct_s,
            "steady": span_s >= STEADY_FACTOR * jct_s,
            "probes": [list(p) for p in found.probes]}


class InlineExecutor(Executor):
    """--jobs 1: every task runs in this process when submitted (a finished Future)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller like a pool does
            future.set_exception(exc)
        return future


def executor(jobs: int, plan: Plan) -> Executor:
    if jobs <= 1:
        init_worker(plan.policy_files)
        return InlineExecutor()
    # spawn: a fresh interpreter per worker, nothing inherited from this process's threads.
    return ProcessPoolExecutor(jobs, multiprocessing.get_context("spawn"), init_worker,
                               (plan.policy_files,))


@dataclass(slots=True)
class Results:
    capacities: dict[Group, dict[str, Any]] = field(default_factory=dict)
    runs: dict[tuple[Cell, str], dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # runs and searches that raised


def run_tournament(plan: Plan, cells: list[Cell], policies: list[str], jobs: int,
                   log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
                   ) -> Results:
    """Capacities first (one search per group, in parallel), each group's cells as soon as its
    capacity is known; progress lines to `log`. A run that raises (a policy's bug) is recorded
    with no figures and the rest go on; a search that raises drops its group's cells."""
    results = Results()
    total = len(cells) * len(policies)
    pending: dict[Future[Any], tuple[str, Any]] = {}
    pool = executor(jobs, plan)

    def finished(kind: str, key: Any, result: dict[str, Any]) -> None:
        if kind == "capacity":
            results.capacities[key] = result
            log(f"capacity {key.label}: {result['rate']:.4g} req/s ({result['basis']}; "
                f"{len(result['probes'])} probes)")
            for cell in (c for c in cells if c.group == key):
                for policy in policies:
                    future = pool.submit(run_policy, plan, key, cell.load * result["rate"],
                                         policy)
                    pending[future] = ("run", (cell, policy))
            return
        results.runs[key] = result
        attained = result.get("slo_attainment")
        log(f"[{len(results.runs)}/{total}] {key[0].label} {key[1]}: "
            f"{'-' if attained is None else f'{attained:.1%}'} ({result['wall_s']:.1f} s)")

    def failed(kind: str, key: Any, exc: Exception) -> None:
        what = key.label if kind == "capacity" else f"{key[0].label} {key[1]}"
        results.errors.append(f"{kind} {what}: {type(exc).__name__}: {exc}")
        log(f"FAILED {results.errors[-1]}")
        if kind == "run":
            results.runs[key] = {"policy": key[1], "error": str(exc), "slo_attainment": None,
                                 "goodput": None}

    try:
        for group in sorted({c.group for c in cells}):
            pending[pool.submit(run_capacity, plan, group)] = ("capacity", group)
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: repr(pending[f][1])):
                kind, key = pending.pop(future)
                try:
                    result = future.result()
                except Exception as exc:  # noqa: BLE001 - reported; the other runs still count
                    failed(kind, key, exc)
                else:
                    finished(kind, key, result)
    finally:  # Ctrl-C: the queued runs are dropped, not waited for
        pool.shutdown(wait=True, cancel_futures=True)
    return results
