"""A simulated sweep is a pure function of its inputs: the same command gives the same summary
and the same records, field for field, whether its runs go one after another in this process
or side by side in forked ones (`--jobs`), and a run does not depend on which runs came before
it in the same process."""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import pytest

from switchyard_bench.simulate.main import run
from switchyard_sim.parallel import in_processes
from tests.sim.sim_helpers import TINY

pytestmark = pytest.mark.procs

POLICIES = "round_robin,least_load,pd,tandem"


def _sweep(out: str, *extra: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The runs of summary.json without what measures the simulator itself (wall_s) or names
    the directory, and every JSONL's text by file name."""
    assert run(argparse.Namespace(rest=[
        "--profile", TINY, "--policies", POLICIES, "--rates", "4,8", "--num-prompts", "12",
        "--input-mean", "120", "--input-std", "30", "--output-mean", "8", "--output-std", "2",
        "--slo-ttft-ms", "400", "--slo-tpot-ms", "40", "--no-progress", "--result-dir", out,
        *extra])) == 0
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        runs = json.load(f)["runs"]
    for r in runs:
        assert r.pop("wall_s") > 0
        r.pop("records_file")
    records = {}
    for name in sorted(os.listdir(out)):
        if name.endswith(".jsonl"):
            with open(os.path.join(out, name), encoding="utf-8") as f:
                records[name] = f.read()
    return runs, records


def test_same_command_same_figures_serial_or_in_processes(tmp_path: os.PathLike[str]) -> None:
    serial = _sweep(os.path.join(tmp_path, "a"), "--jobs", "1")
    again = _sweep(os.path.join(tmp_path, "b"), "--jobs", "1")
    forked = _sweep(os.path.join(tmp_path, "c"), "--jobs", "3")
    runs, records = serial
    assert [r["label"] for r in runs] == [f"{p}@{rate}" for p in POLICIES.split(",")
                                          for rate in ("4", "8")]
    assert len(records) == 8 and all(r["completed"] == 12 for r in runs)
    assert again == serial
    assert forked == serial


def test_a_run_alone_equals_the_same_run_inside_a_sweep(tmp_path: os.PathLike[str]) -> None:
    """tandem@8 is the sweep's last run (salt 7); alone, with --salt 7, it is the first."""
    whole, _ = _sweep(os.path.join(tmp_path, "all"), "--jobs", "1")
    out = os.path.join(tmp_path, "one")
    assert run(argparse.Namespace(rest=[
        "--profile", TINY, "--policies", "tandem", "--rates", "8", "--num-prompts", "12",
        "--input-mean", "120", "--input-std", "30", "--output-mean", "8", "--output-std", "2",
        "--slo-ttft-ms", "400", "--slo-tpot-ms", "40", "--no-progress", "--result-dir", out,
        "--salt", "7"])) == 0
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        alone = json.load(f)["runs"][0]
    last = whole[-1]
    assert last["label"] == alone["label"] == "tandem@8" and alone["salt"] == 7
    for key in ("mean_jct_ms", "p99_ttft_ms", "mean_tpot_ms", "slo_attainment", "routes",
                "engine_busy", "duration_s"):
        assert alone[key] == last[key], key


def _inner_sweep(n: int) -> list[int]:
    """A job that runs its own serial in_processes, as a worker's job may."""
    return list(in_processes(lambda k: k * n, [1, 2, 3], 1))


def test_jobs_may_run_their_own_serial_loops_inside_workers() -> None:
    assert list(in_processes(_inner_sweep, [1, 10, 100, 1000], 2)) == [
        [1, 2, 3], [10, 20, 30], [100, 200, 300], [1000, 2000, 3000]]
