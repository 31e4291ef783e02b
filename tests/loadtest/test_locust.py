"""loadtest/locustfile.py run headless as a user runs it, against `switchyard serve` (mock
engines, then the real model): its CSV has TTFT, TPOT, ITL and JCT rows in milliseconds and an
SLO row whose failures are the misses."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "router"))
from router_procs import ROOT, start_serve, wait_ready  # noqa: E402

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(600)]
LOCUST = os.path.join(os.path.dirname(sys.executable), "locust")


def _serve(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    proc, base = start_serve(*args, env=env)
    try:
        wait_ready(base, proc, want_engines=2, timeout_s=300)
        yield base
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def mock_serve() -> Iterator[str]:
    yield from _serve("--mock-engines", env={"SWITCHYARD_MOCK_CHUNK_DELAY_MS": "2"})


def _locust(base: str, csv_prefix: str, seconds: int, *options: str,
            env: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    argv = [LOCUST, "-f", os.path.join(ROOT, "loadtest", "locustfile.py"), "--host", base,
            "--headless", "-u", "2", "-r", "2", "-t", f"{seconds}s", "--csv", csv_prefix,
            "--only-summary", *options]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120,
                          env={**os.environ, **(env or {})}, cwd=ROOT)
    assert os.path.isfile(f"{csv_prefix}_stats.csv"), done.stdout[-3000:] + done.stderr[-3000:]
    with open(f"{csv_prefix}_stats.csv", encoding="utf-8", newline="") as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def _count(rows: dict[str, dict[str, str]], name: str, column: str = "Request Count") -> int:
    assert name in rows, f"no {name!r} row in {sorted(rows)}"
    return int(rows[name][column])


def test_locust_rows_against_mock_engines(mock_serve: str, tmp_path):
    # the workload from environment variables (a Mooncake replay), an SLO nothing can meet
    rows = _locust(mock_serve, str(tmp_path / "mock"), 5, "--slo-ttft-ms", "0.001",
                   env={"SWITCHYARD_WORKLOAD": "mooncake", "SWITCHYARD_LENGTH_SCALE": "0.03"})
    completed = _count(rows, "completion (stream)")
    assert completed >= 3  # a loaded 2-core machine finishes fewer than an idle one
    for name in ("TTFT", "TPOT", "JCT"):
        # users stopped at -t cut requests short, more of them on a loaded machine
        assert _count(rows, name) >= completed // 2
        assert _count(rows, name, "Failure Count") == 0
        assert rows[name]["Type"] == "LATENCY"
    assert _count(rows, "ITL") > _count(rows, "TTFT")  # one entry per gap between tokens
    # mock engines take 2 ms per token: in seconds TPOT would read 0.002, in milliseconds >= 2
    # (no upper bound: how slow a loaded machine is says nothing about the unit)
    assert float(rows["TPOT"]["Average Response Time"]) > 1.0
    assert float(rows["TTFT"]["Average Response Time"]) < float(
        rows["JCT"]["Average Response Time"])
    assert _count(rows, "SLO", "Failure Count") == _count(rows, "SLO") >= completed - 2


def test_locust_sonnet_with_reachable_slo(mock_serve: str, tmp_path):
    rows = _locust(mock_serve, str(tmp_path / "sonnet"), 3, "--workload", "sonnet",
                   "--input-mean", "64", "--input-std", "8", "--output-mean", "8",
                   "--output-std", "2", "--slo-ttft-ms", "60000", "--slo-tpot-ms", "60000")
    assert _count(rows, "SLO") >= 2 and _count(rows, "SLO", "Failure Count") == 0


def test_locust_rows_against_real_engines(tmp_path):
    for base in _serve():
        rows = _locust(base, str(tmp_path / "real"), 12, "--workload", "sonnet",
                       "--input-mean", "48", "--input-std", "4", "--output-mean", "6",
                       "--output-std", "1", "--slo-ttft-ms", "60000")
        assert _count(rows, "TTFT") >= 1 and _count(rows, "TPOT") >= 1
        assert _count(rows, "ITL") >= 4 and _count(rows, "SLO") >= 1
        assert _count(rows, "completion (stream)", "Failure Count") == 0
