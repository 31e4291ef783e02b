"""`switchyard bench serve`: open-loop load against a running router, one run or a sweep of
policies x rates, with per-request JSONL, a side-by-side table and a JSON summary.

  switchyard bench serve --url http://127.0.0.1:8000 --workload sonnet --input-mean 256 \\
      --output-mean 32 --num-prompts 50 --policies round_robin,pd --rates 0.5,1,2
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import math
import os
import random
import signal
import sys
from typing import Any

import uvloop

from switchyard_bench.list_arguments import name_list, rate_list
from switchyard_bench.result_dir import make_result_dir
from switchyard_bench.serve.client import ClientConfig
from switchyard_bench.serve.report import header_lines, slo_capacity, table, write_summary
from switchyard_bench.serve.request_body import Slo
from switchyard_bench.serve.sweep import SweepConfig, SweepResult, run_sweep
from switchyard_bench.workloads import (
    ArrivalProcess,
    Workload,
    WorkloadError,
    add_workload_arguments,
    build_workload,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="switchyard bench serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the running router")
    p.add_argument("--num-prompts", type=int, default=100, help="requests per run")
    p.add_argument("--rate", "--rates", dest="rates", type=rate_list, default=[],
                   help="requests/s, comma-separated to sweep (inf = all at once); omitted: a "
                   "trace workload's own timestamps")
    p.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma shape of inter-arrival gaps: 1 = Poisson, <1 burstier")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="trace timestamps times this when no rate is given (0.5 = 2x faster)")
    p.add_argument("--policies", type=name_list, default=[],
                   help="comma-separated policies to sweep (PUT /admin/policy before each run; "
                   "the original policy is restored after); omitted: the router's current one")
    p.add_argument("--slo-ttft-ms", type=float, default=None)
    p.add_argument("--slo-tpot-ms", type=float, default=None)
    p.add_argument("--attainment-target", type=float, default=0.9,
                   help="SLO capacity = highest rate with at least this attainment")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per request")
    p.add_argument("--idle-timeout-s", type=float, default=600.0,
                   help="wait at most this long for idle engines before each run")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--served-model", default="default", help="the request's `model` field")
    p.add_argument("--api-key", default=os.environ.get("SWITCHYARD_API_KEY"),
                   help="bearer token (default: $SWITCHYARD_API_KEY)")
    p.add_argument("--salt", type=int, default=None,
                   help="prompt-content salt of the first run (default: random); run k uses "
                   "salt + k")
    p.add_argument("--result-dir", default=None,
                   help="where JSONL + summary.json go (default: bench_results/serve-<time>)")
    p.add_argument("--plot", action="store_true", help="also write PNG plots to the result dir")
    p.add_argument("--no-progress", action="store_true")
    add_workload_arguments(p)
    return p


def _arrivals_text(a: argparse.Namespace) -> str:
    if not a.rates:
        return f"trace timestamps x time-scale {a.time_scale:g}"
    rates = ",".join("inf" if math.isinf(r) else f"{r:g}" for r in a.rates)
    kind = "Poisson" if a.burstiness == 1.0 else f"gamma burstiness {a.burstiness:g}"
    return f"{rates} req/s ({kind})"


def _meta(a: argparse.Namespace, workload: Workload, slo: Slo) -> dict[str, Any]:
    return {"bench": "serve", "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "url": a.url, "workload": workload.describe(), "arrivals": _arrivals_text(a),
            "time_scale": a.time_scale if not a.rates else None, "burstiness": a.burstiness,
            "num_prompts": a.num_prompts, "seed": a.seed, "salt": a.salt,
            "slo": slo.body(), "attainment_target": a.attainment_target,
            "cpu_count": os.cpu_count()}


async def _main(cfg: SweepConfig, workload: Workload) -> SweepResult:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def first_interrupt() -> None:  # a second Ctrl-C falls through to KeyboardInterrupt
        print("\ninterrupted: stopping, summarising what has finished", file=sys.stderr)
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)

    loop.add_signal_handler(signal.SIGINT, first_interrupt)
    try:
        return await run_sweep(cfg, workload, stop)
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def run(args: argparse.Namespace) -> int:
    a = build_parser().parse_args(getattr(args, "rest", None) or [])
    try:
        slo = Slo(a.slo_ttft_ms, a.slo_tpot_ms)
        for rate in a.rates:
            ArrivalProcess(rate, a.burstiness)  # checks rate and burstiness
        workload = build_workload(a)
        size = workload.size()
        if a.num_prompts < 1 or (size is not None and a.num_prompts > size):
            raise WorkloadError(f"num-prompts must be in 1..{size or 'inf'} for the "
                                f"{workload.name} workload, got {a.num_prompts}")
    except (WorkloadError, ValueError) as exc:
        print(f"switchyard bench serve: {exc}", file=sys.stderr)
        return 2
    if a.salt is None:
        a.salt = random.randrange(2**31)
    result_dir = make_result_dir(a.result_dir, "serve")
    meta = _meta(a, workload, slo)
    print("\n".join(header_lines(meta)), flush=True)
    cfg = SweepConfig(
        ClientConfig(a.url.rstrip("/"), a.served_model, a.timeout_s, a.temperature, slo,
                     a.api_key),
        a.num_prompts, a.policies, a.rates, a.burstiness, a.time_scale, a.seed, a.salt,
        a.idle_timeout_s, result_dir, not a.no_progress)
    try:
        result = uvloop.run(_main(cfg, workload))
    except KeyboardInterrupt:  # the second Ctrl-C
        print("interrupted twice: stopped without a summary", file=sys.stderr)
        return 130
    if result.runs:
        print(table(result.runs))
        if slo and a.rates:
            caps = slo_capacity(result.runs, a.attainment_target)
            print(f"SLO capacity (highest rate with >= {a.attainment_target:.0%} attainment): "
                  + ", ".join(f"{p} {'-' if c is None else f'{c:g} req/s'}"
                              for p, c in caps.items()))
        summary_path = os.path.join(result_dir, "summary.json")
        write_summary(summary_path, meta, result.runs)
        print(f"wrote {summary_path} and one JSONL per run")
        if a.plot:
            from switchyard_bench.plot import plot_summaries

            for path in plot_summaries([summary_path], result_dir):
                print(f"wrote {path}")
    if result.error:
        print(f"switchyard bench serve: {result.error}", file=sys.stderr)
        return 1
    return 130 if result.interrupted else 0
