"""`switchyard bench tournament`: the capacity search on a toy, the verdicts' arithmetic on
made-up runs, and a tiny grid end to end (every cell, regret = best fixed - adaptive, the same
figures twice, the heatmap written)."""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import pytest

from switchyard_bench.tournament import runner
from switchyard_bench.tournament.capacity import find_capacity
from switchyard_bench.tournament.cells import Cell, Group
from switchyard_bench.tournament.main import run
from switchyard_bench.tournament.report import (
    prediction_error,
    seed_verdicts,
    summary_lines,
    tables,
    verdicts,
)
from switchyard_bench.tournament.runner import Results
from switchyard_bench.tournament.workloads import PhasedWorkload
from switchyard_bench.workloads import RequestShape, Workload

pytestmark = pytest.mark.procs


def test_capacity_bisection_finds_the_edge_from_either_side() -> None:
    edge = 7.3
    calls: list[float] = []

    def attainment(rate: float) -> float:
        calls.append(rate)
        return 1.0 if rate <= edge else 0.5

    for start in (0.5, 100.0):  # doubling up to the edge, halving down to it
        calls.clear()
        found = find_capacity(attainment, start, 0.05, 0.9, 0.05)
        assert found.bounded and found.light_attainment == 1.0 and found.threshold == 0.9
        assert edge / 1.05 <= found.rate <= edge
        assert len(calls) == len(set(calls)) == len(found.probes) < 20  # no rate run twice


def test_capacity_is_relative_to_light_load_attainment() -> None:
    # 80% at light load (some requests miss the SLO even alone): the edge is where it falls
    # below 90% of that, 72%.
    found = find_capacity(lambda r: 0.8 if r < 3 else 0.75 if r < 5 else 0.6, 1.0, 0.1)
    assert found.threshold == pytest.approx(0.72) and 4.7 < found.rate < 5.0
    assert "90% of its light-load 80.0%" in found.basis
    # Never falling: the search stops at its limit and says the rate is only a bound.
    unbounded = find_capacity(lambda r: 1.0, 1.0, 0.1)
    assert not unbounded.bounded and unbounded.rate >= 1000 and "bound" in unbounded.basis


def _run(policy: str, attainment: float | None, errors: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    return {"policy": policy, "slo_attainment": attainment,
            "goodput": None if attainment is None else 2 * attainment,
            "prediction_error": errors or {}}


def test_verdicts_best_fixed_regret_and_summary() -> None:
    group = Group("local-smollm2-cpu", "sonnet-short", 2)
    low, high = Cell(group, 0.3), Cell(group, 1.5)
    policies = ["round_robin", "pd", "my_switcher", "adaptive"]
    results = Results({group: {"rate": 2.0}}, {
        (low, "round_robin"): _run("round_robin", 0.95),
        (low, "pd"): _run("pd", 0.95, {"ttft/pd": {"n": 10, "median_abs_error": 0.3},
                                       "tpot/pd": {"n": 10, "median_abs_error": 0.1}}),
        (low, "my_switcher"): _run("my_switcher", 0.99),
        (low, "adaptive"): _run("adaptive", 0.90, {"ttft/dp": {"n": 30,
                                                               "median_abs_error": 0.05}}),
        (high, "round_robin"): _run("round_robin", 0.40),
        (high, "pd"): {**_run("pd", 0.55), "failed": 3, "errors": {"engine died": 3}},
        (high, "my_switcher"): _run("my_switcher", 0.60),
        (high, "adaptive"): _run("adaptive", 0.70),
    })
    rows = verdicts(results, [low, high], policies, adaptive=["my_switcher"])
    assert rows[0].best_fixed == ["round_robin", "pd"]  # a tie: both best
    assert rows[0].regret == {"my_switcher": pytest.approx(-4.0),
                              "adaptive": pytest.approx(5.0)}
    assert rows[1].best_fixed == ["pd"] and rows[1].rate == 3.0
    assert rows[1].regret["adaptive"] == pytest.approx(-15.0)
    assert rows[0].prediction_error == {"ttft": 0.05, "tpot": 0.1}  # weighted by requests
    assert rows[1].prediction_error == {}
    lines, body = summary_lines(rows)
    assert body["adaptive"]["max_regret_points"] == pytest.approx(5.0)
    assert body["adaptive"]["max_regret_cell"] == low.label
    assert body["adaptive"]["high_load_cells_beating_best_fixed"] == 1
    assert body["my_switcher"]["cells_within_3_points"] == 2
    assert body["best_fixed_counts"] == {"pd": 2, "round_robin": 1}
    assert any(line.startswith("adaptive: max regret +5.0 points") for line in lines)
    assert "FAILED REQUESTS pd: 3 in 1 cells (first error: engine died)" in lines
    assert rows[1].failed == {"pd": (3, "engine died")}


def test_several_seeds_are_judged_by_their_means() -> None:
    group = Group("local-smollm2-cpu", "sonnet-short", 2)
    cell = Cell(group, 1.5)
    policies = ["round_robin", "pd", "adaptive"]

    def seed(rate: float, rr: float, pd: float | None, adaptive: float) -> Results:
        pd_run = _run("pd", pd) if pd is not None else {
            "policy": "pd", "slo_attainment": None, "goodput": None, "error": "boom",
            "requests": 4}
        return Results({group: {"rate": rate}}, {
            (cell, "round_robin"): _run("round_robin", rr), (cell, "pd"): pd_run,
            (cell, "adaptive"): _run("adaptive", adaptive)})

    # round_robin wins seed 0 and pd seed 1; by the means pd (0.55) beats round_robin (0.50),
    # and adaptive's mean 0.60 beats it: regret -5, though it lost seed 0 by 10 points.
    results = {0: seed(2.0, 0.70, 0.50, 0.60), 1: seed(4.0, 0.30, 0.60, 0.60),
               2: seed(3.0, 0.50, None, 0.60)}  # pd's run in seed 2 raised: no figure
    rows, per_seed = seed_verdicts(results, [cell], policies, [])
    (row,) = rows
    assert row.seeds == [0, 1, 2] and row.capacity == 3.0 and row.rate == pytest.approx(4.5)
    assert row.attainment == {"round_robin": pytest.approx(50.0), "pd": pytest.approx(55.0),
                              "adaptive": pytest.approx(60.0)}
    assert row.best_fixed == ["pd"] and row.regret == {"adaptive": pytest.approx(-5.0)}
    assert row.spread == {"round_robin": pytest.approx(40.0), "pd": pytest.approx(10.0),
                          "adaptive": pytest.approx(0.0)}
    assert row.seed_regret["adaptive"] == [pytest.approx(10.0), pytest.approx(0.0),
                                           pytest.approx(-10.0)]
    assert row.failed == {"pd": (4, "boom")}
    assert [r.best_fixed for r in (per_seed[0][0], per_seed[1][0])] == [["round_robin"], ["pd"]]
    _, body = summary_lines(rows)
    assert body["adaptive"]["high_load_cells_beating_best_fixed"] == 1
    text = tables(rows, policies)
    assert "mean over seeds 0,1,2" in text and "+10.0 +0.0 -10.0" in text
    assert "spread of SLO attainment over the seeds" in text
    # One seed: its verdicts as they are, no spread.
    (only,), _ = seed_verdicts({1: results[1]}, [cell], policies, [])
    assert only.best_fixed == ["pd"] and only.seeds == [] and "spread" not in tables([only],
                                                                                    policies)


def test_prediction_error_ignores_malformed_entries() -> None:
    assert prediction_error([{"prediction_error": {"ttft/x": {"n": 0, "median_abs_error": 9},
                                                   "tpot/x": {"median_abs_error": 1}}}]) == {}


class _Fixed(Workload):
    def __init__(self, length: int) -> None:
        self.length = length

    def shape(self, index: int, salt: int) -> RequestShape:
        return RequestShape([index] * self.length, 1)

    def describe(self) -> dict[str, Any]:
        return {}


def test_the_phased_workload_changes_mix_at_its_phase_ends() -> None:
    phased = PhasedWorkload([("a", _Fixed(2), 3), ("b", _Fixed(5), 2), ("c", _Fixed(1), 1)])
    assert [len(phased.shape(i, 0).prompt) for i in range(8)] == [2, 2, 2, 5, 5, 1, 1, 1]
    assert phased.shape(4, 0).prompt == [4] * 5  # the global index, not the phase's
    assert phased.describe()["phases"] == "a x3, b x2, c x1"


def _tournament(result_dir: str, jobs: int = 1, *more: str) -> int:
    # An SLO tighter than the profile's, so 20 requests find an edge below "all at once".
    return run(argparse.Namespace(rest=[
        "--profiles", "local-smollm2-cpu", "--workloads", "sonnet-short", "--engines", "2",
        "--loads", "0.6,1.5", "--policies", "round_robin,least_load,adaptive",
        "--num-prompts", "20", "--jobs", str(jobs), "--capacity-tolerance", "0.2",
        "--slo", "500,100", "--result-dir", result_dir, *more]))


def _summary(result_dir: str) -> dict[str, Any]:
    with open(os.path.join(result_dir, "summary.json"), encoding="utf-8") as f:
        body: dict[str, Any] = json.load(f)
    return body


def test_a_tiny_grid_end_to_end(tmp_path: os.PathLike[str],
                                capsys: pytest.CaptureFixture[str]) -> None:
    first, second = os.path.join(tmp_path, "a"), os.path.join(tmp_path, "b")
    assert _tournament(first) == 0
    printed = capsys.readouterr()
    assert "SLO attainment (%)" in printed.out and "regret adaptive" in printed.out
    assert "adaptive: max regret" in printed.out and "capacity local sonnet-short x2" in \
        printed.out
    assert "[6/6]" in printed.err  # progress goes to stderr
    body = _summary(first)
    assert body["bench"] == "tournament" and len(body["runs"]) == 6 and not body["errors"]
    assert [c["load"] for c in body["cells"]] == [0.6, 1.5]
    assert body["capacities"][0]["bounded"] and body["slo"] == {
        "local-smollm2-cpu": {"ttft_ms": 500.0, "tpot_ms": 100.0}}
    capacity = body["capacities"][0]["rate"]
    for cell in body["cells"]:
        attained = cell["attainment_pct"]
        assert set(attained) == {"round_robin", "least_load", "adaptive"}
        assert cell["rate"] == pytest.approx(cell["load"] * capacity)
        best = max(attained["round_robin"], attained["least_load"])
        assert cell["best_fixed_attainment_pct"] == best
        assert cell["regret_points"]["adaptive"] == pytest.approx(best - attained["adaptive"])
        assert all(v is not None for v in cell["goodput"].values())
    for r in body["runs"]:
        assert r["requests"] == 20 and r["failed"] == 0
    assert os.path.getsize(os.path.join(first, "heatmap.png")) > 10_000
    # Deterministic: the same command, the same figures.
    assert _tournament(second) == 0
    again = _summary(second)
    assert again["cells"] == body["cells"] and again["capacities"] == body["capacities"]


def test_admission_both_runs_each_policy_behind_the_gate_too_and_draws_the_goodput_curve(
        tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    out = os.path.join(tmp_path, "a")
    assert _tournament(out, 1, "--admission", "both", "--no-plot") == 0
    printed = capsys.readouterr().out
    body = _summary(out)
    labels = {"round_robin", "round_robin+admit", "least_load", "least_load+admit", "adaptive",
              "adaptive+admit"}
    assert body["admission"] == "both" and len(body["runs"]) == 12
    for cell in body["cells"]:
        assert set(cell["attainment_pct"]) == labels
        # adaptive+admit is adaptive, judged as adaptive; the others are fixed.
        assert set(cell["regret_points"]) == {"adaptive", "adaptive+admit"}
    at_light = body["cells"][0]["attainment_pct"]
    # Below capacity the gate costs (almost) nothing.
    assert at_light["round_robin+admit"] >= at_light["round_robin"] - 10
    assert "goodput (offered req/s x share within SLO)" in printed
    assert "round_robin+admit" in printed and "kept@2x" in printed
    admitted = [r for r in body["runs"] if r["policy"].endswith("+admit")]
    assert all("refused" in r for r in admitted)


def test_seeds_each_run_as_alone_and_the_cells_take_their_means(
        tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    both, alone = os.path.join(tmp_path, "both"), os.path.join(tmp_path, "alone")
    assert _tournament(both, 1, "--seeds", "0,1", "--no-plot") == 0
    printed = capsys.readouterr()
    assert "seeds 0,1" in printed.out and "mean over seeds 0,1" in printed.out
    assert "capacity seed 1 local sonnet-short x2" in printed.out and "[12/12]" in printed.err
    body = _summary(both)
    assert body["seeds"] == [0, 1] and len(body["runs"]) == 12
    assert sorted({(r["seed"], r["load"]) for r in body["runs"]}) == [
        (0, 0.6), (0, 1.5), (1, 0.6), (1, 1.5)]
    for seed in (0, 1):  # each seed is the tournament --seed N runs
        assert _tournament(alone, 1, "--seed", str(seed), "--no-plot") == 0
        single = _summary(alone)
        assert body["per_seed"][str(seed)]["cells"] == single["cells"]
        assert body["per_seed"][str(seed)]["summary"] == single["summary"]
        assert [{k: v for k, v in c.items() if k != "seed"} for c in body["capacities"]
                if c["seed"] == seed] == [{k: v for k, v in c.items() if k != "seed"}
                                          for c in single["capacities"]]
    for cell in body["cells"]:
        seeds = [next(c for c in body["per_seed"][s]["cells"] if c["load"] == cell["load"])
                 for s in ("0", "1")]
        for policy, mean in cell["attainment_pct"].items():
            values = [c["attainment_pct"][policy] for c in seeds]
            assert mean == pytest.approx(sum(values) / 2)
            assert cell["spread_points"][policy] == pytest.approx(max(values) - min(values))
        best = max(cell["attainment_pct"]["round_robin"], cell["attainment_pct"]["least_load"])
        assert cell["regret_points"]["adaptive"] == pytest.approx(
            best - cell["attainment_pct"]["adaptive"])
        assert cell["seed_regret_points"]["adaptive"] == [c["regret_points"]["adaptive"]
                                                          for c in seeds]


@pytest.mark.slow
def test_worker_processes_give_the_same_figures(tmp_path: os.PathLike[str]) -> None:
    inline, pooled = os.path.join(tmp_path, "inline"), os.path.join(tmp_path, "pooled")
    assert _tournament(inline) == 0 and _tournament(pooled, jobs=2) == 0
    assert _summary(pooled)["cells"] == _summary(inline)["cells"]


@pytest.mark.parametrize("args, message", [
    (["--workloads", "nope"], "unknown workload"),
    (["--policies", "nope"], "unknown policy 'nope'"),
    (["--profiles", "no-such-profile"], "no profile 'no-such-profile'"),
    (["--slo", "h100-llama3.1-70b-fp8-tp4=1000"], "expected [PROFILE=]TTFT_MS,TPOT_MS"),
    (["--slo", "other=1000,50"], "not in --profiles"),
    (["--roles", "any,sideways"], "--roles"),
    (["--engines", "2,0"], "--engines: counts >= 1"),
    (["--profiles", "local-smollm2-cpu", "--length-scale", "local-smollm2-cpu=0.1"],
     "sonnet input mean must be >="),  # 5.5 tokens: shorter than the instruction
    (["--length-scale", "-1"], "--length-scale '-1' must be > 0"),
    (["--seeds", "0,0"], "expected distinct seeds"),
    (["--seeds", "0,x"], "expected seeds like 0,1,2"),
    (["--seed", "1", "--seeds", "0,1"], "not allowed with argument --seed"),
    (["--workloads", "random:0"], "random:K, K >= 1"),
    (["--split", "sideways"], "invalid choice: 'sideways'"),
    (["--policies", "round_robin", "--study", "adaptive"], "--study 'adaptive' is not in"),
])
def test_bad_input_is_a_clear_error(args: list[str], message: str,
                                    capsys: pytest.CaptureFixture[str],
                                    tmp_path: os.PathLike[str]) -> None:
    status: int | str | None
    try:
        status = run(argparse.Namespace(rest=[*args, "--result-dir", str(tmp_path)]))
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code
    assert status == 2
    assert message in capsys.readouterr().err


def test_a_failing_policy_is_reported_and_the_others_still_count(
        tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    source = os.path.join(tmp_path, "broken.py")
    with open(source, "w", encoding="utf-8") as f:
        f.write("from pyrouter.runtime.policy_registry import policy\n\n\n"
                "@policy('broken_for_tests')\n"
                "async def broken_for_tests(req, cluster):\n"
                "    raise RuntimeError('no engine for you')\n")
    assert run(argparse.Namespace(rest=[
        "--profiles", "local-smollm2-cpu", "--workloads", "sonnet-short", "--engines", "2",
        "--loads", "1", "--policies", "round_robin,broken_for_tests", "--policy-file", source,
        "--num-prompts", "10", "--jobs", "1", "--slo", "500,100", "--no-plot",
        "--result-dir", str(tmp_path)])) == 0  # failed requests are figures, not a crash
    out = capsys.readouterr().out
    assert "FAILED REQUESTS broken_for_tests: 10 in 1 cells" in out and "no engine for you" in out
    cell = _summary(str(tmp_path))["cells"][0]
    assert cell["attainment_pct"]["broken_for_tests"] == 0.0
    assert cell["best_fixed"] == ["round_robin"] and cell["attainment_pct"]["round_robin"] > 0


def test_a_run_that_raises_is_listed_and_the_exit_status_says_so(
        tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = runner.run_policy

    def run_policy(plan: Any, group: Any, rate: float, policy: str) -> dict[str, Any]:
        if policy == "least_load":  # round_robin still finds the capacity
            raise RuntimeError("simulator bug")
        return real(plan, group, rate, policy)

    monkeypatch.setattr(runner, "run_policy", run_policy)
    assert run(argparse.Namespace(rest=[
        "--profiles", "local-smollm2-cpu", "--workloads", "sonnet-short", "--engines", "2",
        "--loads", "1", "--policies", "round_robin,least_load", "--num-prompts", "10",
        "--jobs", "1", "--slo", "500,100", "--no-plot", "--result-dir", str(tmp_path)])) == 1
    out = capsys.readouterr().out
    assert "FAILED run local sonnet-short x2 @1 least_load: RuntimeError: simulator bug" in out
    body = _summary(str(tmp_path))
    assert body["errors"] == ["run local sonnet-short x2 @1 least_load: RuntimeError: "
                              "simulator bug"]
    assert body["cells"][0]["attainment_pct"]["least_load"] is None
    assert body["cells"][0]["best_fixed"] == ["round_robin"]
