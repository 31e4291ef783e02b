"""Print a sweep's runs side by side (one column per policy@rate) under the parameters that
shape them, compute each policy's SLO capacity (DistServe's goodput: the highest rate whose
attainment reaches the target), and write the JSON summary file `switchyard bench plot` reads."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

_ROWS: list[tuple[str, str, str]] = [
    ("requests sent", "requests", "{:.0f}"),
    ("completed", "completed", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("interrupted", "interrupted", "{:.0f}"),
    ("duration (s)", "duration_s", "{:.2f}"),
    ("request throughput (req/s)", "request_throughput", "{:.3f}"),
    ("output throughput (tok/s)", "output_throughput", "{:.1f}"),
    ("prompt tokens not prefilled", "cached_tokens", "{:.0f}"),
]
for _name, _label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("jct", "JCT")):
    for _stat, _stat_label in (("mean", "mean"), ("median", "median"), ("p90", "P90"),
                               ("p99", "P99")):
        _ROWS.append((f"{_stat_label} {_label} (ms)", f"{_stat}_{_name}_ms", "{:.1f}"))
_ROWS += [("goodput (req/s)", "goodput", "{:.3f}"),
          ("SLO attainment (%)", "slo_attainment", "{:.1%}")]


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value).rstrip("%") if fmt.endswith("%}") else fmt.format(value)


def header_lines(meta: dict[str, Any]) -> list[str]:
    workload = ", ".join(f"{k}={v}" for k, v in meta["workload"].items())
    lines = [f"router {meta['url']}   workload: {workload}",
             f"arrivals: {meta['arrivals']}   requests per run: {meta['num_prompts']}   "
             f"salt base {meta['salt']}   seed {meta['seed']}"]
    slo = meta.get("slo") or {}
    if slo:
        lines.append("SLO: " + ", ".join(f"{k} <= {v:g}" for k, v in slo.items())
                     + f"   attainment target {meta['attainment_target']:.0%}")
    return lines


def table(runs: Sequence[dict[str, Any]]) -> str:
    labels = [str(r["label"]) for r in runs]
    width0 = max(len(row[0]) for row in _ROWS)
    widths = [max(len(label), 9) for label in labels]
    lines = ["  ".join([" " * width0, *(f"{label:>{w}}" for label, w in zip(labels, widths, strict=True))])]
    for title, key, fmt in _ROWS:
        if key == "interrupted" and not any(r.get(key) for r in runs):
            continue
        cells = [f"{_cell(r.get(key), fmt):>{w}}" for r, w in zip(runs, widths, strict=True)]
        lines.append("  ".join([f"{title:<{width0}}", *cells]))
    return "\n".join(lines)


def slo_capacity(runs: Sequence[dict[str, Any]], target: float) -> dict[str, float | None]:
    """Per policy, the highest swept rate whose SLO attainment is >= target (None: none).
    Runs cut short by Ctrl-C do not count."""
    out: dict[str, float | None] = {}
    for r in runs:
        out.setdefault(r["policy"], None)
        if r.get("interrupted"):
            continue
        attained, rate = r.get("slo_attainment"), r.get("rate")
        if attained is not None and rate is not None and attained >= target and (
                out[r["policy"]] is None or rate > (out[r["policy"]] or 0.0)):
            out[r["policy"]] = rate
    return out


def write_summary(path: str, meta: dict[str, Any], runs: Sequence[dict[str, Any]]) -> None:
    body = {**meta, "runs": list(runs)}
    if meta.get("slo") and any(r.get("rate") is not None for r in runs):
        body["slo_capacity"] = slo_capacity(runs, meta["attainment_target"])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1, default=str)
