"""One simulated run — a policy, an arrival schedule — and a sweep of them, recorded and
summarised exactly as `switchyard bench serve` records and summarises a real run.

Each request goes through the router's own front, in-process (switchyard_sim/fake/front_run.py:
the Rust request task, executor and built-ins and the policy bridge a client's request runs
through), arriving at its scheduled virtual time. Its tokens' times are
when they left their engine (the simulation has no network between router and client), and the
record is filled by bench serve's StreamObserver, so TTFT, TPOT, ITL and JCT have one
definition for real and simulated runs.
"""
from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

from tqdm import tqdm

from pyrouter.admission import AdmissionConfig
from pyrouter.engines.membership import EngineMembership
from pyrouter.request import RouterRequest, SloSpec
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.runtime.policy_registry import ActivePolicy, get_policy
from switchyard_bench.serve.request_body import Slo
from switchyard_bench.serve.stream_record import RequestRecord, StreamObserver
from switchyard_bench.serve.summary import summarize
from switchyard_bench.serve.sweep import rate_label, write_jsonl
from switchyard_bench.workloads import ArrivalProcess, WorkItem, Workload, WorkloadError, schedule
from switchyard_engine_api.sampling_params import SamplingParams
from switchyard_sim.clock import real_perf_counter, run_virtual
from switchyard_sim.cluster import SimCluster
from switchyard_sim.fake.front_run import FakeRun, FrontHarness
from switchyard_sim.parallel import in_processes
from switchyard_sim.profile import HardwareProfile


@dataclass(slots=True)
class SimConfig:
    profile: HardwareProfile
    engines: int = 2
    roles: list[str] | None = None  # None: the policy's own (as `switchyard serve --policy`)
    slo: Slo = field(default_factory=Slo)
    coalesce: int = 16
    policy_timeout_s: float = 300.0  # the router's --policy-timeout-s
    progress: bool = False
    # Admission by predicted outcome (`switchyard router --admit-predicted`), for the requests'
    # SLO. Off by default here, so that a run compares with the figures recorded before it
    # existed; a router has it on.
    admission: bool = False


@dataclass(slots=True)
class SimRun:
    records: list[RequestRecord]
    duration_s: float  # virtual: first send -> last response
    wall_s: float  # real seconds the run took to simulate
    engine_busy: dict[str, float]  # engine id -> fraction of the run's duration spent stepping
    # The latency model's closed loop: "kind/pattern" -> requests and median |error| of the
    # predictions a policy placed requests by (empty for policies that predict nothing).
    prediction_error: dict[str, dict[str, float | int]] = field(default_factory=dict)


def roles_for(cfg: SimConfig, policy: str) -> list[str]:
    if cfg.roles:
        return list(cfg.roles)
    return get_policy(policy).engine_roles(cfg.engines)


def _record(index: int, item: WorkItem, sent: float, start: float, out: FakeRun,
            times: list[float], end: float, cached: int, slo: Slo) -> RequestRecord:
    prompt_len = len(item.prompt) if isinstance(item.prompt, list) else 0
    record = RequestRecord(index=index, prompt_len=prompt_len, max_tokens=item.max_tokens,
                           scheduled_s=item.arrival_s, sent_s=sent - start,
                           request_id=out.request.request_id, route=out.route)
    observer = StreamObserver(sent)
    observer.token_times = times[:len(out.tokens)]
    observer.finish_reason = out.finish_reason
    observer.done = out.error is None
    observer.error = out.error.message if out.error is not None else ""
    observer.usage = {"prompt_tokens": prompt_len, "completion_tokens": len(out.tokens),
                      "prompt_tokens_details": {"cached_tokens": cached}}
    status = out.error.status if out.error is not None else 200
    observer.finish(record, status, end)
    record.slo_met = slo.met_by(record) if slo else None
    return record


async def _simulate(cfg: SimConfig, policy: str, params: dict[str, Any],
                    items: Sequence[WorkItem], label: str) -> SimRun:
    loop = asyncio.get_running_loop()
    cluster = SimCluster(cfg.profile, roles_for(cfg, policy), cfg.coalesce)
    await cluster.start()
    spec = get_policy(policy)
    dispatcher = Dispatcher(cluster, PolicySlot(ActivePolicy(spec, spec.check_params(params))),
                            policy_timeout_s=cfg.policy_timeout_s)
    # The simulated cluster stands in for the router's EngineMembership.
    harness = FrontHarness(cast(EngineMembership, cluster), dispatcher)
    AdmissionConfig(predicted=cfg.admission).apply(harness.front)
    records: list[RequestRecord | None] = [None] * len(items)
    bar = tqdm(total=len(items), desc=label, unit="req", disable=not cfg.progress,
               file=sys.stderr, dynamic_ncols=True)
    start = loop.time()
    last_end = start
    slo = SloSpec(cfg.slo.ttft_ms, cfg.slo.tpot_ms)

    async def one(index: int, item: WorkItem) -> None:
        nonlocal last_end
        sent = loop.time()
        if not isinstance(item.prompt, list):
            raise WorkloadError("the simulator takes token-id prompts (every built-in "
                                "workload makes them)")
        req = RouterRequest(f"sim-{index}", list(item.prompt),
                            SamplingParams(max_tokens=item.max_tokens, ignore_eos=True),
                            slo=SloSpec(slo.ttft_ms, slo.tpot_ms))
        out = await harness.run(req)
        end = loop.time()
        cached = int(((out.usage or {}).get("prompt_tokens_details") or {})
                     .get("cached_tokens", 0))
        # The last attempt's engine-side id (a retried request's earlier attempts produced
        # nothing: retries happen only before the first token).
        times = cluster.tokens.pop(out.engine_request_id)
        records[index] = _record(index, item, sent, start, out, times, end, cached, cfg.slo)
        last_end = max(last_end, end)
        bar.update(1)

    tasks: list[asyncio.Task[None]] = []
    try:
        for index, item in enumerate(items):
            delay = start + item.arrival_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(loop.create_task(one(index, item)))
        await asyncio.gather(*tasks)
        harness.settle()
    finally:
        # A tournament runs hundreds of these in one process: nothing of this run may outlive it.
        harness.close()
    bar.close()
    duration = max(last_end - start, 1e-9)
    busy = {eid: cluster.sim(eid).busy_s / duration for eid in cluster.engines}
    await cluster.stop()
    return SimRun([r for r in records if r is not None], duration, 0.0, busy,
                  dispatcher.feedback.summary())


def simulate(cfg: SimConfig, policy: str, items: Sequence[WorkItem],
             params: dict[str, Any] | None = None, label: str = "") -> SimRun:
    """Run `items` against `policy` in virtual time (its own event loop); blocking."""
    began = real_perf_counter()
    run = run_virtual(lambda: _simulate(cfg, policy, params or {}, items, label or policy))
    run.wall_s = real_perf_counter() - began
    return run


def run_summary(run: SimRun, policy: str, rate: float | None, burstiness: float,
                time_scale: float, salt: int, slo: Slo) -> dict[str, Any]:
    """One run's row of summary.json: bench serve's summary, plus the simulation's own."""
    label = f"{policy}@{rate_label(rate, time_scale)}"
    return {"label": label, "policy": policy, "rate": rate,
            "burstiness": burstiness if rate is not None else None,
            "time_scale": time_scale if rate is None else None, "salt": salt,
            "interrupted": False, **summarize(run.records, run.duration_s, bool(slo)),
            "simulated": True, "wall_s": run.wall_s,
            "engine_busy": {k: round(v, 4) for k, v in run.engine_busy.items()},
            "prediction_error": run.prediction_error}


@dataclass(slots=True)
class SweepSpec:
    policies: list[str]
    rates: list[float]  # empty: the trace's own timestamps
    num_prompts: int
    burstiness: float = 1.0
    time_scale: float = 1.0
    seed: int = 0
    salt: int = 0  # run k uses salt + k, as bench serve does
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # per policy


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One run of a sweep: its policy, its rate (None: the trace's timestamps), its salt."""

    policy: str
    rate: float | None
    salt: int


def sweep_runs(spec: SweepSpec) -> list[SweepRun]:
    """policies x rates in order; run k uses salt + k."""
    rates: list[float | None] = list(spec.rates) or [None]
    pairs = [(policy, rate) for policy in spec.policies for rate in rates]
    return [SweepRun(policy, rate, spec.salt + k) for k, (policy, rate) in enumerate(pairs)]


def run_one(cfg: SimConfig, workload: Workload, spec: SweepSpec, result_dir: str,
            job: SweepRun) -> dict[str, Any]:
    """One run of a sweep, simulated and summarised (its JSONL written when `result_dir`)."""
    arrivals = None if job.rate is None else ArrivalProcess(job.rate, spec.burstiness)
    items = schedule(workload, spec.num_prompts, job.salt, arrivals, spec.time_scale, spec.seed)
    label = f"{job.policy}@{rate_label(job.rate, spec.time_scale)}"
    run = simulate(cfg, job.policy, items, spec.params.get(job.policy), label)
    summary = run_summary(run, job.policy, job.rate, spec.burstiness, spec.time_scale, job.salt,
                          cfg.slo)
    if result_dir:
        name = label.replace("@", "_at_").replace(" ", "_")
        summary["records_file"] = os.path.join(result_dir, f"{name}.jsonl")
        write_jsonl(summary["records_file"], [r.to_json() for r in run.records])
    return summary


def sweep(cfg: SimConfig, workload: Workload, spec: SweepSpec, result_dir: str = "",
          on_run: Callable[[dict[str, Any]], None] = lambda _: None,
          jobs: int = 1) -> list[dict[str, Any]]:
    """policies x rates, each a fresh cluster (no run inherits another's cache); one JSONL of
    records per run in `result_dir` when given. `jobs` > 1 runs that many at once, each in its
    own process (switchyard_sim/parallel.py): the same results, in the same order, sooner."""
    todo = sweep_runs(spec)
    if jobs > 1 and len(todo) > 1:
        cfg = replace(cfg, progress=False)  # one bar per run would interleave
    runs: list[dict[str, Any]] = []
    for summary in in_processes(partial(run_one, cfg, workload, spec, result_dir), todo, jobs):
        runs.append(summary)
        on_run(summary)
    return runs
