"""Runs the tournament's simulations: one capacity search per cell group, then every policy in
every cell, in this process (--jobs 1) or side by side in forked ones (switchyard_sim/parallel.py,
as `bench simulate --jobs`). A run is a fresh simulated cluster in virtual time, a function of
its inputs only, so where it runs does not change its figures.

Every policy in a cell gets the same items: the group's workload at one salt, Poisson arrivals
(a generated workload's own process) from one seed at the cell's rate (offsets from one seed
scale with 1 / rate, so the loads of a group see the same arrival pattern, stretched). With
several seeds, each seed is the tournament `--seed N` alone would run (its own lengths, arrivals
and capacity search); the seeds' searches share one pool of workers, then their runs do.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from engine.core.latency_model import StepShape
from pyrouter.runtime.policy_registry import get_policy
from switchyard_bench.serve.request_body import Slo
from switchyard_bench.simulate.run import SimConfig, run_summary, simulate
from switchyard_bench.tournament.capacity import find_capacity
from switchyard_bench.tournament.cells import Cell, Group, ProfileSetting
from switchyard_bench.tournament.policy_labels import policy_of
from switchyard_bench.tournament.workloads import arrivals_for, build_tournament_workload
from switchyard_bench.workloads import RealVocabulary, WorkItem, Workload, schedule
from switchyard_sim.parallel import in_processes
from switchyard_sim.profile import HardwareProfile, load_profile

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
            return get_policy(policy_of(policy)[0]).engine_roles(engines)
        return [self.roles[i % len(self.roles)] for i in range(engines)]


_vocab: RealVocabulary | None = None
_workloads: dict[tuple[Any, ...], Workload] = {}
_profiles: dict[str, HardwareProfile] = {}


def profile(name: str) -> HardwareProfile:
    if name not in _profiles:
        _profiles[name] = load_profile(name)
    return _profiles[name]


def workload(plan: Plan, group: Group) -> Workload:
    global _vocab
    context = profile(group.profile).model.max_context
    key = (group.workload, plan.settings[group.profile].sizing, plan.num_prompts, plan.seed,
           context)
    if key not in _workloads:
        if _vocab is None:
            from pyrouter.tokenizer import load_router_tokenizer

            _vocab = RealVocabulary(load_router_tokenizer(None))
        _workloads[key] = build_tournament_workload(group.workload, _vocab,
                                                    plan.settings[group.profile].sizing,
                                                    plan.num_prompts, plan.seed, context)
    return _workloads[key]


def items(plan: Plan, group: Group, rate: float) -> list[WorkItem]:
    chosen = workload(plan, group)
    return schedule(chosen, plan.num_prompts, plan.salt, arrivals_for(chosen, rate),
                    seed=plan.seed)


def run_policy(plan: Plan, group: Group, rate: float, label: str) -> dict[str, Any]:
    """One simulated run of a policy (`P`, or `P+admit`: with admission by predicted outcome):
    its summary row, as `bench simulate` writes it."""
    slo = plan.slo(group.profile)
    policy, admission = policy_of(label)
    cfg = SimConfig(profile(group.profile), group.engines, plan.roles_for(group.engines, policy),
                    slo, plan.coalesce, plan.policy_timeout_s, progress=False,
                    admission=admission)
    run = simulate(cfg, policy, items(plan, group, rate), plan.policy_params.get(policy),
                   f"{group.label} {label}@{rate:.4g}")
    return {**run_summary(run, policy, rate, 1.0, 1.0, plan.salt, slo), "policy": label}


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


@dataclass(slots=True)
class Results:
    capacities: dict[Group, dict[str, Any]] = field(default_factory=dict)
    runs: dict[tuple[Cell, str], dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # runs and searches that raised


def _guarded(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """fn(*args), or {"error": ...} when it raises (a policy's bug): the other runs still count."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - reported by the caller
        return {"error": f"{type(exc).__name__}: {exc}"}


def _search(plan: Plan, job: tuple[int, Group]) -> dict[str, Any]:
    seed, group = job
    return _guarded(run_capacity, replace(plan, seed=seed), group)


def _run(plan: Plan, job: tuple[int, Cell, str, float]) -> dict[str, Any]:
    seed, cell, policy, rate = job
    return _guarded(run_policy, replace(plan, seed=seed), cell.group, rate, policy)


def run_tournament(plan: Plan, cells: list[Cell], policies: list[str], jobs: int,
                   seeds: Sequence[int] | None = None,
                   log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
                   ) -> dict[int, Results]:
    """Per seed (default: the plan's), every group's capacity, then every policy in every cell
    whose group has one; progress lines to `log`. A run that raises is recorded with no figures,
    a search that raises drops its group's cells in that seed; both are listed in `errors`."""
    seeds = list(seeds) if seeds is not None else [plan.seed]
    results = {seed: Results() for seed in seeds}
    several = len(seeds) > 1

    def tag(seed: int) -> str:
        return f"seed {seed} " if several else ""

    searches = [(seed, group) for seed in seeds for group in sorted({c.group for c in cells})]
    for (seed, group), found in zip(searches, in_processes(partial(_search, plan), searches, jobs),
                                    strict=True):
        if "error" in found:
            results[seed].errors.append(f"capacity {tag(seed)}{group.label}: {found['error']}")
            log(f"FAILED {results[seed].errors[-1]}")
            continue
        results[seed].capacities[group] = found
        log(f"capacity {tag(seed)}{group.label}: {found['rate']:.4g} req/s ({found['basis']}; "
            f"{len(found['probes'])} probes)")
    todo = [(seed, cell, policy, cell.load * results[seed].capacities[cell.group]["rate"])
            for seed in seeds for cell in cells if cell.group in results[seed].capacities
            for policy in policies]
    for done, ((seed, cell, policy, _), run) in enumerate(
            zip(todo, in_processes(partial(_run, plan), todo, jobs), strict=True), 1):
        if "error" in run:
            results[seed].errors.append(f"run {tag(seed)}{cell.label} {policy}: {run['error']}")
            log(f"FAILED {results[seed].errors[-1]}")
            run = {"policy": policy, "requests": plan.num_prompts, **run,
                   "slo_attainment": None, "goodput": None}
        else:
            attained = run.get("slo_attainment")
            log(f"[{done}/{len(todo)}] {tag(seed)}{cell.label} {policy}: "
                f"{'-' if attained is None else f'{attained:.1%}'} ({run['wall_s']:.1f} s)")
        results[seed].runs[(cell, policy)] = run
    return results
