"""The tournament's verdicts from its runs: per cell, each policy's SLO attainment and goodput,
the best fixed policy, each adaptive policy's regret (best fixed attainment − its own, in
points), and the summary lines issue 21's targets are read from; the text tables and
summary.json.

A policy is adaptive when its name starts with "adaptive" or it is listed with --adaptive;
every other policy is fixed. Prediction error: a run's summary carries `prediction_error`
("kind/pattern" -> {"n": requests, "median_abs_error": |predicted / actual - 1|}, the router's
closed loop, empty for policies that predict nothing); a cell reports, per kind (ttft, tpot),
the request-weighted median of those medians over all its runs, and the columns are left out
when no run has any.

Out of sample (`out_of_sample_lines`): for one policy under study (adaptive by default), its gap
to the best fixed policy per cell (best fixed attainment − its own, points), summarised apart
for the tuning set and the check set (workload_sets.py says which workload is in which): the
mean gap over the cells, the worst cell, the cells within 3 points.

Over several seeds (`--seeds`), a cell's attainment and goodput are each policy's mean over the
seeds, and the best fixed policy, the regrets and the summary are read off those means (past
capacity one seed moves a cell by more than the 3-point target); each policy's spread (max −
min over the seeds, in points) and each adaptive policy's per-seed regrets come with them.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from switchyard_bench.tournament.cells import Cell, Group, short_profile
from switchyard_bench.tournament.runner import STEADY_FACTOR, Results
from switchyard_bench.tournament.workload_sets import CHECK, TUNE, generator_seed, workload_set

HIGH_LOAD = 0.9  # loads at or above it are where adaptive should beat every fixed pattern
REGRET_BOUND = 3.0  # points: issue 21's "adaptive >= best fixed - 3 points"


def is_adaptive(policy: str, listed: Sequence[str]) -> bool:
    return policy.startswith("adaptive") or policy in listed


def prediction_error(runs: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Per kind, the request-weighted median of the runs' per-pattern median |error|."""
    by_kind: dict[str, list[tuple[float, int]]] = {}
    for run in runs:
        for key, entry in (run.get("prediction_error") or {}).items():
            median, n = entry.get("median_abs_error"), entry.get("n")
            if isinstance(median, int | float) and isinstance(n, int) and n > 0:
                by_kind.setdefault(key.split("/", 1)[0], []).append((abs(float(median)), n))
    out = {}
    for kind, pairs in sorted(by_kind.items()):
        half, seen = sum(n for _, n in pairs) / 2, 0
        for median, n in sorted(pairs):
            seen += n
            if seen >= half:
                out[kind] = median
                break
    return out


@dataclass(slots=True)
class CellVerdict:
    cell: Cell
    capacity: float
    rate: float
    attainment: dict[str, float | None]  # percent
    goodput: dict[str, float | None]  # requests within SLO per second
    best_fixed: list[str]  # the fixed policies with the highest attainment (ties: all)
    best_fixed_attainment: float | None
    regret: dict[str, float | None]  # adaptive policy -> points below the best fixed
    prediction_error: dict[str, float]  # kind -> median |error| over the cell's runs
    failed: dict[str, tuple[int, str]]  # policy -> failed requests and its commonest error
    # Over several seeds: the seeds averaged, each policy's max - min attainment over them
    # (points) and each adaptive policy's regret in each seed (that seed's best fixed).
    seeds: list[int] = field(default_factory=list)
    spread: dict[str, float | None] = field(default_factory=dict)
    seed_regret: dict[str, list[float | None]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        g = self.cell.group
        several = {"seeds": self.seeds, "spread_points": self.spread,
                   "seed_regret_points": self.seed_regret} if len(self.seeds) > 1 else {}
        return {**several, "profile": g.profile, "workload": g.workload, "engines": g.engines,
                "load": self.cell.load, "capacity": self.capacity, "rate": self.rate,
                "attainment_pct": self.attainment, "goodput": self.goodput,
                "best_fixed": self.best_fixed,
                "best_fixed_attainment_pct": self.best_fixed_attainment,
                "regret_points": self.regret,
                "prediction_error_median_abs": self.prediction_error,
                "failed": {p: n for p, (n, _) in self.failed.items()}}


def _pct(run: dict[str, Any]) -> float | None:
    value = run.get("slo_attainment")
    return None if value is None else round(100.0 * value, 6)


def _failures(runs: dict[str, dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """Policies whose run failed requests (or failed itself): how many, and why."""
    out = {}
    for policy, run in runs.items():
        if run.get("error"):  # the run raised: every request counts as failed
            out[policy] = (int(run.get("requests") or 0), str(run["error"]))
        elif run.get("failed"):
            out[policy] = (int(run["failed"]), next(iter(run.get("errors") or {}), ""))
    return out


def _judge(attainment: dict[str, float | None], adaptive: Sequence[str]
           ) -> tuple[list[str], float | None, dict[str, float | None]]:
    """The best fixed policies, their attainment, and each adaptive policy's regret."""
    fixed = {p: a for p, a in attainment.items()
             if not is_adaptive(p, adaptive) and a is not None}
    best = max(fixed.values()) if fixed else None
    regret = {p: (None if best is None or a is None else round(best - a, 6))
              for p, a in attainment.items() if is_adaptive(p, adaptive)}
    return [p for p, a in fixed.items() if a == best], best, regret


def verdicts(results: Results, cells: Sequence[Cell], policies: Sequence[str],
             adaptive: Sequence[str]) -> list[CellVerdict]:
    out = []
    for cell in cells:
        if cell.group not in results.capacities:  # its capacity search failed
            continue
        runs = {p: results.runs[(cell, p)] for p in policies}
        attainment = {p: _pct(r) for p, r in runs.items()}
        goodput = {p: r.get("goodput") for p, r in runs.items()}
        capacity = results.capacities[cell.group]["rate"]
        best_fixed, best, regret = _judge(attainment, adaptive)
        out.append(CellVerdict(cell, capacity, cell.load * capacity, attainment, goodput,
                               best_fixed, best, regret, prediction_error(runs.values()),
                               _failures(runs)))
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values there are (a run that raised has none); None when none."""
    present = [v for v in values if v is not None]
    return round(fmean(present), 6) if present else None


def seed_verdicts(results: dict[int, Results], cells: Sequence[Cell], policies: Sequence[str],
                  adaptive: Sequence[str]) -> tuple[list[CellVerdict], dict[int, list[CellVerdict]]]:
    """Each cell's verdict from the policies' mean attainment over the seeds (with the spread
    and per-seed regrets), and each seed's own verdicts. One seed: its verdicts as they are."""
    per_seed = {seed: verdicts(r, cells, policies, adaptive) for seed, r in results.items()}
    if len(per_seed) == 1:
        return next(iter(per_seed.values())), per_seed
    out = []
    for cell in cells:
        rows = {seed: row for seed, rs in per_seed.items() for row in rs if row.cell == cell}
        if not rows:  # no seed found its group's capacity
            continue
        attainment = {p: _mean(r.attainment[p] for r in rows.values()) for p in policies}
        goodput = {p: _mean(r.goodput[p] for r in rows.values()) for p in policies}
        spread: dict[str, float | None] = {}
        for p in policies:
            values = [v for r in rows.values() if (v := r.attainment[p]) is not None]
            spread[p] = round(max(values) - min(values), 6) if values else None
        capacity = fmean(r.capacity for r in rows.values())
        rate = fmean(r.rate for r in rows.values())
        best_fixed, best, regret = _judge(attainment, adaptive)
        failed: dict[str, tuple[int, str]] = {}
        for r in rows.values():  # failed requests summed over the seeds, the first error kept
            for p, (n, why) in r.failed.items():
                before, first = failed.get(p, (0, why))
                failed[p] = (before + n, first)
        runs = [results[seed].runs[(cell, p)] for seed in rows for p in policies]
        out.append(CellVerdict(cell, capacity, rate, attainment, goodput, best_fixed, best,
                               regret, prediction_error(runs), failed, list(rows), spread,
                               {p: [r.regret.get(p) for r in rows.values()] for p in regret}))
    return out, per_seed


def summary_lines(rows: Sequence[CellVerdict], study: str | None = None
                  ) -> tuple[list[str], dict[str, Any]]:
    """Per adaptive policy: its largest regret and where, the cells within REGRET_BOUND, and the
    cells at load >= HIGH_LOAD where it beats the best fixed policy; then, for the policy under
    `study`, its gaps on the tuning set beside the check set (when a generated workload ran)."""
    lines: list[str] = []
    body: dict[str, Any] = {}
    adaptive = list(dict.fromkeys(p for r in rows for p in r.regret))
    for policy in adaptive:
        scored = [(r.regret[policy], r) for r in rows if r.regret.get(policy) is not None]
        if not scored:
            continue
        worst, where = max(scored, key=lambda s: s[0] or 0.0)
        within = sum(1 for reg, _ in scored if (reg or 0.0) <= REGRET_BOUND)
        high = [(reg, r) for reg, r in scored if r.cell.load >= HIGH_LOAD]
        beats = [r.cell.label for reg, r in high if (reg or 0.0) < 0]
        body[policy] = {"max_regret_points": worst, "max_regret_cell": where.cell.label,
                        "cells": len(scored), "cells_within_3_points": within,
                        "high_load_cells": len(high), "high_load_cells_beating_best_fixed":
                        len(beats), "beats_best_fixed_at_high_load": beats}
        lines.append(f"{policy}: max regret {worst:+.1f} points ({where.cell.label}); within "
                     f"{REGRET_BOUND:g} points of the best fixed policy in {within}/"
                     f"{len(scored)} cells; beats the best fixed policy in {len(beats)}/"
                     f"{len(high)} cells at load >= {HIGH_LOAD:g}")
    failed: dict[str, list[Any]] = {}
    for r in rows:
        for p, (n, why) in r.failed.items():
            entry = failed.setdefault(p, [0, 0, why])
            entry[0] += n
            entry[1] += 1
    for p, (n, cells, why) in failed.items():
        lines.append(f"FAILED REQUESTS {p}: {n} in {cells} cells (first error: {why[:200]})")
    body["failed_requests"] = {p: n for p, (n, _, _) in failed.items()}
    wins: dict[str, int] = {}
    for r in rows:
        for p in r.best_fixed:
            wins[p] = wins.get(p, 0) + 1
    body["best_fixed_counts"] = dict(sorted(wins.items(), key=lambda kv: (-kv[1], kv[0])))
    lines.append("best fixed policy (cells, ties counted for each): " + ", ".join(
        f"{p} {n}" for p, n in body["best_fixed_counts"].items()))
    split_lines, split = out_of_sample_lines(rows, study) if study else ([], {})
    if split:
        lines += ["", *split_lines]
        body["out_of_sample"] = split
    return lines, body


def _gap_summary(gaps: list[tuple[float, CellVerdict]]) -> dict[str, Any]:
    if not gaps:
        return {"cells": 0}
    worst, where = max(gaps, key=lambda g: g[0])
    within = sum(1 for gap, _ in gaps if gap <= REGRET_BOUND)
    return {"cells": len(gaps), "mean_gap_points": round(fmean(g for g, _ in gaps), 6),
            "worst_gap_points": worst, "worst_cell": where.cell.label,
            "cells_within_3_points": within, "share_within_3_points": within / len(gaps),
            "workloads": sorted({r.cell.group.workload for _, r in gaps})}


def out_of_sample_lines(rows: Sequence[CellVerdict], policy: str
                        ) -> tuple[list[str], dict[str, Any]]:
    """`policy`'s gap to the best fixed policy per cell, the tuning set's cells beside the check
    set's; no lines when no generated workload ran (then there is no check set to speak of)."""
    if not any(generator_seed(r.cell.group.workload) is not None for r in rows):
        return [], {}
    gaps: dict[str, list[tuple[float, CellVerdict]]] = {TUNE: [], CHECK: []}
    for r in rows:
        mine = r.attainment.get(policy)
        if mine is not None and r.best_fixed_attainment is not None:
            gaps[workload_set(r.cell.group.workload)].append(
                (round(r.best_fixed_attainment - mine, 6), r))
    body: dict[str, Any] = {"policy": policy, TUNE: _gap_summary(gaps[TUNE]),
                            CHECK: _gap_summary(gaps[CHECK])}
    sets = (body[TUNE], body[CHECK])

    def row(label: str, cell: Any) -> str:
        return f"{label:<20}" + "".join(f"{cell(b) if b['cells'] else '-':>32}" for b in sets)

    lines = [f"out of sample: {policy} against the best fixed policy per cell (gap = best fixed "
             f"- {policy}, points; tuning set: named workloads and even generator seeds, check "
             "set: odd generator seeds)",
             f"{'':<20}{'tuning set':>32}{'check set':>32}",
             row("cells", lambda b: str(b["cells"])),
             row("mean gap", lambda b: f"{b['mean_gap_points']:+.1f}"),
             row("worst cell", lambda b: f"{b['worst_gap_points']:+.1f}"),
             row("  where", lambda b: b["worst_cell"]),
             row(f"within {REGRET_BOUND:g} points", lambda b: f"{b['cells_within_3_points']}/"
                 f"{b['cells']} ({b['share_within_3_points']:.0%})")]
    return lines, body


def fmt(value: float | None, spec: str) -> str:
    """`value` formatted by `spec`, or "-" when there is none."""
    return "-" if value is None else format(value, spec)


def _best(row: CellVerdict) -> str:
    names = row.best_fixed
    if len(names) > 2:
        return f"{names[0]} +{len(names) - 1} tied"
    return "=".join(names) or "-"


def tables(rows: Sequence[CellVerdict], policies: Sequence[str]) -> str:
    """Attainment (best fixed marked *) with the regret and prediction-error columns, then
    goodput, one row per cell; over several seeds the attainment and goodput are means, each
    adaptive policy's per-seed regrets follow its regret, and a table of spreads comes last."""
    adaptive = list(dict.fromkeys(p for r in rows for p in r.regret))
    kinds = sorted({k for r in rows for k in r.prediction_error})
    seeds = max((r.seeds for r in rows), key=len, default=[])
    several = len(seeds) > 1
    head = ["profile", "workload", "eng", "load", "req/s"]
    widths = [max(5, *(len(short_profile(r.cell.group.profile)) for r in rows)),
              max(8, *(len(r.cell.group.workload) for r in rows)), 3, 4, 7]
    pol_w = [max(len(p), 7) for p in policies]

    def prefix(r: CellVerdict) -> list[str]:
        g = r.cell.group
        return [short_profile(g.profile), g.workload, str(g.engines), f"{r.cell.load:g}",
                f"{r.rate:.3g}"]

    def line(cells: list[str], ws: list[int]) -> str:
        return "  ".join(f"{c:<{w}}" if i < 2 else f"{c:>{w}}"
                         for i, (c, w) in enumerate(zip(cells, ws, strict=True)))

    def per_seed(r: CellVerdict, p: str) -> str:
        return " ".join(fmt(v, "+.1f") for v in r.seed_regret.get(p, []))

    extra = ["best fixed"]
    for p in adaptive:
        extra += [f"regret {p}"] + ([f"per seed {p}"] if several else [])
    extra += [f"{k} err" for k in kinds]
    tails = []
    for r in rows:
        tail = [_best(r)]
        for p in adaptive:
            tail += [fmt(r.regret[p], "+.1f")] + ([per_seed(r, p)] if several else [])
        tails.append(tail + [fmt(r.prediction_error.get(k), ".3f") for k in kinds])
    extra_w = [max(len(x), 7, *(len(t[i]) for t in tails)) for i, x in enumerate(extra)]
    mean = f" - mean over seeds {','.join(map(str, seeds))}" if several else ""
    out = [f"SLO attainment (%){mean}, * = best fixed policy; regret = best fixed - adaptive "
           "(points)", line(head + list(policies) + extra, widths + pol_w + extra_w)]
    for r, tail in zip(rows, tails, strict=True):
        marks = [fmt(r.attainment[p], ".1f") + ("*" if p in r.best_fixed else "")
                 for p in policies]
        out.append(line(prefix(r) + marks + tail, widths + pol_w + extra_w))
    out += ["", f"goodput (requests within SLO per second){mean}",
            line(head + list(policies), widths + pol_w)]
    for r in rows:
        out.append(line(prefix(r) + [fmt(r.goodput[p], ".3f") for p in policies],
                        widths + pol_w))
    if several:
        out += ["", "spread of SLO attainment over the seeds (max - min, points)",
                line(head + list(policies), widths + pol_w)]
        for r in rows:
            out.append(line(prefix(r) + [fmt(r.spread.get(p), ".1f") for p in policies],
                            widths + pol_w))
    return "\n".join(out)


def capacity_lines(results: dict[int, Results], groups: Sequence[Group],
                   num_prompts: int) -> list[str]:
    """One line per group and seed; a second where its runs are a burst rather than a steady
    load."""
    lines = []
    for seed, found in results.items():
        tag = f"seed {seed} " if len(results) > 1 else ""
        for g in groups:
            if g not in found.capacities:
                continue
            c = found.capacities[g]
            lines.append(f"capacity {tag}{g.label}: {c['rate']:.4g} req/s, {c['policy']} keeps "
                         f"{c['basis']} (light load {c['light_rate']:.3g} req/s: "
                         f"{c['light_attainment']:.1%})")
            if not c["steady"]:
                lines.append(f"  not a steady load: the {num_prompts} requests arrive within "
                             f"{c['arrival_span_s']:.3g} s, under {STEADY_FACTOR} x their mean "
                             f"JCT ({c['mean_jct_s']:.3g} s), so this is the burst the engines "
                             "absorb; raise --num-prompts until the capacity stops falling")
    return lines


def write_summary(path: str, meta: dict[str, Any], results: dict[int, Results],
                  rows: Sequence[CellVerdict], summary: dict[str, Any],
                  per_seed: dict[int, list[CellVerdict]]) -> None:
    """The settings, every capacity search and run (each with its seed), the cells' verdicts
    and the summary (over several seeds: from the means, and each seed's own as well)."""
    capacities = [{"seed": seed, "profile": g.profile, "workload": g.workload,
                   "engines": g.engines, **c}
                  for seed, found in results.items() for g, c in sorted(found.capacities.items())]
    runs = [{"seed": seed, "profile": c.group.profile, "workload": c.group.workload,
             "engines": c.group.engines, "load": c.load, **run}
            for seed, found in results.items()
            for (c, _), run in sorted(found.runs.items(), key=lambda kv: (kv[0][0],
                                                                          kv[1]["policy"]))]
    body = {**meta, "capacities": capacities, "cells": [r.to_json() for r in rows],
            "summary": summary, "errors": [e for found in results.values() for e in found.errors],
            "runs": runs}
    if len(results) > 1:
        body["per_seed"] = {str(seed): {"cells": [r.to_json() for r in seed_rows],
                                        "summary": summary_lines(seed_rows,
                                                                 meta.get("study"))[1]}
                            for seed, seed_rows in per_seed.items()}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1, default=str)
