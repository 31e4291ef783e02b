"""`switchyard bench router --engines`: the engine counts parse, the table's medians and ratios
to the smallest fleet from made-up rows, the flag's wiring, and one short run end to end over a
mock fleet served from one process (marked `procs`)."""
from __future__ import annotations

import argparse
import re
import shutil

import pytest

from switchyard_bench import router_bench, router_fleet_bench
from switchyard_bench.router_fleet_bench import (
    FleetBenchConfig,
    FleetRow,
    fleet_table,
    parse_engine_counts,
)


def _row(engines: int, policy: str, rnd: int, rps: float, cpu: float | None) -> FleetRow:
    return FleetRow(engines, policy, rnd, rps, 3.0, 9.0, 0, cpu, 0.5 * engines, 1.0,
                    idle_rss_mb=40.0 + engines, rss_mb=50.0 + engines + rnd)


def test_engine_counts_parse_and_bad_ones_are_refused() -> None:
    assert parse_engine_counts("2,64,256,1024") == [2, 64, 256, 1024]
    for bad in ("", "0,2", "-1"):
        with pytest.raises(ValueError):
            parse_engine_counts(bad)
    with pytest.raises(ValueError):
        FleetBenchConfig([2], repeat=0)


def test_table_gives_medians_spread_and_ratios_to_the_smallest_fleet() -> None:
    rows = [_row(2, "round_robin", r, rps, 0.1) for r, rps in enumerate((900, 1000, 1100))]
    rows += [_row(64, "round_robin", r, rps, 0.2) for r, rps in enumerate((400, 500, 600))]
    rows += [_row(64, "cache_aware", 0, 10, None)]  # no smallest-N row, no CPU figure
    table = fleet_table(rows, [2, 64], ("round_robin", "cache_aware"))
    lines = {tuple(c.strip() for c in line.split("|")[1:3]): line
             for line in table.splitlines()[2:]}
    assert "1000 (1.00x; 900–1100)" in lines[("2", "round_robin")]
    assert "500 (0.50x; 400–600)" in lines[("64", "round_robin")]
    assert "0.200 (2.00x; 0.2–0.2)" in lines[("64", "round_robin")]
    assert "32.0 (32–32)" in lines[("64", "round_robin")]  # idle % of a core
    assert lines[("64", "round_robin")].endswith("| 104 / 115 |")  # RSS idle / after, medians
    assert "| 10 (-) | nan (-) |" in lines[("64", "cache_aware")]  # nothing to compare with


def test_engines_flag_selects_the_fleet_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[FleetBenchConfig] = []
    monkeypatch.setattr(router_bench, "run_fleet", lambda cfg: seen.append(cfg) or 0)
    rest = ["--engines", "2,64", "--concurrency", "1", "16", "--duration", "3", "--repeat", "2",
            "--idle-s", "2"]
    assert router_bench.run(argparse.Namespace(rest=rest)) == 0
    (cfg,) = seen
    assert (cfg.engines, cfg.concurrency, cfg.duration_s, cfg.repeat, cfg.idle_s) == (
        [2, 64], 16, 3.0, 2, 2.0)


@pytest.mark.procs
@pytest.mark.timeout(240)
def test_two_fleets_end_to_end(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    # No package installs from a test: wrk when it is there, the Python generator otherwise.
    monkeypatch.setattr(router_fleet_bench, "ensure_wrk", lambda: shutil.which("wrk"))
    rest = ["--engines", "1,3", "--duration", "1", "--concurrency", "4", "--idle-s", "0.5"]
    assert router_bench.run(argparse.Namespace(rest=rest)) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| 1 |", "| 3 |"))]
    assert len(rows) == 2 * len(router_fleet_bench.POLICIES), out
    assert re.findall(r"errors (\d+)", out) == ["0"] * len(rows), out
    assert "load average before" in out
