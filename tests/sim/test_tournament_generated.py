"""The tournament's generated workloads: `random:K` expands by the split's seeds, gen-N names
one workload, the tuning and check sets are disjoint and fixed by the seed, and the report sets
a policy's gaps on the tuning set beside the check set; `random:2` end to end."""
from __future__ import annotations

import argparse
import json
import os

import pytest

from switchyard_bench.tournament.cells import Cell, Group
from switchyard_bench.tournament.main import run
from switchyard_bench.tournament.report import CellVerdict, out_of_sample_lines
from switchyard_bench.tournament.workload_sets import (
    CHECK,
    TUNE,
    expand,
    generator_seed,
    split_seeds,
    workload_set,
)
from switchyard_bench.tournament.workloads import TOURNAMENT_WORKLOADS
from switchyard_bench.workloads import WorkloadError


def test_random_k_expands_to_the_splits_seeds() -> None:
    assert expand(["random:3"], "all", TOURNAMENT_WORKLOADS) == ["gen-0", "gen-1", "gen-2"]
    assert expand(["random:3"], "tune", TOURNAMENT_WORKLOADS) == ["gen-0", "gen-2", "gen-4"]
    assert expand(["random:3"], "check", TOURNAMENT_WORKLOADS) == ["gen-1", "gen-3", "gen-5"]
    # Named ones and gen-N pass through; a workload named twice runs once.
    assert expand(["sonnet-short", "gen-17", "random:2", "gen-3"], "check",
                  TOURNAMENT_WORKLOADS) == ["sonnet-short", "gen-17", "gen-1", "gen-3"]
    assert generator_seed("gen-17") == 17 and generator_seed("mooncake") is None


@pytest.mark.parametrize("names, message", [
    (["random:0"], "random:K, K >= 1"), (["random:x"], "random:K"),
    (["gen-x"], "gen-N, N a seed"), (["nope"], "unknown workload 'nope'")])
def test_bad_workload_names_are_clear_errors(names: list[str], message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        expand(names, "all", TOURNAMENT_WORKLOADS)


def test_the_split_is_disjoint_stable_and_covers_every_seed() -> None:
    tune, check = set(split_seeds(TUNE, 50)), set(split_seeds(CHECK, 50))
    assert not tune & check and tune | check == set(range(100))
    assert split_seeds(CHECK, 50)[:10] == split_seeds(CHECK, 10)  # more seeds only add
    for seed in range(100):  # a workload's set is its seed's, however it was named
        assert workload_set(f"gen-{seed}") == (TUNE if seed in tune else CHECK)
    assert {workload_set(w) for w in TOURNAMENT_WORKLOADS} == {TUNE}
    with pytest.raises(WorkloadError, match="--split"):
        split_seeds("sideways", 2)


def _verdict(workload: str, load: float, best: float, adaptive: float) -> CellVerdict:
    return CellVerdict(Cell(Group("local-smollm2-cpu", workload, 2), load), 1.0, load,
                       {"round_robin": best, "adaptive": adaptive}, {}, ["round_robin"], best,
                       {"adaptive": best - adaptive}, {}, {})


def test_the_report_sets_the_tuning_set_beside_the_check_set() -> None:
    rows = [_verdict("sonnet-short", 0.6, 90.0, 89.0),  # named: tuning set
            _verdict("gen-0", 0.6, 80.0, 82.0), _verdict("gen-2", 1.2, 70.0, 66.0),
            _verdict("gen-1", 0.6, 95.0, 94.0), _verdict("gen-3", 1.2, 60.0, 50.0),
            _verdict("gen-3", 1.5, 50.0, 48.0)]
    lines, body = out_of_sample_lines(rows, "adaptive")
    tune, check = body[TUNE], body[CHECK]
    assert tune["cells"] == 3 and tune["mean_gap_points"] == pytest.approx(1.0)
    assert tune["worst_gap_points"] == pytest.approx(4.0)
    assert tune["worst_cell"] == "local gen-2 x2 @1.2" and tune["cells_within_3_points"] == 2
    assert check["cells"] == 3 and check["mean_gap_points"] == pytest.approx(13 / 3)
    assert check["worst_gap_points"] == pytest.approx(10.0)
    assert check["cells_within_3_points"] == 2 and check["workloads"] == ["gen-1", "gen-3"]
    assert lines[1].split() == ["tuning", "set", "check", "set"]
    assert "local gen-3 x2 @1.2" in lines[5] and "2/3 (67%)" in lines[6]
    # A fixed policy can be studied too: its gap to the best fixed, itself included.
    _, fixed = out_of_sample_lines(rows, "round_robin")
    assert fixed[CHECK]["worst_gap_points"] == 0.0
    # Named workloads alone: no check set, no table.
    assert out_of_sample_lines(rows[:1], "adaptive") == ([], {})


@pytest.mark.procs
def test_random_2_end_to_end(tmp_path: os.PathLike[str],
                             capsys: pytest.CaptureFixture[str]) -> None:
    assert run(argparse.Namespace(rest=[
        "--profiles", "local-smollm2-cpu", "--workloads", "random:2", "--split", "check",
        "--engines", "2", "--loads", "0.6,1.5", "--policies", "round_robin,least_load,adaptive",
        "--num-prompts", "20", "--jobs", "1", "--capacity-tolerance", "0.2", "--no-plot",
        "--result-dir", str(tmp_path)])) == 0
    out = capsys.readouterr().out
    assert "local gen-1 x2" in out and "local gen-3 x2" in out
    assert "out of sample: adaptive against the best fixed policy per cell" in out
    with open(os.path.join(tmp_path, "summary.json"), encoding="utf-8") as f:
        body = json.load(f)
    assert body["workloads"] == ["gen-1", "gen-3"] and body["split"] == "check"
    assert len(body["runs"]) == 12 and not body["errors"]
    split = body["summary"]["out_of_sample"]
    assert split["policy"] == "adaptive" and split[TUNE] == {"cells": 0}
    assert split[CHECK]["cells"] == 4 and split[CHECK]["workloads"] == ["gen-1", "gen-3"]
    gaps = [c["best_fixed_attainment_pct"] - c["attainment_pct"]["adaptive"]
            for c in body["cells"]]
    assert split[CHECK]["worst_gap_points"] == pytest.approx(max(gaps))
    for r in body["runs"]:
        assert r["requests"] == 20 and r["failed"] == 0
