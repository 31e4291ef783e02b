"""`switchyard bench plot`: PNGs from bench serve summaries, one line per policy; bad input is a
clear error."""
from __future__ import annotations

import argparse
import json

from switchyard_bench.plot import _series
from switchyard_bench.plot import run as bench_plot
from switchyard_bench.serve.report import slo_capacity, table


def _run(policy: str, rate: float | None, ttft: float, attained: float) -> dict[str, object]:
    return {"label": f"{policy}@{rate}", "policy": policy, "rate": rate,
            "request_throughput": 1.5, "mean_ttft_ms": ttft, "p99_ttft_ms": 2 * ttft,
            "mean_tpot_ms": 10.0, "p99_tpot_ms": 20.0, "mean_jct_ms": 300.0,
            "p99_jct_ms": 600.0, "slo_attainment": attained, "requests": 10, "completed": 10,
            "failed": 0, "interrupted": 0}


RUNS = [_run("pd", 2.0, 120.0, 0.8), _run("dp", 1.0, 80.0, 1.0), _run("pd", 1.0, 100.0, 0.95),
        _run("dp", 2.0, 90.0, 0.9)]


def test_plot_writes_pngs(tmp_path, capsys):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"bench": "serve", "workload": {"workload": "mooncake",
                                                               "length_scale": 0.03},
                                "arrivals": "1,2 req/s (Poisson)", "runs": RUNS}))
    out = tmp_path / "plots"
    assert bench_plot(argparse.Namespace(rest=[str(path), "--out-dir", str(out)])) == 0
    assert (out / "latency_vs_rate.png").stat().st_size > 10_000
    assert (out / "slo_attainment_vs_rate.png").stat().st_size > 5_000
    assert "wrote" in capsys.readouterr().out


def test_series_sorted_by_rate_per_policy_and_trace_runs_at_throughput():
    series = _series(RUNS + [_run("tr", None, 50.0, 1.0)], "mean_ttft_ms")
    assert series["pd"] == ([1.0, 2.0], [100.0, 120.0])
    assert series["dp"] == ([1.0, 2.0], [80.0, 90.0])
    assert series["tr"] == ([1.5], [50.0])


def test_slo_capacity_and_table():
    assert slo_capacity(RUNS, 0.9) == {"pd": 1.0, "dp": 2.0}
    text = table(RUNS)
    assert text.splitlines()[0].split() == ["pd@2.0", "dp@1.0", "pd@1.0", "dp@2.0"]
    assert "SLO attainment (%)" in text and "80.0" in text


def test_bad_summary_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"runs": 3}')
    assert bench_plot(argparse.Namespace(rest=[str(bad), "--out-dir", str(tmp_path)])) == 2
    assert "not a `switchyard bench serve` or `bench simulate` summary" in capsys.readouterr().err
    assert bench_plot(argparse.Namespace(rest=[str(tmp_path / "missing.json")])) == 2
