"""`switchyard bench router --engines N --churn-s S`: the flag's wiring and checks, the table from
a made-up run, and one short churn end to end over mock engines whose prefix caches evict
(marked `procs`)."""
from __future__ import annotations

import argparse
import re
import shutil

import pytest

from switchyard_bench import router_bench, router_churn_bench
from switchyard_bench.router_churn_bench import ChurnConfig, ChurnResult, churn_table


def test_churn_flag_selects_the_churn_run_with_one_engine_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ChurnConfig] = []
    monkeypatch.setattr(router_bench, "run_churn", lambda cfg: seen.append(cfg) or 0)
    rest = ["--engines", "64", "--churn-s", "30", "--cache-blocks", "128"]
    assert router_bench.run(argparse.Namespace(rest=rest)) == 0
    (cfg,) = seen
    assert (cfg.engines, cfg.duration_s, cfg.cache_blocks) == (64, 30.0, 128)
    with pytest.raises(SystemExit):
        router_bench.run(argparse.Namespace(rest=["--engines", "2,64", "--churn-s", "30"]))
    with pytest.raises(ValueError):
        ChurnConfig(4, cache_blocks=0)


def test_table_gives_idle_peak_last_and_growth_per_engine() -> None:
    result = ChurnResult(100, 50, 140.0, [(30.0, 180.0), (60.0, 210.0), (61.0, 200.0)], 4000.0)
    table = churn_table(result)
    assert "| 100 | 50 (5,000) | 4000 | 0 | 140 | 210 | 200 | 600 |" in table
    assert table.endswith("30: 180, 60: 210, 61: 200")


@pytest.mark.procs
@pytest.mark.timeout(240)
def test_a_short_churn_end_to_end(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    # No package installs from a test: wrk when it is there, the Python generator otherwise.
    monkeypatch.setattr(router_churn_bench, "ensure_wrk", lambda: shutil.which("wrk"))
    assert router_churn_bench.run_churn(ChurnConfig(3, duration_s=3, cache_blocks=8,
                                                    sample_s=1, concurrency=4)) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 3 | 8 (24) |"))
    assert int(row.split("|")[4]) == 0, out  # no errors
    assert len(re.findall(r"RSS \d+ MB", out)) >= 2, out
