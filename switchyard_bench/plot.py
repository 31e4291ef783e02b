"""`switchyard bench plot`: the seeds' figures from `switchyard bench serve` (or `bench simulate`)
summaries — mean and P99 TTFT / TPOT / JCT against request rate, and SLO attainment against rate,
one line per policy.

  switchyard bench plot bench_results/serve-*/summary.json --out-dir docs/plots

Runs without a numeric rate (trace replays) are placed at their measured request throughput.
The workload and its scales are written under each figure's title.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

_LATENCY_PANELS = [(stat, name) for stat in ("mean", "p99") for name in ("ttft", "tpot", "jct")]
_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "jct": "JCT"}


def _load(paths: Sequence[str]) -> tuple[list[dict[str, Any]], str]:
    runs: list[dict[str, Any]] = []
    captions = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
        if body.get("bench") not in ("serve", "simulate") or not isinstance(body.get("runs"),
                                                                          list):
            raise ValueError(f"{path} is not a `switchyard bench serve` or `bench simulate` "
                             "summary.json")
        runs.extend(body["runs"])
        workload = ", ".join(f"{k}={v}" for k, v in body.get("workload", {}).items())
        slo = ", ".join(f"{k}<={v:g}" for k, v in (body.get("slo") or {}).items())
        captions.append(f"{workload}; {body.get('arrivals', '')}" + (f"; SLO {slo}" if slo
                                                                    else ""))
    return runs, " | ".join(dict.fromkeys(captions))


def _x(run: dict[str, Any]) -> float:
    rate = run.get("rate")
    return float(rate) if rate is not None else float(run.get("request_throughput") or 0.0)


def _series(runs: Sequence[dict[str, Any]], key: str) -> dict[str, tuple[list[float], list[float]]]:
    by_policy: dict[str, list[tuple[float, float]]] = {}
    for r in runs:
        value = r.get(key)
        if value is not None:
            by_policy.setdefault(str(r["policy"]), []).append((_x(r), float(value)))
    return {p: ([x for x, _ in sorted(pts)], [y for _, y in sorted(pts)])
            for p, pts in by_policy.items()}


def plot_summaries(paths: Sequence[str], out_dir: str, prefix: str = "") -> list[str]:
    """Write latency_vs_rate.png (and slo_attainment_vs_rate.png when SLOs were given)."""
    try:
        import matplotlib
    except ImportError as err:  # serving images leave the plotting extra out
        raise SystemExit("PNG output needs matplotlib: pip install 'switchyard[plot]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, caption = _load(paths)
    os.makedirs(out_dir, exist_ok=True)

    def draw(ax: Any, key: str, scale: float, title: str, ylabel: str) -> None:
        for policy, (xs, ys) in _series(runs, key).items():
            ax.plot(xs, [scale * y for y in ys], marker="o", label=policy)
        ax.set(title=title, xlabel="request rate (req/s)", ylabel=ylabel)
        ax.grid(alpha=0.3)

    def save(fig: Any, name: str, title: str) -> str:
        fig.suptitle(f"{title}\n{caption}", fontsize=9)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{prefix}{name}")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    fig, axes = plt.subplots(2, 3, figsize=(13, 7), squeeze=False)
    for ax, (stat, name) in zip(axes.flat, _LATENCY_PANELS, strict=True):
        draw(ax, f"{stat}_{name}_ms", 1.0,
             f"{'Mean' if stat == 'mean' else 'P99'} {_NAMES[name]}", "ms")
    axes[0][0].legend()
    written = [save(fig, "latency_vs_rate.png", "latency vs request rate")]
    if _series(runs, "slo_attainment"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        draw(ax, "slo_attainment", 100.0, "", "SLO attainment (%)")
        ax.set_ylim(0, 102)
        ax.legend()
        written.append(save(fig, "slo_attainment_vs_rate.png", "SLO attainment vs request rate"))
    return written


def run(args: argparse.Namespace) -> int:
    p = argparse.ArgumentParser(prog="switchyard bench plot", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("summaries", nargs="+", help="summary.json files from bench serve")
    p.add_argument("--out-dir", default="docs/plots")
    p.add_argument("--prefix", default="", help="file name prefix for the PNGs")
    a = p.parse_args(getattr(args, "rest", None) or [])
    try:
        for path in plot_summaries(a.summaries, a.out_dir, a.prefix):
            print(f"wrote {path}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"switchyard bench plot: {exc}", file=sys.stderr)
        return 2
    return 0
