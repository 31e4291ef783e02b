"""The tools behind docs/experiments.md read what `bench simulate` writes: compare.py puts two
summaries of the same sweep side by side with the relative error per policy (and says which
pass), table.py prints the chosen figures and each policy's SLO capacity."""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

import pytest

from switchyard_bench.simulate.main import run
from tests.sim.sim_helpers import TINY

pytestmark = pytest.mark.procs

TOOLS = os.path.join(os.path.dirname(__file__), "..", "..", "loadtest", "experiments")


def _tool(name: str, *args: str) -> None:
    argv = sys.argv
    sys.argv = [name, *args]
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(os.path.join(TOOLS, name), run_name="__main__")
        assert done.value.code == 0
    finally:
        sys.argv = argv


def test_compare_and_table_on_a_simulated_sweep(tmp_path: os.PathLike[str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = os.path.join(tmp_path, "sim")
    assert run(argparse.Namespace(rest=[
        "--profile", TINY, "--policies", "round_robin,pd", "--rates", "4", "--num-prompts",
        "8", "--input-mean", "120", "--input-std", "30", "--output-mean", "8", "--output-std",
        "2", "--slo-ttft-ms", "400", "--slo-tpot-ms", "40", "--no-progress", "--result-dir",
        out])) == 0
    summary = os.path.join(out, "summary.json")
    # A "real" run 2x slower on JCT than the simulated one: the simulator is 50% optimistic.
    with open(summary, encoding="utf-8") as f:
        body = json.load(f)
    for r in body["runs"]:
        r["mean_jct_ms"] *= 2
    real = os.path.join(tmp_path, "real.json")
    with open(real, "w", encoding="utf-8") as f:
        json.dump(body, f)
    capsys.readouterr()
    _tool("compare.py", real, summary)
    printed = capsys.readouterr().out
    assert "| round_robin@4 |" in printed and "(-50%)" in printed and "(+0%)" in printed
    assert "0 of 2 policies within 25%" in printed
    _tool("compare.py", summary, summary)
    assert "2 of 2 policies within 25%" in capsys.readouterr().out
    _tool("table.py", summary, "--metrics", "mean_jct_ms,slo_attainment")
    printed = capsys.readouterr().out
    assert "| run | mean_jct_ms | slo_attainment |" in printed and "| pd@4 |" in printed
    assert "SLO capacity" in printed and "%" in printed
