"""`switchyard bench tournament`: every policy in every regime, in virtual time. Workloads
(sonnet short and long, Mooncake, Azure code, shifting) x loads relative to each cell group's
capacity x engine counts x hardware profiles; every policy runs each cell on the same prompts
and arrivals, engines all `any` (a router whose policy was switched at run time). Prints SLO
attainment and goodput per policy per cell, the best fixed policy per cell and each adaptive
policy's regret; writes summary.json and heatmap.png. Deterministic: the same command gives
the same tables. `--seeds 0,1,2` runs every cell at each seed and judges it by the policies'
mean attainment over the seeds (past capacity one seed moves a cell by more than 3 points).
`--workloads random:K` adds K generated workloads (gen-N: generator seed N) from the seeds
`--split` selects; the report then sets a policy's gaps on the tuning set beside the check set
(workload_sets.py).

  switchyard bench tournament                      # the full grid (hours on 2 cores)
  switchyard bench tournament --profiles local-smollm2-cpu --workloads sonnet-short \\
      --engines 2 --loads 0.6,1.5 --policies round_robin,pd,adaptive --num-prompts 40

Capacity (the load 1.0 of a group): the highest Poisson rate at which --capacity-policy
(round_robin) keeps 90% of its light-load SLO attainment, by bisection; see capacity.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
from typing import Any

from engine.server.cpu_affinity import usable_cores
from pyrouter.errors import BadRequest
from pyrouter.runtime.policy_registry import BUILTIN_NAMES, get_policy, load_policy_source
from switchyard_bench.list_arguments import name_list, rate_list
from switchyard_bench.result_dir import make_result_dir
from switchyard_bench.serve.request_body import Slo
from switchyard_bench.tournament.cells import (
    DEFAULT_SETTINGS,
    ENGINES,
    LOADS,
    PROFILES,
    ProfileSetting,
    grid,
    short_profile,
)
from switchyard_bench.tournament.goodput_curve import curve_lines
from switchyard_bench.tournament.policy_labels import ADMISSION_CHOICES, labels
from switchyard_bench.tournament.report import (
    capacity_lines,
    seed_verdicts,
    summary_lines,
    tables,
    write_summary,
)
from switchyard_bench.tournament.runner import Plan, run_tournament, workload
from switchyard_bench.tournament.workload_sets import SPLITS, expand
from switchyard_bench.tournament.workloads import TOURNAMENT_WORKLOADS, Sizing
from switchyard_bench.workloads import WorkloadError
from switchyard_sim.clock import real_perf_counter
from switchyard_sim.profile import ProfileError, load_profile


def _per_profile(text: str) -> tuple[str | None, str]:
    """`[PROFILE=]VALUE`: a value for one profile, or for every profile."""
    name, sep, value = text.rpartition("=")
    return (name if sep else None), value


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(n) for n in text.split(",") if n.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected seeds like 0,1,2: {exc}") from exc
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError("expected distinct seeds like 0,1,2")
    return seeds


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="switchyard bench tournament", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", type=name_list, default=list(TOURNAMENT_WORKLOADS),
                   help=f"comma-separated, from {', '.join(TOURNAMENT_WORKLOADS)}, gen-N (the "
                   "generated workload of generator seed N) and random:K (K generated "
                   "workloads from the seeds of --split)")
    p.add_argument("--split", choices=SPLITS, default="all",
                   help="the generator seeds random:K takes: tune (even), check (odd) or all")
    p.add_argument("--study", default=None, metavar="POLICY",
                   help="the policy whose gaps to the best fixed policy the report gives for "
                   "the tuning and check sets apart (default adaptive, when it runs)")
    p.add_argument("--loads", type=rate_list, default=list(LOADS),
                   help="multiples of each group's capacity")
    p.add_argument("--engines", type=name_list, default=[str(n) for n in ENGINES],
                   help="engine counts, comma-separated")
    p.add_argument("--profiles", type=name_list, default=list(PROFILES),
                   help="built-in profile names or JSON files")
    p.add_argument("--policies", type=name_list, default=list(BUILTIN_NAMES))
    p.add_argument("--adaptive", type=name_list, default=[],
                   help="policies that count as adaptive besides those named adaptive*")
    p.add_argument("--roles", type=name_list, default=["any"],
                   help="engine roles cycled to each engine count (default any: every engine "
                   "does everything); 'own': each policy's own roles, as `switchyard serve "
                   "--policy P` starts them")
    p.add_argument("--num-prompts", type=int, default=300, help="requests per run")
    p.add_argument("--jobs", type=int, default=len(usable_cores()),
                   help="runs side by side, each in a forked process (default: one per usable "
                   "core; 1: all in this process)")
    p.add_argument("--slo", action="append", default=[], metavar="[PROFILE=]TTFT_MS,TPOT_MS",
                   help="SLO for one profile or all (default: h100 1000,50; local 2000,200)")
    p.add_argument("--length-scale", action="append", default=[], metavar="[PROFILE=]X",
                   help="multiply a profile's workload lengths (default 1: the seeds' "
                   "lengths on h100, a tenth on local)")
    p.add_argument("--capacity-policy", default="round_robin")
    p.add_argument("--attainment-target", type=float, default=0.9,
                   help="capacity: the fraction of light-load attainment kept")
    p.add_argument("--capacity-tolerance", type=float, default=0.05,
                   help="capacity bisection stops when its bracket is within this ratio")
    p.add_argument("--policy-file", action="append", default=[],
                   help="a .py file or module of @policy functions to load (repeatable)")
    p.add_argument("--policy-params", type=json.loads, default={},
                   help='JSON: policy -> its parameters')
    p.add_argument("--admission", choices=ADMISSION_CHOICES, default="off",
                   help="the router's admission by predicted outcome for each policy: off (as "
                   "every figure before it), on (policy P runs as P+admit) or both; the goodput "
                   "curve after the tables sets them side by side")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, default=0, help="seed of lengths and arrival times")
    seeds.add_argument("--seeds", type=_seeds, default=None, metavar="N,N,...",
                       help="run every cell at each seed (its own lengths, arrivals and "
                       "capacity) and judge each cell by each policy's mean attainment over "
                       "them; summary.json keeps every seed's runs and verdicts")
    p.add_argument("--salt", type=int, default=0, help="prompt-content salt of every run")
    p.add_argument("--coalesce", type=int, default=16)
    p.add_argument("--policy-timeout-s", type=float, default=300.0)
    p.add_argument("--result-dir", default=None)
    p.add_argument("--no-plot", action="store_true", help="skip heatmap.png")
    return p


def _slo(setting: ProfileSetting, value: str) -> ProfileSetting:
    try:
        ttft, tpot = (float(x) for x in value.split(","))
    except ValueError:
        raise ValueError(f"--slo {value!r}: expected [PROFILE=]TTFT_MS,TPOT_MS") from None
    return ProfileSetting(Slo(ttft, tpot), setting.sizing)


def _length_scale(setting: ProfileSetting, value: str) -> ProfileSetting:
    factor = float(value)
    if not factor > 0:
        raise ValueError(f"--length-scale {value!r} must be > 0")
    return ProfileSetting(setting.slo, setting.sizing.times(factor))


def _settings(a: argparse.Namespace) -> dict[str, ProfileSetting]:
    """Each profile's SLO and sizing: the defaults, then --slo and --length-scale in order."""
    settings = {name: DEFAULT_SETTINGS.get(name, ProfileSetting(None, Sizing()))
                for name in a.profiles}
    for option, texts, change in (("--slo", a.slo, _slo),
                                  ("--length-scale", a.length_scale, _length_scale)):
        for text in texts:
            name, value = _per_profile(text)
            for key in ([name] if name else list(settings)):
                if key not in settings:
                    raise ValueError(f"{option} names {key!r}, not in --profiles")
                settings[key] = change(settings[key], value)
    return settings


def _check(a: argparse.Namespace) -> Plan:
    if not all(n.isdigit() and int(n) > 0 for n in a.engines):
        raise ValueError(f"--engines: counts >= 1, got {','.join(a.engines)}")
    a.engines = [int(n) for n in a.engines]
    for name in a.profiles:
        load_profile(name)
    a.workloads = expand(a.workloads, a.split, TOURNAMENT_WORKLOADS)
    if a.study is not None and a.study not in a.policies:
        raise ValueError(f"--study {a.study!r} is not in --policies")
    if a.study is None and "adaptive" in a.policies:
        a.study = "adaptive"
    if a.num_prompts < 1 or a.jobs < 1 or a.coalesce < 1:
        raise ValueError("--num-prompts, --jobs and --coalesce must be >= 1")
    if not 0 < a.attainment_target <= 1 or not a.capacity_tolerance > 0:
        raise ValueError("--attainment-target must be in (0, 1], --capacity-tolerance > 0")
    if a.roles != ["own"] and any(r not in ("any", "prefill", "decode") for r in a.roles):
        raise ValueError("--roles: 'own', or roles each any, prefill or decode")
    if not isinstance(a.policy_params, dict) or set(a.policy_params) - set(a.policies):
        raise ValueError("--policy-params must be a JSON object of policies in --policies")
    for source in a.policy_file:  # loaded here, inherited by the forked runs
        load_policy_source(source)
    for name in [*a.policies, a.capacity_policy]:
        get_policy(name).check_params(a.policy_params.get(name) or {})
    # Each policy's runs by label: P, P+admit or both (their parameters are P's).
    a.policies = labels(a.policies, a.admission)
    if a.study is not None and a.study not in a.policies:
        a.study = labels([a.study], a.admission)[-1]
    settings = _settings(a)
    plan = Plan(settings, a.num_prompts, a.seeds[0], a.salt, tuple(a.roles), a.policy_params,
                a.capacity_policy, a.attainment_target, a.capacity_tolerance, a.coalesce,
                a.policy_timeout_s)
    for cell in grid(a.profiles, a.workloads, a.engines[:1], a.loads[:1]):
        plan.slo(cell.group.profile)
        size = workload(plan, cell.group).size()  # builds it: bad sizes fail here, not later
        if size is not None and a.num_prompts > size:
            raise WorkloadError(f"{cell.group.workload} has {size} requests; --num-prompts "
                                f"{a.num_prompts} is more")
    return plan


def _meta(a: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    return {"bench": "tournament", "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": "switchyard bench tournament " + " ".join(getattr(a, "argv", [])),
            "profiles": a.profiles, "workloads": a.workloads, "engines": a.engines,
            "loads": a.loads, "policies": a.policies, "adaptive": a.adaptive,
            "split": a.split, "study": a.study, "admission": a.admission,
            "roles": a.roles, "num_prompts": a.num_prompts, "seed": a.seeds[0],
            "seeds": a.seeds, "salt": a.salt,
            "slo": {p: s.slo.body() if s.slo else None for p, s in plan.settings.items()},
            "sizing": {p: dataclasses.asdict(s.sizing) for p, s in plan.settings.items()},
            "capacity": {"policy": a.capacity_policy, "target": a.attainment_target,
                         "tolerance": a.capacity_tolerance},
            "jobs": a.jobs, "loadavg_before": list(os.getloadavg())}


def run(args: argparse.Namespace) -> int:
    argv = getattr(args, "rest", None) or []
    a = build_parser().parse_args(argv)
    a.argv = argv
    a.seeds = a.seeds or [a.seed]
    try:
        plan = _check(a)
    except (ProfileError, WorkloadError, BadRequest, ValueError) as exc:
        print(f"switchyard bench tournament: {exc}", file=sys.stderr)
        return 2
    result_dir = make_result_dir(a.result_dir, "tournament")
    meta = _meta(a, plan)
    cells = grid(a.profiles, a.workloads, a.engines, a.loads)
    slos = "; ".join(f"{short_profile(p)} TTFT <= {s.slo.ttft_ms:g} ms, TPOT <= "
                     f"{s.slo.tpot_ms:g} ms" for p, s in plan.settings.items() if s.slo)
    print(f"tournament: {len(cells)} cells x {len(a.policies)} policies, {a.num_prompts} "
          f"requests per run, seed{'s' if len(a.seeds) > 1 else ''} "
          f"{','.join(map(str, a.seeds))}, salt {a.salt}, roles {','.join(a.roles)}\n"
          f"SLO: {slos}", flush=True)
    began = real_perf_counter()
    try:
        results = run_tournament(plan, cells, a.policies, a.jobs, a.seeds)
    except KeyboardInterrupt:
        print("interrupted: no summary", file=sys.stderr)
        return 130
    meta["wall_s"] = real_perf_counter() - began
    meta["loadavg_after"] = list(os.getloadavg())
    rows, per_seed = seed_verdicts(results, cells, a.policies, a.adaptive)
    errors = [e for found in results.values() for e in found.errors]
    if not rows:
        print("no cell has a capacity: nothing to compare\n" + "\n".join(errors))
        return 1
    groups = sorted({g for found in results.values() for g in found.capacities})
    print("\n".join(capacity_lines(results, groups, a.num_prompts)))
    print()
    print(tables(rows, a.policies))
    lines, summary = summary_lines(rows, a.study)
    print()
    print("\n".join(lines))
    print()
    print("\n".join(curve_lines(rows, a.policies, a.num_prompts)))
    for error in errors:
        print(f"FAILED {error}")
    path = os.path.join(result_dir, "summary.json")
    write_summary(path, meta, results, rows, summary, per_seed)
    print(f"{sum(len(found.runs) for found in results.values())} runs in {meta['wall_s']:.1f} s (load {meta['loadavg_before'][0]:.1f}"
          f" -> {meta['loadavg_after'][0]:.1f}); wrote {path}")
    if not a.no_plot:
        from switchyard_bench.tournament.heatmap import write_heatmap

        over = f", mean over seeds {','.join(map(str, a.seeds))}" if len(a.seeds) > 1 else ""
        title = (f"switchyard bench tournament: SLO attainment (%){over}, best fixed outlined\n"
                 f"{a.num_prompts} requests per run; {slos}")
        print(f"wrote {write_heatmap(os.path.join(result_dir, 'heatmap.png'), rows, a.policies, title)}")
    return 1 if errors else 0
