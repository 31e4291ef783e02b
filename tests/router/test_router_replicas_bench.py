"""`switchyard bench router --replicas`: how the load is split, the per-setup figures (medians,
spread, scaling, the peer stream's cost) from made-up runs, the argument wiring, and one short
run end to end over mock engines (marked `procs`)."""
from __future__ import annotations

import argparse
import shutil

import pytest

from switchyard_bench import router_bench, router_replicas_bench
from switchyard_bench import router_replicas_table as figures
from switchyard_bench.router_replicas_bench import ReplicaBenchConfig, parse_replicas
from switchyard_bench.router_replicas_table import ReplicaRun
from switchyard_bench.wrk_runner import Measure


def _run(replicas: int, peered: bool, round_: int, rps_each: float, router_cpu_s: float,
         errors: int = 0) -> ReplicaRun:
    """A run of `duration` 10 s: each replica's generator served rps_each req/s."""
    measures = [Measure(rps_each, 5.0, 9.0, errors if i == 0 else 0, "wrk", int(rps_each * 10))
                for i in range(replicas)]
    return ReplicaRun(replicas, peered, measures, router_cpu_s, 0.5, round_)


def test_concurrency_is_split_evenly_over_the_replicas() -> None:
    assert figures.split_concurrency(32, 1) == [32]
    assert figures.split_concurrency(32, 4) == [8, 8, 8, 8]
    assert figures.split_concurrency(10, 4) == [3, 3, 2, 2]
    with pytest.raises(ValueError):
        figures.split_concurrency(2, 4)


def test_every_count_runs_alone_and_above_one_also_peered() -> None:
    assert figures.setups([1, 2, 4]) == [(1, False), (2, False), (2, True), (4, False), (4, True)]


def test_summary_takes_medians_and_per_round_ratios() -> None:
    # Three rounds; round 1 ran on a busier machine: every setup slower alike.
    runs = []
    for round_, slow in enumerate([1.0, 0.5, 1.0]):
        runs += [_run(1, False, round_, 1000 * slow, 4.0),
                 _run(2, False, round_, 900 * slow, 8.0),
                 _run(2, True, round_, 850 * slow, 9.0, errors=1)]
    by = {(s.replicas, s.peered): s for s in figures.summarize(runs)}
    assert list(by) == [(1, False), (2, False), (2, True)]
    one, two, peered = by[(1, False)], by[(2, False)], by[(2, True)]
    assert (one.rps, one.rps_min, one.rps_max, one.rounds) == (1000, 500, 1000, 3)
    assert two.rps == 1800 and two.requests == 2 * 9000 + 2 * 4500 + 2 * 9000
    # Scaling is each round's own ratio: the slow round does not bend it.
    assert one.scaling == pytest.approx(1.0) and two.scaling == pytest.approx(1.8)
    assert peered.scaling == pytest.approx(1.7)
    # Router CPU per request: 8 s over 18000 requests (median round), and the peered
    # replicas' extra in each round (9 s - 8 s over 17000 vs 18000 requests).
    assert two.router_ms == pytest.approx(8000 / 18000)
    assert peered.peer_ms == pytest.approx(9000 / 17000 - 8000 / 18000)
    assert two.peer_ms is None and one.peer_ms is None
    assert peered.errors == 3 and two.errors == 0
    assert peered.backend_ms == pytest.approx(500 / 17000)


def test_table_has_a_row_per_setup_with_the_ideal_scaling() -> None:
    runs = [_run(1, False, 0, 1000, 4.0), _run(4, False, 0, 500, 8.0),
            _run(4, True, 0, 480, 9.0)]
    lines = figures.replicas_table(figures.summarize(runs), figures.baseline(runs)).splitlines()
    assert lines[0].startswith("| replicas | peered |") and "scaling vs 1" in lines[0]
    assert len(lines) == 2 + 3
    assert lines[2].startswith("| 1 | no | 1000 | 1.00x (1x) | 0.400 |")
    assert lines[3].startswith("| 4 | no | 2000 | 2.00x (4x) |")
    assert lines[3].endswith("| - | 20000 | 0 |")
    assert lines[4].startswith("| 4 | yes | 1920 | 1.92x (4x) |")
    assert f"| {9000 / 19200 - 8000 / 20000:+.3f} |" in lines[4]


def test_a_setup_with_no_requests_has_no_cpu_figures() -> None:
    (s,) = figures.summarize([ReplicaRun(1, False, [Measure(0, 0, 0, 5, "wrk", 0)], 1.0, 1.0)])
    assert s.router_ms is None and s.backend_ms is None and s.errors == 5
    assert "| - | - |" in figures.replicas_table([s], 1)


def test_cores_note_says_what_carries_on_a_small_machine() -> None:
    note = figures.cores_note(2, [1, 2, 4])
    assert note.startswith("2 CPUs; 4 replicas with their 4 load generators and the 2 mock "
                           "engines want 10 cores")
    assert "cannot scale linearly" in note and "CPU per request" in note


def test_replica_counts_parse_and_config_checks_them() -> None:
    assert parse_replicas("4,1,2") == [1, 2, 4]
    for bad in ("0,1", "a", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_replicas(bad)
    with pytest.raises(ValueError):
        ReplicaBenchConfig([1, 4], concurrency=2)


def test_replicas_flag_selects_the_mode_with_the_largest_concurrency(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ReplicaBenchConfig] = []
    monkeypatch.setattr(router_bench, "run_replicas", lambda cfg: seen.append(cfg) or 0)
    rest = ["--replicas", "1,2", "--concurrency", "1", "16", "--duration", "3", "--repeat", "2"]
    assert router_bench.run(argparse.Namespace(rest=rest)) == 0
    (cfg,) = seen
    assert (cfg.replicas, cfg.concurrency, cfg.duration_s, cfg.repeat) == ([1, 2], 16, 3.0, 2)


@pytest.mark.procs
@pytest.mark.timeout(180)
def test_one_and_two_replicas_end_to_end(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    # No package installs from a test: wrk when it is there, the Python generator otherwise.
    monkeypatch.setattr(router_replicas_bench, "ensure_wrk", lambda: shutil.which("wrk"))
    rest = ["--replicas", "1,2", "--duration", "1", "--concurrency", "4"]
    assert router_bench.run(argparse.Namespace(rest=rest)) == 0
    out = capsys.readouterr().out
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line.split("|")
            for line in out.splitlines() if line.startswith(("| 1 |", "| 2 |"))}
    assert set(rows) == {("1", "no"), ("2", "no"), ("2", "yes")}, out
    for cells in rows.values():
        requests, errors = int(cells[-3]), int(cells[-2])
        assert requests > 0 and errors == 0, out
    assert "cannot scale linearly" in out and "load average before" in out
