"""A markdown table of chosen figures from `bench serve` / `bench simulate` summary.json files,
one row per run, and each policy's SLO capacity (the highest rate with >= 90% attainment), for
docs/experiments.md.

  python loadtest/experiments/table.py bench_results/experiments/tropical-sim/summary.json \\
      --metrics mean_ttft_ms,p90_ttft_ms,mean_tpot_ms,slo_attainment
"""
from __future__ import annotations

import argparse
import json

from switchyard_bench.serve.report import slo_capacity

DEFAULT = "mean_ttft_ms,p99_ttft_ms,mean_tpot_ms,p99_tpot_ms,mean_jct_ms,p99_jct_ms"


def _cell(value: object, metric: str) -> str:
    if value is None:
        return "-"
    if "attainment" in metric and isinstance(value, float):
        return f"{value:.0%}"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("summaries", nargs="+")
    p.add_argument("--metrics", default=DEFAULT, help="summary keys, comma-separated")
    p.add_argument("--attainment-target", type=float, default=0.9)
    a = p.parse_args()
    metrics = [m for m in a.metrics.split(",") if m]
    runs = []
    for path in a.summaries:
        with open(path, encoding="utf-8") as f:
            runs.extend(json.load(f)["runs"])
    print("| run | " + " | ".join(metrics) + " |")
    print("|---" * (len(metrics) + 1) + "|")
    for run in runs:
        print(f"| {run['label']} | " + " | ".join(_cell(run.get(m), m) for m in metrics) + " |")
    if any(run.get("slo_attainment") is not None for run in runs):
        caps = slo_capacity(runs, a.attainment_target)
        print(f"\nSLO capacity (highest rate with >= {a.attainment_target:.0%} attainment): "
              + ", ".join(f"{k} {'-' if v is None else f'{v:g} req/s'}" for k, v in caps.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
