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
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from switchyard_bench.tournament.cells import Cell, Group, short_profile
from switchyard_bench.tournament.runner import STEADY_FACTOR, Results

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

    def to_json(self) -> dict[str, Any]:
        g = self.cell.group
        return {"profile": g.profile, "workload": g.workload, "engines": g.engines,
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


def verdicts(results: Results, cells: Sequence[Cell], policies: Sequence[str],
             adaptive: Sequence[str]) -> list[CellVerdict]:
    out = []
    for cell in cells:
        if cell.group not in results.capacities:  # its capacity search failed
            continue
        runs = {p: results.runs[(cell, p)] for p in policies}
        attainment = {p: _pct(r) for p, r in runs.items()}
        goodput = {p: r.get("goodput") for p, r in runs.items()}
        fixed = {p: a for p, a in attainment.items()
                 if not is_adaptive(p, adaptive) and a is not None}
        best = max(fixed.values()) if fixed else None
        regret = {p: (None if best is None or a is None else round(best - a, 6))
                  for p, a in attainment.items() if is_adaptive(p, adaptive)}
        capacity = results.capacities[cell.group]["rate"]
        out.append(CellVerdict(cell, capacity, cell.load * capacity, attainment, goodput,
                               [p for p, a in fixed.items() if a == best], best, regret,
                               prediction_error(runs.values()), _failures(runs)))
    return out


def summary_lines(rows: Sequence[CellVerdict]) -> tuple[list[str], dict[str, Any]]:
    """Per adaptive policy: its largest regret and where, the cells within REGRET_BOUND, and the
    cells at load >= HIGH_LOAD where it beats the best fixed policy."""
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
    return lines, body


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _best(row: CellVerdict) -> str:
    names = row.best_fixed
    if len(names) > 2:
        return f"{names[0]} +{len(names) - 1} tied"
    return "=".join(names) or "-"


def tables(rows: Sequence[CellVerdict], policies: Sequence[str]) -> str:
    """Attainment (best fixed marked *) with the regret and prediction-error columns, then
    goodput, one row per cell."""
    adaptive = list(dict.fromkeys(p for r in rows for p in r.regret))
    kinds = sorted({k for r in rows for k in r.prediction_error})
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

    extra = ["best fixed"] + [f"regret {p}" for p in adaptive] + [f"{k} err" for k in kinds]
    extra_w = [max(10, *(len(_best(r)) for r in rows))] + \
        [max(len(x), 7) for x in extra[1:]]
    out = ["SLO attainment (%), * = best fixed policy; regret = best fixed - adaptive (points)",
           line(head + list(policies) + extra, widths + pol_w + extra_w)]
    for r in rows:
        marks = [_fmt(r.attainment[p], ".1f") + ("*" if p in r.best_fixed else "")
                 for p in policies]
        tail = [_best(r)] + [_fmt(r.regret[p], "+.1f") for p in adaptive]
        tail += [_fmt(r.prediction_error.get(k), ".3f") for k in kinds]
        out.append(line(prefix(r) + marks + tail, widths + pol_w + extra_w))
    out += ["", "goodput (requests within SLO per second)",
            line(head + list(policies), widths + pol_w)]
    for r in rows:
        out.append(line(prefix(r) + [_fmt(r.goodput[p], ".3f") for p in policies],
                        widths + pol_w))
    return "\n".join(out)


def capacity_lines(results: Results, groups: Sequence[Group], num_prompts: int) -> list[str]:
    """One line per group; a second where its runs are a burst rather than a steady load."""
    lines = []
    for g in groups:
        c = results.capacities[g]
        lines.append(f"capacity {g.label}: {c['rate']:.4g} req/s, {c['policy']} keeps "
                     f"{c['basis']} (light load {c['light_rate']:.3g} req/s: "
                     f"{c['light_attainment']:.1%})")
        if not c["steady"]:
            lines.append(f"  not a steady load: the {num_prompts} requests arrive within "
                         f"{c['arrival_span_s']:.3g} s, under {STEADY_FACTOR} x their mean JCT "
                         f"({c['mean_jct_s']:.3g} s), so this is the burst the engines absorb; "
                         "raise --num-prompts until the capacity stops falling")
    return lines


def write_summary(path: str, meta: dict[str, Any], results: Results,
                  rows: Sequence[CellVerdict], summary: dict[str, Any]) -> None:
    capacities = [{"profile": g.profile, "workload": g.workload, "engines": g.engines, **c}
                  for g, c in sorted(results.capacities.items())]
    runs = [{"profile": c.group.profile, "workload": c.group.workload,
             "engines": c.group.engines, "load": c.load, **run}
            for (c, _), run in sorted(results.runs.items(), key=lambda kv: (kv[0][0],
                                                                            kv[1]["policy"]))]
    body = {**meta, "capacities": capacities, "cells": [r.to_json() for r in rows],
            "summary": summary, "errors": results.errors, "runs": runs}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1, default=str)
