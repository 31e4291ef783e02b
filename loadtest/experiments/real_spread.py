"""The table of loadtest/experiments/policies_real.sh: per workload x rate, each policy's SLO
attainment over its interleaved repetitions (median, min-max), the best policy by median, and
whether each other policy is inside the best one's spread (its max reaches the best's min).

  python loadtest/experiments/real_spread.py bench_results/experiments/policies-real-2
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
from collections import defaultdict

_RUN = re.compile(r"^(?P<workload>[a-z]+)-(?P<rate>[0-9.]+)-rep(?P<rep>\d+)-(?P<policy>\w+)$")


def collect(directory: str) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(workload, rate) -> policy -> attainment (%) per repetition."""
    cells: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for name in sorted(os.listdir(directory)):
        match = _RUN.match(name)
        summary = os.path.join(directory, name, "summary.json")
        if match is None or not os.path.exists(summary):
            continue
        with open(summary, encoding="utf-8") as f:
            run = json.load(f)["runs"][0]
        attainment = run.get("slo_attainment")
        if attainment is not None:
            cells[(match["workload"], match["rate"])][match["policy"]].append(100 * attainment)
    return cells


def table(cells: dict[tuple[str, str], dict[str, list[float]]]) -> str:
    lines = ["| workload | req/s | policy | SLO attainment % median (min-max) | reps | "
             "vs best |", "|---|---|---|---|---|---|"]
    for (workload, rate), policies in sorted(cells.items(), key=lambda c: (c[0][0],
                                                                          float(c[0][1]))):
        best = max(policies, key=lambda p: statistics.median(policies[p]))
        low = min(policies[best])
        for policy, values in sorted(policies.items()):
            verdict = "best" if policy == best else (
                "within spread" if max(values) >= low else "below spread")
            lines.append(f"| {workload} | {rate} | {policy} | {statistics.median(values):.1f} "
                         f"({min(values):.1f}-{max(values):.1f}) | {len(values)} | {verdict} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(collect(sys.argv[1])))
