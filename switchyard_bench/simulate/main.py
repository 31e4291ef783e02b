"""`switchyard bench simulate`: policies x rates in virtual time, on simulated engines that run
the engine's own scheduler and KV cache with step times from a latency profile, through the
router's own policy code. Same workloads, summary table, summary.json and plots as `switchyard
bench serve`.

  switchyard bench simulate --profile h100-llama3.1-70b-fp8-tp4 --engines 2 \\
      --workload sonnet --input-mean 3000 --output-mean 100 --num-prompts 1000 \\
      --policies round_robin,pd,balanced_pd --rates 1.6,2.4,3.2,4,4.8,5.6 --plot
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import sys
from typing import Any

from engine.server.cpu_affinity import usable_cores
from pyrouter.errors import BadRequest
from pyrouter.runtime.policy_registry import get_policy, load_policy_source
from switchyard_bench.list_arguments import name_list, rate_list
from switchyard_bench.result_dir import make_result_dir
from switchyard_bench.serve.report import header_lines, slo_capacity, table, write_summary
from switchyard_bench.serve.request_body import Slo
from switchyard_bench.simulate.run import SimConfig, SweepSpec, sweep
from switchyard_bench.workloads import (
    ArrivalProcess,
    Workload,
    WorkloadError,
    add_workload_arguments,
    build_workload,
)
from switchyard_sim.clock import real_perf_counter
from switchyard_sim.profile import ProfileError, builtin_profiles, load_profile

DEFAULT_PROFILE = "local-smollm2-cpu"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="switchyard bench simulate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default=DEFAULT_PROFILE,
                   help=f"hardware profile: a built-in name ({', '.join(builtin_profiles())}) "
                   "or a JSON file")
    p.add_argument("--engines", type=int, default=2)
    p.add_argument("--roles", type=name_list, default=None,
                   help="engine roles, comma-separated (default: each policy's own, as "
                   "`switchyard serve --policy P` starts them; any,any to mirror a router "
                   "whose policy was switched at run time)")
    p.add_argument("--policies", type=name_list, default=["round_robin"])
    p.add_argument("--policy-file", action="append", default=[],
                   help="a .py file or module of @policy functions to load (repeatable)")
    p.add_argument("--policy-params", type=json.loads, default={},
                   help='JSON: policy -> its parameters, e.g. \'{"tandem": {"k_max": 4}}\'')
    p.add_argument("--num-prompts", type=int, default=100, help="requests per run")
    p.add_argument("--rate", "--rates", dest="rates", type=rate_list, default=[],
                   help="requests/s, comma-separated to sweep; omitted: a trace's timestamps")
    p.add_argument("--burstiness", type=float, default=1.0)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--slo-ttft-ms", type=float, default=None)
    p.add_argument("--slo-tpot-ms", type=float, default=None)
    p.add_argument("--admission", choices=("off", "on"), default="off",
                   help="the router's admission by predicted outcome for the SLO's requests "
                   "(off by default here, as every figure before it; a router has it on)")
    p.add_argument("--attainment-target", type=float, default=0.9)
    p.add_argument("--salt", type=int, default=0,
                   help="prompt-content salt of the first run (run k uses salt + k); the same "
                   "salt as a `bench serve` run sends the same prompts")
    p.add_argument("--coalesce", type=int, default=16,
                   help="tokens a stream may hand the router per read (speed only: every "
                   "token's time is kept)")
    p.add_argument("--policy-timeout-s", type=float, default=300.0,
                   help="the router's --policy-timeout-s, in virtual seconds")
    p.add_argument("--jobs", type=int, default=None,
                   help="runs simulated at once, each in its own process (default: one per "
                   "usable core); the results are the same whatever the number")
    p.add_argument("--result-dir", default=None)
    p.add_argument("--plot", action="store_true", help="also write PNG plots to the result dir")
    p.add_argument("--no-progress", action="store_true")
    add_workload_arguments(p)
    return p


def _check(a: argparse.Namespace) -> tuple[SimConfig, Workload]:
    profile = load_profile(a.profile)
    if a.engines < 1:
        raise ValueError("--engines must be >= 1")
    if a.roles is not None and len(a.roles) != a.engines:
        raise ValueError(f"--roles names {len(a.roles)} roles for {a.engines} engines")
    if a.roles is not None and any(r not in ("any", "prefill", "decode") for r in a.roles):
        raise ValueError("--roles: each role is any, prefill or decode")
    if a.coalesce < 1:
        raise ValueError("--coalesce must be >= 1")
    if a.jobs is not None and a.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    if not a.policy_timeout_s > 0:
        raise ValueError("--policy-timeout-s must be > 0")
    if not isinstance(a.policy_params, dict):
        raise ValueError("--policy-params must be a JSON object policy -> parameters")
    unknown = sorted(set(a.policy_params) - set(a.policies))
    if unknown:
        raise ValueError(f"--policy-params names {unknown}, not in --policies")
    for source in a.policy_file:
        load_policy_source(source)
    for name in a.policies:
        get_policy(name).check_params(a.policy_params.get(name) or {})
    for rate in a.rates:
        ArrivalProcess(rate, a.burstiness)
    workload = build_workload(a)
    if not a.rates and workload.trace_offsets(1) is None:
        raise WorkloadError(f"the {workload.name} workload has no timestamps: give --rates")
    size = workload.size()
    if a.num_prompts < 1 or (size is not None and a.num_prompts > size):
        raise WorkloadError(f"num-prompts must be in 1..{size or 'inf'} for the "
                            f"{workload.name} workload, got {a.num_prompts}")
    cfg = SimConfig(profile, a.engines, a.roles, Slo(a.slo_ttft_ms, a.slo_tpot_ms),
                    a.coalesce, a.policy_timeout_s, not a.no_progress,
                    admission=a.admission == "on")
    return cfg, workload


def _meta(a: argparse.Namespace, cfg: SimConfig, workload: Workload) -> dict[str, Any]:
    rates = ",".join("inf" if math.isinf(r) else f"{r:g}" for r in a.rates)
    kind = "Poisson" if a.burstiness == 1.0 else f"gamma burstiness {a.burstiness:g}"
    arrivals = f"{rates} req/s ({kind})" if a.rates else \
        f"trace timestamps x time-scale {a.time_scale:g}"
    return {"bench": "simulate", "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "url": f"simulated: {cfg.engines} x {cfg.profile.name}",
            "profile": cfg.profile.name, "engines": cfg.engines, "roles": cfg.roles,
            "workload": workload.describe(), "arrivals": arrivals,
            "time_scale": a.time_scale if not a.rates else None, "burstiness": a.burstiness,
            "num_prompts": a.num_prompts, "seed": a.seed, "salt": a.salt,
            "slo": cfg.slo.body(), "attainment_target": a.attainment_target,
            "coalesce": cfg.coalesce, "policy_params": a.policy_params}


def run(args: argparse.Namespace) -> int:
    a = build_parser().parse_args(getattr(args, "rest", None) or [])
    try:
        cfg, workload = _check(a)
    except (ProfileError, WorkloadError, BadRequest, ValueError) as exc:
        print(f"switchyard bench simulate: {exc}", file=sys.stderr)
        return 2
    result_dir = make_result_dir(a.result_dir, "simulate")
    meta = _meta(a, cfg, workload)
    print("\n".join(header_lines(meta)), flush=True)
    began = real_perf_counter()
    spec = SweepSpec(a.policies, a.rates, a.num_prompts, a.burstiness, a.time_scale, a.seed,
                     a.salt, a.policy_params)
    jobs = a.jobs or len(usable_cores())
    total = len(a.policies) * max(1, len(a.rates))
    # Runs side by side have no bar each: a line as each ends. Not a tqdm bar here, whose
    # monitor thread could hold tqdm's lock at the moment the workers are forked.
    done = itertools.count(1)

    def ended(run: dict[str, Any]) -> None:
        if not a.no_progress and min(jobs, total) > 1:
            print(f"run {next(done)}/{total} done: {run['label']} ({run['wall_s']:.1f} s)",
                  file=sys.stderr, flush=True)

    try:
        runs = sweep(cfg, workload, spec, result_dir, ended, jobs)
    except KeyboardInterrupt:
        print("interrupted: no summary", file=sys.stderr)
        return 130
    wall_s = real_perf_counter() - began
    print(table(runs))
    if cfg.slo and a.rates:
        caps = slo_capacity(runs, a.attainment_target)
        print(f"SLO capacity (highest rate with >= {a.attainment_target:.0%} attainment): "
              + ", ".join(f"{p} {'-' if c is None else f'{c:g} req/s'}"
                          for p, c in caps.items()))
    meta["wall_s"] = wall_s
    meta["jobs"] = min(jobs, total)
    summary_path = os.path.join(result_dir, "summary.json")
    write_summary(summary_path, meta, runs)
    print(f"simulated {len(runs)} run(s) of {a.num_prompts} requests in {wall_s:.1f} s "
          f"({len(runs) * a.num_prompts / wall_s:.0f} requests/s, {meta['jobs']} process(es)); "
          f"wrote {summary_path} and one JSONL per run")
    if a.plot:
        from switchyard_bench.plot import plot_summaries

        for path in plot_summaries([summary_path], result_dir):
            print(f"wrote {path}")
    return 0
