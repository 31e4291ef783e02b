"""The pieces of `switchyard bench router` that decide its figures: wrk's output parsing (with
the request count CPU per request divides by), process-tree CPU accounting, the issue-11 table,
and the Rust mock OpenAI worker the anchors stand in front of (as a process, stopped by SIGTERM)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import psutil
import pytest
import requests

from router_core import MockOpenAIWorker
from switchyard_bench.proc_cpu import tree_cpu_s
from switchyard_bench.router_bench_tables import Row, issue_table
from switchyard_bench.router_bench_tracing import median_rows, tracing_cost
from switchyard_bench.wrk_runner import Measure, parse_wrk

pytestmark = pytest.mark.procs

WRK_OUTPUT = """Running 8s test @ http://127.0.0.1:1/v1/completions
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    10.00ms    2.00ms  50.00ms   90.00%
  Latency Distribution
     50%    9.50ms
     75%   11.00ms
     90%   13.00ms
     99%   20.10ms
  25000 requests in 8.00s, 1.00MB read
  Non-2xx or 3xx responses: 3
Requests/sec:   3125.00
Transfer/sec:    128.00KB
"""


def test_parse_wrk_reads_requests_and_errors() -> None:
    m = parse_wrk(WRK_OUTPUT)
    assert (m.rps, m.p50_ms, m.p99_ms, m.errors, m.requests) == (3125.0, 9.5, 20.1, 3, 25000)
    # Latencies in seconds come with a trailing space.
    slow = parse_wrk(WRK_OUTPUT.replace("     99%   20.10ms", "     99%    1.19s "))
    assert slow.p99_ms == 1190.0


def test_tree_cpu_counts_live_descendants() -> None:
    # The grandchild burns 0.3 s of CPU, says so on the shared stdout, then stays alive.
    burn = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
            "print('burnt', flush=True)\ntime.sleep(60)\n")
    spawn_and_wait = ("import subprocess, sys\n"
                      f"subprocess.Popen([sys.executable, '-c', {burn!r}]).wait()\n")
    parent = subprocess.Popen([sys.executable, "-c", spawn_and_wait], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "burnt"
        assert tree_cpu_s([parent.pid]) >= 0.3
    finally:
        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()
    assert tree_cpu_s([parent.pid]) == 0.0  # gone: nothing to count, no error


def test_issue_table_has_one_line_per_target_with_ratios() -> None:
    def row(name: str, stream: bool, c: int, rps: float, cpu: float | None = None) -> Row:
        return Row(name, stream, c, Measure(rps, 1.0 + c, 2.0, 0, "wrk", int(rps * 8)), cpu, 0.05)

    rows = [row("direct", True, 1, 3000), row("direct", True, 32, 9000),
            row("switchyard", True, 1, 1000), row("switchyard", True, 32, 2000, 0.4),
            row("switchyard", False, 32, 2500), row("vllm-router", True, 32, 4000, 0.2),
            row("vllm-router", False, 32, 10000)]
    table = issue_table(rows).splitlines()
    assert len(table) == 2 + 3
    switchyard = next(line for line in table if line.startswith("| switchyard |"))
    assert "2000 (0.50x)" in switchyard and "0.400" in switchyard and "2500 (0.25x)" in switchyard
    direct = next(line for line in table if line.startswith("| direct |"))
    assert "9000 |" in direct and "x)" not in direct


def test_tracing_cost_is_the_median_of_per_round_ratios() -> None:
    def row(name: str, rps: float, cpu: float) -> Row:
        return Row(name, True, 32, Measure(rps, 1000 / rps, 2.0, 0, "wrk", int(rps * 5)), cpu)

    # Three rounds; the machine got slower in round 2 for both targets alike.
    results = [row("switchyard", 1000, 0.40), row("switchyard-trace100", 960, 0.42),
               row("switchyard", 500, 0.80), row("switchyard-trace100", 490, 0.82),
               row("switchyard", 1000, 0.40), row("switchyard-trace100", 900, 0.44)]
    (line,) = tracing_cost(results)
    assert line.startswith("tracing cost (streaming, c=32): switchyard-trace100 -4.0% "
                           "throughput vs switchyard (median of 3 rounds; rounds -4%, -2%, "
                           "-10%)")
    assert "router CPU per request +5.0%" in line
    # The Python-policy router's traced row is compared with the Python-policy router.
    python_rows = [row("switchyard-py", 400, 1.0), row("switchyard-py-trace100", 380, 1.1)]
    assert [line.split(":")[1].split("(")[0].strip() for line in
            tracing_cost(results + python_rows)] == [
        "switchyard-trace100 -4.0% throughput vs switchyard",
        "switchyard-py-trace100 -5.0% throughput vs switchyard-py"]
    medians = {r.target: r for r in median_rows(results)}
    assert medians["switchyard"].measure.rps == 1000 and medians["switchyard"].router_cpu_ms == 0.4
    assert medians["switchyard-trace100"].measure.requests == (960 + 490 + 900) * 5
    assert tracing_cost(results[:3]) == []  # rounds that do not pair up give no figure


def test_mock_worker_process_streams_and_stops_on_sigterm() -> None:
    with MockOpenAIWorker(0) as probe:
        port = probe.port  # a free port (released again when the probe stops)
    proc = subprocess.Popen([sys.executable, "-m", "switchyard_bench.mock_openai_worker", "--port",
                             str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and "listening" in proc.stdout.readline()
        url = f"http://127.0.0.1:{port}/v1/completions"
        with requests.post(url, json={"max_tokens": 4, "stream": True}, stream=True,
                           timeout=10) as r:
            data = [line[6:] for line in r.iter_lines(decode_unicode=True)
                    if line.startswith("data: ")]
        assert data[-1] == "[DONE]"
        assert [json.loads(d)["choices"][0]["text"] for d in data[:-1]] == [
            " w0", " w1", " w2", " w3"]
        whole = requests.post(url, json={"max_tokens": 2}, timeout=10).json()
        assert whole["choices"][0]["text"] == " w0 w1" and whole["usage"]["completion_tokens"] == 2
        assert requests.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
