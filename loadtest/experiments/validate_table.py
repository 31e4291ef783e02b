"""The table of loadtest/experiments/validate_grid.sh: per workload x load x policy, the real
engines' mean JCT, P90 TTFT and SLO attainment (mean of the repetitions, min-max) against the
simulator's on the same runs, the errors against issue 20's targets (mean JCT within 15%, P90
TTFT within 25%, attainment within 10 points), and per workload x load the Kendall tau between
the policies' rankings by attainment, real and simulated (target >= 0.8); then, from the real
runs alone, adaptive against the best fixed policy of each workload x load (issue 21's real-engine
target: within the best one's run-to-run spread).

  python loadtest/experiments/validate_table.py bench_results/experiments/validate-grid
"""
from __future__ import annotations

import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict
from itertools import combinations

JCT_LIMIT, TTFT_LIMIT, ATTAIN_POINTS, TAU_TARGET = 0.15, 0.25, 10.0, 0.8
_REAL = re.compile(r"^(?P<workload>[a-z]+)-(?P<load>[0-9.]+)-rep(?P<rep>\d+)-(?P<policy>\w+)$")
_SIM = re.compile(r"^(?P<workload>[a-z]+)-(?P<load>[0-9.]+)-rep(?P<rep>\d+)$")
Cell = tuple[str, str, str]  # workload, load, policy
Row = dict[str, float]


def _row(run: dict[str, object]) -> Row:
    attained = run.get("slo_attainment")
    return {"jct": float(run["mean_jct_ms"]), "ttft": float(run["p90_ttft_ms"]),  # type: ignore[arg-type]
            "attain": 100.0 * float(attained or 0.0)}  # type: ignore[arg-type]


def collect(directory: str) -> tuple[dict[Cell, list[Row]], dict[Cell, list[Row]]]:
    """(workload, load, policy) -> one row per repetition, real and simulated."""
    real: dict[Cell, list[Row]] = defaultdict(list)
    sim: dict[Cell, list[Row]] = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(directory, "real", "*", "summary.json"))):
        match = _REAL.match(os.path.basename(os.path.dirname(path)))
        if match:
            with open(path, encoding="utf-8") as f:
                run = json.load(f)["runs"][0]
            real[(match["workload"], match["load"], match["policy"])].append(_row(run))
    for path in sorted(glob.glob(os.path.join(directory, "sim", "*", "summary.json"))):
        match = _SIM.match(os.path.basename(os.path.dirname(path)))
        if match:
            with open(path, encoding="utf-8") as f:
                for run in json.load(f)["runs"]:
                    sim[(match["workload"], match["load"], run["policy"])].append(_row(run))
    return real, sim


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-b of two paired lists (ties count on neither side)."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in combinations(range(len(xs)), 2):
        dx, dy = xs[i] - xs[j], ys[i] - ys[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif (dx > 0) == (dy > 0):
            concordant += 1
        else:
            discordant += 1
    n = concordant + discordant
    denominator = ((n + ties_x) * (n + ties_y)) ** 0.5
    return (concordant - discordant) / denominator if denominator else 1.0


def _spread(values: list[float], fmt: str) -> str:
    mean = statistics.fmean(values)
    if len(values) == 1:
        return fmt.format(mean)
    return f"{fmt.format(mean)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(real: dict[Cell, list[Row]], sim: dict[Cell, list[Row]]) -> str:
    lines = ["| workload | load | policy | mean JCT ms real / sim (err) | P90 TTFT ms real / sim "
             "(err) | attainment % real / sim (diff) | in target |",
             "|---|---|---|---|---|---|---|"]
    met = {"jct": 0, "ttft": 0, "attain": 0}
    cells = sorted(c for c in real if c in sim)
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cell in cells:
        r, s = real[cell], sim[cell]
        mean = {k: statistics.fmean(x[k] for x in r) for k in ("jct", "ttft", "attain")}
        sim_mean = {k: statistics.fmean(x[k] for x in s) for k in ("jct", "ttft", "attain")}
        jct_err = sim_mean["jct"] / mean["jct"] - 1 if mean["jct"] else float("nan")
        ttft_err = sim_mean["ttft"] / mean["ttft"] - 1 if mean["ttft"] else float("nan")
        diff = sim_mean["attain"] - mean["attain"]
        ok = {"jct": abs(jct_err) <= JCT_LIMIT, "ttft": abs(ttft_err) <= TTFT_LIMIT,
              "attain": abs(diff) <= ATTAIN_POINTS}
        for key, passed in ok.items():
            met[key] += passed
        verdict = ", ".join(name for name, key in (("JCT", "jct"), ("TTFT", "ttft"),
                                                   ("SLO", "attain")) if ok[key]) or "none"
        lines.append(
            f"| {cell[0]} | {cell[1]} | {cell[2]} | "
            f"{_spread([x['jct'] for x in r], '{:.0f}')} / {sim_mean['jct']:.0f} ({jct_err:+.0%}) | "
            f"{_spread([x['ttft'] for x in r], '{:.0f}')} / {sim_mean['ttft']:.0f} "
            f"({ttft_err:+.0%}) | {_spread([x['attain'] for x in r], '{:.1f}')} / "
            f"{sim_mean['attain']:.1f} ({diff:+.1f}) | {verdict} |")
        groups[(cell[0], cell[1])].append(cell[2])
    n = len(cells)
    lines += ["", f"mean JCT within {JCT_LIMIT:.0%}: {met['jct']}/{n}; P90 TTFT within "
              f"{TTFT_LIMIT:.0%}: {met['ttft']}/{n}; SLO attainment within "
              f"{ATTAIN_POINTS:g} points: {met['attain']}/{n}", "",
              "| workload | load | Kendall tau (attainment ranking, real vs sim) | real order |",
              "|---|---|---|---|"]
    taus = 0
    for (workload, load), policies in sorted(groups.items()):
        xs = [statistics.fmean(x["attain"] for x in real[(workload, load, p)]) for p in policies]
        ys = [statistics.fmean(x["attain"] for x in sim[(workload, load, p)]) for p in policies]
        tau = kendall_tau(xs, ys)
        taus += tau >= TAU_TARGET
        order = " > ".join(p for _, p in sorted(zip(xs, policies, strict=True), reverse=True))
        lines.append(f"| {workload} | {load} | {tau:+.2f} | {order} |")
    lines.append(f"\nKendall tau >= {TAU_TARGET}: {taus}/{len(groups)}")
    return "\n".join(lines + ["", adaptive_vs_best(real, groups)])


def adaptive_vs_best(real: dict[Cell, list[Row]], groups: dict[tuple[str, str], list[str]],
                     adaptive: str = "adaptive") -> str:
    """Real runs: per workload x load, the best fixed policy by mean attainment (min-max over
    repetitions) and adaptive's, and whether adaptive's best repetition reaches the best fixed
    policy's worst (inside its spread)."""
    lines = ["| workload | load | best fixed (real) | its attainment % | adaptive % | verdict |",
             "|---|---|---|---|---|---|"]
    inside = total = 0
    for (workload, load), policies in sorted(groups.items()):
        fixed = [p for p in policies if p != adaptive]
        if adaptive not in policies or not fixed:
            continue
        attain = {p: [x["attain"] for x in real[(workload, load, p)]] for p in policies}
        best = max(fixed, key=lambda p: statistics.fmean(attain[p]))
        mine = attain[adaptive]
        if statistics.fmean(mine) >= statistics.fmean(attain[best]):
            verdict = "best"
        elif max(mine) >= min(attain[best]):
            verdict = "within spread"
        else:
            verdict = "below spread"
        inside += verdict != "below spread"
        total += 1
        lines.append(f"| {workload} | {load} | {best} | {_spread(attain[best], '{:.1f}')} | "
                     f"{_spread(mine, '{:.1f}')} | {verdict} |")
    lines.append(f"\nadaptive best or within the best fixed policy's spread: {inside}/{total}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(table(*collect(sys.argv[1])))
