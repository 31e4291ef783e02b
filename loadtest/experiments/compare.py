"""Simulator vs real run, policy by policy: mean JCT and P90 TTFT (and, for context, mean TTFT
and mean TPOT) of two summary.json files of the same sweep, and the simulator's relative error.

  python loadtest/experiments/compare.py REAL/summary.json SIM/summary.json [--limit 0.25]
"""
from __future__ import annotations

import argparse
import json
from typing import Any

METRICS = [("mean_jct_ms", "mean JCT"), ("p90_ttft_ms", "P90 TTFT"),
           ("mean_ttft_ms", "mean TTFT"), ("mean_tpot_ms", "mean TPOT")]
CHECKED = ("mean_jct_ms", "p90_ttft_ms")  # the validation criterion


def _runs(path: str) -> dict[str, dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return {r["label"]: r for r in json.load(f)["runs"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("real")
    p.add_argument("sim")
    p.add_argument("--limit", type=float, default=0.25, help="relative error that passes")
    a = p.parse_args()
    real, sim = _runs(a.real), _runs(a.sim)
    labels = [label for label in real if label in sim]
    if not labels:
        raise SystemExit("the two summaries share no run label (policy@rate)")
    head = " | ".join(f"{name} real / sim (err)" for _, name in METRICS)
    print(f"| run | {head} | within {a.limit:.0%} |")
    print("|---" * (len(METRICS) + 2) + "|")
    passed = 0
    for label in labels:
        cells, ok = [], True
        for key, _ in METRICS:
            r, s = real[label][key], sim[label][key]
            err = (s - r) / r if r else float("nan")
            cells.append(f"{r:.0f} / {s:.0f} ({err:+.0%})")
            if key in CHECKED:
                ok = ok and abs(err) <= a.limit
        passed += ok
        print(f"| {label} | {' | '.join(cells)} | {'yes' if ok else 'no'} |")
    print(f"\n{passed} of {len(labels)} policies within {a.limit:.0%} on mean JCT and P90 TTFT")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
