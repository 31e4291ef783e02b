"""A workload's capacity on a cluster, found in the simulator: the highest Poisson rate at which
round_robin keeps 90% of the SLO attainment it has at light load — the tournament's definition
(switchyard_bench/tournament/capacity.py), here for `bench serve`'s own workload options, so a
real sweep can be run at multiples of it on exactly the prompts the search used.

  python loadtest/experiments/sim_capacity.py --profile PROFILE.json --engines 2 \
      --slo-ttft-ms 2000 --slo-tpot-ms 200 --num-prompts 120 --workload sonnet ...

Prints the search's probes and, on its last line, the capacity in requests/s alone; exits 1 when
the search reaches its limit (the requests are a burst, so there is no edge to find).
"""
from __future__ import annotations

import argparse
import sys

from switchyard_bench.serve.request_body import Slo
from switchyard_bench.simulate.run import SimConfig, run_summary, simulate
from switchyard_bench.tournament.capacity import find_capacity
from switchyard_bench.tournament.runner import LIGHT_UTILISATION, service_s
from switchyard_bench.workloads import (
    ArrivalProcess,
    add_workload_arguments,
    build_workload,
    schedule,
)
from switchyard_sim.profile import load_profile


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", required=True, help="a built-in profile name or a JSON file")
    p.add_argument("--engines", type=int, default=2)
    p.add_argument("--policy", default="round_robin", help="the policy whose edge is found")
    p.add_argument("--num-prompts", type=int, default=120)
    p.add_argument("--salt", type=int, default=0)
    p.add_argument("--slo-ttft-ms", type=float, required=True)
    p.add_argument("--slo-tpot-ms", type=float, required=True)
    p.add_argument("--target", type=float, default=0.9,
                   help="the fraction of light-load attainment a rate must keep")
    p.add_argument("--tolerance", type=float, default=0.05)
    add_workload_arguments(p)
    return p


def main() -> int:
    a = build_parser().parse_args()
    if a.engines < 1 or a.num_prompts < 1:
        raise SystemExit("--engines and --num-prompts must be >= 1")
    profile = load_profile(a.profile)
    slo = Slo(a.slo_ttft_ms, a.slo_tpot_ms)
    workload = build_workload(a)
    cfg = SimConfig(profile, a.engines, ["any"] * a.engines, slo)

    def attainment(rate: float) -> float:
        work = schedule(workload, a.num_prompts, a.salt, ArrivalProcess(rate), seed=a.seed)
        run = simulate(cfg, a.policy, work)
        row = run_summary(run, a.policy, rate, 1.0, 1.0, a.salt, slo)
        value = float(row["slo_attainment"] or 0.0)
        print(f"probe {rate:.4g} req/s: {value:.1%}", file=sys.stderr, flush=True)
        return value

    alone = service_s(profile, schedule(workload, a.num_prompts, a.salt, ArrivalProcess(1.0),
                                        seed=a.seed))
    start = a.engines / alone  # the engines never idle if requests did not batch
    found = find_capacity(attainment, start, LIGHT_UTILISATION * start, a.target, a.tolerance)
    print(f"capacity {found.rate:.4g} req/s ({found.basis}; light-load attainment "
          f"{found.light_attainment:.1%} at {found.light_rate:.4g} req/s)", file=sys.stderr)
    if not found.bounded:
        # A run at a multiple of a bound measures nothing: every request would arrive at once.
        print(f"no capacity: attainment stayed above {found.threshold:.0%} up to the search "
              f"limit ({found.rate:.4g} req/s): {a.num_prompts} requests are a burst these "
              "engines absorb; raise --num-prompts", file=sys.stderr)
        return 1
    print(f"{found.rate:.4g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
