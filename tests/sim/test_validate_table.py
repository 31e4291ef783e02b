"""loadtest/experiments/validate_table.py, the table of validate_grid.sh: Kendall's tau on known
rankings, and the table read from made-up real and simulated summaries (means over repetitions,
errors against the targets, one tau per workload x load)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "validate_table", REPO / "loadtest/experiments/validate_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vt = _module()


@pytest.mark.parametrize(("xs", "ys", "tau"), [
    ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
    ([1, 2, 3, 4], [40, 30, 20, 10], -1.0),
    ([1, 2, 3], [1, 3, 2], 1 / 3),  # one discordant pair of three
    ([100, 100, 90], [100, 100, 80], 1.0),  # the tie is a tie on both sides
    ([100, 100, 100], [100, 90, 80], 1.0),  # real ranks nothing: no disagreement
])
def test_kendall_tau(xs: list[float], ys: list[float], tau: float) -> None:
    assert vt.kendall_tau(xs, ys) == pytest.approx(tau)


def _summary(path: Path, runs: list[dict[str, object]]) -> None:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"runs": runs}))


def _run(policy: str, jct: float, ttft: float, attain: float) -> dict[str, object]:
    return {"policy": policy, "mean_jct_ms": jct, "p90_ttft_ms": ttft, "slo_attainment": attain}


def test_table_means_repetitions_and_judges_each_cell(tmp_path: Path) -> None:
    # real: two repetitions of two policies; sim: the same runs
    for rep, (a_jct, b_attain) in enumerate([(900.0, 0.5), (1100.0, 0.7)], start=1):
        _summary(tmp_path / "real" / f"sonnet-1-rep{rep}-alpha", [_run("alpha", a_jct, 400, 1.0)])
        _summary(tmp_path / "real" / f"sonnet-1-rep{rep}-beta",
                 [_run("beta", 2000, 1000, b_attain)])
        _summary(tmp_path / "sim" / f"sonnet-1-rep{rep}",
                 [_run("alpha", 1100, 400, 1.0), _run("beta", 1500, 1400, 0.45)])
    text = vt.table(*vt.collect(str(tmp_path)))
    # alpha: real mean 1000 (900-1100) vs 1100 sim: +10%, inside 15%; P90 TTFT equal
    assert "| sonnet | 1 | alpha | 1000 (900-1100) / 1100 (+10%) | 400 (400-400) / 400 (+0%) |" \
        in text
    # beta: JCT -25% (outside), P90 TTFT +40% (outside), attainment 60 vs 45 (-15 points)
    assert "| sonnet | 1 | beta | 2000 (2000-2000) / 1500 (-25%) |" in text
    assert "60.0 (50.0-70.0) / 45.0 (-15.0) | none |" in text
    assert "mean JCT within 15%: 1/2; P90 TTFT within 25%: 1/2; SLO attainment within 10 " \
        "points: 1/2" in text
    assert "| sonnet | 1 | +1.00 | alpha > beta |" in text
    assert "Kendall tau >= 0.8: 1/1" in text


def test_adaptive_against_the_best_fixed_policy(tmp_path: Path) -> None:
    # Deliberately the same set-up as the test above, spelled out: each test's directory tree is
    # the table's input, and reads best in full beside the rows it asserts.
    for rep, (fixed, adaptive) in enumerate([(0.8, 0.7), (0.9, 0.85), (1.0, 0.75)], start=1):
        _summary(tmp_path / "real" / f"azure-0.3-rep{rep}-alpha", [_run("alpha", 1, 1, fixed)])
        _summary(tmp_path / "real" / f"azure-0.3-rep{rep}-adaptive",
                 [_run("adaptive", 1, 1, adaptive)])
        _summary(tmp_path / "sim" / f"azure-0.3-rep{rep}",
                 [_run("alpha", 1, 1, 1.0), _run("adaptive", 1, 1, 1.0)])
    text = vt.table(*vt.collect(str(tmp_path)))
    # best fixed alpha 90 (80-100); adaptive 76.7 (70-85): its best run reaches alpha's worst
    assert "| azure | 0.3 | alpha | 90.0 (80.0-100.0) | 76.7 (70.0-85.0) | within spread |" \
        in text
    assert "adaptive best or within the best fixed policy's spread: 1/1" in text
